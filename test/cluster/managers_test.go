package cluster

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/manager"
	"github.com/vbcache/vbcache/test/nodeproc"
)

// TestManagerKilledMidRebalance: "A manager killed mid-rebalance: another
// manager (or the restarted one) resumes and finishes; the map is valid at
// every step." Three nodes hold keys under a load; a fourth joins and a
// rebalance starts; the manager process is killed (SIGKILL) once the
// rebalance has moved a vbucket, and restarted on the same etcd data
// directory. The restarted manager must take the leadership back (after
// the dead one's lease expires), resume the rebalance from etcd and finish
// it, and every key must still read back. Throughout, a mapWatch checks
// the nodes' configs and that no vbucket is ever active on two nodes.
func TestManagerKilledMidRebalance(t *testing.T) {
	keys := 20_000
	if raceEnabled || testing.Short() {
		keys = 5_000
	}
	nodes := startNodes(t, 3, vb256...)
	mflags := append(append(etcdFlags(t), vb256...), "--replicas", "1", "--failover-after", "0", "--max-moves", "2")
	mp := nodeprocStartManager(t, mflags...)
	m := mgr{t: t, url: mp.URL()}
	m.waitLeader()
	for _, n := range nodes {
		m.addNode(n.Addr)
	}
	m.rebalance(60 * time.Second)
	c := client(t, addrs(nodes))
	writeKeys(t, c, keys)

	l := &load{c: c, keys: keys}
	during := &loadStats{}
	l.cur.Store(during)
	l.start(2, 1)

	n4 := startNodes(t, 1, vb256...)[0]
	nodes = append(nodes, n4)
	m.addNode(n4.Addr)
	since := time.Now()
	m.startRebalance()
	v := m.getMap()
	vbs := movingToNew(v, n4.Addr)
	if len(vbs) == 0 {
		t.Fatalf("the plan moves no active to the new node: %v", v.Forward)
	}
	w := watchMap(append([]string{n4.Addr}, addrs(nodes[:3])...), vbs)
	r := m.waitRunning(since, 60*time.Second)
	if err := mp.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if !mp.WaitExit(10 * time.Second) {
		t.Fatal("the manager did not die of SIGKILL")
	}
	t.Logf("killed the manager with %d of %d vbuckets moved", r.Done, r.Total)

	mp2 := nodeprocStartManager(t, mflags...)
	m2 := mgr{t: t, url: mp2.URL()}
	waitLeading(t, []mgr{m2}, 30*time.Second)
	t.Logf("the restarted manager leads %v after the kill", time.Since(killed).Round(time.Millisecond))
	r = m2.waitRebalanceSince(since, 2*time.Minute)
	if !strings.Contains(mp2.Stderr(), "resuming the rebalance") {
		t.Errorf("the restarted manager did not say it resumes the rebalance:\n%s", mp2.Stderr())
	}
	t.Logf("rebalance finished by the restarted manager: %d of %d vbuckets, %v after the kill",
		r.Done, r.Total, time.Since(killed).Round(time.Millisecond))
	if r.Done != r.Total {
		t.Errorf("rebalance done %d of %d", r.Done, r.Total)
	}
	w.finish(t)
	l.halt()
	t.Logf("load during the rebalance and the manager's restart: %s; writes acknowledged %d, failed %d",
		during, l.nacked.Load(), l.werrs.Load())
	if e := during.lastErr.Load(); e != nil {
		t.Logf("last read error: %s", *e)
	}
	if during.wrong.Load() > 0 {
		t.Errorf("%d wrong answers", during.wrong.Load())
	}
	checkAll(t, c, keys, l)
	checkPlacement(t, m2, addrs(nodes))
	checkReplicas(t, m2)
	checkBalanced(t, m2.status(), addrs(nodes), smallVBuckets)
}

// TestThreeManagersLeaderKilled: "etcd: ... a test with three managers
// against a three-member etcd (embedded members) where the leader is
// killed." Three manager processes, each with its own embedded etcd
// member of one three-member cluster. Nodes are added and rebalanced
// through a follower (followers proxy changes to the leader). A fourth
// node joins and, mid-rebalance, the leading manager process is killed
// (SIGKILL, which also takes one etcd member down): another manager must
// lead within the lease's TTL plus a few seconds, resume and finish the
// rebalance, and then take a further change (the fourth node's removal
// and a rebalance, sent to the last follower). The map is checked
// throughout (mapWatch) and at the end, and every key reads back.
func TestThreeManagersLeaderKilled(t *testing.T) {
	keys := 10_000
	if raceEnabled || testing.Short() {
		keys = 3_000
	}
	nodes := startNodes(t, 3, vb256...)
	procs := startManagerCluster(t, 3, append(vb256, "--replicas", "1", "--failover-after", "0", "--max-moves", "2")...)
	ms := make([]mgr, len(procs))
	for i, p := range procs {
		ms[i] = mgr{t: t, url: p.URL()}
	}
	leader := waitLeading(t, ms, 30*time.Second)
	follower := ms[(leader+1)%3]
	t.Logf("manager %d leads; changes go through manager %d", leader, (leader+1)%3)
	for _, n := range nodes {
		follower.addNode(n.Addr)
	}
	since := time.Now()
	follower.startRebalance()
	follower.waitRebalanceSince(since, 60*time.Second)
	c := client(t, addrs(nodes))
	writeKeys(t, c, keys)

	n4 := startNodes(t, 1, vb256...)[0]
	nodes = append(nodes, n4)
	follower.addNode(n4.Addr)
	since = time.Now()
	follower.startRebalance()
	v := waitForward(t, follower)
	w := watchMap(append([]string{n4.Addr}, addrs(nodes[:3])...), movingToNew(v, n4.Addr))
	r := ms[leader].waitRunning(since, 60*time.Second)
	old := ms[leader].status().Leader
	if err := procs[leader].Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	procs[leader].WaitExit(10 * time.Second)
	t.Logf("killed the leading manager (%s) with %d of %d vbuckets moved", old, r.Done, r.Total)

	var rest []mgr
	for i := range ms {
		if i != leader {
			rest = append(rest, ms[i])
		}
	}
	// The lease is 5 s; etcd may also have lost its raft leader with
	// the killed member (an election of a second or two, after which the
	// new raft leader renews every lease for a full TTL).
	limit := 5*time.Second + 7*time.Second
	nl := waitLeading(t, rest, limit)
	took := time.Since(killed)
	t.Logf("manager %s leads %v after the kill", rest[nl].url, took.Round(time.Millisecond))
	for _, m := range rest {
		if s := m.status(); s.Leader != rest[nl].url {
			t.Errorf("%s names %q as leader, want %s", m.url, s.Leader, rest[nl].url)
		}
	}
	r = rest[nl].waitRebalanceSince(since, 2*time.Minute)
	t.Logf("the new leader finished the rebalance: %d of %d vbuckets, %v after the kill", r.Done, r.Total, time.Since(killed).Round(time.Millisecond))
	if r.Done != r.Total {
		t.Errorf("rebalance done %d of %d", r.Done, r.Total)
	}
	w.finish(t)
	checkAll(t, c, keys, &load{})
	checkPlacement(t, rest[nl], addrs(nodes))
	checkReplicas(t, rest[nl])
	checkBalanced(t, rest[nl].status(), addrs(nodes), smallVBuckets)

	// A change through the surviving follower, run by the new leader.
	other := rest[1-nl]
	other.removeNode(n4.Addr)
	since = time.Now()
	other.startRebalance()
	r = other.waitRebalanceSince(since, 2*time.Minute)
	t.Logf("removed %s through the follower: %d vbuckets moved", n4.Addr, r.Done)
	waitSameRev(t, rest, 10*time.Second)
	checkAll(t, c, keys, &load{})
	checkPlacement(t, other, addrs(nodes))
	checkReplicas(t, other)
	checkBalanced(t, other.status(), addrs(nodes[:3]), smallVBuckets)
}

// startManagerCluster starts n managers whose embedded etcd members form
// one n-member cluster. They start at once: a member serves (and so its
// manager's HTTP API) only once the cluster has a quorum.
func startManagerCluster(t *testing.T, n int, flags ...string) []*nodeproc.Node {
	t.Helper()
	return startManagerClusterScheme(t, n, "http", flags...)
}

// startManagerClusterScheme is startManagerCluster with the etcd members'
// URLs in scheme (https: etcd over TLS, which flags must give files for).
func startManagerClusterScheme(t *testing.T, n int, scheme string, flags ...string) []*nodeproc.Node {
	t.Helper()
	type member struct{ name, client, peer string }
	mem := make([]member, n)
	var initial []string
	for i := range mem {
		cp, err := nodeproc.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		pp, err := nodeproc.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		mem[i] = member{fmt.Sprintf("m%d", i), fmt.Sprintf("%s://127.0.0.1:%d", scheme, cp), fmt.Sprintf("%s://127.0.0.1:%d", scheme, pp)}
		initial = append(initial, mem[i].name+"="+mem[i].peer)
	}
	token := fmt.Sprintf("vbcache-test-%d", time.Now().UnixNano())
	procs := make([]*nodeproc.Node, n)
	tbs := make([]*goTB, n)
	var wg sync.WaitGroup
	for i, mb := range mem {
		tbs[i] = &goTB{TB: t}
		dir := t.TempDir()
		wg.Add(1)
		go func() {
			defer wg.Done()
			procs[i] = nodeproc.StartManager(tbs[i], vbcacheBin, nil, append([]string{"--data-dir", dir + "/etcd",
				"--etcd-name", mb.name, "--etcd-client-url", mb.client, "--etcd-peer-url", mb.peer,
				"--etcd-initial-cluster", strings.Join(initial, ","), "--etcd-initial-cluster-token", token}, flags...)...)
		}()
	}
	wg.Wait()
	for i, g := range tbs {
		if msg := g.failure(); msg != "" {
			t.Fatalf("manager %d: %s", i, msg)
		}
	}
	return procs
}

// waitLeading waits until one of ms says it leads and every one of them
// names it as the leader; it returns its index.
func waitLeading(t *testing.T, ms []mgr, limit time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		lead, agree := -1, true
		for i, m := range ms {
			s, err := m.tryStatus()
			if err != nil {
				agree = false
				continue
			}
			if s.Leading {
				lead = i
			}
			if lead >= 0 && s.Leader != ms[lead].url {
				agree = false
			}
		}
		if lead >= 0 && agree {
			// Check the ones read before the leader was found.
			ok := true
			for _, m := range ms {
				if s, err := m.tryStatus(); err != nil || s.Leader != ms[lead].url {
					ok = false
				}
			}
			if ok {
				return lead
			}
		}
		if time.Now().After(deadline) {
			var st []string
			for _, m := range ms {
				s, err := m.tryStatus()
				st = append(st, fmt.Sprintf("%s: leading=%v leader=%q err=%v", m.url, s.Leading, s.Leader, err))
			}
			t.Fatalf("no agreed leader within %v: %s", limit, strings.Join(st, "; "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitForward waits until the manager's map carries the rebalance's
// forward map (a follower sees it once its etcd watch delivers it).
func waitForward(t *testing.T, m mgr) mapView {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if v := m.getMap(); v.Forward != nil {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatal("no forward map within 10s of starting the rebalance")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitSameRev waits until every manager serves the same map revision.
func waitSameRev(t *testing.T, ms []mgr, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		var revs []int64
		for _, m := range ms {
			revs = append(revs, m.getMap().Rev)
		}
		if slices.Min(revs) == slices.Max(revs) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("managers disagree on the map's rev: %v", revs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkBalanced checks that exactly members hold vbuckets, each within one
// of the mean of actives.
func checkBalanced(t *testing.T, s manager.Status, members []string, numVBuckets int) {
	t.Helper()
	total := 0
	for _, n := range s.Nodes {
		want := slices.Contains(members, n.Addr)
		if n.Member != want {
			t.Errorf("%s: member=%v, want %v", n.Addr, n.Member, want)
		}
		total += n.Active
		lo := numVBuckets / len(members)
		if want && (n.Active < lo || n.Active > lo+1) {
			t.Errorf("%s holds %d actives, want %d or %d", n.Addr, n.Active, lo, lo+1)
		}
		if !want && n.Active+n.Replica > 0 {
			t.Errorf("%s is no member but holds %d actives and %d replicas", n.Addr, n.Active, n.Replica)
		}
	}
	if total != numVBuckets {
		t.Errorf("%d actives in the map, want %d", total, numVBuckets)
	}
}
