package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/manager"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/internal/vbucket"
	"github.com/vbcache/vbcache/memcache"
	"github.com/vbcache/vbcache/test/nodeproc"
)

// TestRestartedNodeIsFailedOver: a node killed (SIGKILL) and restarted at
// the same address long before --failover-after (30 s here) answers the
// manager's grants again, so it is never down, but it comes back empty
// while the map still names it active for a third of the vbuckets. The
// manager must see it from the grants' answers (it holds no vbucket, the
// map gives it actives, twice in a row) and fail it over within a few
// probes (1 s each) plus a lease (5 s), not wait for --failover-after;
// then every vbucket has exactly one active, on the node the map names,
// and every key written before the kill reads back through the vbucket
// client: the nodes run --sync-replication, so no acknowledged write is
// missing from the promoted replicas. Added back and rebalanced, the
// node holds vbuckets again.
func TestRestartedNodeIsFailedOver(t *testing.T) {
	const failoverAfter = 30 * time.Second
	const bound = 4*time.Second + 5*time.Second // four probes and a lease
	keys := 4_000
	if raceEnabled || testing.Short() {
		keys = 2_000
	}
	nodes := startNodes(t, 3, append(vb256, "--sync-replication")...)
	mp := nodeprocStartManager(t, append(etcdFlags(t), append(vb256, "--replicas", "1", "--failover-after", failoverAfter.String())...)...)
	m := mgr{t: t, url: mp.URL()}
	m.waitLeader()
	for _, n := range nodes {
		m.addNode(n.Addr)
	}
	m.rebalance(60 * time.Second)
	c := client(t, addrs(nodes))
	writeKeys(t, c, keys)

	victim := nodes[1]
	before := m.getMap()
	owned := 0
	for vb := range smallVBuckets {
		if before.activeOn(vb) == victim.Addr {
			owned++
		}
	}
	if owned == 0 {
		t.Fatalf("the map gives %s no active vbucket", victim.Addr)
	}
	nodeOf := func(s manager.Status, addr string) (manager.NodeStatus, bool) {
		i := slices.IndexFunc(s.Nodes, func(n manager.NodeStatus) bool { return n.Addr == addr })
		if i < 0 {
			return manager.NodeStatus{}, false
		}
		return s.Nodes[i], true
	}
	var inc string
	waitFor(t, 10*time.Second, "the victim's incarnation in /status", func() bool {
		n, _ := nodeOf(m.status(), victim.Addr)
		inc = n.Incarnation
		return inc != "" && n.Holds != nil && *n.Holds > 0
	})

	if err := victim.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	victim = victim.Restart(t)
	restarted := time.Now()
	t.Logf("%s killed and restarted in %v; the map gave it %d actives", victim.Addr, restarted.Sub(killed).Round(time.Millisecond), owned)
	// When /status showed each step (every 5 ms): the grant on the old
	// connection failing, the new incarnation's first answer, the second
	// empty answer.
	var seenDown, seenInc, seenRestarted time.Duration
	waitFor(t, bound, fmt.Sprintf("the manager to fail the restarted %s over (within %v)", victim.Addr, bound), func() bool {
		st := m.status()
		if n, ok := nodeOf(st, victim.Addr); ok {
			if n.Incarnation != inc && seenInc == 0 {
				seenInc = time.Since(restarted)
			}
			if n.Restarted && seenRestarted == 0 {
				seenRestarted = time.Since(restarted)
			}
			if !n.Healthy && seenDown == 0 {
				seenDown = time.Since(restarted)
			}
		}
		return slices.Contains(st.FailedOver, victim.Addr)
	})
	detected := time.Since(restarted)
	t.Logf("after the restart: a grant failed %v, the new incarnation answered %v, restarted %v, failed over %v (--failover-after %v)",
		seenDown.Round(time.Millisecond), seenInc.Round(time.Millisecond), seenRestarted.Round(time.Millisecond), detected.Round(time.Millisecond), failoverAfter)
	want := fmt.Sprintf("manager: %s restarted (it holds 0 of the %d actives the map gives it): failing it over", victim.Addr, owned)
	if !strings.Contains(mp.Stderr(), want) {
		t.Errorf("the manager's log lacks %q", want)
	}
	r := m.waitRebalanceSince(restarted, 2*time.Minute)
	t.Logf("replicas rebuilt on the two others: %d vbuckets moved, %v after the restart", r.Done, time.Since(restarted).Round(time.Millisecond))

	all := addrs(nodes[:1])
	all = append(all, victim.Addr, nodes[2].Addr)
	oneActive(t, all)
	checkPlacement(t, m, all)
	readAll := func(when string) {
		t.Helper()
		// The client learns the new map from a refusal's config or its
		// periodic refresh: wait for one key of the victim's, then all.
		probe := -1
		for i := range keys {
			if before.activeOn(vbmap.VBucketString(oldKey(i), smallVBuckets)) == victim.Addr {
				probe = i
				break
			}
		}
		if probe < 0 {
			t.Fatalf("no key of %d in the victim's vbuckets", keys)
		}
		waitFor(t, 10*time.Second, fmt.Sprintf("%s to read back %s", oldKey(probe), when), func() bool {
			_, err := c.Get(oldKey(probe))
			if errors.Is(err, memcache.ErrCacheMiss) {
				t.Fatalf("%s missing %s", oldKey(probe), when)
			}
			return err == nil
		})
		bad := 0
		for i := range keys {
			it, err := c.Get(oldKey(i))
			if err != nil || string(it.Value) != oldValue(i) {
				if bad < 5 {
					t.Errorf("%s %s: %v", oldKey(i), when, err)
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%d of %d keys written before the kill unreadable %s", bad, keys, when)
		}
	}
	readAll("after the failover")

	// Back in: a member again, it is given vbuckets by a rebalance.
	m.addNode(victim.Addr)
	m.rebalance(2 * time.Minute)
	s := m.status()
	n, ok := nodeOf(s, victim.Addr)
	if !ok || !n.Member || n.Active == 0 {
		t.Fatalf("%s after it was added back and the rebalance: %+v", victim.Addr, n)
	}
	if n.Restarted {
		t.Errorf("%s is reported restarted after the rebalance gave it vbuckets: %+v", victim.Addr, n)
	}
	waitFor(t, 10*time.Second, "the new incarnation in /status", func() bool {
		n, _ := nodeOf(m.status(), victim.Addr)
		return n.Incarnation != "" && n.Holds != nil && *n.Holds > 0
	})
	if n, _ := nodeOf(m.status(), victim.Addr); n.Incarnation == inc {
		t.Errorf("%s answers with its old incarnation %s after its restart", victim.Addr, inc)
	}
	t.Logf("added back: %s holds %d active and %d replica vbuckets", victim.Addr, n.Active, n.Replica)
	oneActive(t, all)
	checkPlacement(t, m, all)
	readAll("after it was added back")
}

// oneActive asks every node for every vbucket's state and requires
// exactly one active per vbucket.
func oneActive(t *testing.T, nodes []string) {
	t.Helper()
	active := make([]int, smallVBuckets)
	for _, a := range nodes {
		c, err := nodeproc.DialAdmin(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		for vb := range smallVBuckets {
			st, err := c.GetVBucket(vb)
			if err != nil {
				t.Fatalf("GET_VBUCKET %d on %s: %v", vb, a, err)
			}
			if st == vbucket.Active {
				active[vb]++
			}
		}
		c.Close()
	}
	for vb, n := range active {
		if n != 1 {
			t.Errorf("vbucket %d is active on %d nodes", vb, n)
		}
	}
}
