package server

import (
	"bytes"
	"strings"

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

	vbuckets, notMyVBucket *prometheus.Desc
}

// Metrics returns a prometheus.Collector of the node's metrics, for a
// registry that --metrics-listen (or a test) serves.
func (s *Server) Metrics() prometheus.Collector {
	m := &nodeMetrics{s: s, set: metrics.NewSet()}
	m.set.Add("vbcache", ownMetrics)
	m.vbuckets = prometheus.NewDesc("vbcache_vbuckets", "vbuckets on this node by state (cluster mode).", []string{"state"}, nil)
	m.notMyVBucket = prometheus.NewDesc("vbcache_not_my_vbucket_total", "Requests answered NOT_MY_VBUCKET: for a vbucket this node does not serve (cluster mode).", nil, nil)
	return m
}

// Describe sends every metric's description.
func (m *nodeMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.set.Describe(ch)
	ch <- m.vbuckets
	ch <- m.notMyVBucket
}

// statLines runs gen on a scratch connection of the node and returns the
// "STAT name value" lines it wrote, name → value.
func (s *Server) statLines(gen func(c *conn)) map[string]string {
	c := &conn{s: s}
	gen(c)
	out := make(map[string]string)
	for _, line := range bytes.Split(c.out, []byte("\r\n")) {
		f := strings.SplitN(string(line), " ", 3)
		if len(f) == 3 && f[0] == "STAT" {
			out[f[1]] = f[2]
		}
	}
	return out
}

// Collect reads the node's stats and sends them as metrics.
func (m *nodeMetrics) Collect(ch chan<- prometheus.Metric) {
	s := m.s
	g := s.statLines((*conn).generalStats)
	m.set.General(ch, g)
	m.set.Table(ch, "vbcache", ownMetrics, g)
	m.set.Settings(ch, s.statLines((*conn).settingsStats))
	m.set.Classes(ch, s.statLines((*conn).itemStats), s.statLines((*conn).slabStats))
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
			ch <- prometheus.MustNewConstMetric(m.vbuckets, prometheus.GaugeValue, states[st], st.String())
		}
		ch <- prometheus.MustNewConstMetric(m.notMyVBucket, prometheus.CounterValue, float64(refused))
	}
}
