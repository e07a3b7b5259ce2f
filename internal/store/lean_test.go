package store

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// checkIndex verifies that every indexed item sits in the shard and bucket
// its key hashes to (the header keeps no hash: evictions, page rescues and
// table growth recompute it) and that a lookup of its key finds it.
func checkIndex(t testing.TB, s *Store) int {
	t.Helper()
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for b, h := range sh.table {
			for ; h != 0; h = s.hdr(h).hnext {
				it := s.hdr(h)
				hash := s.keyHash(it)
				if s.shardOf(hash) != sh || bucket(sh, hash) != uint32(b) {
					sh.mu.Unlock()
					t.Fatalf("key %q indexed in shard %d bucket %d, hashes to another", it.key(), i, b)
				}
				if x, _ := s.lookupLocked(sh, hash, it.key()); x != h {
					sh.mu.Unlock()
					t.Fatalf("key %q: lookup finds handle %d, indexed as %d", it.key(), x, h)
				}
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// TestEvictionAndRescueFindTheShard: with many shards, evictions (items of
// other shards than the storing Tx's, taken by TryLock) and page rescues
// (all items of a page, of every shard) must unlink each victim from the
// shard and bucket its key hashes to. A wrong one would panic ("unlinked
// item not in index") or leave the index and the counts apart.
func TestEvictionAndRescueFindTheShard(t *testing.T) {
	s, _ := newTest(t, Config{MaxBytes: 2 << 20, Shards: 64, HashPower: 6})
	small := string(make([]byte, 100))
	for i := 0; i < 20000; i++ { // more than fits in 2 MiB: evicts
		mustSet(t, s, "s"+strconv.Itoa(i), small, 0)
	}
	var st Stats
	s.ReadStats(&st)
	if st.Evictions == 0 {
		t.Fatalf("no evictions: %+v", st)
	}
	if n := checkIndex(t, s); uint64(n) != st.CurrItems {
		t.Fatalf("index holds %d items, curr_items %d", n, st.CurrItems)
	}
	// Another class: its pages come from the first one's, rescued.
	big := string(make([]byte, 3000))
	for i := 0; i < 700; i++ {
		mustSet(t, s, "b"+strconv.Itoa(i), big, 0)
	}
	s.ReadStats(&st)
	if st.SlabsMoved == 0 || st.SlabReassignEvictionsNoMem == 0 {
		t.Fatalf("no page rescued: %+v", st)
	}
	if n := checkIndex(t, s); uint64(n) != st.CurrItems {
		t.Fatalf("index holds %d items, curr_items %d", n, st.CurrItems)
	}
	wantGet(t, s, "b699", big, Hit)
	checkAll(t, s, false)
}

// TestDelayedFlushBySequence: a delayed flush_all (moment T) is latched by
// the first reader that sees the store time at or past T, as the counter
// of sequences handed out by then. Items stored before T go, items stored
// from T on stay, however late anyone looks.
func TestDelayedFlushBySequence(t *testing.T) {
	for _, disableCAS := range []bool{false, true} {
		s, fk := newTest(t, Config{DisableCAS: disableCAS})
		mustSet(t, s, "before", "1", 0)
		s.Flush(10)
		fk.Advance(9 * time.Second)
		mustSet(t, s, "late", "1", 0) // T-1: goes too
		wantGet(t, s, "before", "1", Hit)
		fk.Advance(time.Hour) // T passes and no one looks
		// The first thing after T is a store of a new key (a miss): it
		// latches the flush before it takes its sequence, so it stays.
		mustSet(t, s, "after", "1", 0)
		wantGet(t, s, "after", "1", Hit)
		wantGet(t, s, "before", "", Flushed)
		wantGet(t, s, "late", "", Flushed)
		if s.flushAt.Load() != 0 {
			t.Fatal("flush not latched")
		}

		// A due flush is latched before another flush_all replaces it.
		mustSet(t, s, "x", "1", 0)
		s.Flush(5)
		fk.Advance(10 * time.Second)
		s.Flush(100) // the first one's moment passed unseen
		mustSet(t, s, "y", "1", 0)
		wantGet(t, s, "x", "", Flushed)
		wantGet(t, s, "y", "1", Hit)
		// An immediate flush_all cancels the pending one, and flushes y.
		s.Flush(0)
		mustSet(t, s, "z", "1", 0)
		fk.Advance(200 * time.Second)
		wantGet(t, s, "y", "", Flushed)
		wantGet(t, s, "z", "1", Hit)
	}
}

// TestDelayedFlushConcurrent: writers keep storing while the clock passes
// a delayed flush_all's moment T. Every item whose Tx began at or after T
// must stay, and every item stored before the flush_all was given must go.
func TestDelayedFlushConcurrent(t *testing.T) {
	s, fk := newTest(t, Config{})
	for i := 0; i < 100; i++ {
		mustSet(t, s, "old"+strconv.Itoa(i), "v", 0)
	}
	s.Flush(10)
	tNow, _ := s.Now()
	T := tNow + 10
	type rec struct {
		key string
		now uint32
	}
	const writers = 4
	recs := make([][]rec, writers)
	var stored atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var tx Tx
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := "w" + strconv.Itoa(w) + ":" + strconv.Itoa(i)
				s.Begin(&tx, []byte(k))
				now := tx.now
				if err := tx.Store(0, 0, 0, []byte("v"), nil); err != nil {
					panic(err)
				}
				tx.End()
				recs[w] = append(recs[w], rec{k, now})
				stored.Add(1)
			}
		}()
	}
	// The clock crosses T while they write: a second at a time, each once
	// the writers have stored another 100 items.
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < 20; i++ {
		// Progress since the last step: the writers may have run far
		// ahead of this goroutine before it first looked.
		for base := stored.Load(); stored.Load() < base+100; {
			if time.Now().After(deadline) {
				t.Fatal("writers stalled")
			}
			runtime.Gosched()
		}
		fk.Advance(time.Second)
	}
	close(stop)
	wg.Wait()
	before, after := 0, 0
	for _, rs := range recs {
		for _, r := range rs {
			if r.now >= T {
				after++
				wantGet(t, s, r.key, "v", Hit)
			} else {
				before++
			}
		}
	}
	if before == 0 || after == 0 {
		t.Fatalf("%d items stored before T and %d after: the test did not straddle T", before, after)
	}
	for i := 0; i < 100; i++ {
		wantGet(t, s, "old"+strconv.Itoa(i), "", Flushed)
	}
	t.Logf("%d items stored before T, %d at or after", before, after)
}

// TestHeaderIs40Bytes pins the layout item.go draws (the compile-time
// check beside hdr pins hdrSize to the struct; this pins the number).
func TestHeaderIs40Bytes(t *testing.T) {
	if hdrSize != 40 || unsafe.Sizeof(hdr{}) != 40 || unsafe.Offsetof(hdr{}.cas) != 32 {
		t.Fatalf("header %d bytes (hdrSize %d), cas at %d", unsafe.Sizeof(hdr{}), hdrSize, unsafe.Offsetof(hdr{}.cas))
	}
}

// TestClassByRealSize: the grid is memcached's (-n 48, -f 1.25: 96, 120,
// 152, 192 …), and an item goes to the smallest chunk that holds its own
// size, header (40) + key + value, whatever its flags, at every class
// boundary, large classes included.
func TestClassByRealSize(t *testing.T) {
	s, _ := newTest(t, Config{})
	if got := s.sizes[1:5]; got[0] != 96 || got[1] != 120 || got[2] != 152 || got[3] != 192 {
		t.Fatalf("first chunk sizes %v, want memcached's 96 120 152 192", got)
	}
	// The memory test's item: 11-byte key, 100-byte value, 151 bytes,
	// takes a 152-byte chunk (memcached's takes 192).
	key := "key:0000001"
	mustSet(t, s, key, string(make([]byte, 100)), 0)
	var tx Tx
	s.Begin(&tx, []byte(key))
	if tx.ClassID() != 3 || tx.Size() != 151 {
		t.Fatalf("class %d size %d, want class 3 (152-byte chunks), 151 bytes", tx.ClassID(), tx.Size())
	}
	tx.End()
	s.ReadClassStats(func(cs *ClassStats) {
		if cs.ID == 3 && cs.MemRequested != 151 {
			t.Errorf("class 3 mem_requested %d, want 151", cs.MemRequested)
		}
	})

	const nkey = 8
	for id := 1; id < len(s.classes); id++ {
		size := int(s.sizes[id])
		for _, total := range []int{size - 1, size, size + 1} {
			nbytes := total - hdrSize - nkey
			if nbytes < 0 || total > s.cfg.ItemSizeMax {
				continue
			}
			want := id
			if total > size {
				want = id + 1
			}
			for _, flags := range []uint32{0, 0xdeadbeef} {
				if got := s.ClassFor(nkey, flags, nbytes); got != want {
					t.Fatalf("ClassFor(%d-byte item, flags %#x) = %d, want %d", total, flags, got, want)
				}
			}
			k := fmt.Sprintf("k%07d", id) // nkey bytes
			if err := set(t, s, k, string(make([]byte, nbytes)), 0); err != nil {
				t.Fatalf("store %d-byte item: %v", total, err)
			}
			s.Begin(&tx, []byte(k))
			if tx.ClassID() != want || tx.Size() != total || string(tx.it.key()) != k {
				t.Fatalf("%d-byte item: class %d size %d key %q, want class %d", total, tx.ClassID(), tx.Size(), tx.it.key(), want)
			}
			tx.End()
		}
	}
	if s.ClassFor(nkey, 0, s.cfg.ItemSizeMax-hdrSize-nkey) != len(s.classes)-1 || s.ClassFor(nkey, 0, s.cfg.ItemSizeMax-hdrSize-nkey+1) != 0 {
		t.Fatal("ClassFor at ItemSizeMax")
	}
	checkAll(t, s, false)
}

// TestStateKeepsClassAndKeyLength: the class id and key length share the
// state word with bits that change while the item is linked; no change of
// those may touch them.
func TestStateKeepsClassAndKeyLength(t *testing.T) {
	s, _ := newTest(t, Config{HotLRUPct: 10, WarmLRUPct: 10})
	key := "a-key-of-some-length"
	val := string(make([]byte, 500))
	mustSet(t, s, key, val, 0)
	var tx Tx
	s.Begin(&tx, []byte(key))
	it, cls := tx.it, tx.ClassID()
	tx.End()
	check := func(when string) {
		t.Helper()
		if int(it.class()) != cls || it.nkey() != len(key) || string(it.key()) != key || len(it.value()) != len(val) {
			t.Fatalf("%s: class %d nkey %d, want %d %d", when, it.class(), it.nkey(), cls, len(key))
		}
	}
	s.Begin(&tx, []byte(key))
	tx.Bump()
	tx.SetStale(true)
	tx.SetTokenSent(true)
	tx.SetKeyBinary(true)
	check("after the meta bits")
	tx.SetStale(false)
	tx.SetTokenSent(false)
	tx.SetKeyBinary(false)
	tx.End()
	check("after clearing them")
	// Push it through HOT, WARM and COLD (segment moves are CAS loops on
	// the state word) by storing more items of its class.
	for i := 0; i < 200; i++ {
		mustSet(t, s, "other"+strconv.Itoa(i), val, 0)
		if i%10 == 0 {
			wantGet(t, s, key, val, Hit)
		}
	}
	check("after segment moves")
	if it.seg() == segHot {
		t.Fatal("item never left HOT")
	}
}
