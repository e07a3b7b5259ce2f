package manager

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// TestJanitorPlan: what the janitor asks for, from the map and the
// members' answers alone.
func TestJanitorPlan(t *testing.T) {
	s := &State{Servers: []string{"a", "b", "c"}, Map: [][]int{
		{0, 1},  // 0: a active, b replica: as it should be
		{0, 1},  // 1: a dead with items, nobody active
		{1, 2},  // 2: b active, c active too (a stray)
		{2, 0},  // 3: c active; b holds an orphan replica
		{0, 1},  // 4: a dead, b ahead of it on the same lineage
		{1, -1}, // 5: b pending (a takeover left it), no replica
		{2, 1},  // 6: c holds no copy, b none either: activated empty
		{0, 2},  // 7: a holds no copy, its replica c does: not overruled
		{2, 0},  // 8: c holds a replica, nobody active: a failover's promotion, not the janitor's
		{0, 1},  // 9: b's replica follows c: pointed at a again
		{0, 1},  // 10: b's replica follows nothing: pointed at a
		{0, 1},  // 11: b does not say what its replica follows: left alone
		{0, 1},  // 12: b holds no copy: made a replica of a
		{0, 1},  // 13: b follows a: as it should be
		{2, 1},  // 14: c dead with no lineage (seqno left from before a DEL_VBUCKET), b's replica holds items: not overruled
	}, Chain: false}
	pos := map[string]map[int]copyPos{
		"a": {0: {"active", 7, 10, 1, ""}, 1: {"dead", 7, 30, 3, ""}, 3: {"replica", 8, 5, 1, ""}, 4: {"dead", 9, 10, 2, ""},
			9: {"active", 5, 1, 1, ""}, 10: {"active", 5, 1, 1, ""}, 11: {"active", 5, 1, 1, ""}, 12: {"active", 5, 1, 1, ""}, 13: {"active", 5, 1, 1, ""}},
		"b": {0: {"replica", 7, 10, 1, ""}, 1: {"replica", 7, 30, 3, ""}, 2: {"active", 1, 4, 1, ""}, 3: {"replica", 8, 5, 1, ""}, 4: {"replica", 9, 12, 2, ""}, 5: {"pending", 2, 6, 1, ""},
			14: {"replica", 6, 30, 3, "c"}, 9: {"replica", 5, 1, 1, "c"}, 10: {"replica", 5, 1, 1, "none"}, 11: {"replica", 5, 0, 0, ""}, 13: {"replica", 5, 1, 1, "a"}},
		"c": {2: {"active", 1, 4, 1, ""}, 3: {"active", 8, 5, 1, ""}, 7: {"replica", 3, 4, 2, ""}, 8: {"replica", 4, 9, 1, ""}, 14: {"dead", 0, 40, 0, ""}},
	}
	var got []string
	for _, r := range janitorPlan(s, pos) {
		got = append(got, fmt.Sprintf("%s %d %s %s", r.Kind, r.VB, r.Node, r.Source))
	}
	want := []string{
		"deactivated 2 c b", // the row's replica: follows the active again
		"activated 1 a ",
		"unrepaired 4 a ",
		"activated 5 b ",
		"activated 6 c ",
		"unrepaired 7 a ",
		"unrepaired 8 c ",
		"unrepaired 14 c ",
		"repointed 9 b a",
		"repointed 10 b a",
		"repointed 12 b a",
		"dropped 3 b ",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("plan:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// janitorCluster starts three nodes and a manager whose janitor looks
// every 100 ms, rebalances them, and returns at least need vbuckets with
// a replica.
func janitorCluster(t *testing.T, name string, need int) ([]*testNode, *State, []int) {
	t.Helper()
	cli := startTestEtcd(t)
	nodes := []*testNode{startNode(t, ""), startNode(t, ""), startNode(t, "")}
	tm := newTestManager(t, cli, name)
	tm.m.cfg.JanitorInterval = 100 * time.Millisecond
	tm.start(t)
	s := tm.joinAll(t, nodes)
	var withReplica []int
	for vb, row := range s.Map {
		if row[0] >= 0 && len(row) > 1 && row[1] >= 0 {
			withReplica = append(withReplica, vb)
		}
	}
	if len(withReplica) < need {
		t.Fatalf("%d vbuckets with a replica: %v", len(withReplica), s.Map)
	}
	return nodes, s, withReplica
}

// TestJanitorRepairs: with every member answering and nothing running,
// the leader's janitor repairs, on real nodes, what no other duty would:
// a vbucket whose map active was left dead (a TAKEOVER whose answer was
// lost and whose target never took it) and one left pending are active
// again, with their items; a stray active on the row's replica is a
// replica again, following its active; an orphan replica is dropped.
// Without the janitor (the vbcache_unsafe_janitor tag) they stay so: the
// test fails.
func TestJanitorRepairs(t *testing.T) {
	nodes, s, withReplica := janitorCluster(t, "janitor", 4)
	dead, pending, stray, orphanVB := withReplica[0], withReplica[1], withReplica[2], withReplica[3]
	activeOf := func(vb int) string { return s.server(s.Map[vb][0]) }
	replicaOf := func(vb int) string { return s.server(s.Map[vb][1]) }
	orphanAt := ""
	for _, n := range nodes {
		if !slices.Contains(s.Map[orphanVB], slices.Index(s.Servers, n.addr)) {
			orphanAt = n.addr
		}
	}
	if orphanAt == "" {
		t.Fatalf("every node holds vbucket %d", orphanVB)
	}
	// Items in the vbuckets to be stranded, to see they survive.
	for _, vb := range []int{dead, pending} {
		c := testDial(t, activeOf(vb))
		for i := range 3 {
			if _, err := c.Do(protocol.OpSet, uint16(vb), make([]byte, 8), fmt.Appendf(nil, "k%d-%d", vb, i), []byte("v")); err != nil {
				t.Fatalf("set in vbucket %d: %v", vb, err)
			}
		}
	}
	set := func(addr string, vb int, st vbucket.State) {
		t.Helper()
		if err := testDial(t, addr).SetVBucket(vb, st); err != nil {
			t.Fatalf("vbucket %d %s on %s: %v", vb, st, addr, err)
		}
	}
	set(activeOf(dead), dead, vbucket.Dead)
	set(activeOf(pending), pending, vbucket.Pending)
	set(replicaOf(stray), stray, vbucket.Active)
	set(orphanAt, orphanVB, vbucket.Replica)
	conns := map[string]*admin.Conn{} // one per node: the polls below would use up its connections
	for _, n := range nodes {
		conns[n.addr] = testDial(t, n.addr)
	}
	state := func(addr string, vb int) vbucket.State {
		st, err := conns[addr].GetVBucket(vb)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	waitFor(t, 10*time.Second, "the janitor's repairs", func() bool {
		return state(activeOf(dead), dead) == vbucket.Active && state(activeOf(pending), pending) == vbucket.Active &&
			state(replicaOf(stray), stray) == vbucket.Replica && state(orphanAt, orphanVB) == vbucket.Dead
	})
	for _, vb := range []int{dead, pending} {
		c := testDial(t, activeOf(vb))
		for i := range 3 {
			if v, err := c.Do(protocol.OpGet, uint16(vb), nil, fmt.Appendf(nil, "k%d-%d", vb, i), nil); err != nil || string(v) != "v" {
				t.Errorf("vbucket %d, key %d, after the repair: %q, %v", vb, i, v, err)
			}
		}
	}
	// The stray follows its active again: a write there reaches it.
	c := testDial(t, activeOf(stray))
	if _, err := c.Do(protocol.OpSet, uint16(stray), make([]byte, 8), []byte("after"), []byte("w")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the repaired replica to take a new write", func() bool {
		lines, err := conns[replicaOf(stray)].Stats("vbucket")
		if err != nil {
			return false
		}
		p := parsePositions(lines)[stray]
		return p.State == "replica" && p.Items >= 1
	})
}

// TestJanitorRepointsAReplica: a replica the map names that follows the
// wrong node, or nothing (its REPLICATE lost with the leader that sent
// it, or a consumer stopped behind the manager's back), is pointed at its
// row's source again by the janitor, and takes the active's writes. It
// never was before: under --sync-replication every write of the vbucket
// then waited for it in vain.
func TestJanitorRepointsAReplica(t *testing.T) {
	nodes, s, withReplica := janitorCluster(t, "janitor-repoint", 2)
	stopped, wrong := withReplica[0], withReplica[1]
	activeOf := func(vb int) string { return s.server(s.Map[vb][0]) }
	replicaOf := func(vb int) string { return s.server(s.Map[vb][1]) }
	other := func(vb int) string { // the node that holds no copy of vb
		for _, n := range nodes {
			if n.addr != activeOf(vb) && n.addr != replicaOf(vb) {
				return n.addr
			}
		}
		t.Fatalf("every node holds vbucket %d", vb)
		return ""
	}
	if err := testDial(t, replicaOf(stopped)).StopReplication(stopped); err != nil {
		t.Fatal(err)
	}
	if err := testDial(t, replicaOf(wrong)).Replicate(wrong, other(wrong)); err != nil {
		t.Fatal(err)
	}
	for _, vb := range []int{stopped, wrong} {
		c := testDial(t, activeOf(vb))
		if _, err := c.Do(protocol.OpSet, uint16(vb), make([]byte, 8), fmt.Appendf(nil, "after-%d", vb), []byte("w")); err != nil {
			t.Fatal(err)
		}
		rc := testDial(t, replicaOf(vb))
		waitFor(t, 10*time.Second, fmt.Sprintf("replica %s of vbucket %d to follow %s again and take its write", replicaOf(vb), vb, activeOf(vb)), func() bool {
			lines, err := rc.Stats("vbucket " + fmt.Sprint(vb))
			if err != nil {
				return false
			}
			p := parsePositions(lines)[vb]
			return p.State == "replica" && p.Items >= 1
		})
	}
}
