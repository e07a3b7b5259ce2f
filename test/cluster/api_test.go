package cluster

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

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
	req, _ := http.NewRequestWithContext(ctx, "GET", m.url+"/pools/default/bs/default", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	configs := make(chan *vbmap.Config, 1024)
	go func() { // owned by the test: ends when ctx cancels the request
		defer close(configs)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
			if i := bytes.Index(data, []byte("\n\n\n\n")); i >= 0 {
				return i + 4, data[:i], nil
			}
			if atEOF && len(data) > 0 {
				return len(data), data, nil
			}
			return 0, nil, nil
		})
		for sc.Scan() {
			c, err := vbmap.Parse(sc.Bytes())
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
	m.must("POST", "/rebalance", nil)
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
	m.must("POST", "/rebalance/stop", nil)
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
