package cluster

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// TestFailoverOfLiveNodeFencesIt fails over a node that is still running:
// before its replicas are promoted it must stop serving, or a client with
// an old map could write to it and be acknowledged while another node is
// active for the same vbucket.
func TestFailoverOfLiveNodeFencesIt(t *testing.T) {
	nodes := startNodes(t, 3, vb256...)
	m := mgr{t: t, url: startManager(t, append(vb256, "--replicas", "1", "--failover-after", "0")...).URL()}
	m.waitLeader()
	for _, n := range nodes {
		m.addNode(n.Addr)
	}
	m.rebalance(60 * time.Second)
	victim := nodes[0]
	m.must("POST", "/failover", url.Values{"node": {victim.Addr}})
	c, err := admin.Dial(context.Background(), victim.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for vb := range smallVBuckets {
		st, err := c.GetVBucket(vb)
		if err != nil {
			t.Fatal(err)
		}
		if st == vbucket.Active || st == vbucket.Replica {
			t.Fatalf("vbucket %d is %v on the failed-over node %s", vb, st, victim.Addr)
		}
	}
	// Every vbucket has exactly one active among the other nodes.
	active := make([]int, smallVBuckets)
	for _, n := range nodes[1:] {
		c, err := admin.Dial(context.Background(), n.Addr)
		if err != nil {
			t.Fatal(err)
		}
		for vb := range smallVBuckets {
			if st, err := c.GetVBucket(vb); err == nil && st == vbucket.Active {
				active[vb]++
			}
		}
		c.Close()
	}
	for vb, n := range active {
		if n != 1 {
			t.Fatalf("vbucket %d is active on %d of the remaining nodes", vb, n)
		}
	}
}
