package manager

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The manager's Prometheus metrics (vbcache manager --metrics-listen): most
// are read at scrape time from what Status reports (the map as this
// manager holds it, its view of each node, the last rebalance) plus one
// etcd read, timed. What happened in between is observed as it happens,
// off any request path (observed): how long each vbucket move and its
// takeover took, and the failovers.

// observed are the metrics counted as things happen. A move is one
// vbucket of a rebalance, from its first step to its last (the source's
// takeover, catch-up and map commits included); its takeover is the step
// in which the vbucket, pending on the source, does not take writes.
type observed struct {
	moveSecs     *prometheus.HistogramVec // by result: moved, failed
	takeoverSecs prometheus.Histogram
	failovers    *prometheus.CounterVec // by trigger (api, automatic) and result (done, not_sure, failed)
	janitor      *prometheus.CounterVec // the janitor's repairs, by kind (janitor.go)
}

func newObserved() observed {
	o := observed{
		moveSecs: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "vbcache_manager_move_duration_seconds", Help: "Time of each vbucket move of a rebalance led by this manager, by result.",
			Buckets: prometheus.ExponentialBucketsRange(0.001, 100, 16),
		}, []string{"result"}),
		takeoverSecs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "vbcache_manager_takeover_duration_seconds", Help: "Time of each move's takeover: the vbucket is pending on the source, its writes wait.",
			Buckets: prometheus.ExponentialBucketsRange(0.0001, 10, 16),
		}),
		failovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vbcache_manager_failovers_total", Help: "Failovers this manager ran, by trigger (api: asked for; automatic: the probes') and result.",
		}, []string{"trigger", "result"}),
		janitor: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vbcache_manager_janitor_repairs_total", Help: "What this manager's janitor repaired, by kind: deactivated (a stray active), activated (a vbucket no member had active), dropped (an orphan copy), unrepaired (said, not done).",
		}, []string{"kind"}),
	}
	for _, k := range janitorKinds {
		o.janitor.WithLabelValues(k)
	}
	for _, r := range []string{"moved", "failed"} {
		o.moveSecs.WithLabelValues(r) // every series from the start, at 0
	}
	for _, t := range []string{"api", "automatic"} {
		for _, r := range []string{"done", "not_sure", "failed"} {
			o.failovers.WithLabelValues(t, r)
		}
	}
	return o
}

func (o *observed) moved(d time.Duration, err error) {
	r := "moved"
	if err != nil {
		r = "failed"
	}
	o.moveSecs.WithLabelValues(r).Observe(d.Seconds())
}

func (o *observed) failover(auto bool, err error) {
	t, r := "api", "done"
	if auto {
		t = "automatic"
	}
	switch {
	case errors.Is(err, ErrNotSure):
		r = "not_sure"
	case err != nil:
		r = "failed"
	}
	o.failovers.WithLabelValues(t, r).Inc()
}

type managerMetrics struct {
	m *Manager

	leader, rev, vbuckets, failedOver                *prometheus.Desc
	nodeUp, nodeMember, nodeActive, nodeReplica      *prometheus.Desc
	rebRunning, rebTotal, rebDone, rebBytes, rebSecs *prometheus.Desc
	etcdRTT, etcdUp                                  *prometheus.Desc
	moving                                           *prometheus.Desc
}

// Metrics returns a prometheus.Collector of the manager's metrics.
func (m *Manager) Metrics() prometheus.Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("vbcache_manager_"+name, help, labels, nil)
	}
	return &managerMetrics{m: m,
		leader:      d("leader", "1 while this manager leads the cluster."),
		rev:         d("map_revision", "The revision of the cluster's state this manager holds."),
		vbuckets:    d("vbuckets", "The cluster's number of vbuckets."),
		failedOver:  d("failed_over_nodes", "Nodes failed over and not yet removed or added back."),
		nodeUp:      d("node_up", "1 while the node answers this manager's probes.", "node"),
		nodeMember:  d("node_member", "1 for a member of the cluster, 0 for a server only the map still names.", "node"),
		nodeActive:  d("node_active_vbuckets", "vbuckets the map makes active on the node.", "node"),
		nodeReplica: d("node_replica_vbuckets", "vbuckets the map has a replica of on the node.", "node"),
		rebRunning:  d("rebalance_running", "1 while a rebalance runs."),
		rebTotal:    d("rebalance_vbuckets", "vbuckets the running (or last) rebalance moves."),
		rebDone:     d("rebalance_vbuckets_done", "vbuckets the running (or last) rebalance has moved."),
		rebBytes:    d("rebalance_moved_bytes", "Bytes of the vbuckets the running (or last) rebalance has moved."),
		rebSecs:     d("rebalance_duration_seconds", "How long the running rebalance has run, or the last one ran."),
		etcdRTT:     d("etcd_round_trip_seconds", "Time of one read of the cluster's state from etcd, at this scrape."),
		etcdUp:      d("etcd_up", "1 when that read succeeded."),
		moving:      d("moves_in_flight", "vbucket moves this manager is running now."),
	}
}

func (c *managerMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.leader, c.rev, c.vbuckets, c.failedOver, c.nodeUp, c.nodeMember, c.nodeActive, c.nodeReplica,
		c.rebRunning, c.rebTotal, c.rebDone, c.rebBytes, c.rebSecs, c.etcdRTT, c.etcdUp, c.moving} {
		ch <- d
	}
	c.m.obs.moveSecs.Describe(ch)
	c.m.obs.takeoverSecs.Describe(ch)
	c.m.obs.failovers.Describe(ch)
	c.m.obs.janitor.Describe(ch)
}

func (c *managerMetrics) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	c.m.obs.moveSecs.Collect(ch)
	c.m.obs.takeoverSecs.Collect(ch)
	c.m.obs.failovers.Collect(ch)
	c.m.obs.janitor.Collect(ch)
	c.m.mu.Lock()
	moving := len(c.m.moving)
	c.m.mu.Unlock()
	gauge(c.moving, float64(moving))
	st := c.m.Status()
	gauge(c.leader, b(st.Leading))
	gauge(c.rev, float64(st.Rev))
	gauge(c.vbuckets, float64(st.NumVBuckets))
	gauge(c.failedOver, float64(len(st.FailedOver)))
	for _, n := range st.Nodes {
		gauge(c.nodeUp, b(n.Healthy), n.Addr)
		gauge(c.nodeMember, b(n.Member), n.Addr)
		gauge(c.nodeActive, float64(n.Active), n.Addr)
		gauge(c.nodeReplica, float64(n.Replica), n.Addr)
	}
	if r := st.Rebalance; r != nil {
		gauge(c.rebRunning, b(r.Running))
		gauge(c.rebTotal, float64(r.Total))
		gauge(c.rebDone, float64(r.Done))
		gauge(c.rebBytes, float64(r.Bytes))
		end := r.Finished
		if r.Running || end.IsZero() {
			end = time.Now()
		}
		gauge(c.rebSecs, end.Sub(r.Started).Seconds())
	} else {
		gauge(c.rebRunning, 0)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.m.cli.Get(ctx, c.m.stateKey())
	gauge(c.etcdRTT, time.Since(start).Seconds())
	gauge(c.etcdUp, b(err == nil))
}
