package store

import (
	"strconv"
	"testing"
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
