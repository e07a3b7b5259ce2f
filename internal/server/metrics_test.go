package server

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/vbcache/vbcache/internal/vbucket"
)

// metricValue gathers reg and returns the value of the series name whose
// labels include want, and whether there is one.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
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
			for k, v := range want {
				if got[k] != v {
					continue next
				}
			}
			return value(m), true
		}
	}
	return 0, false
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

// The node's metrics follow its stats, under memcached_exporter's names:
// commands by status (set without the cas commands memcached counts in
// cmd_set), items, bytes, per-slab series; vbuckets by state and
// NOT_MY_VBUCKET answers in cluster mode. A pedantic registry takes them
// (every series described, no duplicates) and the linter finds nothing.
func TestMetricsFollowStats(t *testing.T) {
	s, addr := startCluster(t, func(c *Config) { c.ClusterAuth = testAdmin })
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.Metrics())
	adm := login(t, addr, testAdmin)
	adm.setState(1, vbucket.Active)
	adm.setState(2, vbucket.Replica)
	k1 := keyFor(t, 1)
	adm.set(1, k1, "v")
	adm.set(1, k1, "w")
	for range 3 {
		if st, _ := adm.get(1, k1); st != 0 {
			t.Fatalf("get: status %#x", uint16(st))
		}
	}
	adm.get(1, k1+"-missing")
	adm.get(2, keyFor(t, 2)) // a replica: NOT_MY_VBUCKET

	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"memcached_commands_total", map[string]string{"command": "get", "status": "hit"}, 3},
		{"memcached_commands_total", map[string]string{"command": "get", "status": "miss"}, 1},
		{"memcached_commands_total", map[string]string{"command": "set", "status": "hit"}, 2},
		{"memcached_current_items", nil, 1},
		{"memcached_items_total", nil, 2},
		{"memcached_up", nil, 1},
		{"vbcache_vbuckets", map[string]string{"state": "active"}, 1},
		{"vbcache_vbuckets", map[string]string{"state": "replica"}, 1},
		{"vbcache_vbuckets", map[string]string{"state": "dead"}, testVBuckets - 2},
		{"vbcache_not_my_vbucket_total", nil, 1},
		{"memcached_slab_current_items", nil, 1},
	} {
		got, ok := metricValue(t, reg, c.name, c.labels)
		if !ok || got != c.want {
			t.Errorf("%s%v = %v (found %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	for _, name := range []string{"memcached_read_bytes_total", "memcached_current_bytes", "memcached_limit_bytes", "memcached_slab_chunk_size_bytes", "memcached_process_user_cpu_seconds_total"} {
		if got, ok := metricValue(t, reg, name, nil); !ok || got <= 0 {
			t.Errorf("%s = %v (found %v), want > 0", name, got, ok)
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}
