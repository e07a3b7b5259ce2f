package cluster

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/memcache"
	"github.com/vbcache/vbcache/test/nodeproc"
)

// TestAdminPasswordRotation rotates the cluster administrator's password
// of a running cluster under load, without a restart, in the three steps
// docs/OPERATIONS.md gives: each rewrites every process's --cluster-auth
// file and sends each process SIGHUP, one at a time.
//
//  1. "admin:OLD" + "admin:NEW": every process accepts NEW, still logs in
//     with OLD;
//  2. "admin:NEW" + "admin:OLD": every process logs in with NEW, accepts
//     both, so a process not yet reloaded and one already reloaded still
//     reach each other;
//  3. "admin:NEW": OLD is refused everywhere.
//
// A fourth node joins between steps 2 and 3 and its rebalance starts
// before step 3; after step 3 a node is killed and failed over, so the
// manager's control connections and the nodes' streams to each other are
// opened with NEW, while replication streams opened before the rotation
// keep feeding their replicas (checkReplicas). At the end OLD is refused
// by every node (SASL) and by the manager's API (401), NEW is served by
// both, and the load saw no wrong answer, no read error through the
// rotation and the grow, and lost no write.
func TestAdminPasswordRotation(t *testing.T) {
	keys := 3_000
	if raceEnabled || testing.Short() {
		keys = 1_000
	}
	old := nodeproc.ClusterCredentials() // the harness's clients start with it
	const newPassword = "a new administrator password"
	authFile := filepath.Join(t.TempDir(), "admin.pwdb")
	write := func(lines ...string) {
		t.Helper()
		tmp := authFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, authFile); err != nil { // a reload never reads half a file
			t.Fatal(err)
		}
	}
	write("admin:" + old.Password)

	nodeFlags := append(slices.Clip(vb256), "--cluster-auth", authFile)
	nodes := startNodes(t, 3, nodeFlags...)
	mp := startManager(t, append(vb256, "--replicas", "1", "--failover-after", "0", "--cluster-auth", authFile)...)
	m := mgr{t: t, url: mp.URL()}
	m.waitLeader()
	for _, n := range nodes {
		m.addNode(n.Addr)
	}
	m.rebalance(60 * time.Second)

	c, err := memcache.NewCluster(context.Background(), addrs(nodes), &memcache.ClusterOptions{
		RefreshInterval: 200 * time.Millisecond, MaxTries: 30, MinBackoff: 2 * time.Millisecond,
		MaxBackoff: 50 * time.Millisecond, Timeout: 3 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	writeKeys(t, c, keys)
	l := &load{c: c, keys: keys}
	during := &loadStats{}
	l.cur.Store(during)
	l.start(2, 1)

	type proc interface {
		Signal(os.Signal) error
		Stderr() string
	}
	procs := []proc{mp.(proc)}
	for _, n := range nodes {
		procs = append(procs, n)
	}
	reload := func(step string) {
		t.Helper()
		for _, p := range procs {
			before := strings.Count(p.Stderr(), "SIGHUP:")
			if err := p.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, step+": a process's SIGHUP reload", func() bool {
				return strings.Count(p.Stderr(), "SIGHUP:") > before
			})
			if tail := p.Stderr()[len(p.Stderr())-min(len(p.Stderr()), 300):]; strings.Contains(tail, "reload failed") {
				t.Fatalf("%s: %s", step, tail)
			}
		}
	}
	canLogin := func(addr, password string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ac, err := admin.DialWith(ctx, addr, &admin.Credentials{User: old.User, Password: password})
		if err != nil {
			return err
		}
		defer ac.Close()
		_, err = ac.LeaseQuery() // a control request: it needs the admin role
		return err
	}

	write("admin:"+old.Password, "admin:"+newPassword)
	reload("step 1")
	write("admin:"+newPassword, "admin:"+old.Password)
	reload("step 2")
	for _, n := range nodes {
		for _, pw := range []string{old.Password, newPassword} {
			if err := canLogin(n.Addr, pw); err != nil {
				t.Errorf("during the rotation, %s refused a password it should accept: %v", n.Addr, err)
			}
		}
	}
	for _, pw := range []string{old.Password, newPassword} {
		if code := httpDo(t, "POST", m.url+"/rebalance/stop", old.User, pw); code == http.StatusUnauthorized {
			t.Errorf("during the rotation, the manager's API refused a password it should accept: %d", code)
		}
	}

	n4 := startNodes(t, 1, nodeFlags...)[0]
	nodes, procs = append(nodes, n4), append(procs, n4)
	m.addNode(n4.Addr)
	m.startRebalance()
	write("admin:" + newPassword)
	reload("step 3")
	m.password = newPassword
	r := m.waitRebalance(2 * time.Minute)
	l.halt()
	t.Logf("grow 3→4 across the rotation's last step: %d vbuckets moved in %v", r.Done, r.Finished.Sub(r.Started).Round(time.Millisecond))
	checkAll(t, c, keys, l)
	checkReplicas(t, m) // with the writes stopped: every replica has them all

	// After the rotation, a failover: the manager promotes replicas and
	// rebuilds the lost ones, every link logged in with the new password.
	t.Logf("load through the rotation and the grow: %v (last error %s)", during, lastErr(during))
	if during.wrong.Load() > 0 || during.errs.Load() > 0 {
		t.Errorf("%d wrong answers and %d errors during the rotation", during.wrong.Load(), during.errs.Load())
	}
	// Reads only from here: replication is asynchronous, so a write the
	// killed node acknowledged in its last moments may be lost (see
	// docs/OPERATIONS.md), which is not what this test is about.
	failing := &loadStats{}
	rl := &load{c: c, keys: keys}
	rl.cur.Store(failing)
	rl.start(2, 0)
	before := m.getMap()
	victim := nodes[0]
	if err := victim.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	victim.WaitExit(10 * time.Second)
	since := time.Now()
	m.failover(victim.Addr)
	probe := -1
	for i := range keys {
		if before.activeOn(vbmap.VBucketString(oldKey(i), smallVBuckets)) == victim.Addr {
			probe = i
			break
		}
	}
	waitFor(t, 10*time.Second, "a key of the failed node read back", func() bool {
		it, err := c.Get(oldKey(probe))
		if errors.Is(err, memcache.ErrCacheMiss) {
			t.Fatalf("%s missing after the failover: its replica was not promoted", oldKey(probe))
		}
		return err == nil && string(it.Value) == oldValue(probe)
	})
	r = m.waitRebalanceSince(since, 2*time.Minute)
	rl.halt()
	t.Logf("failover after the rotation: replicas rebuilt, %d vbuckets in %v; load from the kill: %v (last error %s); %d writes acknowledged before it",
		r.Done, r.Finished.Sub(r.Started).Round(time.Millisecond), failing, lastErr(failing), l.nacked.Load())
	if failing.wrong.Load() > 0 {
		t.Errorf("%d wrong answers during the failover", failing.wrong.Load())
	}
	checkAll(t, c, keys, l)
	checkReplicas(t, m)
	nodes = nodes[1:]

	for _, n := range nodes {
		if err := canLogin(n.Addr, old.Password); !errors.Is(err, admin.ErrAuth) {
			t.Errorf("after the rotation %s: the old password: %v, want an auth failure", n.Addr, err)
		}
		if err := canLogin(n.Addr, newPassword); err != nil {
			t.Errorf("after the rotation %s: the new password: %v", n.Addr, err)
		}
	}
	if code := httpDo(t, "POST", m.url+"/rebalance/stop", old.User, old.Password); code != http.StatusUnauthorized {
		t.Errorf("after the rotation the manager's API answered the old password %d, want 401", code)
	}
	if code := httpDo(t, "GET", m.url+"/status", old.User, newPassword); code != http.StatusOK {
		t.Errorf("after the rotation the manager's API answered the new password %d, want 200", code)
	}
}

// lastErr is the last read error st saw, or "none".
func lastErr(st *loadStats) string {
	if p := st.lastErr.Load(); p != nil {
		return *p
	}
	return "none"
}
