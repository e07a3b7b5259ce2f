package proxy

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vbcache/vbcache/internal/metrics"
)

// The proxy's Prometheus metrics (vbcache proxy --metrics-listen), read at
// scrape time from its "stats" lines: memcached's general stats under
// memcached_exporter's names (package metrics), as for a node, so a
// dashboard shows a proxy as it shows a memcached; the proxy's own and its
// servers' under vbcache_proxy_, one series per server (label server).

// proxyMetrics are the proxy's own stats.
var proxyMetrics = []metrics.Stat{
	{Stat: "proxy_reloads", Name: "proxy_reloads_total", Help: "Reloads of the proxy's configuration or cluster map that took effect."},
	{Stat: "proxy_reload_errors", Name: "proxy_reload_errors_total", Help: "Reloads that failed and left the pool as it was."},
	{Stat: "proxy_fast_path", Name: "proxy_fast_path_total", Help: "Requests served on the proxy's fast path."},
	{Stat: "ssl_handshake_errors", Name: "ssl_handshake_errors_total", Help: "Clients' TLS handshakes that failed."},
	{Stat: "auth_cmds", Name: "auth_commands_total", Help: "Clients' login attempts (SASL PLAIN and the text token)."},
	{Stat: "auth_errors", Name: "auth_errors_total", Help: "Clients' login attempts that failed."},
}

// serverMetrics are the per-server lines "server:<addr>:<stat>".
var serverMetrics = []metrics.Stat{
	{Stat: "requests", Name: "proxy_server_requests_total", Help: "Requests sent to the server."},
	{Stat: "errors", Name: "proxy_server_errors_total", Help: "Requests to the server that failed (connection errors and timeouts)."},
	{Stat: "connections", Name: "proxy_server_connections", Help: "Connections open to the server.", Gauge: true},
	{Stat: "total_connections", Name: "proxy_server_connections_total", Help: "Connections opened to the server."},
	{Stat: "ejected", Name: "proxy_server_ejected", Help: "1 while the server is ejected from the pool (auto_eject_hosts).", Gauge: true},
}

type proxyCollector struct {
	p       *Proxy
	set     *metrics.Set
	latency *prometheus.Desc
}

// Metrics returns a prometheus.Collector of the proxy's metrics.
func (p *Proxy) Metrics() prometheus.Collector {
	c := &proxyCollector{p: p, set: metrics.NewSet()}
	c.set.Add("vbcache", proxyMetrics)
	c.set.Add("vbcache", serverMetrics, "server")
	c.latency = prometheus.NewDesc("vbcache_proxy_server_request_duration_seconds",
		"Time from sending a request to the server to its answer (or its failure).",
		[]string{"server"}, nil)
	return c
}

func (c *proxyCollector) Describe(ch chan<- *prometheus.Desc) {
	c.set.Describe(ch)
	ch <- c.latency
}

func (c *proxyCollector) Collect(ch chan<- prometheus.Metric) {
	general := map[string]string{}
	servers := map[string]map[string]string{}
	for _, kv := range c.p.statLines() {
		rest, ok := strings.CutPrefix(kv[0], "server:")
		if !ok {
			general[kv[0]] = kv[1]
			continue
		}
		i := strings.LastIndexByte(rest, ':') // the address has colons too
		if i < 0 {
			continue
		}
		addr, stat := rest[:i], rest[i+1:]
		if servers[addr] == nil {
			servers[addr] = map[string]string{}
		}
		servers[addr][stat] = kv[1]
	}
	c.set.Begin()
	c.set.General(ch, metrics.Map(general), general["version"])
	c.set.Table(ch, "vbcache", proxyMetrics, metrics.Map(general))
	for addr, st := range servers {
		c.set.Table(ch, "vbcache", serverMetrics, metrics.Map(st), addr)
		s := c.p.st.get(addr)
		// The sum and the buckets are read one after the other while
		// requests go on: the count is the buckets' own total, so that
		// the +Inf bucket equals it, as Prometheus requires.
		sum := float64(s.latencyUs.Load()) / 1e6
		buckets := make(map[float64]uint64, len(latencyBucketsUs))
		var n uint64
		for i, le := range latencyBucketsUs {
			n += s.hist[i].Load()
			buckets[float64(le)/1e6] = n
		}
		n += s.hist[len(latencyBucketsUs)].Load()
		ch <- prometheus.MustNewConstHistogram(c.latency, n, sum, buckets, addr)
	}
}
