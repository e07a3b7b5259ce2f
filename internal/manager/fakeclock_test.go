package manager

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/clock"
	"github.com/vbcache/vbcache/internal/server"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// TestFailoverWaitsForLeaseOnFakeClock drives the manager's lease
// accounting with a fake clock (Config.Clock) against in-process nodes:
// grants are answered in real time and stamped with fake time, which the
// test moves 100 ms at a time once every node answered another grant.
// Node a is then cut off from the manager and failed over by hand; the
// failover must wait, on the fake clock, until a's lease from the manager
// has surely ended (its last answer plus the lease and the margin), and
// promote a's replica then and not before.
func TestFailoverWaitsForLeaseOnFakeClock(t *testing.T) {
	cli := startTestEtcd(t)
	var cut atomic.Bool
	a := startNodeWith(t, "", func(c *server.Config) { c.CutControl = &cut })
	b, c := startNode(t, ""), startNode(t, "")
	fc := clock.NewFake(time.Unix(1_000_000, 0))
	m, err := New(Config{Etcd: cli, Advertise: "http://fake-clock-test", NumVBuckets: testVBuckets, Replicas: 1,
		SessionTTL: 1, ProbeInterval: 20 * time.Millisecond, Lease: 5 * time.Second, Clock: fc,
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
	answered := func(addr string) uint64 {
		m.mu.Lock()
		defer m.mu.Unlock()
		if r := m.leases[addr]; r != nil {
			return r.ackedSeq
		}
		return 0
	}
	// step moves the fake clock 100 ms once every node in live has
	// answered a grant more.
	step := func(live ...string) {
		t.Helper()
		before := map[string]uint64{}
		for _, n := range live {
			before[n] = answered(n)
		}
		waitFor(t, 10*time.Second, "a grant round", func() bool {
			for _, n := range live {
				if answered(n) <= before[n] {
					return false
				}
			}
			return true
		})
		fc.Advance(100 * time.Millisecond)
	}
	for range 80 { // 8 s of fake time: more than a lease and its margin
		step(a.addr, b.addr, c.addr)
	}

	vb, replica := -1, ""
	for v, row := range s.Map {
		if s.server(row[0]) == a.addr && row[1] >= 0 {
			vb, replica = v, s.server(row[1])
			break
		}
	}
	if vb < 0 {
		t.Fatalf("no vbucket active on %s with a replica", a.addr)
	}
	rc := testDial(t, replica)
	cut.Store(true)
	done := make(chan error, 1)
	go func() { // owned by the test, which waits for done
		_, err := m.failover(ctx, a.addr, false)
		done <- err
	}()
	waitFor(t, 10*time.Second, "the failover to wait on the clock", func() bool { return fc.Waiters() > 0 })
	m.mu.Lock()
	end := newLeaseParams(m.cfg.Lease).managerLeaseEnd(m.leases[a.addr], m.leadSince)
	m.mu.Unlock()
	t.Logf("the failover waits for a's lease: %v of fake time left", end.Sub(fc.Now()))
	if end.Sub(fc.Now()) < 4*time.Second {
		t.Fatalf("a's lease ends %v from now; its last answer was just before the cut", end.Sub(fc.Now()))
	}
	var promotedAt time.Time
	var ferr error
	for i := 0; i < 400 && promotedAt.IsZero(); i++ {
		st, err := rc.GetVBucket(vb)
		if err != nil {
			t.Fatal(err)
		}
		if st == vbucket.Active {
			promotedAt = fc.Now()
			break
		}
		select {
		case ferr = <-done:
			t.Fatalf("the failover ended (%v) without promoting vbucket %d on %s", ferr, vb, replica)
		default:
		}
		step(b.addr, c.addr)
	}
	if promotedAt.IsZero() {
		t.Fatalf("vbucket %d not promoted on %s after 40 s of fake time", vb, replica)
	}
	t.Logf("promoted %v after a's lease surely ended", promotedAt.Sub(end))
	if promotedAt.Before(end) {
		t.Errorf("vbucket %d promoted at fake %v, before a's lease surely ended (%v)", vb, promotedAt, end)
	}
	select {
	case ferr = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the failover did not return")
	}
	if ferr != nil {
		t.Fatalf("failover: %v", ferr)
	}
}

// TestFailoverWaitsForAnEarlierLeadersLease is issue 43's third hole at
// the manager: a leader with --lease 20s grants every node its lease and
// stops; its successor runs with --lease 2s. Node a is cut off before
// the successor grants it anything, so it may hold the first leader's
// 20 s lease. The successor's failover of a must not promote a's
// vbuckets while that lease may run: not after 5 s of (fake) time, as a
// wait by its own 2 s would; only once 20 s and the margin have passed
// since it began to lead. The first leader's lease is in etcd
// (State.LeaseMs).
func TestFailoverWaitsForAnEarlierLeadersLease(t *testing.T) {
	cli := startTestEtcd(t)
	var cut atomic.Bool
	a := startNodeWith(t, "", func(c *server.Config) { c.CutControl = &cut })
	b, c := startNode(t, ""), startNode(t, "")
	logf := func(name string) func(string, ...any) {
		return func(format string, args ...any) { t.Logf(name+": "+format, args...) }
	}
	first, err := New(Config{Etcd: cli, Advertise: "http://first", NumVBuckets: testVBuckets, Replicas: 1,
		SessionTTL: 1, ProbeInterval: 20 * time.Millisecond, Lease: 20 * time.Second, Logf: logf("first")})
	if err != nil {
		t.Fatal(err)
	}
	tm1 := &testManager{m: first, ran: make(chan struct{})}
	tm1.start(t)
	ctx := context.Background()
	for _, n := range []*testNode{a, b, c} {
		if err := first.AddNode(ctx, n.addr); err != nil {
			t.Fatal(err)
		}
	}
	if err := first.StartRebalance(ctx); err != nil {
		t.Fatal(err)
	}
	s := waitRebalanced(t, first)
	waitFor(t, 10*time.Second, "the first leader's grants to every node", func() bool {
		first.mu.Lock()
		defer first.mu.Unlock()
		for _, n := range []*testNode{a, b, c} {
			if r := first.leases[n.addr]; r == nil || r.ackedSeq < 2 {
				return false
			}
		}
		return true
	})
	if got := first.State().LeaseMs; got != 20_000 {
		t.Fatalf("State.LeaseMs %d after a leader with --lease 20s, want 20000", got)
	}
	cut.Store(true) // a hears no successor
	tm1.kill()

	fc := clock.NewFake(time.Unix(1_000_000, 0))
	second, err := New(Config{Etcd: cli, Advertise: "http://second", NumVBuckets: testVBuckets, Replicas: 1,
		SessionTTL: 1, ProbeInterval: 20 * time.Millisecond, Lease: 2 * time.Second, Clock: fc, Logf: logf("second")})
	if err != nil {
		t.Fatal(err)
	}
	tm2 := &testManager{m: second, ran: make(chan struct{})}
	tm2.start(t)
	vb, replica := -1, ""
	for v, row := range s.Map {
		if s.server(row[0]) == a.addr && row[1] >= 0 {
			vb, replica = v, s.server(row[1])
			break
		}
	}
	if vb < 0 {
		t.Fatalf("no vbucket active on %s with a replica", a.addr)
	}
	rc := testDial(t, replica)
	answered := func(addr string) uint64 {
		second.mu.Lock()
		defer second.mu.Unlock()
		if r := second.leases[addr]; r != nil {
			return r.ackedSeq
		}
		return 0
	}
	// step moves the fake clock 100 ms once b and c have answered a
	// grant more.
	step := func() {
		t.Helper()
		before := []uint64{answered(b.addr), answered(c.addr)}
		waitFor(t, 10*time.Second, "a grant round", func() bool {
			return answered(b.addr) > before[0] && answered(c.addr) > before[1]
		})
		fc.Advance(100 * time.Millisecond)
	}
	begun := fc.Now()
	done := make(chan error, 1)
	go func() { // owned by the test, which waits for done
		_, err := second.failover(ctx, a.addr, false)
		done <- err
	}()
	promoted := func() bool {
		st, err := rc.GetVBucket(vb)
		if err != nil {
			t.Fatal(err)
		}
		return st == vbucket.Active
	}
	for fc.Now().Sub(begun) < 5*time.Second {
		step()
		if promoted() {
			t.Fatalf("vbucket %d promoted on %s %v after the successor began, while %s may hold the first leader's 20 s lease",
				vb, replica, fc.Now().Sub(begun), a.addr)
		}
	}
	for i := 0; i < 400 && !promoted(); i++ {
		step()
	}
	at := fc.Now().Sub(begun)
	t.Logf("promoted %v of fake time after the successor began to lead", at)
	if !promoted() {
		t.Fatalf("vbucket %d not promoted on %s after %v", vb, replica, at)
	}
	if at < 20*time.Second {
		t.Errorf("promoted %v after the successor began, before the first leader's 20 s lease surely ended", at)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("failover: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the failover did not return")
	}
}
