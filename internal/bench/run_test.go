package bench

import (
	"context"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/clock"
	"github.com/vbcache/vbcache/internal/server"
	"github.com/vbcache/vbcache/internal/server/servertest"
)

// startNode runs an in-process vbcache node on a loopback port.
func startNode(t *testing.T) string {
	t.Helper()
	cfg := server.Config{MaxConnsFast: true, Version: "bench-test"}
	cfg.Store.Clock = clock.NewFake(time.Unix(1700000000, 0))
	return servertest.Start(t, cfg)
}

func mustRun(t *testing.T, c Config) *Result {
	t.Helper()
	r, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if r.Errors != 0 {
		t.Fatalf("%d errors (first: %s)", r.Errors, r.FirstError)
	}
	return r
}

// TestRunAgainstNode drives a real node over each protocol: a sequential
// preload makes every later get a hit, a fresh prefix makes every get a miss.
func TestRunAgainstNode(t *testing.T) {
	addr := startNode(t)
	for _, proto := range []Protocol{Text, Meta, Binary} {
		t.Run(proto.String(), func(t *testing.T) {
			prefix := "bt-" + proto.String() + ":"
			base := Config{Servers: []string{addr}, Protocol: proto, Clients: 4, KeyPrefix: prefix,
				KeyMax: 199, DataSizeMin: 10, DataSizeMax: 300, Timeout: 10 * time.Second}

			pre := base
			pre.Ratio, pre.Pattern, pre.Requests, pre.Pipeline = Ratio{Set: 1}, Sequential, 200, 3
			if r := mustRun(t, pre); r.Sets != 200 || r.Requests != 200 {
				t.Fatalf("preload: %d sets, %d requests", r.Sets, r.Requests)
			}

			get := base
			get.Ratio, get.Requests, get.Pipeline, get.MultiGet = Ratio{Set: 1, Get: 4}, 300, 4, 3
			r := mustRun(t, get)
			if r.Requests != 300 || r.Gets+r.Sets != 300 || r.Sets != 60 {
				t.Errorf("requests %d gets %d sets %d", r.Requests, r.Gets, r.Sets)
			}
			if r.Hits != r.Gets*3 || r.Misses != 0 {
				t.Errorf("hits %d misses %d for %d 3-key gets", r.Hits, r.Misses, r.Gets)
			}
			if r.Histogram().Count() != 300 || r.Latency.P50 <= 0 || r.Latency.Max < r.Latency.P99 {
				t.Errorf("latency %+v", r.Latency)
			}

			miss := base
			miss.KeyPrefix = "absent-" + prefix
			miss.Ratio, miss.Requests = Ratio{Get: 1}, 200
			r = mustRun(t, miss)
			if r.Hits != 0 || r.Misses != 200 {
				t.Errorf("misses: hits %d misses %d", r.Hits, r.Misses)
			}
		})
	}
}

// TestRunOpenLoop checks that open loop sends what was asked for (the
// request count bounds it, so the test does not depend on timing) and
// reports the send lag.
func TestRunOpenLoop(t *testing.T) {
	addr := startNode(t)
	r := mustRun(t, Config{Servers: []string{addr}, Clients: 2, Pipeline: 2, Rate: 20_000, Requests: 100})
	if r.Requests != 100 || r.SendLag == nil || r.Rate != 20_000 {
		t.Errorf("requests %d send lag %v", r.Requests, r.SendLag)
	}
}

func TestRunRefusesBadConfig(t *testing.T) {
	for _, c := range []Config{
		{},
		{Servers: []string{"x:1"}, KeyMin: 10, KeyMax: 5},
		{Servers: []string{"x:1"}, DataSizeMin: 0, DataSizeMax: 10},
		{Servers: []string{"x:1"}, MultiGet: 2, Ratio: Ratio{Set: 1}},
		{Servers: []string{"x:1"}, MultiGet: 500},
	} {
		if _, err := Run(context.Background(), c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
