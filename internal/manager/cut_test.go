package manager

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/server"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// TestCutFromManagerFencesBeforePromotion cuts node a's link to the
// manager alone (Config.CutControl: the manager's requests get no answer,
// while clients and the other nodes still reach a) and watches, from a
// client with the old map, one of a's vbuckets on both sides: a must stop
// serving it before the manager's failover makes its replica active, and
// serve it never again after. The lease is 1 s, probes every 100 ms,
// failover after 500 ms down.
func TestCutFromManagerFencesBeforePromotion(t *testing.T) {
	cli := startTestEtcd(t)
	var cut atomic.Bool
	a := startNodeWith(t, "", func(c *server.Config) { c.CutControl = &cut })
	b, c := startNode(t, ""), startNode(t, "")
	m, err := New(Config{Etcd: cli, Advertise: "http://cut-test", NumVBuckets: testVBuckets, Replicas: 1,
		SessionTTL: 1, ProbeInterval: 100 * time.Millisecond, Lease: time.Second, FailoverAfter: 500 * time.Millisecond,
		Logf: func(format string, args ...any) { t.Logf("manager: "+format, args...) }})
	if err != nil {
		t.Fatal(err)
	}
	tm := &testManager{m: m, ran: make(chan struct{})}
	tm.start(t)
	ctx := context.Background()
	for _, n := range []*testNode{a, b, c} {
		if err := m.AddNode(ctx, n.addr); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.StartRebalance(ctx); err != nil {
		t.Fatal(err)
	}
	s := waitRebalanced(t, m)
	vb, replica := -1, ""
	for v, row := range s.Map {
		if s.server(row[0]) == a.addr && row[1] >= 0 {
			vb, replica = v, s.server(row[1])
			break
		}
	}
	if vb < 0 {
		t.Fatalf("no vbucket active on %s with a replica: %v", a.addr, s.Map)
	}
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("k%d", i); vbmap.VBucketString(k, testVBuckets) == vb {
			key = k
		}
	}
	ca, cr := testDial(t, a.addr), testDial(t, replica)
	ca.Timeout, cr.Timeout = 2*time.Second, 2*time.Second
	if _, err := ca.Do(protocol.OpSet, uint16(vb), make([]byte, 8), []byte(key), []byte("v")); err != nil {
		t.Fatal(err)
	}
	// a holds a lease from the manager that names all three nodes.
	waitFor(t, 10*time.Second, "a's lease on the whole cluster", func() bool {
		ls := m.Status().Nodes
		for _, n := range ls {
			if n.Addr == a.addr {
				return n.Lease != nil && n.Lease.Answered >= 2 && len(n.Lease.Quorums) == 1 && len(n.Lease.Quorums[0]) == 3
			}
		}
		return false
	})

	cut.Store(true)
	cutAt := time.Now()
	var fencedAt, promotedAt time.Time
	servedAfter := 0
	for i := 0; i < 20000 && time.Since(cutAt) < 30*time.Second; i++ {
		// First the replica's state, then a's answer: an answer a
		// serves after the replica was seen active is a second active.
		st, err := cr.GetVBucket(vb)
		if err != nil {
			t.Fatalf("GET_VBUCKET %d on %s: %v", vb, replica, err)
		}
		if st == vbucket.Active && promotedAt.IsZero() {
			promotedAt = time.Now()
		}
		_, err = ca.Do(protocol.OpGet, uint16(vb), nil, []byte(key), nil)
		switch {
		case err == nil || admin.IsStatus(err, protocol.StatusKeyNotFound):
			if !promotedAt.IsZero() {
				servedAfter++
			}
		case admin.IsStatus(err, protocol.StatusTmpFail), admin.IsStatus(err, protocol.StatusNotMyVBucket):
			if fencedAt.IsZero() {
				fencedAt = time.Now()
			}
		default:
			t.Fatalf("get %s on %s: %v", key, a.addr, err)
		}
		if !promotedAt.IsZero() && time.Since(promotedAt) > 500*time.Millisecond {
			break
		}
		time.Sleep(2 * time.Millisecond) // pacing the observations
	}
	if promotedAt.IsZero() {
		t.Fatalf("the replica on %s was not promoted within 30 s of the cut", replica)
	}
	t.Logf("cut at 0: a refused from %v, the replica active from %v", fencedAt.Sub(cutAt).Round(time.Millisecond), promotedAt.Sub(cutAt).Round(time.Millisecond))
	if fencedAt.IsZero() || !fencedAt.Before(promotedAt) {
		t.Errorf("a was not fenced before the promotion (fenced %v, promoted %v)", fencedAt, promotedAt)
	}
	if servedAfter > 0 {
		t.Errorf("a served vbucket %d %d times after its replica was seen active", vb, servedAfter)
	}
}
