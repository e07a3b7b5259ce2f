package manager

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/server"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// TestFailoverOfAMoveTargetStrandsNothing is issue 43's second hole: a
// rebalance moves a vbucket from a to a joining node c; during the
// handover (a holds it dead, c pending: a's handover failpoint) c is cut
// off from the manager, and the manager fails c over. The move's TAKEOVER
// used to hold the failover up until its 10-minute limit, and then
// nothing made the vbucket active again: the row names a, whose copy is
// dead, and c, fenced, serves nothing. Now the move is abandoned at once
// (move.Options.Abandon), and the failover, once c is fenced, makes a's
// copy active again with every key it held.
//
// Two timings: the handover still held when the failover acts (3 s), and
// the handover done after the cut, c active and its TAKEOVER answer lost
// (0.5 s, within the failover's wait for c's 1 s lease): c must then be
// fenced (it is told, or its lease waited out) before a is active again,
// and serve nothing after.
func TestFailoverOfAMoveTargetStrandsNothing(t *testing.T) {
	for _, pause := range []string{"3s", "500ms"} {
		t.Run("handover-pause="+pause, func(t *testing.T) { failoverOfAMoveTarget(t, pause, false) })
	}
	// The rebalance, its moves into the failing node ended at once,
	// clears the forward map before the failover reads it (a CI run,
	// seed 1796678860015554244: the source stayed dead 9 s).
	t.Run("rebalance-ends-first", func(t *testing.T) { failoverOfAMoveTarget(t, "3s", true) })
}

func failoverOfAMoveTarget(t *testing.T, pause string, endFirst bool) {
	cli := startTestEtcd(t)
	a := startNode(t, pause) // holds each handover, dead, that long
	b := startNode(t, "")
	var cut atomic.Bool
	c := startNodeWith(t, "", func(cfg *server.Config) { cfg.CutControl = &cut })
	m, err := New(Config{Etcd: cli, Advertise: "http://strand-test", NumVBuckets: testVBuckets, Replicas: 0,
		SessionTTL: 1, ProbeInterval: 50 * time.Millisecond, MaxMoves: 1, Lease: time.Second,
		Logf: func(format string, args ...any) { t.Logf("manager: "+format, args...) }})
	if err != nil {
		t.Fatal(err)
	}
	if endFirst {
		m.hook = func(step string, _ int) {
			if step != "failover-marked" {
				return
			}
			deadline := time.Now().Add(10 * time.Second)
			for m.State().Forward != nil && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond) // polling a condition
			}
			t.Logf("the rebalance ended before the failover read the state: %v", m.State().Forward == nil)
		}
	}
	tm := &testManager{m: m, ran: make(chan struct{})}
	tm.start(t)
	ctx := context.Background()
	for _, n := range []*testNode{a, b} {
		if err := m.AddNode(ctx, n.addr); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.StartRebalance(ctx); err != nil {
		t.Fatal(err)
	}
	s := waitRebalanced(t, m)
	keys := testKeys()
	writeKeys(t, s, keys)

	if err := m.AddNode(ctx, c.addr); err != nil {
		t.Fatal(err)
	}
	if err := m.StartRebalance(ctx); err != nil {
		t.Fatal(err)
	}
	// A vbucket of a's in its handover to c.
	cc, ac := testDial(t, c.addr), testDial(t, a.addr)
	vb := -1
	waitFor(t, 30*time.Second, "a handover from "+a.addr+" to "+c.addr, func() bool {
		for v, row := range s.Map {
			if s.server(row[0]) != a.addr {
				continue
			}
			if st, err := cc.GetVBucket(v); err == nil && st == vbucket.Pending {
				vb = v
				return true
			}
		}
		return false
	})
	cut.Store(true)
	t0 := time.Now()
	rep, err := m.FailoverReport(ctx, c.addr, FailoverOptions{})
	t.Logf("failover of %s took %v: %+v, %v", c.addr, time.Since(t0).Round(time.Millisecond), rep, err)
	if err != nil {
		t.Fatalf("failover: %v", err)
	}
	ns := m.State()
	if got := ns.server(ns.Map[vb][0]); got != a.addr {
		t.Fatalf("vbucket %d: the map names %s, want %s", vb, got, a.addr)
	}
	if st, err := ac.GetVBucket(vb); err != nil || st != vbucket.Active {
		t.Fatalf("vbucket %d on %s: %s, %v; want active (the failover of its move's target stranded it)", vb, a.addr, st, err)
	}
	for _, k := range keys[vb] {
		if v, err := ac.Do(protocol.OpGet, uint16(vb), nil, []byte(k), nil); err != nil || string(v) != "v-"+k {
			t.Errorf("vbucket %d: get %s on %s: %q, %v", vb, k, a.addr, v, err)
		}
	}
	// c, cut off and fenced, serves nothing, whatever its state.
	nodeC := testDial(t, c.addr)
	cut.Store(false) // to ask it (its lease has run out; nothing grants it one)
	st, err := nodeC.GetVBucket(vb)
	t.Logf("vbucket %d on the failed-over %s: %s, %v", vb, c.addr, st, err)
	if lines, err := ac.Stats("streams"); err == nil {
		for _, kv := range lines {
			if kv[0] == "takeovers_out" {
				t.Logf("%s completed %s takeovers as their source (1: the handover to %s was done, its answer lost)", a.addr, kv[1], c.addr)
			}
		}
	}
	if err == nil && st == vbucket.Active {
		if _, err := nodeC.Do(protocol.OpGet, uint16(vb), nil, []byte(keys[vb][0]), nil); err == nil || !admin.IsStatus(err, protocol.StatusTmpFail) {
			t.Errorf("vbucket %d is active on the failed-over %s, and a get there answered %v: two actives", vb, c.addr, err)
		}
		t.Logf("vbucket %d turned active on %s after the cut (its TAKEOVER answer lost); it serves nothing", vb, c.addr)
	}
	if took := time.Since(t0); took > 20*time.Second {
		t.Errorf("the failover took %v: the move into the failed node held it up", took.Round(time.Millisecond))
	}
}
