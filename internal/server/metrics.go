package server

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vbcache/vbcache/internal/metrics"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// The node's Prometheus metrics (--metrics-listen) are read at scrape time
// from what "stats", "stats settings", "stats items" and "stats slabs"
// report, by running those commands on a scratch connection and reading
// their lines back (package metrics maps them onto memcached_exporter's
// names): the request path does no work for them. What memcached has no
// stat or exporter metric for is vbcache's own, under vbcache_.

// ownMetrics are vbcache's, from stats memcached has too but its exporter
// does not export, or memcached does not have.
var ownMetrics = []metrics.Stat{
	{Stat: "auth_cmds", Name: "auth_commands_total", Help: "Authentication commands handled (SASL and -Y's token), successful or not."},
	{Stat: "auth_errors", Name: "auth_errors_total", Help: "Authentication commands that failed."},
	{Stat: "idle_kicks", Name: "idle_kicks_total", Help: "Connections closed by idle_timeout."},
	{Stat: "unauth_kicks", Name: "unauth_kicks_total", Help: "Connections closed by unauth_timeout before they authenticated."},
	{Stat: "ssl_handshake_errors", Name: "ssl_handshake_errors_total", Help: "TLS handshakes that failed."},
	{Stat: "control_refused", Name: "control_refused_total", Help: "Cluster-control requests refused for want of the administrator's role."},
	{Stat: "rejected_connections_per_ip", Name: "connections_rejected_per_ip_total", Help: "Connections refused by the per-address limit."},
	{Stat: "unauthenticated_connections", Name: "unauthenticated_connections", Help: "Connections open that have not authenticated.", Gauge: true},
	{Stat: "rejected_unauthenticated_connections", Name: "connections_rejected_unauthenticated_total", Help: "Connections refused by the bound on unauthenticated connections."},
}

// nodeMetrics is the node's prometheus.Collector.
type nodeMetrics struct {
	s   *Server
	set *metrics.Set

	// mu serializes scrapes: it protects the parsed replies below and
	// the scratch connection's buffer, which every scrape reuses.
	mu                              sync.Mutex
	general, settings, items, slabs metrics.Lines
	scratch                         []byte

	vbuckets, notMyVBucket *prometheus.Desc
	// streams (stats streams), summed per peer: per-vbucket series would
	// be thousands
	streams, seqnosBehind, bytesBehind, unacked, consumerBehind, takeovers, logBytes, branchRebuilds *prometheus.Desc
}

// Metrics returns a prometheus.Collector of the node's metrics, for a
// registry that --metrics-listen (or a test) serves.
func (s *Server) Metrics() prometheus.Collector {
	m := &nodeMetrics{s: s, set: metrics.NewSet()}
	m.set.Add("vbcache", ownMetrics)
	m.vbuckets = prometheus.NewDesc("vbcache_vbuckets", "vbuckets on this node by state (cluster mode).", []string{"state"}, nil)
	m.notMyVBucket = prometheus.NewDesc("vbcache_not_my_vbucket_total", "Requests answered NOT_MY_VBUCKET: for a vbucket this node does not serve (cluster mode).", nil, nil)
	m.streams = prometheus.NewDesc("vbcache_streams", "Open vbucket streams: as producer to a peer, or as consumer from a source; each replication or takeover.", []string{"role", "peer", "type"}, nil)
	m.seqnosBehind = prometheus.NewDesc("vbcache_stream_seqnos_behind", "Replication lag of this node's producer streams to a peer: the sum over its vbuckets of the high seqno minus the one the peer acknowledged.", []string{"peer"}, nil)
	m.bytesBehind = prometheus.NewDesc("vbcache_stream_bytes_behind", "Bytes of mutations this node's producer streams to a peer have not had acknowledged (a lower bound where the mutation log no longer holds them all).", []string{"peer"}, nil)
	m.unacked = prometheus.NewDesc("vbcache_stream_unacked_bytes", "Bytes sent to a peer's consumer and not yet acknowledged (flow control).", []string{"peer"}, nil)
	m.consumerBehind = prometheus.NewDesc("vbcache_stream_consumer_seqnos_behind", "Lag of this node's consumer streams from a source: the sum over its vbuckets of the source's last seqno minus the one applied here.", []string{"source"}, nil)
	m.takeovers = prometheus.NewDesc("vbcache_takeovers_total", "Takeovers this node completed as the source of a move.", nil, nil)
	m.branchRebuilds = prometheus.NewDesc("vbcache_stream_branch_rebuilds_total", "Streams this node produced that could not resume because the consumer ran past the end of its branch of the vbucket's history here (it holds writes a promoted copy never had): it got a backfill instead.", nil, nil)
	m.logBytes = prometheus.NewDesc("vbcache_stream_log_bytes", "Memory of the mutation log kept for streams.", nil, nil)
	return m
}

// Describe sends every metric's description.
func (m *nodeMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.set.Describe(ch)
	for _, d := range []*prometheus.Desc{m.vbuckets, m.notMyVBucket, m.streams, m.seqnosBehind, m.bytesBehind, m.unacked, m.consumerBehind, m.takeovers, m.logBytes, m.branchRebuilds} {
		ch <- d
	}
}

// statLines runs gen on a scratch connection of the node and parses the
// "STAT name value" lines it wrote into l. The caller holds m.mu.
func (m *nodeMetrics) statLines(l *metrics.Lines, gen func(c *conn)) {
	c := &conn{s: m.s, out: m.scratch[:0]}
	gen(c)
	l.Parse(c.out)
	m.scratch = c.out
}

// Collect reads the node's stats and sends them as metrics.
func (m *nodeMetrics) Collect(ch chan<- prometheus.Metric) {
	s := m.s
	m.mu.Lock()
	defer m.mu.Unlock()
	m.set.Begin()
	m.statLines(&m.general, (*conn).generalStats)
	m.set.General(ch, &m.general, s.cfg.Version)
	m.set.Table(ch, "vbcache", ownMetrics, &m.general)
	m.statLines(&m.settings, (*conn).settingsStats)
	m.set.Settings(ch, &m.settings)
	m.statLines(&m.items, (*conn).itemStats)
	m.statLines(&m.slabs, (*conn).slabStats)
	m.set.Classes(ch, &m.items, &m.slabs)
	if cl := s.cl; cl != nil {
		var states [5]float64 // by vbucket.State, 0 (never set) counted as dead
		var refused uint64
		for vb := 0; vb < cl.vbs.Len(); vb++ {
			st := cl.vbs.Get(vb)
			if st == 0 {
				st = vbucket.Dead
			}
			if int(st) < len(states) {
				states[st]++
			}
			refused += cl.refused[vb].Load()
		}
		for _, st := range []vbucket.State{vbucket.Active, vbucket.Replica, vbucket.Pending, vbucket.Dead} {
			m.set.Send(ch, m.vbuckets, prometheus.GaugeValue, states[st], st.String())
		}
		m.set.Send(ch, m.notMyVBucket, prometheus.CounterValue, float64(refused))
		m.collectStreams(ch, cl)
	}
}

// collectStreams sums "stats streams" per peer: lines
// "producer:<peer>:vb_<n>:<stat>", "producer:<peer>:unacked_bytes" and
// "consumer:<source>:vb_<n>:<stat>" (a peer's address has colons too).
func (m *nodeMetrics) collectStreams(ch chan<- prometheus.Metric, cl *cluster) {
	type key struct{ role, peer, kind string }
	count := map[key]float64{}
	behind, bytes, unacked, consumer := map[string]float64{}, map[string]float64{}, map[string]float64{}, map[string]float64{}
	var takeovers, logBytes, branchRebuilds float64
	cl.streams.Stats(-1, func(name, value string) {
		role, rest, _ := strings.Cut(name, ":")
		i := strings.LastIndexByte(rest, ':')
		if i < 0 {
			switch name {
			case "takeovers_out":
				takeovers, _ = metrics.Value(value)
			case "log_ring_bytes":
				logBytes, _ = metrics.Value(value)
			case "branch_rebuilds":
				branchRebuilds, _ = metrics.Value(value)
			}
			return
		}
		head, stat := rest[:i], rest[i+1:]
		v, _ := metrics.Value(strings.TrimPrefix(value, ">"))
		if role == "producer" && stat == "unacked_bytes" {
			unacked[head] = v
			return
		}
		j := strings.LastIndex(head, ":vb_")
		if j < 0 {
			return
		}
		peer := head[:j]
		switch {
		case role == "producer" && stat == "type":
			count[key{"producer", peer, value}]++
		case role == "producer" && stat == "seqno_behind":
			behind[peer] += v
		case role == "producer" && stat == "bytes_behind":
			bytes[peer] += v
		case role == "consumer" && stat == "type":
			count[key{"consumer", peer, value}]++
		case role == "consumer" && stat == "seqno_behind":
			consumer[peer] += v
		}
	})
	for k, n := range count {
		m.set.Send(ch, m.streams, prometheus.GaugeValue, n, k.role, k.peer, k.kind)
	}
	for peer, v := range behind {
		m.set.Send(ch, m.seqnosBehind, prometheus.GaugeValue, v, peer)
		m.set.Send(ch, m.bytesBehind, prometheus.GaugeValue, bytes[peer], peer)
	}
	for peer, v := range unacked {
		m.set.Send(ch, m.unacked, prometheus.GaugeValue, v, peer)
	}
	for src, v := range consumer {
		m.set.Send(ch, m.consumerBehind, prometheus.GaugeValue, v, src)
	}
	m.set.Send(ch, m.takeovers, prometheus.CounterValue, takeovers)
	m.set.Send(ch, m.logBytes, prometheus.GaugeValue, logBytes)
	m.set.Send(ch, m.branchRebuilds, prometheus.CounterValue, branchRebuilds)
}
