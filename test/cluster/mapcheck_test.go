package cluster

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/manager"
	"github.com/vbcache/vbcache/internal/manager/mgrclient"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/internal/vbucket"
	"github.com/vbcache/vbcache/memcache"
	"github.com/vbcache/vbcache/test/nodeproc"
)

// Helpers shared by the failover and manager tests: a smaller vbucket
// count (every move costs a few tens of milliseconds whatever its size,
// so 256 vbuckets keep a rebalance to seconds), the map as the manager
// serves it, a check that the nodes' states agree with it, and a watcher
// that checks the map's rules while a rebalance runs.

const smallVBuckets = 256

// vb256 are the flags of a node or manager with smallVBuckets vbuckets
// (the last --vbuckets flag wins).
var vb256 = []string{"--vbuckets", fmt.Sprint(smallVBuckets)}

// mapView is GET /map.
type mapView mgrclient.Map

func (m mgr) getMap() mapView {
	m.t.Helper()
	v, err := m.api().Map(context.Background())
	m.must(err)
	return mapView(v)
}

// activeOn returns the address of vb's active copy in the map ("" for none).
func (v mapView) activeOn(vb int) string {
	if i := v.Map[vb][0]; i >= 0 {
		return v.Servers[i]
	}
	return ""
}

// writeKeys stores oldKey(i) = oldValue(i) for i < keys with 8 writers.
func writeKeys(t *testing.T, c *memcache.Client, keys int) {
	t.Helper()
	start := time.Now()
	var wg sync.WaitGroup
	var werr atomic.Int64
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < keys; i += 8 {
				if err := c.Set(&memcache.Item{Key: oldKey(i), Value: []byte(oldValue(i))}); err != nil {
					werr.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if werr.Load() > 0 {
		t.Fatalf("%d of %d initial writes failed", werr.Load(), keys)
	}
	t.Logf("wrote %d keys in %v", keys, time.Since(start).Round(time.Millisecond))
}

// checkPlacement asks every node for the state of every vbucket and checks
// it against the manager's map: the active is where the map says and
// nowhere else, the replicas are replicas, and no rebalance is left over.
func checkPlacement(t *testing.T, m mgr, nodes []string) {
	t.Helper()
	v := m.getMap()
	if v.Forward != nil {
		t.Errorf("a forward map is left after the rebalance")
	}
	if err := checkRows(v.Map, len(v.Servers), v.Replicas); err != nil {
		t.Errorf("map rev %d: %v", v.Rev, err)
	}
	conns := map[string]*admin.Conn{}
	for _, a := range nodes {
		c, err := nodeproc.DialAdmin(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[a] = c
	}
	bad := 0
	for vb, row := range v.Map {
		for _, a := range nodes {
			st, err := conns[a].GetVBucket(vb)
			if err != nil {
				t.Fatalf("GET_VBUCKET %d on %s: %v", vb, a, err)
			}
			want := vbucket.Dead // or any state that is not served
			i := slices.Index(v.Servers, a)
			switch {
			case i >= 0 && row[0] == i:
				want = vbucket.Active
			case i >= 0 && slices.Contains(row[1:], i):
				want = vbucket.Replica
			}
			ok := st == want || (want == vbucket.Dead && st != vbucket.Active && st != vbucket.Replica)
			if !ok {
				if bad < 5 {
					t.Errorf("vbucket %d on %s is %v, the map (rev %d) says %v", vb, a, st, v.Rev, want)
				}
				bad++
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d vbucket states disagree with the map", bad)
	}
}

// checkReplicas checks that every replica in the manager's map is fed by
// its vbucket's active (star replication: a consumer stream from the
// active) and holds what the active holds (as many items, and the
// active's last sequence number): the map's replica really is a copy that
// a failover could promote. Call it with the writes stopped.
func checkReplicas(t *testing.T, m mgr) {
	t.Helper()
	v := m.getMap()
	conns := map[string]*admin.Conn{}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	stats := func(a, group string) map[string]string {
		if conns[a] == nil {
			c, err := m.dialAdmin(a)
			if err != nil {
				t.Fatal(err)
			}
			conns[a] = c
		}
		st, err := conns[a].Stats(group)
		if err != nil {
			t.Fatalf("stats %s on %s: %v", group, a, err)
		}
		out := map[string]string{}
		for _, kv := range st {
			out[kv[0]] = kv[1]
		}
		return out
	}
	type copyOf struct {
		vb        int
		active, r string
	}
	var left []copyOf
	for vb, row := range v.Map {
		for _, x := range row[1:] {
			if x >= 0 {
				left = append(left, copyOf{vb, v.Servers[row[0]], v.Servers[x]})
			}
		}
	}
	why := func(c copyOf) string {
		p := fmt.Sprintf("vb_%d", c.vb)
		a, r := stats(c.active, "vbucket "+strconv.Itoa(c.vb)), stats(c.r, "vbucket "+strconv.Itoa(c.vb))
		if _, ok := stats(c.r, "streams "+strconv.Itoa(c.vb))[fmt.Sprintf("consumer:%s:vb_%d:seqno", c.active, c.vb)]; !ok {
			return fmt.Sprintf("no stream from the active %s", c.active)
		}
		if r[p] != "replica" || r[p+":items"] != a[p+":items"] || atoi(r[p+":high_seqno"]) < atoi(a[p+":high_seqno"]) {
			return fmt.Sprintf("replica %s items %s high_seqno %s, active %s items %s high_seqno %s",
				r[p], r[p+":items"], r[p+":high_seqno"], a[p], a[p+":items"], a[p+":high_seqno"])
		}
		return ""
	}
	// Replication is asynchronous: give the replicas a moment.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var still []copyOf
		for _, c := range left {
			if why(c) != "" {
				still = append(still, c)
			}
		}
		left = still
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i, c := range left {
		if i == 5 {
			break
		}
		t.Errorf("vbucket %d: replica on %s: %s", c.vb, c.r, why(c))
	}
	if len(left) > 0 {
		t.Errorf("%d replicas of map rev %d do not follow their active", len(left), v.Rev)
	}
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// checkRows checks a map's rules: every row has replicas+1 entries, an
// active in range, and no server twice.
func checkRows(rows [][]int, servers, replicas int) error {
	for vb, row := range rows {
		if len(row) != replicas+1 {
			return fmt.Errorf("row %d is %v: want %d entries", vb, row, replicas+1)
		}
		if row[0] < 0 || row[0] >= servers {
			return fmt.Errorf("row %d is %v: no active among %d servers", vb, row, servers)
		}
		for j, x := range row {
			if x < -1 || x >= servers {
				return fmt.Errorf("row %d is %v: server %d of %d", vb, row, x, servers)
			}
			if x >= 0 && slices.Contains(row[j+1:], x) {
				return fmt.Errorf("row %d is %v: server %d twice", vb, row, x)
			}
		}
	}
	return nil
}

// mapWatch checks, until stop, that what the nodes say is valid at every
// step of a grow rebalance: each poll reads every node's cluster config
// (GET_CLUSTER_CONFIG), which must parse, follow checkRows, and never go
// back in (revEpoch, rev); and it reads the state of every vbucket of vbs
// on every node, counting polls where two nodes answer active.
//
// Why the order of those reads cannot make a false positive: vbs are the
// vbuckets whose active the rebalance moves from an old node to the new
// node, nodes[0], and nodes are read in order, new node first. A move
// turns the target active only after the source is dead for good, and
// nothing moves an active away from the new node in this rebalance: once
// nodes[0] answers active it stays active, so an old node answering active
// after it means two actives at that later instant. And among the old
// nodes only the vbucket's source was ever active (a grow rebalance
// promotes no replica), so two old nodes answering active is a fault
// whenever they answered.
type mapWatch struct {
	nodes []string
	vbs   []int

	stop chan struct{}
	done chan struct{}

	polls, configs, twoActive, noActive atomic.Int64
	lastRev                             map[string][2]int64 // owned by run

	mu  sync.Mutex // protects bad
	bad []string
}

func watchMap(nodes []string, vbs []int) *mapWatch {
	w := &mapWatch{nodes: nodes, vbs: vbs, stop: make(chan struct{}), done: make(chan struct{}), lastRev: map[string][2]int64{}}
	go w.run()
	return w
}

func (w *mapWatch) fault(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.bad) < 20 {
		w.bad = append(w.bad, fmt.Sprintf(format, args...))
	}
}

func (w *mapWatch) run() {
	defer close(w.done)
	conns := make([]*admin.Conn, len(w.nodes))
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	// get runs fn on node i's connection, dialling as needed; a failed
	// request drops the connection and reports false.
	get := func(i int, fn func(c *admin.Conn) error) bool {
		if conns[i] == nil {
			c, err := nodeproc.DialAdmin(context.Background(), w.nodes[i])
			if err != nil {
				return false
			}
			c.Timeout = 5 * time.Second
			conns[i] = c
		}
		if err := fn(conns[i]); err != nil {
			conns[i].Close()
			conns[i] = nil
			return false
		}
		return true
	}
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		w.polls.Add(1)
		for i, a := range w.nodes {
			var data []byte
			if !get(i, func(c *admin.Conn) (err error) { data, err = c.ClusterConfig(); return err }) || len(data) == 0 {
				continue
			}
			w.configs.Add(1)
			cfg, err := vbmap.Parse(data)
			if err != nil {
				w.fault("config from %s: %v", a, err)
				continue
			}
			sm := cfg.VBucketServerMap
			if err := checkRows(sm.VBucketMap, len(sm.ServerList), sm.NumReplicas); err != nil {
				w.fault("config rev %d from %s: vBucketMap: %v", cfg.Rev, a, err)
			}
			if sm.VBucketMapForward != nil {
				if err := checkRows(sm.VBucketMapForward, len(sm.ServerList), sm.NumReplicas); err != nil {
					w.fault("config rev %d from %s: vBucketMapForward: %v", cfg.Rev, a, err)
				}
			}
			rev := [2]int64{cfg.RevEpoch, cfg.Rev}
			if last := w.lastRev[a]; rev[0] < last[0] || (rev[0] == last[0] && rev[1] < last[1]) {
				w.fault("%s went back from config %v to %v", a, last, rev)
			}
			w.lastRev[a] = rev
		}
		for _, vb := range w.vbs {
			var actives []string
			complete := true
			for i, a := range w.nodes {
				var st vbucket.State
				if !get(i, func(c *admin.Conn) (err error) { st, err = c.GetVBucket(vb); return err }) {
					complete = false
					continue
				}
				if st == vbucket.Active {
					actives = append(actives, a)
				}
			}
			switch {
			case len(actives) > 1:
				w.twoActive.Add(1)
				w.fault("vbucket %d active on %v at once", vb, actives)
			case len(actives) == 0 && complete:
				w.noActive.Add(1)
			}
		}
	}
}

// finish stops the watch and fails t for every fault it saw.
func (w *mapWatch) finish(t *testing.T) {
	t.Helper()
	close(w.stop)
	<-w.done
	t.Logf("map watch: %d polls, %d configs checked, %d vbucket reads with no active (mid-handover), %d with two",
		w.polls.Load(), w.configs.Load(), w.noActive.Load(), w.twoActive.Load())
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range w.bad {
		t.Error(b)
	}
	if w.polls.Load() < 2 {
		t.Errorf("map watch polled %d times: too few to mean anything", w.polls.Load())
	}
}

// movingToNew returns the vbuckets whose active the forward map moves
// from an old node to newNode.
func movingToNew(v mapView, newNode string) []int {
	ni := slices.Index(v.Servers, newNode)
	var out []int
	for vb := range v.Forward {
		if v.Forward[vb][0] == ni && v.Map[vb][0] != ni && v.Map[vb][0] >= 0 {
			out = append(out, vb)
		}
	}
	return out
}

// waitRunning polls the manager until the rebalance started after since
// is running with at least one vbucket done (so that a kill lands
// mid-rebalance) and returns its progress.
func (m mgr) waitRunning(since time.Time, limit time.Duration) *manager.Rebalance {
	m.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		r := m.status().Rebalance
		if r != nil && !r.Started.Before(since) {
			if r.Running && r.Done > 0 {
				return r
			}
			if !r.Running {
				m.t.Fatalf("the rebalance ended (%d of %d done) before the test could interrupt it", r.Done, r.Total)
			}
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("no rebalance progress within %v (last %+v)", limit, r)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitRebalanceSince waits for the end of the rebalance started at or
// after since. Unlike waitRebalance it does not take an earlier
// rebalance's end for this one's, which a follower (whose copy of the
// state trails the leader's) would show right after a change.
func (m mgr) waitRebalanceSince(since time.Time, limit time.Duration) *manager.Rebalance {
	m.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		s, err := m.tryStatus()
		if r := s.Rebalance; err == nil && r != nil && !r.Started.Before(since) && !r.Running {
			if r.Err != "" {
				m.t.Fatalf("rebalance failed: %s", r.Err)
			}
			return r
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("rebalance not done within %v (last status %+v, err %v)", limit, s.Rebalance, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// goTB lets a helper that calls Fatal run on another goroutine: Fatal
// records the message and ends that goroutine only; the test goroutine
// reports it.
type goTB struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (g *goTB) Fatal(args ...any) { g.fail(fmt.Sprint(args...)) }
func (g *goTB) Fatalf(format string, args ...any) {
	g.fail(fmt.Sprintf(format, args...))
}
func (g *goTB) fail(msg string) {
	g.mu.Lock()
	g.msg = msg
	g.mu.Unlock()
	runtime.Goexit()
}

func (g *goTB) failure() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.msg
}
