package store

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// txState is the part of a Tx the caller cannot see. All fields are owned
// by the goroutine that called Begin and are meaningful only until End.
type txState struct {
	s    *Store
	sh   *shard     // locked shard, nil outside Begin..End
	key  []byte     // caller's key bytes (not copied)
	hash uint64     // maphash of key
	cur  uint32     // handle of the held item, 0 when none
	it   *hdr       // header of cur (points into slab memory)
	now  uint32     // store time read at Begin
	cls  *slabClass // class of cur
	vb   uint16     // vbucket of the items this Tx stores (SetVBucket)
	seq  uint64     // sequence number for the observer (SetSeqno), 0: assign
	muts uint64     // mutations told to the observer through this Tx (Mutations)

	onEvict func(*Eviction) // the eviction log's callback (OnEvict), nil: none
	ev      Eviction        // what onEvict is handed, reused
}

// storeState is the part of a Store the caller cannot see.
type storeState struct {
	vb   *vbLists // per-vbucket item lists; nil unless Config.VBuckets > 0
	obs  Observer // told of every mutation of a vbucket's items (cluster mode); set once before use
	cfg  Config
	seed maphash.Seed

	// Index shards, picked by hash&shardMask. Each shard's mutex protects its
	// table and the hnext/exptime/cas/value bytes of the items it indexes.
	shards    []shard
	shardMask uint64

	// Slab classes, indexed by class id; classes[0] is unused. Each class's
	// mutex protects its free list, LRU lists and counters.
	classes []slabClass
	sizes   []uint32 // sizes[i] = classes[i].size, for ClassFor's search

	// Handle layout: page<<chunkBits | chunk. Page 0 is never used so that
	// handle 0 means "none".
	chunkBits uint32
	chunkMask uint32
	maxPages  uint32
	dir       []*pageGroup // fixed length; groups are allocated under pageMu

	pageMu    sync.Mutex // protects limit, malloced, nextPage, arena, freeSlots and slot allocation
	limit     int64      // page budget in bytes (MaxBytes, or SetMemLimit's value)
	malloced  int64      // bytes of pages currently held by classes
	lent      int64      // bytes of chunks lent by Borrow (pageMu)
	nextPage  uint32     // next never-used page number
	arena     pageArena  // the standard-size pages' memory (arena.go)
	freeSlots []uint32   // page numbers whose buffers were released

	// LRU tuning (SetLRU); read under class locks and by Tx.Store.
	hotPct, warmPct atomic.Int32
	flat            atomic.Bool

	// flush_all (store.go flush, latchFlush). An item is flushed when its
	// sequence (its CAS) is at or below flushSeq. A delayed flush_all sets
	// flushAt, its moment T; the first reader that sees the store time at
	// or past T latches it: flushSeq takes the counter's value and flushAt
	// goes back to 0. Every Store latches a due flush before it takes its
	// own sequence, so items stored from T on stay and all before go.
	casSeq   atomic.Uint64 // CAS and store-sequence counter
	flushSeq atomic.Uint64 // items with seq <= flushSeq are flushed
	flushAt  atomic.Uint32 // pending delayed flush moment (store time), 0 = none
	flushMu  sync.Mutex    // serialises flush and latchFlush (a leaf: taken under shard and class locks, takes none)

	// Time. base is the unix second at which store time is 0; store time
	// starts at relStart. With clock.Real, relNow is refreshed by the
	// background goroutine; other clocks are read on every call.
	base   int64
	cached bool
	relNow atomic.Uint32

	// Global counters (the per-class ones live in slabClass).
	slabsMoved    atomic.Uint64
	pageEvictions atomic.Uint64 // items evicted to empty a page for another class
	globalOOM     atomic.Uint64

	evictLog atomic.Bool // LogEvictions: evictLocked tells Tx callbacks (evictlog.go)

	crawlMu    sync.Mutex // serialises Crawl passes
	crawlerOn  atomic.Bool
	crawlTicks int // background ticks between crawls
	done       chan struct{}
	wg         sync.WaitGroup
	closeOnce  sync.Once
}
