package stream

import (
	"fmt"
	"testing"

	"github.com/vbcache/vbcache/internal/store"
	"github.com/vbcache/vbcache/internal/vbucket"
)

func newTestLog(t *testing.T, max int) *Log {
	t.Helper()
	tab := vbucket.NewTable(4)
	for vb := range 4 {
		tab.Set(vb, vbucket.Active)
	}
	return NewLog(tab, max)
}

func TestLogNumbersWithoutRing(t *testing.T) {
	l := newTestLog(t, 0)
	for range 5 {
		l.Mutated(1, store.MutStore, []byte("k"), 10, 0)
	}
	if h := l.High(1); h != 5 {
		t.Fatalf("high = %d, want 5", h)
	}
	if h := l.High(0); h != 0 {
		t.Fatalf("vb 0 high = %d, want 0", h)
	}
	// No ring before a stream opens: nothing to read, the caller must
	// backfill.
	if _, _, ok := l.Read(1, 0, 0, make([]Entry, 0, 8), nil); ok {
		t.Fatal("Read without a ring reported ok")
	}
}

func TestLogReadResume(t *testing.T) {
	l := newTestLog(t, 0)
	l.Mutated(2, store.MutStore, []byte("before"), 10, 0)
	uuid, high, gen := l.Open(2, func() uint64 { return 42 })
	if uuid != 42 || high != 1 {
		t.Fatalf("Open = %d %d", uuid, high)
	}
	for i := range 10 {
		l.Mutated(2, store.MutStore, fmt.Appendf(nil, "key-%d", i), 100+i, 0)
	}
	l.Mutated(2, store.MutDelete, []byte("key-3"), 5, 0)
	got, h, ok := l.Read(2, 5, gen, make([]Entry, 0, 100), nil)
	if !ok || h != 12 {
		t.Fatalf("Read ok=%v high=%d", ok, h)
	}
	if len(got) != 7 || got[0].Seq != 6 || string(got[0].Key) != "key-4" || got[6].Kind != store.MutDelete || string(got[6].Key) != "key-3" {
		t.Fatalf("entries %+v", got)
	}
	// Entries from before the ring existed cannot be read.
	if _, _, ok := l.Read(2, 0, gen, make([]Entry, 0, 100), nil); ok {
		t.Fatal("read from before the ring reported ok")
	}
	// A reset generation forces a restart.
	l.Forget(2)
	if _, _, ok := l.Read(2, 5, gen, make([]Entry, 0, 100), nil); ok {
		t.Fatal("read after Forget with the old generation reported ok")
	}
	if b, exact := l.BytesAfter(2, 12); b != 0 || !exact {
		t.Fatalf("BytesAfter(high) = %d %v", b, exact)
	}
}

func TestLogRingBoundedAndDrops(t *testing.T) {
	const max = 64 << 10
	l := newTestLog(t, max)
	_, _, gen := l.Open(0, func() uint64 { return 1 })
	key := make([]byte, 200)
	for i := range 20000 {
		key[0] = byte(i)
		l.Mutated(0, store.MutStore, key, 300, 0)
	}
	if fp := l.RingBytes(); fp > max {
		t.Fatalf("ring holds %d bytes, budget %d", fp, max)
	}
	if _, _, ok := l.Read(0, 1, gen, make([]Entry, 0, 10), nil); ok {
		t.Fatal("read of dropped entries reported ok")
	}
	got, _, ok := l.Read(0, 19990, gen, make([]Entry, 0, 100), nil)
	if !ok || len(got) != 10 || got[9].Seq != 20000 || got[9].Key[0] != byte(19999%256) {
		t.Fatalf("tail read ok=%v n=%d", ok, len(got))
	}
	b, exact := l.BytesAfter(0, 19990)
	if b != 3000 || !exact {
		t.Fatalf("BytesAfter = %d %v, want 3000 true", b, exact)
	}
	if _, exact := l.BytesAfter(0, 5); exact {
		t.Fatal("BytesAfter a dropped position claims to be exact")
	}
}

func TestLogGrowKeepsOrder(t *testing.T) {
	l := newTestLog(t, 8<<20)
	_, _, gen := l.Open(3, func() uint64 { return 1 })
	for i := range 5000 {
		l.Mutated(3, store.MutStore, fmt.Appendf(nil, "k%05d", i), 10, 0)
	}
	got, _, ok := l.Read(3, 0, gen, make([]Entry, 0, 5000), nil)
	if !ok || len(got) != 5000 {
		t.Fatalf("ok=%v n=%d", ok, len(got))
	}
	for i, e := range got {
		if e.Seq != uint64(i+1) || string(e.Key) != fmt.Sprintf("k%05d", i) {
			t.Fatalf("entry %d = %d %q", i, e.Seq, e.Key)
		}
	}
}

func TestLogReplicaExpiryNotNumbered(t *testing.T) {
	tab := vbucket.NewTable(2)
	tab.Set(0, vbucket.Replica)
	l := NewLog(tab, 0)
	l.Mutated(0, store.MutStore, []byte("k"), 1, 7) // applied from a producer
	l.Mutated(0, store.MutExpire, []byte("k"), 1, 0)
	if h := l.High(0); h != 7 {
		t.Fatalf("high = %d, want 7 (a replica does not number its own expiries)", h)
	}
}

// TestLogReadWrappedKeys reads a bounded ring that has dropped and wrapped
// many times, from every position it still holds: each entry comes back
// with its own key (keys of varying length straddle the end of the key
// buffer) and nothing at or below the position asked from.
func TestLogReadWrappedKeys(t *testing.T) {
	l := newTestLog(t, 16<<10)
	_, _, gen := l.Open(1, func() uint64 { return 1 })
	key := func(i int) string { return fmt.Sprintf("k%d-%s", i, "abcdefghijklmnopqrstuvwxyz"[:i%27]) }
	const n = 30000
	for i := 1; i <= n; i++ {
		l.Mutated(1, store.MutStore, []byte(key(i)), 10, 0)
		// Each key read back at once, so the ones that wrap are read too.
		got, _, ok := l.Read(1, uint64(i-1), gen, make([]Entry, 0, 3), nil)
		if !ok || len(got) != 1 || got[0].Seq != uint64(i) || string(got[0].Key) != key(i) {
			t.Fatalf("after entry %d: ok %v, %+v", i, ok, got)
		}
	}
	first := uint64(0)
	for from := uint64(n - 1); from > 0; from-- {
		got, high, ok := l.Read(1, from, gen, make([]Entry, 0, 3), nil)
		if !ok {
			first = from + 1
			break
		}
		if high != n || len(got) != min(3, int(n-from)) {
			t.Fatalf("Read(%d): high %d, %d entries", from, high, len(got))
		}
		for k, e := range got {
			if e.Seq != from+1+uint64(k) || string(e.Key) != key(int(e.Seq)) {
				t.Fatalf("Read(%d)[%d] = %d %q, want %d %q", from, k, e.Seq, e.Key, from+1+uint64(k), key(int(from)+1+k))
			}
		}
	}
	if first < 1000 || first > n-100 {
		t.Fatalf("the ring held from %d of %d: the test did not wrap or held too little", first, n)
	}
}

// TestLogKeySeq: the last entry of a key (its keys wrapping around the
// ring's key buffer too), the floor where a scan stops, the ring's start
// for a key it does not hold, the last number without a ring or in another
// generation.
func TestLogKeySeq(t *testing.T) {
	l := newTestLog(t, 16<<10)
	for range 3 {
		l.Mutated(1, store.MutStore, []byte("early"), 10, 0) // before the ring: 1..3
	}
	if s := l.KeySeq(1, []byte("early"), 0, 0); s != 3 {
		t.Fatalf("without a ring: %d, want the last number 3", s)
	}
	_, _, gen := l.Open(1, func() uint64 { return 1 })
	key := func(i int) string { return fmt.Sprintf("k%d-%s", i%50, "abcdefghijklmnopqrstuvwxyz"[:i%27]) }
	const n = 20000
	last := map[string]uint64{}
	for i := 4; i <= n; i++ {
		l.Mutated(1, store.MutStore, []byte(key(i)), 10, 0)
		last[key(i)] = uint64(i)
	}
	dropped := l.vbs[1].ring.dropped
	if dropped < 3 || dropped > n-100 {
		t.Fatalf("the ring holds from %d of %d: the test did not wrap, or holds too little", dropped, n)
	}
	held := 0
	for k, seq := range last {
		if seq <= dropped {
			if got := l.KeySeq(1, []byte(k), gen, 0); got != dropped {
				t.Fatalf("KeySeq(%q), last written at %d, before the ring's start %d: %d", k, seq, dropped, got)
			}
			continue
		}
		held++
		if got := l.KeySeq(1, []byte(k), gen, 0); got != seq {
			t.Fatalf("KeySeq(%q) = %d, want %d", k, got, seq)
		}
		if got := l.KeySeq(1, []byte(k), gen, seq); got != seq {
			t.Fatalf("KeySeq(%q, floor %d) = %d, want the floor", k, seq, got)
		}
		if got := l.KeySeq(1, []byte(k), gen, seq-1); got != seq {
			t.Fatalf("KeySeq(%q, floor %d) = %d, want %d", k, seq-1, got, seq)
		}
	}
	if held < 40 {
		t.Fatalf("only %d keys in the ring", held)
	}
	if got := l.KeySeq(1, []byte("early"), gen, 0); got != dropped {
		t.Fatalf("KeySeq of a key not in the ring = %d, want where the ring starts, %d", got, dropped)
	}
	if got := l.KeySeq(1, []byte("early"), gen+1, 0); got != n {
		t.Fatalf("KeySeq in another generation = %d, want the last number %d", got, n)
	}
}
