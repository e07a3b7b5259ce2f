package manager

import (
	"context"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// TestSuccessorFinishesAHalfDoneFailover is issue 43's sixth hole: a
// leader fails node a over and dies right after committing the new map
// (its leadership ends: the hook at "failover-committed"), before it
// promotes anything. The map then names a's replicas as the actives of
// its vbuckets, which are still replicas there: nobody serves them, and
// no successor used to repair that. Now the failover's promotions are in
// etcd with its map (State.Intents), and the successor finishes them:
// every vbucket a was active for is active on the replica the map names,
// with its keys, and the intent is cleared.
func TestSuccessorFinishesAHalfDoneFailover(t *testing.T) {
	cli := startTestEtcd(t)
	nodes := []*testNode{startNode(t, ""), startNode(t, ""), startNode(t, "")}
	first := leaseManager(t, cli, "first")
	first.start(t)
	s := first.joinAll(t, nodes)
	keys := testKeys()
	writeKeys(t, s, keys)
	a := nodes[0].addr
	var mine []int
	for vb, row := range s.Map {
		if s.server(row[0]) == a && row[1] >= 0 {
			mine = append(mine, vb)
		}
	}
	if len(mine) == 0 {
		t.Fatalf("%s is active for no vbucket with a replica", a)
	}
	waitReplicasCaughtUp(t, s, a, mine, keys)
	nodes[0].stop() // a is gone: the failover cannot tell it, and waits its lease

	first.m.hook = func(step string, vb int) {
		if step == "failover-committed" {
			first.cancel() // the leader dies: its leadership's context ends here
		}
	}
	res := make(chan error, 1)
	first.m.inLeadership(func(lctx context.Context) { // as POST /failover runs it
		go func() { // owned by the test, which waits for res
			_, err := first.m.failover(lctx, a, false)
			res <- err
		}()
	})
	err := <-res
	t.Logf("the first leader's failover of %s: %v", a, err)
	<-first.ran
	ns := first.m.State()
	if !slices.Contains(ns.FailedOver, a) {
		t.Fatalf("the failover did not commit: failed over %v", ns.FailedOver)
	}
	conns := map[string]*admin.Conn{} // one per node: the waits below poll
	connTo := func(addr string) *admin.Conn {
		if conns[addr] == nil {
			conns[addr] = testDial(t, addr)
		}
		return conns[addr]
	}
	undone := 0
	for _, vb := range mine {
		if st, err := connTo(ns.server(ns.Map[vb][0])).GetVBucket(vb); err == nil && st != vbucket.Active {
			undone++
		}
	}
	t.Logf("after the first leader died, %d of %d promotions were undone", undone, len(mine))
	if undone == 0 {
		t.Fatal("the first leader promoted everything before it died: the test makes nothing half done")
	}

	second := leaseManager(t, cli, "second")
	second.start(t)
	waitFor(t, 30*time.Second, "the successor to finish the promotions", func() bool {
		for _, vb := range mine {
			if st, err := connTo(ns.server(ns.Map[vb][0])).GetVBucket(vb); err != nil || st != vbucket.Active {
				return false
			}
		}
		return true
	})
	for _, vb := range mine {
		c := connTo(ns.server(ns.Map[vb][0]))
		for _, k := range keys[vb] {
			if v, err := c.Do(protocol.OpGet, uint16(vb), nil, []byte(k), nil); err != nil || string(v) != "v-"+k {
				t.Errorf("vbucket %d: get %s: %q, %v", vb, k, v, err)
			}
		}
	}
	waitFor(t, 10*time.Second, "the intent to be cleared", func() bool { return len(second.m.State().Intents) == 0 })
}

// leaseManager is newTestManager with a 1 s lease, so that the waits for
// a lease to run out are short.
func leaseManager(t *testing.T, cli *clientv3.Client, name string) *testManager {
	t.Helper()
	m, err := New(Config{Etcd: cli, Advertise: "http://" + name, NumVBuckets: testVBuckets, Replicas: 1,
		SessionTTL: 1, ProbeInterval: 50 * time.Millisecond, MaxMoves: 1, Lease: time.Second,
		Logf: func(format string, args ...any) { t.Logf(name+": "+format, args...) }})
	if err != nil {
		t.Fatal(err)
	}
	return &testManager{m: m, ran: make(chan struct{})}
}
