package store

import (
	"strconv"
	"testing"
)

// TestTablesGrowOutsideTheHeap grows one shard's table from 16 buckets
// past mmapTableMin twice, so that a mapped table is replaced and
// unmapped, and checks every item is still found and the crawler and the
// stats still walk the table.
func TestTablesGrowOutsideTheHeap(t *testing.T) {
	s, _ := newTest(t, Config{Shards: 1, HashPower: 4, MaxBytes: 64 << 20})
	const n = 3 * mmapTableMin // the table ends at 2 × mmapTableMin buckets
	for i := range n {
		mustSet(t, s, "k"+strconv.Itoa(i), strconv.Itoa(i), 0)
	}
	sh := &s.shards[0]
	sh.mu.Lock()
	buckets, mapped := len(sh.table), sh.tmap != nil
	sh.mu.Unlock()
	if buckets < 2*mmapTableMin || !mapped {
		t.Fatalf("table has %d buckets, mapped %v; want ≥ %d, mapped", buckets, mapped, 2*mmapTableMin)
	}
	for i := range n {
		wantGet(t, s, "k"+strconv.Itoa(i), strconv.Itoa(i), Hit)
	}
	s.crawl()
	var st Stats
	if s.ReadStats(&st); st.HashBytes != uint64(buckets)*4 {
		t.Fatalf("hash_bytes %d, want %d", st.HashBytes, buckets*4)
	}
}
