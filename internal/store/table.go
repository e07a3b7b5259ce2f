package store

import (
	"runtime"
	"syscall"
	"unsafe"
)

// Index tables of mmapTableMin buckets and more live outside the Go heap,
// mapped with mmap and unmapped as soon as a grow has replaced them, the
// way memcached frees its old hash table. On the Go heap the old tables
// would stay resident: the runtime keeps freed memory up to its heap goal,
// which with slab pages live is about twice the cache, so the tables a
// shard outgrew (together as large as its current one) would cost about
// four bytes per item at a million items. Smaller tables, the start of
// every shard and all of a small store's, stay on the heap.
//
// Every access to a table is under its shard's lock (lookups, grows, the
// crawler and the dumps re-read sh.table each time they take it), so
// unmapping the old table inside growLocked is safe. The mappings still
// held when the Store becomes unreachable are unmapped by a cleanup
// attached in newStore.
const mmapTableMin = 16 << 10

// allocTable returns a zeroed table of n buckets and, when it is mapped,
// its mapping (nil for a heap table).
func allocTable(n int) ([]uint32, []byte) {
	if n >= mmapTableMin {
		m, err := syscall.Mmap(-1, 0, n*4, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
		if err == nil {
			return unsafe.Slice((*uint32)(unsafe.Pointer(&m[0])), n), m
		}
	}
	return make([]uint32, n), nil
}

// freeTable unmaps a table allocTable mapped (a heap table is left to the
// garbage collector).
func freeTable(m []byte) {
	if m != nil {
		syscall.Munmap(m)
	}
}

// unmapTablesOnCleanup frees the shards' mapped tables once the Store
// that owns them is unreachable. shards holds no pointer back to s.
func unmapTablesOnCleanup(s *Store, shards []shard) {
	runtime.AddCleanup(s, func(shards []shard) {
		for i := range shards {
			freeTable(shards[i].tmap)
			shards[i].tmap, shards[i].table = nil, nil
		}
	}, shards)
}
