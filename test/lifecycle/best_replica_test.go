package lifecycle

import (
	"context"
	"fmt"
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
// The same scenario on a build with the vbcache_unsafe_bestreplica tag
// (failovers promote the first live replica in row order) must lose
// writes, or this test could not catch the hole.
func TestLocalFailoverPromotesTheBestReplica(t *testing.T) {
	for _, mode := range []struct {
		name  string
		flags []string
	}{{"star", nil}, {"chain", []string{"--chain"}}} {
		t.Run(mode.name, func(t *testing.T) {
			if lost := failoverPromotesTheBestReplica(t, bin, mode.name == "chain", mode.flags); lost > 0 {
				t.Errorf("%d acknowledged writes lost that a surviving replica held", lost)
			}
		})
	}
	t.Run("unsafe build", func(t *testing.T) {
		unsafe, err := nodeproc.BuildVbcacheTags(t.TempDir(), "vbcache_unsafe_bestreplica")
		if err != nil {
			t.Fatal(err)
		}
		lost := failoverPromotesTheBestReplica(t, unsafe, false, nil)
		if lost == 0 {
			t.Errorf("a vbcache_unsafe_bestreplica build lost no write: the scenario does not catch a failover that promotes by row order")
		}
	})
}

// failoverPromotesTheBestReplica runs the scenario on the vbcache at bin
// and returns how many acknowledged writes that a surviving replica held
// are not on the new active.
func failoverPromotesTheBestReplica(t *testing.T, bin string, chain bool, flags []string) (lost int) {
	const (
		vbuckets = 16
		first    = 50
		later    = 300
		size     = 100 << 10
	)
	l := startLocalBin(t, bin, 3, append([]string{"--replicas", "2", "--vbuckets", strconv.Itoa(vbuckets), "-m", "256", "--failover-after", "2s"}, flags...)...)
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
	write := func(from, to int) {
		for i := from; i < to; i++ {
			if r := ac.do(t, fmt.Sprintf("set %s 0 0 %d\r\n%s\r\n", keys[i], size, value(i))); r != "STORED" {
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
	write(first, first+later)
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
	mustHold := first + max(0, r2held-h0) // keys[:mustHold] were on a surviving replica
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
	l.wait("the manager to fail "+a+" over and rebuild the replicas", 60*time.Second, func() bool {
		_, after, ok := strings.Cut(l.stderr.String(), "manager: failed over "+a)
		return ok && strings.Contains(after, "manager: rebalance finished")
	})
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
