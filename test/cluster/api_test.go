package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/manager/mgrclient"
	"github.com/vbcache/vbcache/internal/vbmap"
)

// TestConfigStreamAndStop follows the manager's streaming config endpoint
// (Couchbase's /pools/default/bs/default: each config followed by four
// newlines) while nodes join and a rebalance runs and is stopped: every
// config it pushes is valid and newer than the one before, and the map
// left by the stop is complete (every vbucket has an active).
func TestConfigStreamAndStop(t *testing.T) {
	nodes := startNodes(t, 3)
	mp := startManager(t, "--replicas", "0", "--failover-after", "0", "--max-moves", "1")
	m := mgr{t: t, url: mp.URL()}
	m.waitLeader()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := (&mgrclient.Client{Base: m.url}).StreamConfigs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	configs := make(chan *vbmap.Config, 1024)
	go func() { // owned by the test: ends when ctx cancels the request
		defer close(configs)
		for {
			b, err := stream.Next()
			if err != nil {
				return
			}
			c, err := vbmap.Parse(b)
			if err != nil {
				t.Errorf("streamed config does not parse: %v", err)
				return
			}
			configs <- c
		}
	}()

	for _, n := range nodes[:2] {
		m.addNode(n.Addr)
	}
	m.rebalance(60 * time.Second) // populate two nodes
	m.addNode(nodes[2].Addr)
	m.startRebalance()
	// Stop once a few vbuckets have moved.
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := m.status()
		if s.Rebalance != nil && s.Rebalance.Done >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the rebalance made no progress")
		}
		time.Sleep(5 * time.Millisecond)
	}
	m.stopRebalance()
	r := m.waitRebalance(60 * time.Second)
	if r.Done >= r.Total {
		t.Logf("the rebalance finished before the stop took effect (%d of %d)", r.Done, r.Total)
	} else {
		t.Logf("stopped after %d of %d vbuckets", r.Done, r.Total)
	}
	// The last streamed config must be the manager's current one.
	want := m.status().Rev
	var last *vbmap.Config
	var n int
	timeout := time.After(10 * time.Second)
	for last == nil || last.Rev < want {
		select {
		case c, ok := <-configs:
			if !ok {
				t.Fatal("stream ended")
			}
			if last != nil && !c.Newer(last) {
				t.Errorf("streamed rev %d after rev %d", c.Rev, last.Rev)
			}
			last = c
			n++
		case <-timeout:
			t.Fatalf("stream never reached rev %d (last %v)", want, last)
		}
	}
	t.Logf("%d configs streamed, last rev %d", n, last.Rev)
	if err := last.Validate(); err != nil {
		t.Fatalf("final map invalid: %v", err)
	}
	for vb, row := range last.VBucketServerMap.VBucketMap {
		if row[0] < 0 {
			t.Fatalf("vbucket %d has no active after the stop", vb)
		}
	}
	// The map in the stream is the map the nodes serve.
	c := client(t, addrs(nodes))
	if err := c.Set(mcItem("after-stop", "1")); err != nil {
		t.Fatalf("set after the stop: %v", err)
	}
}
