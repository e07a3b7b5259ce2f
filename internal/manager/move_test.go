package manager

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/move"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/server"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// The move tests run a manager against an embedded etcd and in-process
// nodes (internal/server on loopback ports), interrupt it at a step of a
// rebalance's move by ending its leadership (its Run's context: it stops
// acting, as a leader whose process died does, and resigns), and start a
// new Manager on the same etcd, which must finish the rebalance. A
// checker polls every vbucket's state on every node throughout and fails
// the test on two actives.

const testVBuckets = 16

// handoverPause is internal/stream's failpoint: a source node holds each
// handover, dead, this long. It is read when a node starts.
const handoverPauseEnv = "VBCACHE_FAILPOINT_HANDOVER_PAUSE"

type testNode struct {
	addr string
	stop func() // ends Serve and waits for it; idempotent
}

// startNode starts an in-process cluster-mode node; pause, if set, is
// its handover failpoint.
func startNode(t *testing.T, pause string) *testNode {
	t.Helper()
	return startNodeWith(t, pause, nil)
}

// startNodeWith is startNode with mod applied to the node's config.
func startNodeWith(t *testing.T, pause string, mod func(*server.Config)) *testNode {
	t.Helper()
	if pause != "" {
		t.Setenv(handoverPauseEnv, pause) // restored at the end of the test
	}
	cfg := server.Config{Port: -1, PortSet: true, Listen: []string{"127.0.0.1"}, MaxConnsFast: true,
		Version: "test", VBuckets: testVBuckets, InsecureCluster: true} // the manager's tests are about moves; logins: internal/server, test/security
	if mod != nil {
		mod(&cfg)
	}
	s, err := server.New(cfg)
	if pause != "" {
		os.Unsetenv(handoverPauseEnv) // the next nodes start without it
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx) }() // owned by the test: stop ends it
	n := &testNode{addr: s.Addrs()[0].String(), stop: sync.OnceFunc(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})}
	t.Cleanup(n.stop)
	return n
}

// startTestEtcd starts an embedded etcd and returns a client of it.
func startTestEtcd(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{startTestEtcdServer(t)}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// startTestEtcdServer starts an embedded etcd, stopped at the end of the
// test, and returns its client URL.
//
// etcd listens on port 0 for both URLs, so the kernel picks each port as
// etcd binds it. Ports picked beforehand (nodeproc.FreePort: bind port 0,
// close, hand the number on) are free for anyone until etcd binds them,
// and any process binding port 0 meanwhile draws from the same pool (a
// test's nodes, other tests on the machine): StartEtcd then failed within
// milliseconds of the test's start with "bind: address already in use".
// The URLs etcd advertises say port 0; nothing dials them (one member has
// no peers, and the client is given the bound address and does not sync
// its endpoints).
func startTestEtcdServer(t *testing.T) string {
	t.Helper()
	e, err := StartEtcd(EtcdMember{Dir: t.TempDir(), ClientURL: "http://127.0.0.1:0",
		PeerURL: "http://127.0.0.1:0", QuietLogs: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return "http://" + e.e.Clients[0].Addr().String()
}

// testManager is one manager process: kill ends its leadership and waits
// for Run to return.
type testManager struct {
	m      *Manager
	cancel context.CancelFunc
	ran    chan struct{}
}

// newTestManager returns a manager that is not running yet (set m.hook,
// then start it).
func newTestManager(t *testing.T, cli *clientv3.Client, name string) *testManager {
	t.Helper()
	m, err := New(Config{Etcd: cli, Advertise: "http://" + name, NumVBuckets: testVBuckets, Replicas: 1,
		SessionTTL: 1, ProbeInterval: 50 * time.Millisecond, MaxMoves: 1,
		Logf: func(format string, args ...any) { t.Logf(name+": "+format, args...) }})
	if err != nil {
		t.Fatal(err)
	}
	return &testManager{m: m, ran: make(chan struct{})}
}

func (tm *testManager) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tm.cancel = cancel
	go func() { // owned by the test: kill ends it
		defer close(tm.ran)
		tm.m.Run(ctx)
	}()
	t.Cleanup(tm.kill)
	waitFor(t, 20*time.Second, "the manager to lead", func() bool {
		leading, _ := tm.m.Leader()
		return leading
	})
}

// joinAll adds every node to tm's cluster and rebalances, and returns the
// rebalanced state.
func (tm *testManager) joinAll(t *testing.T, nodes []*testNode) *State {
	t.Helper()
	ctx := context.Background()
	for _, n := range nodes {
		if err := tm.m.AddNode(ctx, n.addr); err != nil {
			t.Fatal(err)
		}
	}
	if err := tm.m.StartRebalance(ctx); err != nil {
		t.Fatal(err)
	}
	return waitRebalanced(t, tm.m)
}

func (tm *testManager) kill() {
	tm.cancel()
	<-tm.ran
}

// waitFor polls cond every 5 ms until it holds, for at most limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, not waiting for time to pass
	}
}

// waitRebalanced waits until no rebalance runs and returns the state.
func waitRebalanced(t *testing.T, m *Manager) *State {
	t.Helper()
	waitFor(t, 60*time.Second, "the rebalance to finish", func() bool {
		s := m.State()
		return s.Rebalance != nil && !s.Rebalance.Running
	})
	return m.State()
}

// activeChecker reads every vbucket's state on every node, in rounds,
// until stopped, and records two actives. Reads are not atomic across
// nodes, so it reads all nodes twice in a fixed order: a vbucket active
// on node i in both of i's reads and on another node j in the read of j's
// that falls between them was active on both at once (a move turns the
// source dead before the target turns active, and nothing here moves a
// vbucket back within milliseconds).
type activeChecker struct {
	addrs []string
	stop  chan struct{}
	done  chan struct{}

	mu     sync.Mutex // protects bad and rounds
	bad    []string
	rounds int
}

func startChecker(t *testing.T, addrs []string) *activeChecker {
	c := &activeChecker{addrs: addrs, stop: make(chan struct{}), done: make(chan struct{})}
	go c.run() // owned by the test: finish ends it
	t.Cleanup(func() { c.finish(t) })
	return c
}

func (c *activeChecker) run() {
	defer close(c.done)
	conns := map[string]*admin.Conn{}
	defer func() {
		for _, cn := range conns {
			cn.Close()
		}
	}()
	read := func(a string) []vbucket.State { // nil: not reachable
		cn := conns[a]
		if cn == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			var err error
			cn, err = admin.Dial(ctx, a)
			cancel()
			if err != nil {
				return nil
			}
			cn.Timeout = time.Second
			conns[a] = cn
		}
		out := make([]vbucket.State, testVBuckets)
		for vb := range out {
			st, err := cn.GetVBucket(vb)
			if err != nil {
				cn.Close()
				delete(conns, a)
				return nil
			}
			out[vb] = st
		}
		return out
	}
	for {
		select {
		case <-c.stop:
			return
		default:
		}
		var r [2][][]vbucket.State
		for k := range r {
			for _, a := range c.addrs {
				r[k] = append(r[k], read(a))
			}
		}
		c.mu.Lock()
		for vb := range testVBuckets {
			for i := range c.addrs {
				if r[0][i] == nil || r[1][i] == nil || r[0][i][vb] != vbucket.Active || r[1][i][vb] != vbucket.Active {
					continue
				}
				for j := range c.addrs {
					mid := r[1][j] // j < i: j's second read falls between i's
					if j > i {
						mid = r[0][j]
					}
					if j != i && mid != nil && mid[vb] == vbucket.Active {
						c.bad = append(c.bad, fmt.Sprintf("vbucket %d active on %s and %s", vb, c.addrs[i], c.addrs[j]))
					}
				}
			}
		}
		c.rounds++
		c.mu.Unlock()
	}
}

// finish stops the checker and fails the test on two actives.
func (c *activeChecker) finish(t *testing.T) {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bad) > 0 {
		t.Errorf("two actives seen (%d times in %d rounds), first: %s", len(c.bad), c.rounds, c.bad[0])
	}
}

// roundsDone is how many rounds the checker has completed.
func (c *activeChecker) roundsDone() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rounds
}

func testDial(t *testing.T, addr string) *admin.Conn {
	t.Helper()
	c, err := admin.Dial(context.Background(), addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// testKeys are 8 keys per vbucket.
func testKeys() map[int][]string {
	keys := map[int][]string{}
	for i := 0; ; i++ {
		k := "key-" + strconv.Itoa(i)
		vb := vbmap.VBucketString(k, testVBuckets)
		if len(keys[vb]) < 8 {
			keys[vb] = append(keys[vb], k)
		}
		full := len(keys) == testVBuckets
		for _, ks := range keys {
			full = full && len(ks) == 8
		}
		if full {
			return keys
		}
	}
}

// writeKeys sets every key on its vbucket's active in s.
func writeKeys(t *testing.T, s *State, keys map[int][]string) {
	t.Helper()
	for vb, ks := range keys {
		c := testDial(t, s.server(s.Map[vb][0]))
		for _, k := range ks {
			if _, err := c.Do(protocol.OpSet, uint16(vb), make([]byte, 8), []byte(k), []byte("v-"+k)); err != nil {
				t.Fatalf("set %s on %s: %v", k, c.Addr, err)
			}
		}
	}
}

// holdsItems reports whether addr's "stats vbucket" lists vb, which it
// does while the vbucket has items there.
func holdsItems(t *testing.T, c *admin.Conn, vb int) bool {
	t.Helper()
	lines, err := c.Stats("vbucket")
	if err != nil {
		t.Fatalf("stats vbucket on %s: %v", c.Addr, err)
	}
	for _, kv := range lines {
		if strings.HasPrefix(kv[0], "vb_"+strconv.Itoa(vb)+":") {
			return true
		}
	}
	return false
}

// checkCluster requires every vbucket active on its map's active alone,
// a replica on its map's replicas, every key readable on the active, and
// no copy (no items, not active) on the live nodes outside its row.
func checkCluster(t *testing.T, s *State, live []string, keys map[int][]string) {
	t.Helper()
	conns := map[string]*admin.Conn{}
	for _, a := range live {
		conns[a] = testDial(t, a)
	}
	for vb, row := range s.Map {
		names := s.rowServers(row)
		for _, a := range live {
			c := conns[a]
			st, err := c.GetVBucket(vb)
			if err != nil {
				t.Fatalf("GET_VBUCKET %d on %s: %v", vb, a, err)
			}
			switch i := slices.Index(names, a); {
			case i == 0:
				if st != vbucket.Active {
					t.Errorf("vbucket %d: %s on its active %s", vb, st, a)
				}
				for _, k := range keys[vb] {
					if v, err := c.Do(protocol.OpGet, uint16(vb), nil, []byte(k), nil); err != nil || string(v) != "v-"+k {
						t.Errorf("vbucket %d: get %s on %s: %q, %v", vb, k, a, v, err)
					}
				}
			case i > 0:
				if st != vbucket.Replica {
					t.Errorf("vbucket %d: %s on its replica %s", vb, st, a)
				}
			default:
				if st == vbucket.Active || holdsItems(t, c, vb) {
					t.Errorf("vbucket %d (row %v): a copy, %s, on %s outside its row", vb, names, st, a)
				}
			}
		}
	}
}

// TestMoveInterrupted interrupts a rebalance's move at each of its steps
// by ending the leader's leadership there, and requires the next leader
// (a new Manager on the same etcd) to finish it: two nodes a and b hold
// the 16 vbuckets with one replica each, c joins, and the rebalance moves
// actives to c one at a time (MaxMoves 1).
func TestMoveInterrupted(t *testing.T) {
	for _, tc := range []struct {
		name string
		// pause: the handover failpoint of a and b; the test ends the
		// leadership while a handover is held (source dead, target
		// pending).
		pause string
		// hookStep: end the leadership at this step of the first move
		// (commit-active: the target active, the map not yet committed;
		// published: the map committed and pushed, the old copy not yet
		// deleted).
		hookStep string
		// killTarget: c is stopped too, with the leader, during the
		// handover: the move cannot finish, and the vbucket must stay on
		// (or return to) its source.
		killTarget bool
	}{
		{name: "source-dead-target-pending", pause: "1s"},
		{name: "target-lost-in-handover", pause: "1s", killTarget: true},
		{name: "target-active-before-commit", hookStep: "commit-active"},
		{name: "old-copy-not-deleted", hookStep: "published"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli := startTestEtcd(t)
			a, b := startNode(t, tc.pause), startNode(t, tc.pause)
			c := startNode(t, "")
			nodes := []string{a.addr, b.addr, c.addr}
			checker := startChecker(t, nodes)
			ctx := context.Background()

			m1 := newTestManager(t, cli, "m1")
			var once sync.Once
			interrupted := make(chan int, 1)
			if tc.hookStep != "" {
				m1.m.hook = func(step string, vb int) {
					if step == tc.hookStep {
						once.Do(func() {
							interrupted <- vb
							m1.cancel() // the leadership ends here; the hook's caller sees it
						})
					}
				}
			}
			m1.start(t)
			for _, n := range nodes[:2] {
				if err := m1.m.AddNode(ctx, n); err != nil {
					t.Fatal(err)
				}
			}
			if err := m1.m.StartRebalance(ctx); err != nil {
				t.Fatal(err)
			}
			s := waitRebalanced(t, m1.m)
			keys := testKeys()
			writeKeys(t, s, keys)
			if err := m1.m.AddNode(ctx, c.addr); err != nil {
				t.Fatal(err)
			}
			if err := m1.m.StartRebalance(ctx); err != nil {
				t.Fatal(err)
			}

			// The interruption.
			var vb int
			var from string
			if tc.pause != "" {
				// A handover held: the vbucket pending on c and dead on
				// its source.
				cc := testDial(t, c.addr)
				vb = -1
				waitFor(t, 30*time.Second, "a handover to c", func() bool {
					for v := range testVBuckets {
						if st, err := cc.GetVBucket(v); err == nil && st == vbucket.Pending {
							vb = v
							return true
						}
					}
					return false
				})
				from = s.server(s.Map[vb][0])
				fc := testDial(t, from)
				waitFor(t, 5*time.Second, "the source to turn dead", func() bool {
					st, err := fc.GetVBucket(vb)
					return err == nil && st == vbucket.Dead
				})
				m1.kill()
				if tc.killTarget {
					c.stop()
				}
			} else {
				vb = <-interrupted
				from = s.server(s.Map[vb][0])
				m1.kill()
			}
			t.Logf("interrupted the move of vbucket %d from %s", vb, from)
			st1 := m1.m.State()
			if st1.Rebalance == nil || !st1.Rebalance.Running {
				t.Fatalf("after the interruption the rebalance is not running: %+v", st1.Rebalance)
			}
			switch tc.hookStep {
			case "commit-active":
				if got := st1.server(st1.Map[vb][0]); got != from {
					t.Fatalf("vbucket %d: the map's active is %s, want %s (not committed yet)", vb, got, from)
				}
			case "published":
				if st1.Rebalance.Moving[vb] != from || !holdsItems(t, testDial(t, from), vb) {
					t.Fatalf("vbucket %d: Moving %v, want its old copy kept on %s", vb, st1.Rebalance.Moving, from)
				}
			}

			// The successor's steps for the interrupted vbucket.
			var stepsMu sync.Mutex
			var steps []string
			m2 := newTestManager(t, cli, "m2")
			m2.m.hook = func(step string, v int) {
				if v == vb {
					stepsMu.Lock()
					steps = append(steps, step)
					stepsMu.Unlock()
				}
			}
			m2.start(t)
			s = waitRebalanced(t, m2.m)
			stepsMu.Lock()
			got := strings.Join(steps, ",")
			stepsMu.Unlock()
			// No new takeover for the interrupted move: the successor
			// commits what the nodes say happened (R1), or, once the
			// active is committed, only finishes the move; a target
			// lost leaves nothing to commit.
			want := map[string]string{"source-dead-target-pending": "commit-active,published",
				"target-active-before-commit": "commit-active,published", "old-copy-not-deleted": "",
				"target-lost-in-handover": ""}[tc.name]
			if got != want {
				t.Errorf("the successor's steps for vbucket %d: %q, want %q", vb, got, want)
			}
			rounds := checker.roundsDone()
			waitFor(t, 10*time.Second, "two more checker rounds", func() bool { return checker.roundsDone() >= rounds+2 })
			live := nodes
			if tc.killTarget {
				live = nodes[:2]
				if s.Rebalance.Err == "" {
					t.Errorf("the rebalance to a stopped node finished without an error")
				}
				if got := s.server(s.Map[vb][0]); got != from {
					t.Errorf("vbucket %d: active %s in the map, want its source %s", vb, got, from)
				}
			} else {
				if s.Rebalance.Err != "" || s.Rebalance.Done != s.Rebalance.Total || s.Forward != nil {
					t.Errorf("rebalance: %+v, forward %v", s.Rebalance, s.Forward != nil)
				}
				if got := s.server(s.Map[vb][0]); got != c.addr {
					t.Errorf("vbucket %d: active %s, want %s", vb, got, c.addr)
				}
			}
			t.Logf("rebalance: %d of %d moved, error %q, rev %d", s.Rebalance.Done, s.Rebalance.Total, s.Rebalance.Err, s.Rev)
			checkCluster(t, s, live, keys)
		})
	}
}

// TestMoveIntoReplicaKeepsAReplica removes a node: each vbucket it was
// active for moves to its replica, whose row would have no replica left
// at the commit. The new replica is built before the takeover and
// committed with the new active, so at every commit (the "published"
// hook) the row still names a replica; and no key is lost.
func TestMoveIntoReplicaKeepsAReplica(t *testing.T) {
	cli := startTestEtcd(t)
	nodes := []*testNode{startNode(t, ""), startNode(t, ""), startNode(t, "")}
	tm := newTestManager(t, cli, "m1")
	var mu sync.Mutex // protects bad, intoReplica and before
	var bad []string
	intoReplica := 0
	var before *State // the map before the removal; set before it starts
	tm.m.hook = func(step string, vb int) {
		mu.Lock()
		defer mu.Unlock()
		if step != "published" || before == nil {
			return
		}
		s := tm.m.State()
		row := s.Map[vb]
		if s.server(row[0]) == before.server(before.Map[vb][1]) {
			intoReplica++
		}
		if row[1] < 0 {
			bad = append(bad, fmt.Sprintf("vbucket %d committed as %v (servers %v): no replica", vb, row, s.Servers))
		}
	}
	tm.start(t)
	ctx := context.Background()
	s := tm.joinAll(t, nodes)
	keys := testKeys()
	writeKeys(t, s, keys)
	mu.Lock()
	before = s
	mu.Unlock()
	if err := tm.m.RemoveNode(ctx, nodes[0].addr); err != nil {
		t.Fatal(err)
	}
	if err := tm.m.StartRebalance(ctx); err != nil {
		t.Fatal(err)
	}
	s = waitRebalanced(t, tm.m)
	mu.Lock()
	defer mu.Unlock()
	if intoReplica == 0 {
		t.Fatalf("no vbucket moved into its replica: the test shows nothing")
	}
	for _, b := range bad {
		t.Error(b)
	}
	t.Logf("%d moves into the replica", intoReplica)
	for vb, ks := range keys {
		c := testDial(t, s.server(s.Map[vb][0]))
		for _, k := range ks {
			if v, err := c.Do(protocol.OpGet, uint16(vb), nil, []byte(k), nil); err != nil || string(v) != "v-"+k {
				t.Errorf("vbucket %d: get %s on %s: %q, %v", vb, k, c.Addr, v, err)
			}
		}
	}
}

// TestMoveNotDoneDropsBuiltReplica: a move into the replica whose target
// is gone by the time of the takeover (stopped at the "move" hook, after
// the new replica was built) does not happen, and the replica built for
// it, in no row, is dropped rather than fed for ever.
func TestMoveNotDoneDropsBuiltReplica(t *testing.T) {
	cli := startTestEtcd(t)
	nodes := []*testNode{startNode(t, ""), startNode(t, ""), startNode(t, "")}
	byAddr := map[string]*testNode{}
	for _, n := range nodes {
		byAddr[n.addr] = n
	}
	tm := newTestManager(t, cli, "m1")
	var mu sync.Mutex // protects the fields below
	var removing bool
	built := map[int]string{} // vbucket → the replica built for its move, seen replica at the hook
	var stopped *testNode
	tm.m.hook = func(step string, vb int) {
		mu.Lock()
		defer mu.Unlock()
		if step != "move" || !removing || stopped != nil {
			return
		}
		s := tm.m.State()
		row, fw := s.rowServers(s.Map[vb]), s.rowServers(s.Forward[vb])
		b := buildFirst(row, fw)
		if len(b) != 1 {
			return
		}
		c, err := admin.Dial(context.Background(), b[0])
		if err != nil {
			t.Errorf("dial %s: %v", b[0], err)
			return
		}
		st, err := c.GetVBucket(vb)
		c.Close()
		if err != nil || st != vbucket.Replica {
			t.Errorf("vbucket %d on %s at the move: %v, %v; want the replica built first", vb, b[0], st, err)
			return
		}
		built[vb] = b[0]
		stopped = byAddr[fw[0]]
		stopped.stop() // the target: the move's preflight fails
	}
	tm.start(t)
	tm.joinAll(t, nodes)
	ctx := context.Background()
	mu.Lock()
	removing = true
	mu.Unlock()
	if err := tm.m.RemoveNode(ctx, nodes[0].addr); err != nil {
		t.Fatal(err)
	}
	if err := tm.m.StartRebalance(ctx); err != nil {
		t.Fatal(err)
	}
	waitRebalanced(t, tm.m)
	mu.Lock()
	defer mu.Unlock()
	if len(built) == 0 {
		t.Fatal("no move into a replica was stopped at its takeover: the test shows nothing")
	}
	for vb, r := range built {
		st, err := testDial(t, r).GetVBucket(vb)
		if err != nil || st != vbucket.Dead {
			t.Errorf("vbucket %d on %s, built for a move that did not happen: %v, %v; want it dropped (dead)", vb, r, st, err)
		}
	}
}

// startSwap makes vbucket vb's forward row its row with the active and
// the first replica swapped, and runs the rebalance (as StartRebalance
// does, the plan crafted: the planner makes swaps when it balances
// actives, not on demand).
func startSwap(t *testing.T, m *Manager, vb int) {
	t.Helper()
	ctx := context.Background()
	m.opMu.Lock()
	_, err := m.update(ctx, func(s *State) error {
		fw := make([][]int, len(s.Map))
		for v, row := range s.Map {
			fw[v] = slices.Clone(row)
		}
		fw[vb][0], fw[vb][1] = fw[vb][1], fw[vb][0]
		s.Forward = fw
		s.Rev++
		s.Rebalance = &Rebalance{Running: true, Target: slices.Clone(s.Nodes), Total: 1, Started: time.Now()}
		return nil
	})
	m.opMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	m.inLeadership(m.launchRebalance)
}

// TestSwapKeepsOldCopy swaps a vbucket's active a and replica b: the
// commit names a, its dead copy kept, as b's replica (the row never
// lacks one), and a then resumes streaming from b where the handover
// left it: not one item copied again.
func TestSwapKeepsOldCopy(t *testing.T) {
	cli := startTestEtcd(t)
	nodes := []*testNode{startNode(t, ""), startNode(t, "")}
	tm := newTestManager(t, cli, "m1")
	var mu sync.Mutex // protects committed
	var committed []int
	const vb = 3
	tm.m.hook = func(step string, v int) {
		if step == "published" && v == vb {
			mu.Lock()
			committed = slices.Clone(tm.m.State().Map[vb])
			mu.Unlock()
		}
	}
	tm.start(t)
	ctx := context.Background()
	s := tm.joinAll(t, nodes)
	keys := testKeys()
	writeKeys(t, s, keys)
	before := slices.Clone(s.Map[vb])
	a, b := s.server(before[0]), s.server(before[1])
	startSwap(t, tm.m, vb)
	s = waitRebalanced(t, tm.m)
	if s.Rebalance.Err != "" || !slices.Equal(s.Map[vb], []int{before[1], before[0]}) {
		t.Fatalf("after the swap: row %v (was %v), rebalance %+v", s.Map[vb], before, s.Rebalance)
	}
	mu.Lock()
	if !slices.Equal(committed, []int{before[1], before[0]}) {
		t.Errorf("the swap committed %v, want %v: the old active kept as the replica", committed, []int{before[1], before[0]})
	}
	mu.Unlock()
	for _, k := range keys[vb] {
		if v, err := testDial(t, b).Do(protocol.OpGet, uint16(vb), nil, []byte(k), nil); err != nil || string(v) != "v-"+k {
			t.Errorf("get %s on %s: %q, %v", k, b, v, err)
		}
	}
	// a follows b from where it was: once at b's sequence number, its
	// stream has received nothing (every item was already there).
	high, err := tm.m.vbStat(ctx, b, vb, "high_seqno")
	if err != nil {
		t.Fatal(err)
	}
	q := "consumer:" + b + ":vb_" + strconv.Itoa(vb) + ":"
	ac := testDial(t, a)
	waitFor(t, 10*time.Second, "the old active to follow the new one", func() bool {
		lines, err := ac.Stats("streams " + strconv.Itoa(vb))
		if err != nil {
			t.Fatal(err)
		}
		var seq uint64
		for _, kv := range lines {
			if kv[0] == q+"seqno" {
				seq, _ = strconv.ParseUint(kv[1], 10, 64)
			}
		}
		return seq >= high
	})
	lines, err := ac.Stats("streams " + strconv.Itoa(vb))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range lines {
		if kv[0] == q+"items_received" && kv[1] != "0" {
			t.Errorf("the old active's stream from %s received %s items, want 0 (a resumed stream)", b, kv[1])
		}
	}
}

// TestFailoverAfterSwapKeepsOldCopy: the new active of a swap is killed
// right after the commit, before its kept replica (the old active, dead)
// follows it. The failover activates that dead copy as it is, every key
// there, instead of activating the vbucket empty.
func TestFailoverAfterSwapKeepsOldCopy(t *testing.T) {
	cli := startTestEtcd(t)
	nodes := []*testNode{startNode(t, ""), startNode(t, ""), startNode(t, "")}
	tm := newTestManager(t, cli, "m1")
	tm.start(t)
	ctx := context.Background()
	s := tm.joinAll(t, nodes)
	keys := testKeys()
	writeKeys(t, s, keys)
	const vb = 5
	a, b := s.server(s.Map[vb][0]), s.server(s.Map[vb][1])
	// The swap's move and commit as moveVBucket makes them, without the
	// rest of the rebalance (which would make a follow b at once).
	if _, err := tm.m.update(ctx, func(s *State) error {
		s.Rebalance = &Rebalance{}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	res, err := move.Move(ctx, vb, a, b, move.Options{KeepOld: true, Logf: t.Logf,
		Publish: func(_ context.Context, vb int, to string) (int64, error) { return tm.m.commitActive(ctx, vb, a, to, a) }})
	if err != nil || res.Outcome != move.Moved || res.OldCopyDeleted {
		t.Fatalf("the swap's move: %s, %v", res.String(), err)
	}
	if st := tm.m.State(); st.server(st.Map[vb][0]) != b || st.server(st.Map[vb][1]) != a || st.Rebalance.Moving[vb] != a {
		t.Fatalf("after the swap's commit: row %v, moving %v", st.rowServers(st.Map[vb]), st.Rebalance.Moving)
	}
	for _, n := range nodes {
		if n.addr == b {
			n.stop()
		}
	}
	rep, err := tm.m.failover(ctx, b, true /* force: it is gone */)
	if err != nil {
		t.Fatalf("failover: %v", err)
	}
	t.Logf("%+v", rep)
	c := testDial(t, a)
	if st, err := c.GetVBucket(vb); err != nil || st != vbucket.Active {
		t.Fatalf("vbucket %d on %s after the failover: %v, %v", vb, a, st, err)
	}
	for _, k := range keys[vb] {
		if v, err := c.Do(protocol.OpGet, uint16(vb), nil, []byte(k), nil); err != nil || string(v) != "v-"+k {
			t.Errorf("get %s on %s: %q, %v", k, a, v, err)
		}
	}
}
