package manager

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/server"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// TestRestartWatch pins restart.go's rule, answer by answer: two answers
// in a row holding no active (after a new incarnation, fewer actives than
// the map gives) while the map gives the node actives, with nothing
// running, are a restart that lost the data; anything else in between
// starts the count again; an incarnation change is reported whatever the
// node holds; an older node's empty answer knows nothing, and a node that
// does not say its actives is judged by all it holds.
func TestRestartWatch(t *testing.T) {
	type answer struct {
		inc     uint64 // 0: an older node's empty answer
		held    int
		act     int    // the actives it holds; -1: not said (a 12-byte answer)
		actives int    // the map's
		busy    bool   // a failover ran, or the map changed
		reb     bool   // a rebalance ran
		lost    bool   // lost() after it
		changed uint64 // restartSeen.Was
	}
	for _, tc := range []struct {
		name    string
		answers []answer
	}{
		{"restart", []answer{
			{inc: 1, held: 40, act: 20, actives: 20},
			{inc: 2, held: 0, act: 0, actives: 20, changed: 1},
			{inc: 2, held: 0, act: 0, actives: 20, lost: true},
			{inc: 2, held: 0, act: 0, actives: 20, lost: true},
		}},
		{"restarted, and made a replica within its first probe", []answer{
			{inc: 1, held: 42, act: 21, actives: 21},
			{inc: 2, held: 1, act: 0, actives: 21, changed: 1},
			{inc: 2, held: 1, act: 0, actives: 21, lost: true},
		}},
		{"restarted, and a move gave it one active back", []answer{
			{inc: 1, held: 40, act: 20, actives: 20},
			{inc: 2, held: 2, act: 1, actives: 21, changed: 1},
			{inc: 2, held: 2, act: 1, actives: 21, lost: true},
		}},
		{"restarted, and holds every active the map gives it", []answer{
			{inc: 1, held: 8, act: 4, actives: 4},
			{inc: 9, held: 8, act: 4, actives: 4, changed: 1},
			{inc: 9, held: 8, act: 3, actives: 4}, // the mark ended: one active short is not a restart
			{inc: 9, held: 8, act: 3, actives: 4},
		}},
		{"a restart seen while busy stays marked", []answer{
			{inc: 1, held: 8, act: 4, actives: 4},
			{inc: 9, held: 2, act: 1, actives: 4, busy: true, changed: 1},
			{inc: 9, held: 2, act: 1, actives: 4},
			{inc: 9, held: 2, act: 1, actives: 4, lost: true},
		}},
		{"a node short of an active that did not restart", []answer{
			{inc: 1, held: 40, act: 19, actives: 20},
			{inc: 1, held: 40, act: 19, actives: 20},
			{inc: 1, held: 40, act: 19, actives: 20},
		}},
		{"first answers of a leadership, already empty", []answer{
			{inc: 5, held: 0, act: 0, actives: 3},
			{inc: 5, held: 0, act: 0, actives: 3, lost: true},
		}},
		{"a move commits between an answer and the map's reading", []answer{
			{inc: 1, held: 0, act: 0, actives: 0},
			{inc: 1, held: 0, act: 0, actives: 1}, // the node took the vbucket over after it answered
			{inc: 1, held: 1, act: 1, actives: 1},
			{inc: 1, held: 1, act: 1, actives: 1},
		}},
		{"a rebalance or failover runs", []answer{
			{inc: 1, held: 0, act: 0, actives: 4, busy: true},
			{inc: 1, held: 0, act: 0, actives: 4, busy: true},
			{inc: 1, held: 0, act: 0, actives: 4},
			{inc: 1, held: 0, act: 0, actives: 4, busy: true},
			{inc: 1, held: 0, act: 0, actives: 4},
			{inc: 1, held: 0, act: 0, actives: 4, lost: true},
		}},
		{"a rebalance runs", []answer{
			{inc: 1, held: 0, act: 0, actives: 4, reb: true},
			{inc: 1, held: 0, act: 0, actives: 4, reb: true},
			{inc: 1, held: 0, act: 0, actives: 4},
			{inc: 1, held: 0, act: 0, actives: 4, lost: true},
		}},
		{"restarted while a rebalance runs", []answer{
			{inc: 1, held: 40, act: 20, actives: 20, reb: true},
			{inc: 2, held: 1, act: 0, actives: 20, reb: true, changed: 1},
			{inc: 2, held: 1, act: 0, actives: 20, reb: true, lost: true},
		}},
		{"restarted while a rebalance moves vbuckets into it", []answer{
			{inc: 1, held: 4, act: 2, actives: 2, reb: true},
			{inc: 2, held: 1, act: 1, actives: 2, reb: true, busy: true, changed: 1}, // the map changed meanwhile
			{inc: 2, held: 2, act: 2, actives: 3, reb: true, busy: true},
			{inc: 2, held: 3, act: 3, actives: 3, reb: true},
		}},
		{"the map gives it replicas only", []answer{
			{inc: 1, held: 0, act: 0, actives: 0},
			{inc: 1, held: 0, act: 0, actives: 0},
		}},
		{"a node that does not say its actives", []answer{
			{inc: 1, held: 8, act: -1, actives: 4},
			{inc: 9, held: 2, act: -1, actives: 4, changed: 1},
			{inc: 9, held: 2, act: -1, actives: 4, lost: true}, // restarted, and holds fewer than the map's actives
			{inc: 9, held: 4, act: -1, actives: 4},
			{inc: 9, held: 0, act: -1, actives: 4},
			{inc: 9, held: 0, act: -1, actives: 4, lost: true},
		}},
		{"an older node", []answer{
			{inc: 0, held: 0, act: -1, actives: 4},
			{inc: 0, held: 0, act: -1, actives: 4},
			{inc: 3, held: 0, act: -1, actives: 4}, // upgraded: no change reported, none was known
			{inc: 3, held: 0, act: -1, actives: 4, lost: true},
			{inc: 0, held: 0, act: -1, actives: 4}, // downgraded: nothing known
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w restartWatch
			for i, a := range tc.answers {
				ans := admin.LeaseAnswer{Known: a.inc != 0, Incarnation: a.inc, Held: a.held}
				if a.act >= 0 && a.inc != 0 {
					ans.Actives, ans.ActivesKnown = a.act, true
				}
				seen := w.answered(ans, a.actives, a.busy, a.reb)
				if seen.Was != a.changed || w.lost() != a.lost {
					t.Fatalf("answer %d %+v (map: %d actives, busy %v, rebalance %v): incarnation change from %#x (want %#x), lost %v (want %v)",
						i, ans, a.actives, a.busy, a.reb, seen.Was, a.changed, w.lost(), a.lost)
				}
			}
		})
	}
}

// TestRestartedNodeInProcess restarts an in-process node at its address
// (the old server stopped, a new one on the same port, empty) while the
// map names it active, with probes every 50 ms and failover after 1 h
// down, so only restart.go's rule can act. With automatic failover on,
// the manager fails it over, logging why, and the node, added back and
// rebalanced, holds vbuckets again. With it off, the manager warns once,
// /status reports the node restarted, and nothing is failed over until an
// operator's failover.
func TestRestartedNodeInProcess(t *testing.T) {
	for _, auto := range []bool{true, false} {
		t.Run(map[bool]string{true: "auto", false: "off"}[auto], func(t *testing.T) {
			cli := startTestEtcd(t)
			nodes := []*testNode{startNode(t, ""), startNode(t, ""), startNode(t, "")}
			var logMu sync.Mutex
			var logs []string
			countLogs := func(sub string) int {
				logMu.Lock()
				defer logMu.Unlock()
				n := 0
				for _, l := range logs {
					if strings.Contains(l, sub) {
						n++
					}
				}
				return n
			}
			after := time.Hour
			if !auto {
				after = 0
			}
			m, err := New(Config{Etcd: cli, Advertise: "http://restart-test", NumVBuckets: testVBuckets, Replicas: 1,
				SessionTTL: 1, ProbeInterval: 50 * time.Millisecond, FailoverAfter: after,
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
			a := nodes[0].addr
			actives := activesOf(s, a)
			if actives == 0 {
				t.Fatalf("the map gives %s no active: %v", a, s.Map)
			}
			nodeStatus := func() NodeStatus {
				for _, n := range m.Status().Nodes {
					if n.Addr == a {
						return n
					}
				}
				return NodeStatus{}
			}
			waitFor(t, 10*time.Second, "the node's incarnation in /status", func() bool {
				n := nodeStatus()
				return n.Incarnation != "" && n.Holds != nil && *n.Holds > 0
			})
			inc := nodeStatus().Incarnation

			nodes[0].stop()
			_, port, _ := net.SplitHostPort(a)
			restarted := startNodeWith(t, "", func(c *server.Config) { c.Port, _ = strconv.Atoi(port) })
			if restarted.addr != a {
				t.Fatalf("restarted at %s, not %s", restarted.addr, a)
			}
			since := time.Now()
			want := fmt.Sprintf("manager: %s restarted (it holds 0 of the %d actives the map gives it): failing it over", a, actives)
			if !auto {
				want = fmt.Sprintf("manager: %s restarted (it holds 0 of the %d actives the map gives it): not failing it over (automatic failover is off)", a, actives)
			}
			waitFor(t, 10*time.Second, "the log line "+want, func() bool { return countLogs(want) > 0 })
			t.Logf("%v after the restart: %s", time.Since(since).Round(time.Millisecond), want)
			if countLogs(fmt.Sprintf("manager: %s restarted (incarnation ", a)) != 1 {
				t.Errorf("the incarnation change was not logged once")
			}
			if !auto {
				n := nodeStatus()
				if !n.Restarted || n.Holds == nil || *n.Holds != 0 || n.Incarnation == inc {
					t.Errorf("/status of the restarted node: %+v (incarnation before %s)", n, inc)
				}
				// Ten more answers: warned once, not failed over.
				answered := n.Lease.Answered
				waitFor(t, 10*time.Second, "ten more grants answered", func() bool {
					n := nodeStatus()
					return n.Lease != nil && n.Lease.Answered >= answered+10
				})
				if c := countLogs(want); c != 1 {
					t.Errorf("warned %d times, want once", c)
				}
				if fo := m.State().FailedOver; len(fo) > 0 {
					t.Fatalf("failed over %v with automatic failover off", fo)
				}
				if err := m.Failover(ctx, a, FailoverOptions{Rebuild: true}); err != nil {
					t.Fatal(err)
				}
			}
			// Failed over, and the replicas rebuilt by the rebalance the
			// failover starts.
			waitFor(t, 10*time.Second, a+" failed over and its replicas rebuilt", func() bool {
				s := m.State()
				return slices.Contains(s.FailedOver, a) && s.Rebalance != nil && s.Rebalance.Started.After(since) && !s.Rebalance.Running
			})
			s = m.State()
			for vb, row := range s.Map {
				if s.server(row[0]) == a || row[0] < 0 {
					t.Fatalf("vbucket %d after the failover: %v (servers %v)", vb, row, s.Servers)
				}
			}
			// Back in.
			if err := m.AddNode(ctx, a); err != nil {
				t.Fatalf("adding %s back: %v", a, err)
			}
			if err := m.StartRebalance(ctx); err != nil {
				t.Fatal(err)
			}
			s = waitRebalanced(t, m)
			if activesOf(s, a) == 0 {
				t.Fatalf("%s holds no active after it was added back and the rebalance", a)
			}
			c := testDial(t, a)
			held := 0
			for vb := range testVBuckets {
				if st, err := c.GetVBucket(vb); err == nil && st == vbucket.Active {
					held++
				}
			}
			if held != activesOf(s, a) {
				t.Errorf("%s is active for %d vbuckets, the map gives it %d", a, held, activesOf(s, a))
			}
			if n := nodeStatus(); n.Restarted {
				t.Errorf("%s still reported restarted: %+v, holds %d, lease %+v", a, n, *n.Holds, *n.Lease)
			}
		})
	}
}

// TestRestartedNodeGivenAReplica is the restart rule's hole that the fault
// schedule met (a CI run of TestSchedule, restart-node right after a
// leader's recovery of a rebalance): the node killed and started again
// was made a replica of one vbucket (a move's or a failover's
// REPLICATE, sent by an operation that began before the restart) before
// the leader had two empty answers from it. It then held one vbucket, so
// the rule ("holds none") never held, and the vbuckets the map made it
// active for were served by no one for as long as the cluster ran. The
// rule counts the actives a node holds, so a replica does not hide that
// they are gone.
func TestRestartedNodeGivenAReplica(t *testing.T) {
	cli := startTestEtcd(t)
	nodes := []*testNode{startNode(t, ""), startNode(t, ""), startNode(t, "")}
	m, err := New(Config{Etcd: cli, Advertise: "http://restart-replica-test", NumVBuckets: testVBuckets, Replicas: 1,
		SessionTTL: 1, ProbeInterval: 200 * time.Millisecond, FailoverAfter: time.Hour,
		Logf: func(format string, args ...any) { t.Log("manager: " + fmt.Sprintf(format, args...)) }})
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
	ai := slices.Index(s.Servers, a)
	// Its actives' replicas hold their items, so the janitor does not
	// take the restarted node's empty copies for the whole vbucket.
	for v, row := range s.Map {
		if row[0] == ai && len(keys[v]) > 0 {
			c := testDial(t, s.server(row[1]))
			waitFor(t, 10*time.Second, fmt.Sprintf("vbucket %d's replica holds items", v), func() bool { return holdsItems(t, c, v) })
		}
	}
	vb, src := -1, ""
	for v, row := range s.Map {
		if len(row) > 1 && row[1] == ai {
			vb, src = v, s.server(row[0])
			break
		}
	}
	if activesOf(s, a) == 0 || vb < 0 {
		t.Fatalf("the map gives %s no active or no replica: %v", a, s.Map)
	}
	waitFor(t, 10*time.Second, "the node's incarnation in /status", func() bool {
		for _, n := range m.Status().Nodes {
			if n.Addr == a {
				return n.Incarnation != "" && n.Holds != nil && *n.Holds > 0
			}
		}
		return false
	})

	nodes[0].stop()
	_, port, _ := net.SplitHostPort(a)
	restarted := startNodeWith(t, "", func(c *server.Config) { c.Port, _ = strconv.Atoi(port) })
	// At once, as an operation begun before the restart would: within a
	// probe, so at most one grant found it empty.
	if err := testDial(t, restarted.addr).Replicate(vb, src); err != nil {
		t.Fatalf("making the restarted node a replica of vbucket %d: %v", vb, err)
	}
	since := time.Now()
	waitFor(t, 10*time.Second, a+" failed over", func() bool { return slices.Contains(m.State().FailedOver, a) })
	t.Logf("failed over %v after the restart", time.Since(since).Round(time.Millisecond))
	waitFor(t, 10*time.Second, "the replicas rebuilt", func() bool {
		s := m.State()
		return s.Rebalance != nil && s.Rebalance.Started.After(since) && !s.Rebalance.Running
	})
	checkCluster(t, m.State(), []string{nodes[1].addr, nodes[2].addr}, keys)
}

// TestRestartedNodeMidRebalance: a node killed and started again, empty,
// while a rebalance runs is failed over all the same once its answers
// show the new incarnation. The rule held off while any rebalance ran,
// and the schedule's restart-node-mid-rb met a rebalance that could not
// end without that failover (it waited two minutes for the restarted
// node, made a replica by the old process, to catch up): the node's 17
// actives were served by no one for the 60 s the test waited. Here the
// rebalance is held at a move (the test hook) until a failover stops it;
// the map does not change meanwhile.
func TestRestartedNodeMidRebalance(t *testing.T) {
	cli := startTestEtcd(t)
	nodes := []*testNode{startNode(t, ""), startNode(t, ""), startNode(t, "")}
	m, err := New(Config{Etcd: cli, Advertise: "http://restart-midrb-test", NumVBuckets: testVBuckets, Replicas: 1,
		SessionTTL: 1, ProbeInterval: 200 * time.Millisecond, FailoverAfter: time.Hour, MaxMoves: 1,
		Logf: func(format string, args ...any) { t.Log("manager: " + fmt.Sprintf(format, args...)) }})
	if err != nil {
		t.Fatal(err)
	}
	var hold atomic.Bool
	held := make(chan struct{}, 1)
	m.hook = func(step string, vb int) {
		if step != "move" || !hold.Load() {
			return
		}
		select {
		case held <- struct{}{}:
		default:
		}
		// Until a failover stops the rebalance, or the test gives up.
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			if s := m.State(); s.Rebalance == nil || s.Rebalance.Stopping {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	tm := &testManager{m: m, ran: make(chan struct{})}
	tm.start(t)
	s := tm.joinAll(t, nodes[:2])
	writeKeys(t, s, testKeys())
	a := nodes[0].addr
	if activesOf(s, a) == 0 {
		t.Fatalf("the map gives %s no active: %v", a, s.Map)
	}
	waitFor(t, 10*time.Second, "the node's incarnation in /status", func() bool {
		for _, n := range m.Status().Nodes {
			if n.Addr == a {
				return n.Incarnation != "" && n.Holds != nil && *n.Holds > 0
			}
		}
		return false
	})
	hold.Store(true)
	ctx := context.Background()
	if err := m.AddNode(ctx, nodes[2].addr); err != nil {
		t.Fatal(err)
	}
	if err := m.StartRebalance(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("no move reached the hook")
	}
	nodes[0].stop()
	_, port, _ := net.SplitHostPort(a)
	startNodeWith(t, "", func(c *server.Config) { c.Port, _ = strconv.Atoi(port) })
	since := time.Now()
	waitFor(t, 10*time.Second, a+", restarted mid-rebalance, failed over", func() bool { return slices.Contains(m.State().FailedOver, a) })
	t.Logf("failed over %v after the restart", time.Since(since).Round(time.Millisecond))
}
