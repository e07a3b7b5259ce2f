package lifecycle

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/test/nodeproc"
)

// TestLocalFailoverPromotesTheBestReplica is issue 43's measured scenario,
// as an operator met it: `vbcache local --nodes 3 --replicas 2
// --failover-after 2s`, a vbucket with the row [A, R1, R2]; 50 writes
// reach both replicas; R1 is paused (SIGSTOP); 300 writes of 100 KB go to
// A and are acknowledged (30 MB: more than R1's socket buffers hold, so R1
// lags), and R2 holds them all; A is killed (SIGKILL) and R1 resumed. The
// failover must promote the replica that holds the most: no acknowledged
// write that a surviving replica held may be lost (before the fix, R1 was
// promoted with about 10 of the 300 and 290 were lost), and the surviving
// replica ends equal to the new active, key by key. Chained (R2 fed from
// R1), pausing R1 starves R2 too: what R2 held is what must survive.
//
// With --sync-replication (issue 43: "run it both star and chained,
// async and sync") a write is answered once every stream to a replica
// the map names has it, and at least one: while R1 is paused and in the
// row, A's writes wait, each answered "sync replication timed out" (it
// may or may not have taken effect) after --pending-timeout, until the
// manager fails R1 over; then they are acknowledged on R2's word (star;
// chained, once R2 follows A). A is killed and R2, the one replica left,
// is promoted: no acknowledged write may be lost. Before the fix in
// internal/stream (Replicated), A went on waiting for the paused R1's
// open stream after its failover, and no write was acknowledged in 90 s.
//
// The same scenario on a build with the vbcache_unsafe_bestreplica tag
// (failovers promote the first live replica in row order) must lose
// writes, or this test could not catch the hole (asynchronously: under
// --sync-replication a replica in the row never lacks an acknowledged
// write, so the row order loses none there).
func TestLocalFailoverPromotesTheBestReplica(t *testing.T) {
	for _, mode := range []struct {
		name        string
		chain, sync bool
	}{{"star", false, false}, {"chain", true, false}, {"star-sync", false, true}, {"chain-sync", true, true}} {
		t.Run(mode.name, func(t *testing.T) {
			if lost := failoverPromotesTheBestReplica(t, bin, mode.chain, mode.sync); lost > 0 {
				t.Errorf("%d acknowledged writes lost that a surviving replica held", lost)
			}
		})
	}
	t.Run("unsafe build", func(t *testing.T) {
		unsafe, err := nodeproc.BuildVbcacheTags(t.TempDir(), "vbcache_unsafe_bestreplica")
		if err != nil {
			t.Fatal(err)
		}
		lost := failoverPromotesTheBestReplica(t, unsafe, false, false)
		if lost == 0 {
			t.Errorf("a vbcache_unsafe_bestreplica build lost no write: the scenario does not catch a failover that promotes by row order")
		}
	})
}

// failoverPromotesTheBestReplica runs the scenario on the vbcache at bin
// and returns how many acknowledged writes that a surviving replica held
// are not on the new active.
func failoverPromotesTheBestReplica(t *testing.T, bin string, chain, sync bool) (lost int) {
	const (
		vbuckets = 16
		first    = 50
		later    = 300
		size     = 100 << 10
	)
	args := []string{"--replicas", "2", "--vbuckets", strconv.Itoa(vbuckets), "-m", "256", "--failover-after", "2s"}
	if chain {
		args = append(args, "--chain")
	}
	if sync {
		args = append(args, "--sync-replication")
	}
	l := startLocalBin(t, bin, 3, args...)
	cfg := managerConfig(t, l.base+1)
	servers := cfg.VBucketServerMap.ServerList
	a := l.addr(0)
	ai := slices.Index(servers, a)
	vb := slices.IndexFunc(cfg.VBucketServerMap.VBucketMap, func(row []int) bool { return row[0] == ai && len(row) == 3 && row[1] >= 0 && row[2] >= 0 })
	if vb < 0 {
		t.Fatalf("no vbucket active on %s with two replicas: %v", a, cfg.VBucketServerMap.VBucketMap)
	}
	row := cfg.VBucketServerMap.VBucketMap[vb]
	r1, r2 := servers[row[1]], servers[row[2]]
	nodeIndex := func(addr string) int {
		for i := range 3 {
			if l.addr(i) == addr {
				return i
			}
		}
		t.Fatalf("%s is not one of local's nodes", addr)
		return -1
	}
	t.Logf("vbucket %d: [%s %s %s]", vb, a, r1, r2)
	var keys []string
	for i := 0; len(keys) < first+later; i++ {
		if k := "best-" + strconv.Itoa(i); vbmap.VBucketString(k, vbuckets) == vb {
			keys = append(keys, k)
		}
	}
	value := func(i int) string {
		return fmt.Sprintf("%06d", i) + strings.Repeat("v", size-6)
	}
	ac := dialText(t, a)
	acked := make([]bool, len(keys)) // the set was answered STORED
	ambiguous := 0
	write := func(from, to int) {
		for i := from; i < to; i++ {
			switch r := ac.do(t, fmt.Sprintf("set %s 0 0 %d\r\n%s\r\n", keys[i], size, value(i))); {
			case r == "STORED":
				acked[i] = true
			case sync && strings.HasPrefix(r, "SERVER_ERROR sync replication timed out"):
				ambiguous++ // it may or may not have taken effect
			default:
				t.Fatalf("set %s on %s: %q", keys[i], a, r)
			}
		}
	}
	stat := func(addr, name string) int {
		c, err := admin.DialWith(context.Background(), addr, l.creds())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		lines, err := c.Stats("vbucket " + strconv.Itoa(vb))
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range lines {
			if kv[0] == "vb_"+strconv.Itoa(vb)+":"+name {
				n, _ := strconv.Atoi(kv[1])
				return n
			}
		}
		return 0
	}
	write(0, first)
	if slices.Contains(acked[:first], false) {
		t.Fatalf("the first %d writes, both replicas up: not all acknowledged (%d ambiguous)", first, ambiguous)
	}
	h0 := stat(a, "high_seqno")
	l.wait("both replicas to hold the first writes", 30*time.Second, func() bool {
		return stat(r1, "high_seqno") >= h0 && stat(r2, "high_seqno") >= h0
	})

	r1pid := l.nodePid(nodeIndex(r1))
	if err := syscall.Kill(r1pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			syscall.Kill(r1pid, syscall.SIGCONT)
		}
	}()
	// Asynchronous, all 300 are acknowledged at once. Synchronous, each
	// waits --pending-timeout (1 s) while the paused R1 is in the row,
	// until its failover (a few seconds): the first writes are answered
	// "sync replication timed out", the others acknowledged.
	write(first, first+later)
	ackedLater := 0
	for _, ok := range acked[first:] {
		if ok {
			ackedLater++
		}
	}
	t.Logf("while R1 was paused: %d writes, %d acknowledged, %d answered sync replication timed out", later, ackedLater, ambiguous)
	if sync && (ambiguous == 0 || ackedLater == 0) {
		t.Fatalf("synchronous: %d writes answered sync replication timed out, %d acknowledged: want some of each (R1 holds writes up until its failover, then R2 acknowledges them); the manager on failovers: %s",
			ambiguous, ackedLater, grepLines(l.stderr.String(), "fail"))
	}
	high := stat(a, "high_seqno")
	// What R2 holds must survive: star, all of it (it is waited for);
	// chained, what reached it through R1 before the pause.
	var r2held int
	if chain {
		r2held = stat(r2, "high_seqno")
	} else {
		l.wait("R2 to hold every write", 30*time.Second, func() bool { return stat(r2, "high_seqno") >= high })
		r2held = high
	}
	// must says which keys a surviving replica held: asynchronous, the
	// first writes and those R2 got (in order: each set is one seqno);
	// synchronous, every acknowledged one.
	must := make([]bool, len(keys))
	mustHold := 0
	for i := range keys {
		if sync {
			must[i] = acked[i]
		} else {
			must[i] = i < first+max(0, r2held-h0)
		}
		if must[i] {
			mustHold++
		}
	}
	t.Logf("%s at seqno %d, %s at %d (star: every write), R1 paused since the first %d writes", a, high, r2, r2held, first)

	if err := syscall.Kill(l.nodePid(0), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(r1pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	// The failover, and the rebalance that rebuilds replicas after it
	// (it may move the vbucket again): the map is read once both are over.
	// Synchronous, R1 was failed over while paused: R2 is the one node
	// left, so the manager cannot be sure A stopped serving (a majority
	// of its quorum set must answer to tell it) and does not fail it
	// over by itself; the operator, who knows A is gone, forces it. No
	// replica is left to rebuild.
	if sync {
		l.wait("the manager to refuse the automatic failover of "+a, 60*time.Second, func() bool {
			return strings.Contains(l.stderr.String(), "automatic failover of "+a+": cannot be sure")
		})
		ctl := exec.Command(bin, "ctl", "failover", "--force", a)
		ctl.Env = append(os.Environ(), "VBCACHE_MANAGER=http://127.0.0.1:"+strconv.Itoa(l.base+1), "VBCACHE_CLUSTER_AUTH="+filepath.Join(l.dir, "admin.pwdb"))
		out, err := ctl.CombinedOutput()
		if err != nil {
			t.Fatalf("vbcache ctl failover --force %s: %v\n%s", a, err, out)
		}
		t.Logf("vbcache ctl failover --force %s: %s", a, strings.TrimSpace(string(out)))
	}
	l.wait("the manager to fail "+a+" over and rebuild the replicas", 60*time.Second, func() bool {
		_, after, ok := strings.Cut(l.stderr.String(), "manager: failed over "+a)
		return ok && (sync || strings.Contains(after, "manager: rebalance finished"))
	})
	if sync {
		l.wait("vbucket "+strconv.Itoa(vb)+" active on another node", 30*time.Second, func() bool {
			c := managerConfig(t, l.base+1)
			row := c.VBucketServerMap.VBucketMap[vb]
			return len(row) > 0 && row[0] >= 0 && c.VBucketServerMap.ServerList[row[0]] != a
		})
	}
	ncfg := managerConfig(t, l.base+1)
	nrow := ncfg.VBucketServerMap.VBucketMap[vb]
	to := ncfg.VBucketServerMap.ServerList[nrow[0]]
	t.Logf("vbucket %d promoted on %s; the manager's log: %s", vb, to, grepLines(l.stderr.String(), fmt.Sprintf("vbucket %d: promoting", vb)))

	// Every acknowledged write a surviving replica held is on the new
	// active; count the others too (lost inside every replica's lag).
	tc, err := admin.DialWith(context.Background(), to, l.creds())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	var lostInLag int
	for i, k := range keys {
		v, err := tc.Do(protocol.OpGet, uint16(vb), nil, []byte(k), nil)
		// Synchronous, a read waits until its vbucket's writes are on
		// the replicas the map names: TMPFAIL while they catch up, ask
		// again (never a miss).
		for try := 0; try < 20 && admin.IsStatus(err, protocol.StatusTmpFail); try++ {
			v, err = tc.Do(protocol.OpGet, uint16(vb), nil, []byte(k), nil)
		}
		if err == nil && string(v) == value(i) {
			continue
		}
		if i < mustHold {
			lost++
		} else {
			lostInLag++
		}
	}
	t.Logf("%d of %d acknowledged writes lost that a surviving replica held; %d lost that none held", lost, mustHold, lostInLag)

	if sync {
		// R1 was failed over while paused: no replica survives in the
		// row to compare with.
		l.stop()
		return lost
	}
	// The surviving replica follows the new active and ends equal to it.
	other := r1
	if to == r1 {
		other = r2
	}
	oc, err := admin.DialWith(context.Background(), other, l.creds())
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close()
	th := stat(to, "high_seqno")
	for deadline := time.Now().Add(30 * time.Second); stat(other, "high_seqno") < th; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("%s did not follow the new active %s in 30 s: high_seqno %d, the active's %d", other, to, stat(other, "high_seqno"), th)
			break
		}
	}
	differ := 0
	for _, k := range keys {
		want, werr := tc.Do(protocol.OpGet, uint16(vb), nil, []byte(k), nil)
		got, gerr := oc.Do(protocol.OpGetReplica, uint16(vb), nil, []byte(k), nil)
		if string(got) != string(want) || (werr == nil) != (gerr == nil) {
			differ++
		}
	}
	if differ > 0 {
		t.Errorf("vbucket %d: %d of %d keys differ between the replica %s and the new active %s", vb, differ, len(keys), other, to)
	}
	if t.Failed() {
		for _, n := range []string{r1, r2} {
			for _, g := range []string{"vbucket " + strconv.Itoa(vb), "streams " + strconv.Itoa(vb)} {
				if c, err := admin.DialWith(context.Background(), n, l.creds()); err == nil {
					lines, err := c.Stats(g)
					t.Logf("%s stats %s: %v %v", n, g, lines, err)
					c.Close()
				}
			}
		}
		t.Logf("the map's row of vbucket %d now: %v of %v\nlocal's log:\n%s", vb, managerConfig(t, l.base+1).VBucketServerMap.VBucketMap[vb], servers, l.stderr.String())
	}
	l.stop()
	return lost
}

// grepLines returns the lines of s that contain sub, joined by " | ".
func grepLines(s, sub string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, " | ")
}
