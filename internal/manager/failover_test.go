package manager

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// TestFailoverPromotesThroughMove fails over a live node a (it answers,
// so it is told first and the failover need not wait for its lease) after
// one of its replicas was dropped behind the manager's back (SET_VBUCKET
// dead on the replica's node): every other vbucket a was active for is
// promoted on its replica (move.Promote, R5) with its keys, and the one
// whose replica is gone is logged with the rule that refused it and made
// active, empty, on that node (a cache loses data, never availability),
// counted as lost.
func TestFailoverPromotesThroughMove(t *testing.T) {
	cli := startTestEtcd(t)
	nodes := []*testNode{startNode(t, ""), startNode(t, ""), startNode(t, "")}
	var logMu sync.Mutex
	var logs []string
	m, err := New(Config{Etcd: cli, Advertise: "http://promote-test", NumVBuckets: testVBuckets, Replicas: 1,
		SessionTTL: 1, ProbeInterval: 50 * time.Millisecond,
		Logf: func(format string, args ...any) {
			line := fmt.Sprintf(format, args...)
			logMu.Lock()
			logs = append(logs, line)
			logMu.Unlock()
			t.Log("manager: " + line)
		}})
	if err != nil {
		t.Fatal(err)
	}
	tm := &testManager{m: m, ran: make(chan struct{})}
	tm.start(t)
	ctx := context.Background()
	for _, n := range nodes {
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

	a := nodes[0].addr
	var mine []int // a's active vbuckets, each with a replica
	for vb, row := range s.Map {
		if s.server(row[0]) == a && row[1] >= 0 {
			mine = append(mine, vb)
		}
	}
	if len(mine) < 2 {
		t.Fatalf("%s is active for %v only: %v", a, mine, s.Map)
	}
	waitReplicasCaughtUp(t, s, a, mine, keys)
	broken := mine[0]
	brokenAt := s.server(s.Map[broken][1])
	if err := testDial(t, brokenAt).SetVBucket(broken, vbucket.Dead); err != nil {
		t.Fatal(err)
	}

	rep, err := m.failover(ctx, a, false /* force */)
	if err != nil {
		t.Fatalf("failover: %v", err)
	}
	t.Logf("%+v", rep)
	if rep.Promoted != len(mine)-1 || rep.Lost != 1 || rep.Unactivated != 0 {
		t.Errorf("promoted %d (want %d), lost %d (want 1), unactivated %d (want 0)", rep.Promoted, len(mine)-1, rep.Lost, rep.Unactivated)
	}
	ns := m.State()
	for _, vb := range mine {
		to := ns.server(ns.Map[vb][0])
		c := testDial(t, to)
		st, err := c.GetVBucket(vb)
		if err != nil {
			t.Fatal(err)
		}
		if vb == broken {
			if to != brokenAt || st != vbucket.Active {
				t.Errorf("vbucket %d, its replica dropped: %s on %s (the map's active %s); want it active there", vb, st, brokenAt, to)
			}
			for _, k := range keys[vb] {
				if _, err := c.Do(protocol.OpGet, uint16(vb), nil, []byte(k), nil); !admin.IsStatus(err, protocol.StatusKeyNotFound) {
					t.Errorf("vbucket %d, activated empty: get %s on %s: %v, want not found", vb, k, to, err)
				}
			}
			continue
		}
		if st != vbucket.Active {
			t.Errorf("vbucket %d: %s on its new active %s", vb, st, to)
			continue
		}
		for _, k := range keys[vb] {
			if v, err := c.Do(protocol.OpGet, uint16(vb), nil, []byte(k), nil); err != nil || string(v) != "v-"+k {
				t.Errorf("vbucket %d: get %s on %s: %q, %v", vb, k, to, v, err)
			}
		}
	}
	if st, err := testDial(t, a).GetVBucket(mine[1]); err != nil || st != vbucket.Dead {
		t.Errorf("vbucket %d on the failed-over %s: %s, %v", mine[1], a, st, err)
	}
	logMu.Lock()
	want := fmt.Sprintf("promoting vbucket %d on %s: source-and-copy-lost", broken, brokenAt)
	if !slices.ContainsFunc(logs, func(l string) bool { return strings.Contains(l, want) }) {
		t.Errorf("no log line with %q", want)
	}
	logMu.Unlock()

	// The failed-over node joins again within the same leadership: it is
	// granted leases again (the failover had stopped them) and the
	// rebalance gives it vbuckets.
	if err := m.AddNode(ctx, a); err != nil {
		t.Fatalf("adding %s again after its failover: %v", a, err)
	}
	if err := m.StartRebalance(ctx); err != nil {
		t.Fatal(err)
	}
	s = waitRebalanced(t, m)
	if slices.Contains(s.FailedOver, a) || !slices.ContainsFunc(s.Map, func(row []int) bool { return s.server(row[0]) == a }) {
		t.Errorf("%s after joining again: failed over %v, the map %v", a, s.FailedOver, s.Map)
	}
	waitFor(t, 10*time.Second, a+" to hold a lease again", func() bool {
		lines, err := testDial(t, a).Stats("vbucket")
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range lines {
			if kv[0] == "lease_ms_left" {
				n, _ := strconv.Atoi(kv[1])
				return n > 0
			}
		}
		return false
	})
}

// waitReplicasCaughtUp waits until the replica of each of a's vbuckets
// vbs has caught up with a after the writes of keys. Replication is
// asynchronous: a promoted replica lacks the writes inside the
// replication lag.
func waitReplicasCaughtUp(t *testing.T, s *State, a string, vbs []int, keys map[int][]string) {
	t.Helper()
	mine := vbs
	// Each replica's stream must reach the active's sequence number
	// after the writes. Not items_received: a stream opened after the
	// writes gets them as its backfill, which that counter may not
	// count.
	ac := testDial(t, a)
	for _, vb := range mine {
		var high int
		lines, err := ac.Stats("vbucket " + strconv.Itoa(vb))
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range lines {
			if kv[0] == "vb_"+strconv.Itoa(vb)+":high_seqno" {
				high, _ = strconv.Atoi(kv[1])
			}
		}
		if high < len(keys[vb]) {
			t.Fatalf("vbucket %d on %s: high_seqno %d after %d writes", vb, a, high, len(keys[vb]))
		}
		rc := testDial(t, s.server(s.Map[vb][1]))
		q := "consumer:" + a + ":vb_" + strconv.Itoa(vb) + ":seqno"
		waitFor(t, 10*time.Second, fmt.Sprintf("vbucket %d's replica to catch up", vb), func() bool {
			lines, err := rc.Stats("streams " + strconv.Itoa(vb))
			if err != nil {
				t.Fatal(err)
			}
			for _, kv := range lines {
				if kv[0] == q {
					n, _ := strconv.Atoi(kv[1])
					return n >= high
				}
			}
			return false
		})
	}
}

// TestUnsureFailoverPromotesOnceTold: a failover that committed its map
// without a's vbuckets but could not be sure a had stopped serving
// promotes nothing then (failover's ErrNotSure after the commit, when the
// new map's push reached too few of a's quorum set); once a answers and
// has been told it is out (every vbucket dead there, the new map), the
// promotions are done (finishPromotion): each vbucket a was active for
// is active on its replica with its keys. The unsure failover's commit is
// made by hand here (the push reaching too few nodes cannot be arranged
// with live in-process nodes); what follows it is the manager's own.
func TestUnsureFailoverPromotesOnceTold(t *testing.T) {
	cli := startTestEtcd(t)
	nodes := []*testNode{startNode(t, ""), startNode(t, ""), startNode(t, "")}
	var logMu sync.Mutex
	var logs []string
	m, err := New(Config{Etcd: cli, Advertise: "http://unsure-test", NumVBuckets: testVBuckets, Replicas: 1,
		SessionTTL: 1, ProbeInterval: 50 * time.Millisecond,
		Logf: func(format string, args ...any) {
			line := fmt.Sprintf(format, args...)
			logMu.Lock()
			logs = append(logs, line)
			logMu.Unlock()
			t.Log("manager: " + line)
		}})
	if err != nil {
		t.Fatal(err)
	}
	tm := &testManager{m: m, ran: make(chan struct{})}
	tm.start(t)
	ctx := context.Background()
	for _, n := range nodes {
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
	a := nodes[0].addr
	idx := slices.Index(s.Servers, a)
	var mine []int
	for vb, row := range s.Map {
		if row[0] == idx && row[1] >= 0 {
			mine = append(mine, vb)
		}
	}
	if len(mine) == 0 {
		t.Fatalf("%s is active for no vbucket with a replica: %v", a, s.Map)
	}
	waitReplicasCaughtUp(t, s, a, mine, keys)

	// The unsure failover's commit: a out of every row (its actives'
	// replicas first in theirs), out of the members, failed over; pushed.
	m.stopGrants(a, newLeaseParams(m.cfg.Lease))
	changed := map[int]bool{}
	ns, err := m.update(ctx, func(st *State) error {
		clear(changed)
		for vb, row := range st.Map {
			if !slices.Contains(row, idx) {
				continue
			}
			changed[vb] = row[0] == idx
			var nr []int
			for _, r := range row {
				if r >= 0 && r != idx {
					nr = append(nr, r)
				}
			}
			for len(nr) < len(row) {
				nr = append(nr, -1)
			}
			st.Map[vb] = nr
		}
		st.Forward = nil
		st.Nodes = slices.DeleteFunc(st.Nodes, func(x string) bool { return x == a })
		st.FailedOver = append(st.FailedOver, a)
		st.compact()
		st.Rev++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for vb, active := range changed {
		if !active {
			delete(changed, vb)
		}
	}
	m.mu.Lock()
	delete(m.told, a)
	m.unpromoted[a] = &promotion{ns: ns, changed: changed, lost: map[int]bool{}, keptOld: map[int]bool{}}
	m.mu.Unlock()
	m.pushConfigAcks(ctx, ns)

	// a answers: the probes tell it it is out, and the promotions follow.
	for _, vb := range mine {
		to := ns.server(ns.Map[vb][0])
		c := testDial(t, to)
		waitFor(t, 20*time.Second, fmt.Sprintf("vbucket %d active on %s", vb, to), func() bool {
			st, err := c.GetVBucket(vb)
			return err == nil && st == vbucket.Active
		})
		for _, k := range keys[vb] {
			if v, err := c.Do(protocol.OpGet, uint16(vb), nil, []byte(k), nil); err != nil || string(v) != "v-"+k {
				t.Errorf("vbucket %d: get %s on %s: %q, %v", vb, k, to, v, err)
			}
		}
		if st, err := testDial(t, a).GetVBucket(vb); err != nil || st != vbucket.Dead {
			t.Errorf("vbucket %d on the failed-over %s: %s, %v", vb, a, st, err)
		}
	}
	// The line is logged once every promotion is answered, which can come
	// just after the vbuckets above were seen active.
	waitFor(t, 10*time.Second, "a log line of the promotions done", func() bool {
		logMu.Lock()
		defer logMu.Unlock()
		return slices.ContainsFunc(logs, func(l string) bool {
			return strings.Contains(l, a+" was told it is out: its failover's promotions done")
		})
	})
}
