package memcache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/vbmap"
)

// keyIn returns a key of vbucket vb (of clusterVBuckets).
func keyIn(t *testing.T, vb int) string {
	t.Helper()
	for i := 0; i < 1<<20; i++ {
		if k := fmt.Sprintf("key-%d", i); vbmap.VBucketString(k, clusterVBuckets) == vb {
			return k
		}
	}
	t.Fatalf("no key in vbucket %d", vb)
	return ""
}

// needTmpFailMapping skips t until the binary response path maps status
// 0x86 to ErrTemporaryFailure (binStatusError in binary.go).
func needTmpFailMapping(t *testing.T) {
	t.Helper()
	if !errors.Is(binStatusError(protocol.StatusTmpFail, nil), ErrTemporaryFailure) {
		t.Skip("binStatusError does not map status 0x86 to errTemporaryFailureAnswer yet (memcache/binary.go)")
	}
}

// TestClusterTemporaryFailure: a node answers TMPFAIL (0x86) to a request
// that waited on a pending vbucket longer than its park timeout. The
// cluster client retries with backoff and succeeds once the vbucket turns
// active; when it stays pending the client gives up after MaxTries with an
// error wrapping ErrTemporaryFailure (and ErrServerError).
func TestClusterTemporaryFailure(t *testing.T) {
	needTmpFailMapping(t)
	checkGoroutines(t)
	const park = 20 * time.Millisecond
	tc := newTestClusterPark(t, 1, park)
	const maxTries = 8
	c, err := NewCluster(context.Background(), tc.addrs, &ClusterOptions{RefreshInterval: -1, Timeout: 5 * time.Second,
		MaxTries: maxTries, MinBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	adm := tc.admins[0]
	key, other := keyIn(t, 5), keyIn(t, 6)
	for _, k := range []string{key, other} {
		if err := c.Set(&Item{Key: k, Value: []byte("v-" + k)}); err != nil {
			t.Fatal(err)
		}
	}

	// activateAfterFailure turns vb active from another goroutine once
	// the client has met a TMPFAIL and is about to back off: the park
	// timeout has fired at least once.
	activateAfterFailure := func(vb int) (wait func()) {
		failed := make(chan struct{})
		var once sync.Once
		c.cl.sleep = func(ctx context.Context, d time.Duration) error {
			once.Do(func() { close(failed) })
			return sleepCtx(ctx, d)
		}
		var wg sync.WaitGroup
		errc := make(chan error, 1)
		wg.Go(func() {
			<-failed
			errc <- adm.trySetState(vb, vbActive)
		})
		return func() {
			t.Helper()
			wg.Wait()
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		}
	}

	// Get: served after the vbucket turns active.
	adm.setState(5, vbPending)
	done := activateAfterFailure(5)
	it, err := c.Get(key)
	done()
	if err != nil || string(it.Value) != "v-"+key {
		t.Fatalf("Get after TMPFAIL: %v %v", it, err)
	}
	if n := c.cl.tmpFails.Load(); n == 0 {
		t.Fatal("Get was never answered TMPFAIL")
	}
	if n := c.cl.refusals.Load(); n != 0 {
		t.Fatalf("%d NOT_MY_VBUCKET answers", n)
	}

	// Set: the same.
	adm.setState(5, vbPending)
	done = activateAfterFailure(5)
	err = c.Set(&Item{Key: key, Value: []byte("v2")})
	done()
	if err != nil {
		t.Fatalf("Set after TMPFAIL: %v", err)
	}

	// GetMulti: the keys that got no value are sent again.
	adm.setState(5, vbPending)
	before := c.cl.tmpFails.Load()
	done = activateAfterFailure(5)
	m, err := c.GetMulti([]string{key, other, "missing"})
	done()
	if err != nil || len(m) != 2 || string(m[key].Value) != "v2" || string(m[other].Value) != "v-"+other {
		t.Fatalf("GetMulti after TMPFAIL: %v %v", m, err)
	}
	if c.cl.tmpFails.Load() == before {
		t.Fatal("GetMulti was never answered TMPFAIL")
	}

	// Pending for good: MaxTries sends, backoff between them, then an
	// error wrapping ErrTemporaryFailure.
	adm.setState(5, vbPending)
	var waits []time.Duration
	c.cl.sleep = func(ctx context.Context, d time.Duration) error {
		waits = append(waits, d)
		return nil
	}
	before = c.cl.tmpFails.Load()
	_, err = c.Get(key)
	if !errors.Is(err, ErrTemporaryFailure) || !errors.Is(err, ErrServerError) {
		t.Fatalf("Get on a pending vbucket: %v, want ErrTemporaryFailure and ErrServerError", err)
	}
	if n := c.cl.tmpFails.Load() - before; n != maxTries {
		t.Fatalf("%d TMPFAIL answers, want %d", n, maxTries)
	}
	wantWaits := []time.Duration{1, 2, 2, 2, 2, 2, 2}
	for i := range wantWaits {
		wantWaits[i] *= time.Millisecond
	}
	if fmt.Sprint(waits) != fmt.Sprint(wantWaits) {
		t.Fatalf("waits %v, want %v", waits, wantWaits)
	}
	m, err = c.GetMulti([]string{key, other})
	if !errors.Is(err, ErrTemporaryFailure) || len(m) != 1 || m[other] == nil {
		t.Fatalf("GetMulti with a pending vbucket: %v %v, want ErrTemporaryFailure and %s only", m, err, other)
	}

	// A plain binary client with a vbucket selector (so that requests
	// carry the vbucket) gets the answer as an error, without retry.
	vs, err := NewVBucket(tc.addrs, clusterVBuckets)
	if err != nil {
		t.Fatal(err)
	}
	pc := NewFromSelector(vs)
	pc.Protocol = Binary
	pc.Timeout = 5 * time.Second
	defer pc.Close()
	if _, err := pc.Get(key); !errors.Is(err, ErrTemporaryFailure) {
		t.Fatalf("plain binary Get on a pending vbucket: %v", err)
	}
	adm.setState(5, vbActive)
}

// TestClusterForwardMap: when the map carries vBucketMapForward, requests
// still go to vBucketMap's owner; on NOT_MY_VBUCKET for a vbucket whose
// forward owner is another server, the client tries the forward owner
// before asking any server for a newer config, once per request.
func TestClusterForwardMap(t *testing.T) {
	checkGoroutines(t)
	tc := newTestCluster(t, 2)
	// Rev 2: every fourth vbucket is moving to the other node.
	fwdCfg := *tc.cfg
	fwdCfg.Rev++
	fwd := make([][]int, clusterVBuckets)
	for vb := range fwd {
		fwd[vb] = []int{tc.cfg.Active(vb)}
		if vb%4 == 0 {
			fwd[vb][0] = 1 - fwd[vb][0]
		}
	}
	fwdCfg.VBucketServerMap.VBucketMapForward = fwd
	tc.cfg = &fwdCfg
	tc.push(nil)

	c, err := NewCluster(context.Background(), tc.addrs, &ClusterOptions{RefreshInterval: -1, Timeout: 5 * time.Second,
		MaxTries: 4, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var waits int
	c.cl.sleep = func(context.Context, time.Duration) error { waits++; return nil }
	counts := func() string {
		return fmt.Sprintf("refusals %d, forwards %d, from bodies %d, from fetches %d, waits %d",
			c.cl.refusals.Load(), c.cl.forwards.Load(), c.cl.fromBody.Load(), c.cl.fromFetch.Load(), waits)
	}
	// Vbuckets 0 and 4 are on node 0, moving to node 1; vbucket 2 is on
	// node 0 and stays.
	kFwd, kStay, kStuck := keyIn(t, 0), keyIn(t, 2), keyIn(t, 4)

	// Before any move the forward map changes nothing.
	if err := c.Set(&Item{Key: kFwd, Value: []byte("old")}); err != nil {
		t.Fatal(err)
	}
	if got, want := counts(), "refusals 0, forwards 0, from bodies 0, from fetches 0, waits 0"; got != want {
		t.Fatalf("counts: %s, want %s", got, want)
	}

	// Vbucket 0 moves to node 1 as forecast. Rev 3 goes to node 1 only:
	// a client that asked around first would learn it.
	tc.move([]int{0}, func(int) int { return 1 })
	tc.push([]int{1})
	if err := c.Set(&Item{Key: kFwd, Value: []byte("new")}); err != nil {
		t.Fatalf("Set after the move: %v", err)
	}
	if it, err := c.Get(kFwd); err != nil || string(it.Value) != "new" {
		t.Fatalf("Get after the move: %v %v", it, err)
	}
	if got, want := counts(), "refusals 2, forwards 2, from bodies 0, from fetches 0, waits 0"; got != want {
		t.Fatalf("counts: %s, want %s", got, want)
	}
	if e, r := c.ConfigRevision(); e != 1 || r != 2 {
		t.Fatalf("the client has (%d, %d), want (1, 2): it asked for a config before the forward owner", e, r)
	}

	// Vbucket 2 moves too, unforecast (its forward owner is its owner):
	// the client asks node 1 for rev 4.
	tc.move([]int{2}, func(int) int { return 1 })
	tc.push([]int{1})
	if err := c.Set(&Item{Key: kStay, Value: []byte("x")}); err != nil {
		t.Fatalf("Set after the unforecast move: %v", err)
	}
	if got, want := counts(), "refusals 3, forwards 2, from bodies 0, from fetches 1, waits 0"; got != want {
		t.Fatalf("counts: %s, want %s", got, want)
	}
	if e, r := c.ConfigRevision(); e != 1 || r != 4 {
		t.Fatalf("the client has (%d, %d), want (1, 4)", e, r)
	}

	// Vbucket 4 dies on node 0 and its forward owner does not have it
	// either: one send goes to the forward owner, the others to the map's
	// owner, and the request fails with ErrNotMyVBucket.
	tc.admins[0].setState(4, vbDead)
	_, err = c.Get(kStuck)
	if !errors.Is(err, ErrNotMyVBucket) {
		t.Fatalf("Get on a vbucket no node serves: %v, want ErrNotMyVBucket", err)
	}
	if got, want := counts(), "refusals 7, forwards 3, from bodies 0, from fetches 1, waits 2"; got != want {
		t.Fatalf("counts: %s, want %s", got, want)
	}
}

// TestSyncWriteAmbiguousStatus: binary status 0xa3 is
// ErrSyncWriteAmbiguous, a server error, and not a temporary failure (a
// cluster client does not send the write again).
func TestSyncWriteAmbiguousStatus(t *testing.T) {
	err := binStatusError(protocol.StatusSyncWriteAmbiguous, []byte("sync replication timed out"))
	if !errors.Is(err, ErrSyncWriteAmbiguous) || !errors.Is(err, ErrServerError) || errors.Is(err, ErrTemporaryFailure) {
		t.Fatalf("status 0xa3: %v; want ErrSyncWriteAmbiguous and ErrServerError, not ErrTemporaryFailure", err)
	}
}
