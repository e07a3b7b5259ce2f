package move

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/internal/vbucket"
	"github.com/vbcache/vbcache/test/nodeproc"
)

// The tests run real vbcache processes (test/nodeproc) in cluster mode
// with 16 vbuckets, and drive them over real sockets.

const numVBuckets = 16

var bin string // the vbcache binary, built once by TestMain

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vbcache-move")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin, err = nodeproc.BuildVbcache(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// startNode starts a cluster-mode node (all vbuckets dead) with extra
// environment variables.
func startNode(t *testing.T, env ...string) *nodeproc.Node {
	t.Helper()
	return nodeproc.StartEnv(t, nodeproc.Vbcache, bin, env, "--vbuckets", strconv.Itoa(numVBuckets))
}

// creds log a move's connections in to the nodes startNode starts
// (nodeproc gives them --cluster-auth).
var creds = nodeproc.ClusterCredentials()

// failpoint makes a source node hold every handover, dead, for 20 s (the
// test kills a node in that window).
const failpoint = "VBCACHE_FAILPOINT_HANDOVER_PAUSE=20s"

func dial(t *testing.T, addr string) *admin.Conn {
	t.Helper()
	c, err := nodeproc.DialAdmin(context.Background(), addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// keysFor returns n keys that hash to vb.
func keysFor(vb, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		k := fmt.Sprintf("key-%d", i)
		if vbmap.VBucketString(k, numVBuckets) == vb {
			out = append(out, k)
		}
	}
	return out
}

func setKeys(t *testing.T, c *admin.Conn, vb int, keys []string) {
	t.Helper()
	for _, k := range keys {
		if _, err := c.Do(protocol.OpSet, uint16(vb), make([]byte, 8), []byte(k), []byte("v-"+k)); err != nil {
			t.Fatalf("set %s on %s: %v", k, c.Addr, err)
		}
	}
}

// checkKeys requires every key readable with its value on c.
func checkKeys(t *testing.T, c *admin.Conn, vb int, keys []string) {
	t.Helper()
	for _, k := range keys {
		v, err := c.Do(protocol.OpGet, uint16(vb), nil, []byte(k), nil)
		if err != nil || string(v) != "v-"+k {
			t.Fatalf("get %s on %s: %q, %v", k, c.Addr, v, err)
		}
	}
}

func state(t *testing.T, c *admin.Conn, vb int) vbucket.State {
	t.Helper()
	st, err := c.GetVBucket(vb)
	if err != nil {
		t.Fatalf("GET_VBUCKET %d on %s: %v", vb, c.Addr, err)
	}
	return st
}

// waitState polls (the nodes are real processes: there is no clock to
// advance) until vb is st on c, for at most 5 s.
func waitState(t *testing.T, c *admin.Conn, vb int, st vbucket.State) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for state(t, c, vb) != st {
		if time.Now().After(deadline) {
			t.Fatalf("vbucket %d on %s never became %s", vb, c.Addr, st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// terse returns a config over servers, rev rev, epoch 1, one replica,
// vbucket vb on [active, replica] and the others spread.
func terse(t *testing.T, servers []string, rev int64, vb int, row []int) []byte {
	t.Helper()
	cfg := vbmap.Spread(servers, numVBuckets)
	cfg.Rev, cfg.Name, cfg.BucketCapabilities = rev, "default", []string{"cccp"}
	cfg.VBucketServerMap.NumReplicas = 1
	for i := range cfg.VBucketServerMap.VBucketMap {
		cfg.VBucketServerMap.VBucketMap[i] = []int{i % len(servers), -1}
	}
	cfg.VBucketServerMap.VBucketMap[vb] = row
	for _, s := range servers {
		host, p, _ := net.SplitHostPort(s)
		port, _ := strconv.Atoi(p)
		cfg.Nodes = append(cfg.Nodes, vbmap.Node{Hostname: net.JoinHostPort(host, "8091"), Ports: vbmap.NodePorts{Direct: port}})
		cfg.NodesExt = append(cfg.NodesExt, vbmap.NodeExt{Hostname: host, Services: map[string]int{"kv": port, "mgmt": 8091}})
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A field the project does not model must survive the move.
	return []byte(strings.Replace(string(b), "{", `{"clusterCapabilitiesVer":[1,0],`, 1))
}

func pushConfig(t *testing.T, c *admin.Conn, cfg []byte, rev int64) {
	t.Helper()
	if err := c.SetClusterConfig(cfg, 1, rev); err != nil {
		t.Fatalf("SET_CLUSTER_CONFIG on %s: %v", c.Addr, err)
	}
}

func config(t *testing.T, c *admin.Conn) (*vbmap.Config, []byte) {
	t.Helper()
	raw, err := c.ClusterConfig()
	if err != nil {
		t.Fatalf("GET_CLUSTER_CONFIG on %s: %v", c.Addr, err)
	}
	cfg, err := vbmap.Parse(raw)
	if err != nil {
		t.Fatalf("config on %s: %v\n%s", c.Addr, err, raw)
	}
	return cfg, raw
}

// TestMoveWithItems moves a vbucket of 5000 items from A to B while C,
// which holds the map but not the vbucket, only learns the new map. B is
// not in the map's serverList before the move.
func TestMoveWithItems(t *testing.T) {
	na, nb, nc := startNode(t), startNode(t), startNode(t)
	a, b, c := dial(t, na.Addr), dial(t, nb.Addr), dial(t, nc.Addr)
	const vb = 3
	if err := a.SetVBucket(vb, vbucket.Active); err != nil {
		t.Fatal(err)
	}
	keys := keysFor(vb, 5000)
	setKeys(t, a, vb, keys)
	cfg := terse(t, []string{na.Addr, nc.Addr}, 5, vb, []int{0, 1})
	pushConfig(t, a, cfg, 5)
	pushConfig(t, c, cfg, 5)

	res, err := Move(context.Background(), vb, na.Addr, nb.Addr, Options{Credentials: creds, Logf: t.Logf})
	t.Logf("%s\n%s", res.String(), res.Timings())
	if err != nil || res.Outcome != Moved {
		t.Fatalf("Move: %v, %v", res.Outcome, err)
	}
	if !res.Published || res.Rev != 6 || !res.OldCopyDeleted {
		t.Fatalf("published %v rev %d deleted %v", res.Published, res.Rev, res.OldCopyDeleted)
	}
	if st := state(t, b, vb); st != vbucket.Active {
		t.Fatalf("target: %s", st)
	}
	if st := state(t, a, vb); st != vbucket.Dead {
		t.Fatalf("source: %s", st)
	}
	checkKeys(t, b, vb, keys)
	// The old copy is gone: "stats vbucket" lists a dead vbucket only
	// while it still holds items.
	lines, err := a.Stats("vbucket")
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range lines {
		if strings.HasPrefix(kv[0], "vb_"+strconv.Itoa(vb)) {
			t.Errorf("source still lists %s %s", kv[0], kv[1])
		}
	}
	for _, n := range []*admin.Conn{a, b, c} {
		got, raw := config(t, n)
		if got.Rev != 6 || got.RevEpoch != 1 {
			t.Errorf("%s: rev %d epoch %d", n.Addr, got.Rev, got.RevEpoch)
		}
		m := got.VBucketServerMap
		if row := m.VBucketMap[vb]; m.ServerList[row[0]] != nb.Addr || row[1] != 1 {
			t.Errorf("%s: row %d is %v over %v", n.Addr, vb, row, m.ServerList)
		}
		if r := m.VBucketMap[vb+1]; r[0] != 0 { // others untouched
			t.Errorf("%s: row %d changed: %v", n.Addr, vb+1, r)
		}
		last := got.NodesExt[len(got.NodesExt)-1]
		if len(got.NodesExt) != 3 || last.Services["kv"] != nb.Port || last.Services["mgmt"] != 8091 || len(got.Nodes) != 3 {
			t.Errorf("%s: nodes %+v nodesExt %+v", n.Addr, got.Nodes, got.NodesExt)
		}
		if !strings.Contains(string(raw), `"clusterCapabilitiesVer":[1,0]`) {
			t.Errorf("%s: unmodelled field lost: %s", n.Addr, raw)
		}
	}
}

// TestMoveTargetKilled kills the target while the source holds the
// handover (dead here, pending there): the move is aborted and the source
// is active again with every key.
func TestMoveTargetKilled(t *testing.T) {
	na, nb := startNode(t, failpoint), startNode(t)
	a := dial(t, na.Addr)
	const vb = 7
	if err := a.SetVBucket(vb, vbucket.Active); err != nil {
		t.Fatal(err)
	}
	keys := keysFor(vb, 1000)
	setKeys(t, a, vb, keys)

	type out struct {
		res Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := Move(context.Background(), vb, na.Addr, nb.Addr, Options{Credentials: creds, Settle: 3 * time.Second, Logf: t.Logf})
		done <- out{res, err}
	}()
	waitState(t, a, vb, vbucket.Dead) // the handover is held: B is pending
	if err := nb.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	o := <-done
	t.Logf("%s\n%s\n%s", o.res.String(), o.res.Detail, o.res.Timings())
	// R3: the source turned itself back active (it never told the dead
	// target to turn active); Move did not have to.
	if o.res.Outcome != Aborted || !errors.Is(o.err, ErrAborted) || o.res.Rule != "R3" {
		t.Fatalf("Move: %v (%s), %v", o.res.Outcome, o.res.Rule, o.err)
	}
	if st := state(t, a, vb); st != vbucket.Active {
		t.Fatalf("source: %s", st)
	}
	checkKeys(t, a, vb, keys)
}

// TestMoveSourceKilledInHandover kills the source while it holds the
// handover (dead there, pending on the target): the target is promoted
// and holds every write acknowledged before the move began.
func TestMoveSourceKilledInHandover(t *testing.T) {
	na, nb := startNode(t, failpoint), startNode(t)
	a, b := dial(t, na.Addr), dial(t, nb.Addr)
	const vb = 9
	if err := a.SetVBucket(vb, vbucket.Active); err != nil {
		t.Fatal(err)
	}
	keys := keysFor(vb, 2000)
	setKeys(t, a, vb, keys)
	cfg := terse(t, []string{na.Addr, nb.Addr}, 10, vb, []int{0, 1})
	pushConfig(t, a, cfg, 10)
	pushConfig(t, b, cfg, 10)

	type out struct {
		res Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := Move(context.Background(), vb, na.Addr, nb.Addr, Options{Credentials: creds, Settle: 3 * time.Second, Logf: t.Logf})
		done <- out{res, err}
	}()
	waitState(t, b, vb, vbucket.Pending)
	waitState(t, a, vb, vbucket.Dead)
	if err := na.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	o := <-done
	t.Logf("%s\n%s\n%s", o.res.String(), o.res.Detail, o.res.Timings())
	if o.err != nil || o.res.Outcome != Promoted || o.res.Rule != "R5" {
		t.Fatalf("Move: %v (%s), %v", o.res.Outcome, o.res.Rule, o.err)
	}
	if !o.res.Published || o.res.Rev != 11 || o.res.OldCopyDeleted {
		t.Fatalf("published %v rev %d deleted %v", o.res.Published, o.res.Rev, o.res.OldCopyDeleted)
	}
	if st := state(t, b, vb); st != vbucket.Active {
		t.Fatalf("target: %s", st)
	}
	checkKeys(t, b, vb, keys)
	got, _ := config(t, b)
	if row := got.VBucketServerMap.VBucketMap[vb]; row[0] != 1 || row[1] != -1 {
		t.Errorf("row %d is %v, want [1 -1] (the target leaves the replicas)", vb, row)
	}
}

// TestMovePreflight: nothing is touched when the source does not hold the
// vbucket active, or the target already does.
func TestMovePreflight(t *testing.T) {
	na, nb := startNode(t), startNode(t)
	a, b := dial(t, na.Addr), dial(t, nb.Addr)
	res, err := Move(context.Background(), 1, na.Addr, nb.Addr, Options{Credentials: creds})
	if !errors.Is(err, ErrPreflight) || res.Outcome != NotStarted || !strings.Contains(err.Error(), "dead, not active") {
		t.Fatalf("source dead: %v, %v", res.Outcome, err)
	}
	if err := a.SetVBucket(1, vbucket.Active); err != nil {
		t.Fatal(err)
	}
	if err := b.SetVBucket(1, vbucket.Active); err != nil {
		t.Fatal(err)
	}
	if _, err := Move(context.Background(), 1, na.Addr, nb.Addr, Options{Credentials: creds}); !errors.Is(err, ErrPreflight) {
		t.Fatalf("target active: %v", err)
	}
	if _, err := Move(context.Background(), 1, na.Addr, na.Addr, Options{Credentials: creds}); !errors.Is(err, ErrPreflight) {
		t.Fatalf("same node: %v", err)
	}
	// Without the administrator's credentials the nodes refuse the move's
	// control requests; the preflight says so and touches nothing.
	if err := b.SetVBucket(1, vbucket.Dead); err != nil {
		t.Fatal(err)
	}
	if _, err := Move(context.Background(), 1, na.Addr, nb.Addr, Options{}); !errors.Is(err, ErrPreflight) || !admin.IsStatus(err, protocol.StatusAuthError) {
		t.Fatalf("no credentials: %v", err)
	}
	if st := state(t, b, 1); st != vbucket.Dead {
		t.Fatalf("target touched: %s", st)
	}
	if st := state(t, a, 1); st != vbucket.Active {
		t.Fatalf("source touched: %s", st)
	}
}

// TestMoveCallerPublish: with Options.Publish the map step is the
// caller's; the old copy goes only after it returned nil, is kept when it
// failed (ErrNotPublished), and is kept when Halt answers after it.
func TestMoveCallerPublish(t *testing.T) {
	na, nb := startNode(t), startNode(t)
	a, b := dial(t, na.Addr), dial(t, nb.Addr)
	hasItems := func(c *admin.Conn, vb int) bool {
		t.Helper()
		lines, err := c.Stats("vbucket")
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range lines {
			if strings.HasPrefix(kv[0], "vb_"+strconv.Itoa(vb)+":") {
				return true
			}
		}
		return false
	}
	for _, tc := range []struct {
		name       string
		vb         int
		publishErr error
		haltAfter  bool // Halt answers once Publish has run
		wantErr    error
		wantGone   bool // the old copy deleted
	}{
		{name: "published", vb: 2, wantGone: true},
		{name: "publish-failed", vb: 4, publishErr: errors.New("etcd says no"), wantErr: ErrNotPublished},
		{name: "halted-after-publish", vb: 6, haltAfter: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := a.SetVBucket(tc.vb, vbucket.Active); err != nil {
				t.Fatal(err)
			}
			keys := keysFor(tc.vb, 100)
			setKeys(t, a, tc.vb, keys)
			var calls []string
			published := false
			opt := Options{Credentials: creds, Logf: t.Logf,
				Publish: func(ctx context.Context, vb int, to string) (int64, error) {
					// The old copy is still there, dead, while the map is
					// being published.
					if st := state(t, a, vb); st != vbucket.Dead || !hasItems(a, vb) {
						t.Errorf("during Publish the source holds vbucket %d %s (items: %v)", vb, st, hasItems(a, vb))
					}
					calls = append(calls, fmt.Sprintf("%d->%s", vb, to))
					published = tc.publishErr == nil
					return 42, tc.publishErr
				},
				Halt: func() error {
					if tc.haltAfter && published {
						return errors.New("leadership ended")
					}
					return nil
				}}
			res, err := Move(context.Background(), tc.vb, na.Addr, nb.Addr, opt)
			t.Logf("%s: %v", res.String(), err)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("Move: %v, want %v", err, tc.wantErr)
			}
			if want := []string{fmt.Sprintf("%d->%s", tc.vb, nb.Addr)}; fmt.Sprint(calls) != fmt.Sprint(want) {
				t.Fatalf("Publish calls %v, want %v", calls, want)
			}
			if res.Outcome != Moved || res.Published != (tc.publishErr == nil) || res.OldCopyDeleted != tc.wantGone {
				t.Fatalf("outcome %v published %v deleted %v", res.Outcome, res.Published, res.OldCopyDeleted)
			}
			if tc.publishErr == nil && res.Rev != 42 {
				t.Fatalf("rev %d, want Publish's 42", res.Rev)
			}
			if hasItems(a, tc.vb) == tc.wantGone {
				t.Fatalf("old copy on the source: items %v, want deleted %v", hasItems(a, tc.vb), tc.wantGone)
			}
			if st := state(t, b, tc.vb); st != vbucket.Active {
				t.Fatalf("target: %s", st)
			}
			if st := state(t, a, tc.vb); st != vbucket.Dead {
				t.Fatalf("source: %s", st)
			}
			checkKeys(t, b, tc.vb, keys)
		})
	}
}

// TestRecoverFinishesHandover: a move begun by someone else (a TAKEOVER
// sent on a connection that is then closed, as a leader that dies does)
// and caught while the source holds the handover (dead there, pending on
// the target) is waited for (R2) and then finished (R1) by Recover, which
// publishes through Options.Publish and then deletes the old copy. Halt
// stops a Recover before it decides.
func TestRecoverFinishesHandover(t *testing.T) {
	na, nb := startNode(t, "VBCACHE_FAILPOINT_HANDOVER_PAUSE=1s"), startNode(t)
	a, b := dial(t, na.Addr), dial(t, nb.Addr)
	const vb = 5
	if err := a.SetVBucket(vb, vbucket.Active); err != nil {
		t.Fatal(err)
	}
	keys := keysFor(vb, 200)
	setKeys(t, a, vb, keys)
	tc, err := nodeproc.DialAdmin(context.Background(), nb.Addr)
	if err != nil {
		t.Fatal(err)
	}
	sent := make(chan error, 1)
	go func() { sent <- tc.Takeover(vb, na.Addr) }() // answered with an error once tc is closed
	waitState(t, b, vb, vbucket.Pending)
	waitState(t, a, vb, vbucket.Dead)
	tc.Close()
	<-sent

	res, err := Recover(vb, na.Addr, nb.Addr, Options{Credentials: creds, Settle: 3 * time.Second, Logf: t.Logf,
		Halt: func() error { return errors.New("not leading") }})
	if !errors.Is(err, ErrHalted) || res.Outcome != Unresolved {
		t.Fatalf("halted Recover: %v, %v", res.Outcome, err)
	}
	var published []int
	res, err = Recover(vb, na.Addr, nb.Addr, Options{Credentials: creds, Settle: 10 * time.Second, Logf: t.Logf,
		Publish: func(ctx context.Context, vb int, to string) (int64, error) {
			published = append(published, vb)
			return 9, nil
		}})
	t.Logf("%s\n%s", res.String(), res.Detail)
	if err != nil || res.Outcome != Moved || res.Rule != "R1" || !res.OldCopyDeleted || len(published) != 1 {
		t.Fatalf("Recover: %v (%s), deleted %v, published %v: %v", res.Outcome, res.Rule, res.OldCopyDeleted, published, err)
	}
	if st := state(t, b, vb); st != vbucket.Active {
		t.Fatalf("target: %s", st)
	}
	if st := state(t, a, vb); st != vbucket.Dead {
		t.Fatalf("source: %s", st)
	}
	checkKeys(t, b, vb, keys)
}

// TestPromote promotes a replica whose source is fenced, as a failover
// does: the source is paused (SIGSTOP), so its replication stream to the
// replica stays open, and it is never asked. The replica becomes active
// with every key (R5) at once, not after Settle; a second Promote finds it
// active (R1) and touches nothing; a target that holds the vbucket dead,
// or is gone, is unresolved with the rule named.
func TestPromote(t *testing.T) {
	na, nb, nc := startNode(t), startNode(t), startNode(t)
	a, b := dial(t, na.Addr), dial(t, nb.Addr)
	const vb = 9
	if err := a.SetVBucket(vb, vbucket.Active); err != nil {
		t.Fatal(err)
	}
	keys := keysFor(vb, 200)
	setKeys(t, a, vb, keys)
	if err := b.Replicate(vb, na.Addr); err != nil {
		t.Fatal(err)
	}
	waitStat(t, b, vb, "consumer:"+na.Addr+":vb_"+strconv.Itoa(vb)+":items_received", strconv.Itoa(len(keys)))
	// Replication, which R2 does not wait for: it cannot turn b active.
	waitStat(t, b, vb, "consumer:"+na.Addr+":vb_"+strconv.Itoa(vb)+":type", "replication")
	if err := na.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { na.Signal(syscall.SIGCONT) })

	res, err := Promote(context.Background(), vb, na.Addr, nb.Addr, Options{Credentials: creds, Settle: 3 * time.Second, Logf: t.Logf,
		Halt: func() error { return errors.New("not leading") }})
	if !errors.Is(err, ErrHalted) || res.Outcome != Unresolved || state(t, b, vb) != vbucket.Replica {
		t.Fatalf("halted Promote: %v, %v", res.Outcome, err)
	}

	const settle = 10 * time.Second
	res, err = Promote(context.Background(), vb, na.Addr, nb.Addr, Options{Credentials: creds, Settle: settle, Logf: t.Logf})
	t.Logf("%s in %v: %s", res.String(), res.Duration.Round(time.Millisecond), res.Detail)
	if err != nil || res.Outcome != Promoted || res.Rule != "R5" {
		t.Fatalf("Promote: %v (%s): %v", res.Outcome, res.Rule, err)
	}
	if res.Duration > settle/2 {
		t.Errorf("Promote took %v: it waited on the paused source's replication stream", res.Duration)
	}
	if st := state(t, b, vb); st != vbucket.Active {
		t.Fatalf("target: %s", st)
	}
	checkKeys(t, b, vb, keys)

	res, err = Promote(context.Background(), vb, na.Addr, nb.Addr, Options{Credentials: creds, Settle: settle})
	if err != nil || res.Outcome != Moved || res.Rule != "R1" {
		t.Fatalf("Promote of an active target: %v (%s): %v", res.Outcome, res.Rule, err)
	}

	res, err = Promote(context.Background(), vb, na.Addr, nc.Addr, Options{Credentials: creds, Settle: settle})
	if !errors.Is(err, ErrUnresolved) || res.Rule != "source-and-copy-lost" || !strings.Contains(err.Error(), res.Rule) {
		t.Fatalf("Promote of a dead target: %v (%s): %v", res.Outcome, res.Rule, err)
	}
	if st := state(t, dial(t, nc.Addr), vb); st != vbucket.Dead {
		t.Fatalf("dead target touched: %s", st)
	}
	nc.Stop()
	res, err = Promote(context.Background(), vb, na.Addr, nc.Addr, Options{Credentials: creds, Settle: settle})
	if !errors.Is(err, ErrUnresolved) || res.Rule != "source-and-copy-lost" || res.Duration > settle/2 {
		t.Fatalf("Promote of a target gone: %v (%s) in %v: %v", res.Outcome, res.Rule, res.Duration, err)
	}
}

// waitStat polls (no clock to advance: the nodes are real processes)
// until c's "stats streams vb" has a line key with value val, for at most
// 10 s.
func waitStat(t *testing.T, c *admin.Conn, vb int, key, val string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		lines, err := c.Stats("streams " + strconv.Itoa(vb))
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range lines {
			if kv[0] == key && kv[1] == val {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never showed %s %s: %v", c.Addr, key, val, lines)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestMoveSourceKilledBeforeHandover kills the source of a move once its
// takeover stream is drained, before the target turned pending (the
// kill-node-mid-rb fault of test/faults). A target that was the
// vbucket's replica keeps its copy and is promoted with every write; a
// target that held nothing before the move is left dead, and the move is
// unresolved (nothing can be promoted).
func TestMoveSourceKilledBeforeHandover(t *testing.T) {
	for _, wasReplica := range []bool{true, false} {
		t.Run(fmt.Sprintf("replica=%v", wasReplica), func(t *testing.T) {
			na, nb := startNode(t, "VBCACHE_FAILPOINT_DRAINED_PAUSE=20s"), startNode(t)
			a, b := dial(t, na.Addr), dial(t, nb.Addr)
			const vb = 5
			if err := a.SetVBucket(vb, vbucket.Active); err != nil {
				t.Fatal(err)
			}
			keys := keysFor(vb, 500)
			setKeys(t, a, vb, keys)
			if wasReplica {
				if err := b.Replicate(vb, na.Addr); err != nil {
					t.Fatal(err)
				}
				waitStat(t, b, vb, "consumer:"+na.Addr+":vb_"+strconv.Itoa(vb)+":items_received", strconv.Itoa(len(keys)))
			}
			type out struct {
				res Result
				err error
			}
			done := make(chan out, 1)
			go func() {
				res, err := Move(context.Background(), vb, na.Addr, nb.Addr, Options{Credentials: creds, Settle: 3 * time.Second, Logf: t.Logf})
				done <- out{res, err}
			}()
			// The producer is named by the target's own name, its address.
			waitStat(t, a, vb, "producer:"+nb.Addr+":vb_"+strconv.Itoa(vb)+":phase", "handover")
			if st := state(t, b, vb); st != vbucket.Replica {
				t.Fatalf("target %s before the handover", st)
			}
			if err := na.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			o := <-done
			t.Logf("%s\n%s\n%s", o.res.String(), o.res.Detail, o.res.Timings())
			if !wasReplica {
				if !errors.Is(o.err, ErrUnresolved) || o.res.Rule != "source-and-copy-lost" {
					t.Fatalf("Move: %v (%s), %v", o.res.Outcome, o.res.Rule, o.err)
				}
				if st := state(t, b, vb); st != vbucket.Dead {
					t.Fatalf("target: %s, want its partial copy dropped", st)
				}
				return
			}
			if o.err != nil || o.res.Outcome != Promoted || o.res.Rule != "R5" {
				t.Fatalf("Move: %v (%s), %v", o.res.Outcome, o.res.Rule, o.err)
			}
			if st := state(t, b, vb); st != vbucket.Active {
				t.Fatalf("target: %s", st)
			}
			checkKeys(t, b, vb, keys)
		})
	}
}

// TestMoveAbortedKeepsReplica aborts a move into the vbucket's replica
// before the handover (an operator's SET_VBUCKET on the target stops its
// takeover): the source stays active (R3), and the target, instead of
// losing its copy, is the vbucket's replica again, fed from the source.
func TestMoveAbortedKeepsReplica(t *testing.T) {
	na, nb := startNode(t, "VBCACHE_FAILPOINT_DRAINED_PAUSE=20s"), startNode(t)
	a, b := dial(t, na.Addr), dial(t, nb.Addr)
	const vb = 3
	if err := a.SetVBucket(vb, vbucket.Active); err != nil {
		t.Fatal(err)
	}
	keys := keysFor(vb, 300)
	setKeys(t, a, vb, keys[:200])
	if err := b.Replicate(vb, na.Addr); err != nil {
		t.Fatal(err)
	}
	waitStat(t, b, vb, "consumer:"+na.Addr+":vb_"+strconv.Itoa(vb)+":items_received", "200")
	type out struct {
		res Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := Move(context.Background(), vb, na.Addr, nb.Addr, Options{Credentials: creds, Settle: 3 * time.Second, Logf: t.Logf})
		done <- out{res, err}
	}()
	waitStat(t, a, vb, "producer:"+nb.Addr+":vb_"+strconv.Itoa(vb)+":phase", "handover")
	// The target has two consumers of vb fed from a: replication and the
	// takeover's. R2 waits for the takeover's alone.
	lines, err := b.Stats("streams " + strconv.Itoa(vb))
	if err != nil {
		t.Fatal(err)
	}
	if !streamOpen(lines, vb, na.Addr) || !fedFrom(lines, vb, na.Addr) {
		t.Fatalf("the target's takeover stream is not seen: %q", lines)
	}
	if err := b.SetVBucket(vb, vbucket.Replica); err != nil {
		t.Fatal(err)
	}
	o := <-done
	t.Logf("%s\n%s", o.res.String(), o.res.Detail)
	if !errors.Is(o.err, ErrAborted) || o.res.Rule != "R3" || !o.res.TargetRefed || o.res.TargetCopyDropped {
		t.Fatalf("Move: %v (%s) refed %v dropped %v: %v", o.res.Outcome, o.res.Rule, o.res.TargetRefed, o.res.TargetCopyDropped, o.err)
	}
	if st := state(t, a, vb); st != vbucket.Active {
		t.Fatalf("source: %s", st)
	}
	if st := state(t, b, vb); st != vbucket.Replica {
		t.Fatalf("target: %s", st)
	}
	// Fed again from where it was: once the replica is at the source's
	// sequence number, the new stream has carried only the writes made
	// after it opened, not the whole vbucket again.
	setKeys(t, a, vb, keys[200:])
	q := "consumer:" + na.Addr + ":vb_" + strconv.Itoa(vb) + ":"
	waitStat(t, b, vb, q+"seqno", "300")
	waitStat(t, b, vb, q+"items_received", "100")
}

// TestMoveTargetPausedInTakeover is issue 43's second hole at a move: the
// target stops answering (SIGSTOP: paused, or cut off) while its
// TAKEOVER is in flight. Move used to wait for the TAKEOVER's answer
// until MoveTimeout (10 minutes by default), and a failover of the target
// waited for the move. Now the move watches the target on a second
// connection and abandons the request once the target has not answered
// for Settle; recovery then finds the target silent and leaves the
// states alone (unresolved), for the failover of the target to settle.
// Abandon does the same at once when the caller knows an end of the move
// is being failed over.
func TestMoveTargetPausedInTakeover(t *testing.T) {
	for _, abandon := range []bool{false, true} {
		t.Run(fmt.Sprintf("abandon=%v", abandon), func(t *testing.T) {
			na, nb := startNode(t, failpoint), startNode(t)
			a, b := dial(t, na.Addr), dial(t, nb.Addr)
			const vb = 9
			if err := a.SetVBucket(vb, vbucket.Active); err != nil {
				t.Fatal(err)
			}
			setKeys(t, a, vb, keysFor(vb, 100))
			var gone atomic.Bool
			opt := Options{Credentials: creds, Settle: time.Second, MoveTimeout: time.Minute, Logf: t.Logf}
			if abandon {
				opt.Settle = 30 * time.Second // only Abandon can end it early
				opt.Abandon = func() bool { return gone.Load() }
			}
			type out struct {
				res Result
				err error
			}
			done := make(chan out, 1)
			go func() {
				res, err := Move(context.Background(), vb, na.Addr, nb.Addr, opt)
				done <- out{res, err}
			}()
			waitState(t, b, vb, vbucket.Pending)
			if err := nb.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			defer nb.Signal(syscall.SIGCONT)
			paused := time.Now()
			gone.Store(true)
			var o out
			select {
			case o = <-done:
			case <-time.After(40 * time.Second):
				t.Fatalf("Move still waiting %v after its target was paused", time.Since(paused).Round(time.Millisecond))
			}
			took := time.Since(paused)
			t.Logf("Move returned %v after the pause: %s, %v", took.Round(time.Millisecond), o.res.String(), o.err)
			if o.err == nil || o.res.Outcome == Moved {
				t.Fatalf("Move into a paused target: %v, %v", o.res.Outcome, o.err)
			}
			limit := 8 * time.Second
			if abandon {
				limit = 5 * time.Second
			}
			if took > limit {
				t.Errorf("Move took %v after its target was paused, want under %v", took.Round(time.Millisecond), limit)
			}
		})
	}
}

// TestRecoverAfterSourceRestart is issue 43's restarted move source: a
// move's source killed and started again at its address (a crash and a
// supervisor's restart) holds every vbucket dead and empty, and Recover,
// which knows no process ids from a preflight (a new leader finishing
// its predecessor's move), used to read it as R4's dead source: it set
// the empty source active again and dropped the target's full copy, so
// every key was lost though the target held them all. A dead source that
// holds nothing while the target holds items is lost (R5): the target is
// promoted, with every key.
func TestRecoverAfterSourceRestart(t *testing.T) {
	na, nb := startNode(t), startNode(t)
	a, b := dial(t, na.Addr), dial(t, nb.Addr)
	const vb = 5
	if err := a.SetVBucket(vb, vbucket.Active); err != nil {
		t.Fatal(err)
	}
	keys := keysFor(vb, 300)
	setKeys(t, a, vb, keys)
	if err := b.Replicate(vb, na.Addr); err != nil {
		t.Fatal(err)
	}
	waitStat(t, b, vb, "consumer:"+na.Addr+":vb_"+strconv.Itoa(vb)+":items_received", strconv.Itoa(len(keys)))

	if err := na.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	na2 := na.Restart(t)
	if st := state(t, dial(t, na2.Addr), vb); st != vbucket.Dead {
		t.Fatalf("the restarted source holds vbucket %d %s", vb, st)
	}

	res, err := Recover(vb, na.Addr, nb.Addr, Options{Credentials: creds, Settle: 5 * time.Second, Logf: t.Logf,
		Publish: func(ctx context.Context, vb int, to string) (int64, error) { return 9, nil }})
	t.Logf("%s\n%s", res.String(), res.Detail)
	if err != nil || res.Outcome != Promoted || res.Rule != "R5" {
		t.Fatalf("Recover: %v (%s): %v", res.Outcome, res.Rule, err)
	}
	if st := state(t, b, vb); st != vbucket.Active {
		t.Fatalf("target: %s", st)
	}
	checkKeys(t, b, vb, keys)
}

// TestRecoverKeepsARestartedSourceDead: the move's source was killed and
// started again empty, and the target holds nothing of the vbucket (the
// takeover had not begun, or its partial copy was dropped); the data is
// on the vbucket's replica, which is no end of the move. Recover, which
// knows no process ids, must not set the new process active empty (R4
// did: the fault schedule's restart-node-mid-rb, seed
// 1796672272894398485, saw four vbuckets "active again" on a node that
// had just restarted, and the restart rule then never failed it over).
// The source has no lineage for the vbucket, which a source that handed
// over always has: nothing is done, and a failover of the source
// promotes the replica.
func TestRecoverKeepsARestartedSourceDead(t *testing.T) {
	na, nb, nc := startNode(t), startNode(t), startNode(t)
	a, c := dial(t, na.Addr), dial(t, nc.Addr)
	const vb = 6
	if err := a.SetVBucket(vb, vbucket.Active); err != nil {
		t.Fatal(err)
	}
	keys := keysFor(vb, 100)
	setKeys(t, a, vb, keys)
	if err := c.Replicate(vb, na.Addr); err != nil {
		t.Fatal(err)
	}
	waitStat(t, c, vb, "consumer:"+na.Addr+":vb_"+strconv.Itoa(vb)+":items_received", strconv.Itoa(len(keys)))

	if err := na.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	na2 := na.Restart(t)
	a2 := dial(t, na2.Addr)
	res, err := Recover(vb, na.Addr, nb.Addr, Options{Credentials: creds, Settle: 2 * time.Second, Logf: t.Logf,
		Publish: func(ctx context.Context, vb int, to string) (int64, error) { return 9, nil }})
	t.Logf("%s (%s): %v\n%s", res.String(), res.Rule, err, res.Detail)
	if st := state(t, a2, vb); st == vbucket.Active {
		t.Fatalf("the restarted source was set active, empty (rule %s), while the replica holds %d keys", res.Rule, len(keys))
	}
	if err == nil || res.Outcome != Unresolved {
		t.Errorf("Recover: %v (%s), %v; want unresolved", res.Outcome, res.Rule, err)
	}
	// What a failover of the source does: the replica, promoted, holds
	// every key.
	if err := c.SetVBucket(vb, vbucket.Active); err != nil {
		t.Fatal(err)
	}
	checkKeys(t, c, vb, keys)
}
