package server

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/stream"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// keysFor returns n keys that hash to vb among testVBuckets.
func keysFor(vb, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		k := fmt.Sprintf("k%d", i)
		if vbmap.VBucketString(k, testVBuckets) == vb {
			out = append(out, k)
		}
	}
	return out
}

func (b *binClient) get(vb uint16, key string) (protocol.Status, string) {
	b.t.Helper()
	h, body := b.do(protocol.OpGet, vb, nil, []byte(key), nil)
	if h.Status != protocol.StatusOK {
		return h.Status, ""
	}
	return h.Status, string(body[h.ExtLen:])
}

func (b *binClient) state(vb uint16) vbucket.State {
	b.t.Helper()
	h, body := b.do(protocol.OpGetVBucket, vb, nil, nil, nil)
	if h.Status != protocol.StatusOK || len(body) != 4 {
		b.t.Fatalf("GET_VBUCKET: %#x %q", h.Status, body)
	}
	return vbucket.State(body[3])
}

func TestTakeoverMovesItems(t *testing.T) {
	_, addrA := startCluster(t, nil)
	_, addrB := startCluster(t, nil)
	a, b := dialBin(t, addrA), dialBin(t, addrB)
	const vb = 3
	a.setState(vb, vbucket.Active)
	keys := keysFor(vb, 2000)
	for i, k := range keys {
		a.set(vb, k, fmt.Sprintf("v%d", i))
	}
	h, body := b.do(stream.OpTakeover, vb, nil, []byte(addrA), nil)
	if h.Status != protocol.StatusOK {
		t.Fatalf("TAKEOVER: %#x %q", h.Status, body)
	}
	if st := a.state(vb); st != vbucket.Dead {
		t.Errorf("source state %v, want dead", st)
	}
	if st := b.state(vb); st != vbucket.Active {
		t.Errorf("target state %v, want active", st)
	}
	for i, k := range keys {
		if st, v := b.get(vb, k); st != protocol.StatusOK || v != fmt.Sprintf("v%d", i) {
			t.Fatalf("%s on target: %#x %q", k, st, v)
		}
	}
	if st, _ := a.get(vb, keys[0]); st != protocol.StatusNotMyVBucket {
		t.Errorf("source answered %#x, want NOT_MY_VBUCKET", st)
	}
	// And back again, resuming nothing: B is the source now.
	h, body = a.do(stream.OpTakeover, vb, nil, []byte(addrB), nil)
	if h.Status != protocol.StatusOK {
		t.Fatalf("TAKEOVER back: %#x %q", h.Status, body)
	}
	for i, k := range keys {
		if st, v := a.get(vb, k); st != protocol.StatusOK || v != fmt.Sprintf("v%d", i) {
			t.Fatalf("%s back on source: %#x %q", k, st, v)
		}
	}
}

// TestTakeoverUnderWrites moves a vbucket while writers keep writing to it
// through whichever node owns it; every acknowledged write must be on the
// new owner, and at no moment are both nodes active.
func TestTakeoverUnderWrites(t *testing.T) {
	_, addrA := startCluster(t, nil)
	_, addrB := startCluster(t, nil)
	a, b := dialBin(t, addrA), dialBin(t, addrB)
	const vb = 5
	a.setState(vb, vbucket.Active)
	keys := keysFor(vb, 64)
	var acked [64]atomic.Int64 // last acknowledged value per key
	var writes atomic.Int64    // acknowledged writes, for the waits below
	stop := make(chan struct{})
	var wg sync.WaitGroup
	addrs := []string{addrA, addrB}
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs := []*binClient{dialBin(t, addrs[0]), dialBin(t, addrs[1])}
			for n := int64(1); ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				i := int(n*7+int64(w)) % len(keys)
				if i%4 != w { // each writer owns its keys, so acked is monotonic
					continue
				}
				v := fmt.Sprint(n)
				for _, c := range cs {
					c.nc.SetDeadline(time.Now().Add(10 * time.Second))
					h, _ := c.do(protocol.OpSet, vb, make([]byte, 8), []byte(keys[i]), []byte(v))
					if h.Status == protocol.StatusOK {
						acked[i].Store(n)
						writes.Add(1)
						break
					}
				}
			}
		}()
	}
	// Poll both states: never two actives. Round k moves the vbucket
	// from nodes[k%2] to nodes[(k+1)%2]. Within a round the target turns
	// active only after the source is dead for good, so reading the
	// target active and then the source active, with no round ending in
	// between, would mean two actives at once.
	var round atomic.Int64
	var two atomic.Int64
	var polls atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		cs := []*binClient{dialBin(t, addrA), dialBin(t, addrB)}
		for {
			select {
			case <-stop:
				return
			default:
			}
			r0 := round.Load()
			src, dst := cs[r0%2], cs[(r0+1)%2]
			dst.nc.SetDeadline(time.Now().Add(10 * time.Second))
			src.nc.SetDeadline(time.Now().Add(10 * time.Second))
			dstActive := dst.state(vb) == vbucket.Active
			srcActive := src.state(vb) == vbucket.Active
			if round.Load() == r0 {
				polls.Add(1)
				if dstActive && srcActive {
					two.Add(1)
				}
			}
		}
	}()
	// The takeovers run under writes and polls: so many of them before
	// the first and after each (about what 50 ms and 20 ms gave under
	// -race), not so much time.
	progress := func(nw, np int64, what string) {
		t.Helper()
		w, p := writes.Load(), polls.Load()
		waitFor(t, fmt.Sprintf("%d writes and %d polls %s", nw, np, what), func() bool {
			return writes.Load()-w >= nw && polls.Load()-p >= np
		})
	}
	progress(500, 20, "before the first takeover")
	src, dst := a, b
	srcAddr, dstAddr := addrA, addrB
	for k := 0; k < 6; k++ {
		dst.nc.SetDeadline(time.Now().Add(30 * time.Second))
		h, body := dst.do(stream.OpTakeover, vb, nil, []byte(srcAddr), nil)
		if h.Status != protocol.StatusOK {
			t.Fatalf("round %d: TAKEOVER: %#x %q", k, h.Status, body)
		}
		src, dst = dst, src
		srcAddr, dstAddr = dstAddr, srcAddr
		round.Add(1)
		progress(100, 2, fmt.Sprintf("after takeover %d", k))
	}
	close(stop)
	wg.Wait()
	if n := two.Load(); n > 0 {
		t.Errorf("both nodes were active at once (%d of %d polls)", n, polls.Load())
	}
	if polls.Load() == 0 {
		t.Error("the state poller never completed a poll")
	}
	owner := src
	for i, k := range keys {
		want := acked[i].Load()
		if want == 0 {
			continue
		}
		st, v := owner.get(vb, k)
		if st != protocol.StatusOK {
			t.Fatalf("%s: %#x on the owner", k, st)
		}
		var got int64
		fmt.Sscan(v, &got)
		if got < want {
			t.Errorf("%s: owner has %d, last acknowledged write was %d", k, got, want)
		}
	}
}

func TestReplicationStarAndChain(t *testing.T) {
	_, addrA := startCluster(t, nil)
	_, addrR1 := startCluster(t, nil)
	_, addrR2 := startCluster(t, nil)
	a, r1, r2 := dialBin(t, addrA), dialBin(t, addrR1), dialBin(t, addrR2)
	const vb = 7
	a.setState(vb, vbucket.Active)
	keys := keysFor(vb, 500)
	for _, k := range keys[:250] {
		a.set(vb, k, "before")
	}
	if h, body := r1.do(stream.OpReplicate, vb, nil, []byte(addrA), nil); h.Status != protocol.StatusOK {
		t.Fatalf("REPLICATE: %#x %q", h.Status, body)
	}
	// Chained: r2 follows r1.
	if h, body := r2.do(stream.OpReplicate, vb, nil, []byte(addrR1), nil); h.Status != protocol.StatusOK {
		t.Fatalf("REPLICATE: %#x %q", h.Status, body)
	}
	for _, k := range keys[250:] {
		a.set(vb, k, "after")
	}
	a.do(protocol.OpDelete, vb, nil, []byte(keys[0]), nil)
	want := func(i int) string {
		if i == 0 {
			return ""
		}
		if i < 250 {
			return "before"
		}
		return "after"
	}
	for _, c := range []*binClient{r1, r2} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			bad := ""
			for i, k := range keys {
				h, body := c.do(protocol.OpGetReplica, vb, nil, []byte(k), nil)
				got := ""
				if h.Status == protocol.StatusOK {
					got = string(body[h.ExtLen:])
				}
				if got != want(i) {
					bad = fmt.Sprintf("%s = %q (status %#x), want %q", k, got, h.Status, want(i))
					break
				}
			}
			if bad == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica never caught up: %s", bad)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Lag on the active is zero once caught up.
	a.send(protocol.OpStat, 0, nil, []byte("streams"), nil)
	var lines []string
	for {
		h, body := a.read()
		if h.KeyLen == 0 {
			break
		}
		lines = append(lines, string(body[:h.KeyLen])+"="+string(body[h.KeyLen:]))
	}
	joined := strings.Join(lines, "\n")
	if !strings.Contains(joined, fmt.Sprintf("vb_%d:seqno_behind=0", vb)) {
		t.Errorf("stats streams on the active:\n%s", joined)
	}
}

// stat returns one statistic of a group ("" for the general ones).
func (b *binClient) stat(group, name string) string {
	b.t.Helper()
	return b.statWhere(group, func(n string) bool { return n == name })
}

// statSuffix is the value of the first stat in group whose name ends in
// suffix ("" when none).
func (b *binClient) statSuffix(group, suffix string) string {
	b.t.Helper()
	return b.statWhere(group, func(n string) bool { return strings.HasSuffix(n, suffix) })
}

// statWhere is the value of the first stat in group whose name match
// takes ("" when none).
func (b *binClient) statWhere(group string, match func(name string) bool) string {
	b.t.Helper()
	b.send(protocol.OpStat, 0, nil, []byte(group), nil)
	val, found := "", false
	for {
		h, body := b.read()
		if h.KeyLen == 0 {
			return val
		}
		if name := string(body[:h.KeyLen]); !found && match(name) {
			val, found = string(body[h.KeyLen:]), true
		}
	}
}

// TestReplicationAddsAndDropsStreamsLive: a replica node's connection to a
// source takes vbuckets on and off while it runs. Adding one does not
// reconnect (the streams already there go on), dropping one stops it at
// once while the others go on, and a dropped vbucket can be added again.
func TestReplicationAddsAndDropsStreamsLive(t *testing.T) {
	_, addrA := startCluster(t, nil)
	_, addrB := startCluster(t, nil)
	a, b := dialBin(t, addrA), dialBin(t, addrB)
	const vb1, vb2 = 3, 5
	a.setState(vb1, vbucket.Active)
	a.setState(vb2, vbucket.Active)
	k1, k2 := keysFor(vb1, 4), keysFor(vb2, 3)
	replicate := func(vb uint16) {
		t.Helper()
		if h, body := b.do(stream.OpReplicate, vb, nil, []byte(addrA), nil); h.Status != protocol.StatusOK {
			t.Fatalf("REPLICATE %d: %#x %q", vb, h.Status, body)
		}
	}
	waitReplica := func(vb uint16, key, want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			h, body := b.do(protocol.OpGetReplica, vb, nil, []byte(key), nil)
			if h.Status == protocol.StatusOK && string(body[h.ExtLen:]) == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica of vbucket %d never had %s = %q (status %#x)", vb, key, want, h.Status)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	replicate(vb1)
	a.set(vb1, k1[0], "one")
	waitReplica(vb1, k1[0], "one")
	conns := a.stat("", "total_connections")

	replicate(vb2)
	a.set(vb2, k2[0], "two")
	a.set(vb1, k1[1], "one")
	waitReplica(vb2, k2[0], "two")
	waitReplica(vb1, k1[1], "one")
	if got := a.stat("", "total_connections"); got != conns {
		t.Fatalf("adding a vbucket reconnected: total_connections %s, then %s", conns, got)
	}

	if h, body := b.do(stream.OpStopReplication, vb1, nil, nil, nil); h.Status != protocol.StatusOK {
		t.Fatalf("STOP_REPLICATION: %#x %q", h.Status, body)
	}
	a.set(vb1, k1[2], "late")
	a.set(vb2, k2[1], "two")
	waitReplica(vb2, k2[1], "two") // the connection is still up and applying
	if h, _ := b.do(protocol.OpGetReplica, vb1, nil, []byte(k1[2]), nil); h.Status != protocol.StatusKeyNotFound {
		t.Fatalf("a write made after STOP_REPLICATION reached the replica: status %#x", h.Status)
	}
	if got := a.stat("", "total_connections"); got != conns {
		t.Fatalf("dropping a vbucket reconnected: total_connections %s, then %s", conns, got)
	}

	// Fed again, it resumes and gets what it missed.
	replicate(vb1)
	a.set(vb2, k2[2], "two")
	waitReplica(vb1, k1[2], "late")
	waitReplica(vb2, k2[2], "two")
}

// TestReplicaCatchesUpAfterALargeGap: a replica whose stream was stopped
// while 300 values of 100 KB (30 MB, far more than the socket buffers and
// the producer's 4 MiB window hold) were written resumes from its position
// in the log, and catches up to every one of them. A producer used to send
// a log batch whole (256 entries, 25 MB here) in one write and count it as
// unacknowledged only once the write returned: the consumer's
// acknowledgements of those bytes, arriving during the write, were
// clamped away, the window stayed full for ever, and the replica stalled
// at the batch's end (found by test/lifecycle's
// TestLocalFailoverPromotesTheBestReplica, issue 43).
func TestReplicaCatchesUpAfterALargeGap(t *testing.T) {
	_, addrA := startCluster(t, nil)
	_, addrR := startCluster(t, nil)
	a, r := dialBin(t, addrA), dialBin(t, addrR)
	const vb = 7
	a.setState(vb, vbucket.Active)
	keys := keysFor(vb, 350)
	for _, k := range keys[:50] {
		a.set(vb, k, "small")
	}
	if h, body := r.do(stream.OpReplicate, vb, nil, []byte(addrA), nil); h.Status != protocol.StatusOK {
		t.Fatalf("REPLICATE: %#x %q", h.Status, body)
	}
	seqno := func() string {
		return r.stat("streams "+fmt.Sprint(vb), "consumer:"+addrA+":vb_"+fmt.Sprint(vb)+":seqno")
	}
	waitFor(t, "the replica to hold the first 50", func() bool { return seqno() == "50" })
	if h, body := r.do(stream.OpStopReplication, vb, nil, nil, nil); h.Status != protocol.StatusOK {
		t.Fatalf("STOP_REPLICATION: %#x %q", h.Status, body)
	}
	big := strings.Repeat("v", 100<<10)
	for _, k := range keys[50:] {
		a.set(vb, k, big)
	}
	if h, body := r.do(stream.OpReplicate, vb, nil, []byte(addrA), nil); h.Status != protocol.StatusOK {
		t.Fatalf("REPLICATE again: %#x %q", h.Status, body)
	}
	deadline := time.Now().Add(20 * time.Second)
	for seqno() != "350" {
		if time.Now().After(deadline) {
			t.Fatalf("the replica stalled at seqno %s of 350; the active's streams: unacked_bytes %s, sent_seqno %s", seqno(),
				a.stat("streams", "producer:"+addrR+":unacked_bytes"), a.stat("streams", "producer:"+addrR+":vb_"+fmt.Sprint(vb)+":sent_seqno"))
		}
		time.Sleep(20 * time.Millisecond) // polling a condition
	}
	for i, k := range keys {
		h, body := r.do(protocol.OpGetReplica, vb, nil, []byte(k), nil)
		want := big
		if i < 50 {
			want = "small"
		}
		if h.Status != protocol.StatusOK || string(body[h.ExtLen:]) != want {
			t.Fatalf("%s on the replica: status %#x, %d bytes", k, h.Status, len(body))
		}
	}
}

// TestResumeAfterPromotionFollowsTheNewBranch is issue 43's lineage hole:
// vbucket 7 is active on A with replicas R1 and R2; both hold 50 writes;
// R2's stream is cut and A takes 100 more, which R1 holds (seqnos 51-150).
// A is lost and R2 is promoted (SET_VBUCKET active: R1 was unreachable,
// say), and takes 200 writes of its own (seqnos 51-250 on R2). R1 then
// follows R2 from its position (A's lineage, seqno 150). Resuming there
// would keep A's 100 writes that R2 never had and skip R2's writes 51-150:
// R1 must end equal to R2, key by key. R2 started a new branch of the
// vbucket's history at its promotion (seqno 50), R1 ran past it, so R1
// does not resume at 150.
func TestResumeAfterPromotionFollowsTheNewBranch(t *testing.T) {
	_, addrA := startCluster(t, nil)
	_, addrR1 := startCluster(t, nil)
	_, addrR2 := startCluster(t, nil)
	a, r1, r2 := dialBin(t, addrA), dialBin(t, addrR1), dialBin(t, addrR2)
	const vb = 7
	a.setState(vb, vbucket.Active)
	keys := keysFor(vb, 350)
	for _, k := range keys[:50] {
		a.set(vb, k, "first")
	}
	for _, c := range []*binClient{r1, r2} {
		if h, body := c.do(stream.OpReplicate, vb, nil, []byte(addrA), nil); h.Status != protocol.StatusOK {
			t.Fatalf("REPLICATE: %#x %q", h.Status, body)
		}
	}
	consumerAt := func(c *binClient, src string) string {
		return c.stat("streams "+fmt.Sprint(vb), "consumer:"+src+":vb_"+fmt.Sprint(vb)+":seqno")
	}
	waitFor(t, "both replicas to hold the first 50", func() bool { return consumerAt(r1, addrA) == "50" && consumerAt(r2, addrA) == "50" })
	if h, body := r2.do(stream.OpStopReplication, vb, nil, nil, nil); h.Status != protocol.StatusOK {
		t.Fatalf("STOP_REPLICATION: %#x %q", h.Status, body)
	}
	for _, k := range keys[50:150] {
		a.set(vb, k, "old-branch")
	}
	waitFor(t, "R1 to hold A's 150", func() bool { return consumerAt(r1, addrA) == "150" })
	if h, body := r1.do(stream.OpStopReplication, vb, nil, nil, nil); h.Status != protocol.StatusOK {
		t.Fatalf("STOP_REPLICATION: %#x %q", h.Status, body)
	}
	a.setState(vb, vbucket.Dead)
	r2.setState(vb, vbucket.Active)
	for _, k := range keys[150:] {
		r2.set(vb, k, "new-branch")
	}
	if h, body := r1.do(stream.OpReplicate, vb, nil, []byte(addrR2), nil); h.Status != protocol.StatusOK {
		t.Fatalf("REPLICATE from R2: %#x %q", h.Status, body)
	}
	high := r2.stat("vbucket "+fmt.Sprint(vb), "vb_"+fmt.Sprint(vb)+":high_seqno")
	deadline := time.Now().Add(10 * time.Second)
	for consumerAt(r1, addrR2) != high {
		if time.Now().After(deadline) {
			t.Fatalf("R1 at %q from R2, whose high seqno is %s", consumerAt(r1, addrR2), high)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition
	}
	differ := 0
	var sample string
	for _, k := range keys {
		h1, b1 := r1.do(protocol.OpGetReplica, vb, nil, []byte(k), nil)
		h2, b2 := r2.do(protocol.OpGet, vb, nil, []byte(k), nil)
		v1, v2 := "", ""
		if h1.Status == protocol.StatusOK {
			v1 = string(b1[h1.ExtLen:])
		}
		if h2.Status == protocol.StatusOK {
			v2 = string(b2[h2.ExtLen:])
		}
		if v1 != v2 {
			differ++
			if sample == "" {
				sample = fmt.Sprintf("%s: %q on R1, %q on R2", k, v1, v2)
			}
		}
	}
	if differ > 0 {
		t.Errorf("%d of %d keys differ between R1 and the promoted R2 (e.g. %s)", differ, len(keys), sample)
	}
}

// TestSetVBucketEndsATakeoverFromHere: SET_VBUCKET on a move's source
// ends the takeover running from it, as it ends one running into a
// target. A failover of a move's paused target makes the source active
// again (once the target is fenced); the handover, held up meanwhile by
// the silent target, must not go on afterwards. It did (issue 43, the
// schedule's pause-target-mid-rb): held before the target turned
// pending, it went on when the target resumed and turned the source dead
// (the target, told it was out, took nothing: no active for 4 s, until
// the janitor); held after the source turned dead, it told the target to
// turn active beside the source set active again.
func TestSetVBucketEndsATakeoverFromHere(t *testing.T) {
	for _, hold := range []string{"VBCACHE_FAILPOINT_DRAINED_PAUSE", "VBCACHE_FAILPOINT_HANDOVER_PAUSE"} {
		t.Run(hold, func(t *testing.T) {
			t.Setenv(hold, "3s") // the source's Node reads it when it starts
			_, addrA := startCluster(t, nil)
			os.Unsetenv(hold)
			_, addrB := startCluster(t, nil)
			a, b, mover := dialBin(t, addrA), dialBin(t, addrB), dialBin(t, addrB)
			const vb = 5
			a.setState(vb, vbucket.Active)
			keys := keysFor(vb, 50)
			for i, k := range keys {
				a.set(vb, k, fmt.Sprintf("v%d", i))
			}
			mover.send(stream.OpTakeover, vb, nil, []byte(addrA), nil)
			want := vbucket.Pending // the drained hold: the handover has begun, the target not yet pending
			if hold == "VBCACHE_FAILPOINT_HANDOVER_PAUSE" {
				want = vbucket.Dead // dead here, pending there
			}
			waitFor(t, "the handover to reach its hold", func() bool {
				if want == vbucket.Dead {
					return a.state(vb) == vbucket.Dead
				}
				return a.statSuffix("streams", ":vb_5:phase") == "handover"
			})
			a.setState(vb, vbucket.Active) // as a failover's reactivate does
			h, body := mover.read()        // the TAKEOVER's answer: whatever it is, it has ended
			t.Logf("TAKEOVER answered %#x %q", h.Status, body)
			if st := a.state(vb); st != vbucket.Active {
				t.Errorf("source: %v after SET_VBUCKET active and the takeover's end, want active", st)
			}
			if st := b.state(vb); st == vbucket.Active {
				t.Errorf("target: active beside the source set active again")
			}
			if st, v := a.get(vb, keys[0]); st != protocol.StatusOK || v != "v0" {
				t.Errorf("source: get %s: %#x %q", keys[0], st, v)
			}
		})
	}
}
