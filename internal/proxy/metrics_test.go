package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vbcache/vbcache/internal/server"
	"github.com/vbcache/vbcache/internal/server/servertest"
)

// The proxy's metrics follow its stats: memcached_commands_total as for a
// node, and per server its requests and their latency summary; the
// pedantic registry and the linter take them.
func TestProxyMetrics(t *testing.T) {
	node := servertest.Start(t, server.Config{Version: "test"})
	cfg, err := ParseConfig([]byte("listen: 127.0.0.1:0\nservers: [" + node + ":1]\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.Logf = nil
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln) // ends at p.Close
	t.Cleanup(func() { p.Close() })
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(nc, "set k 0 0 1\r\nv\r\nget k\r\nget k\r\nget nope\r\n")
	br := bufio.NewReader(nc)
	for range 1 + 3 + 3 + 1 { // STORED, VALUE/v/END twice, END
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(p.Metrics())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	find := func(name string, labels map[string]string) (float64, uint64, bool) {
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		next:
			for _, m := range mf.GetMetric() {
				got := map[string]string{}
				for _, lp := range m.GetLabel() {
					got[lp.GetName()] = lp.GetValue()
				}
				for k, v := range labels {
					if got[k] != v {
						continue next
					}
				}
				switch {
				case m.Counter != nil:
					return m.Counter.GetValue(), 0, true
				case m.Gauge != nil:
					return m.Gauge.GetValue(), 0, true
				case m.Histogram != nil:
					h := m.Histogram
					prev := uint64(0)
					for _, b := range h.GetBucket() {
						if b.GetCumulativeCount() < prev || b.GetCumulativeCount() > h.GetSampleCount() {
							t.Errorf("%s: bucket le=%v holds %d after %d, of %d", name, b.GetUpperBound(), b.GetCumulativeCount(), prev, h.GetSampleCount())
						}
						prev = b.GetCumulativeCount()
					}
					if prev != h.GetSampleCount() { // loopback requests all within the last bucket, 5 s
						t.Errorf("%s: %d requests within the last bucket, of %d", name, prev, h.GetSampleCount())
					}
					return h.GetSampleSum(), h.GetSampleCount(), true
				}
			}
		}
		return 0, 0, false
	}
	if v, _, ok := find("memcached_commands_total", map[string]string{"command": "get", "status": "hit"}); !ok || v != 2 {
		t.Errorf("get hits %v (%v), want 2", v, ok)
	}
	if v, _, ok := find("memcached_commands_total", map[string]string{"command": "get", "status": "miss"}); !ok || v != 1 {
		t.Errorf("get misses %v (%v), want 1", v, ok)
	}
	reqs, _, ok := find("vbcache_proxy_server_requests_total", map[string]string{"server": node})
	if !ok || reqs < 4 {
		t.Errorf("requests to %s: %v (%v), want at least 4", node, reqs, ok)
	}
	sum, count, ok := find("vbcache_proxy_server_request_duration_seconds", map[string]string{"server": node})
	if !ok || float64(count) != reqs || sum <= 0 {
		t.Errorf("latency of %s: sum %v count %d (%v), want %v requests taking some time", node, sum, count, ok, reqs)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range problems {
		t.Errorf("lint: %s: %s", pr.Metric, pr.Text)
	}
}
