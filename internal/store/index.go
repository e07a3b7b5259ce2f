package store

import (
	"hash/maphash"
	"sync"
)

// shard is one stripe of the index: a chained hash table of item handles.
type shard struct {
	mu    sync.Mutex // protects table, count, hits, and the hnext/exptime/cas/value of indexed items
	table []uint32   // bucket heads; len is a power of two
	tmap  []byte     // table's mapping when it is outside the heap (see table.go)
	mask  uint32
	count int
	hits  []uint64 // hits per class and segment: [class*nSegs+seg]
	_     [64]byte
}

// shardOf returns the shard that indexes hash.
func (s *Store) shardOf(hash uint64) *shard { return &s.shards[hash&s.shardMask] }

// bucket returns the bucket index of hash in sh (the high half of the hash;
// the low bits pick the shard). It reads sh.mask: caller holds sh.mu.
func bucket(sh *shard, hash uint64) uint32 { return uint32(hash>>32) & sh.mask }

// keyHash returns the store's hash of item it's key. The header does not
// keep it: whoever needs an item's shard or bucket and does not hold the
// key in hand (eviction, page rescue, dumps, vbucket snapshots, a table
// growing) hashes the key again. Caller holds a lock under which the key
// cannot change: the item's shard lock, or its class lock while the item
// is linked, or its vbucket stripe while it is on the vbucket's list.
func (s *Store) keyHash(it *hdr) uint64 { return maphash.Bytes(s.seed, it.key()) }

// lookupLocked finds key in sh. Caller holds sh.mu. Items in a chain are
// compared by key alone (length, then bytes): the header has no hash to
// compare first, and a chain holds one or two items on average.
func (s *Store) lookupLocked(sh *shard, hash uint64, key []byte) (uint32, *hdr) {
	for h := sh.table[bucket(sh, hash)]; h != 0; {
		it := s.hdr(h)
		if string(it.key()) == string(key) {
			return h, it
		}
		h = it.hnext
	}
	return 0, nil
}

// inChainLocked reports whether handle h is indexed in bucket b of sh:
// then h holds a linked item whose fields sh.mu protects. Callers holding
// a handle learnt under another lock (dumps, vbucket snapshots) check it
// before they read the item, since the chunk may have been freed and
// reused meanwhile. Caller holds sh.mu.
func (s *Store) inChainLocked(sh *shard, b uint32, h uint32) bool {
	for x := sh.table[b]; x != 0; x = s.hdr(x).hnext {
		if x == h {
			return true
		}
	}
	return false
}

// insertIndexLocked adds item h (not yet indexed), whose key hashes to
// hash, to sh. Caller holds sh.mu.
func (s *Store) insertIndexLocked(sh *shard, hash uint64, h uint32, it *hdr) {
	b := bucket(sh, hash)
	it.hnext = sh.table[b]
	sh.table[b] = h
	sh.count++
	if sh.count > len(sh.table)+len(sh.table)/2 {
		s.growLocked(sh)
	}
}

// replaceIndexLocked puts item h where old (of the same key, which hashes
// to hash) was in sh's chain. Caller holds sh.mu.
func (s *Store) replaceIndexLocked(sh *shard, hash uint64, old uint32, h uint32, it *hdr) {
	p := &sh.table[bucket(sh, hash)]
	for *p != 0 {
		if *p == old {
			o := s.hdr(old)
			it.hnext = o.hnext
			o.hnext = 0
			*p = h
			return
		}
		p = &s.hdr(*p).hnext
	}
	panic("store: replaced item not in index")
}

// unlinkIndexLocked removes item h from bucket b of sh. Caller holds sh.mu.
func (s *Store) unlinkIndexLocked(sh *shard, b uint32, h uint32, it *hdr) {
	p := &sh.table[b]
	for *p != 0 {
		if *p == h {
			*p = it.hnext
			it.hnext = 0
			sh.count--
			return
		}
		p = &s.hdr(*p).hnext
	}
	panic("store: unlinked item not in index")
}

// growLocked doubles sh's table (memcached grows at a load of 1.5 too, but
// in a background thread; here the shard is small enough to rehash at once).
// Each item's key is hashed again (the header keeps no hash); tables
// double, so that is at most one more hash per item stored, amortised.
func (s *Store) growLocked(sh *shard) {
	old, oldMap := sh.table, sh.tmap
	sh.table, sh.tmap = allocTable(2 * len(old))
	sh.mask = uint32(len(sh.table) - 1)
	for _, h := range old {
		for h != 0 {
			it := s.hdr(h)
			next := it.hnext
			b := bucket(sh, s.keyHash(it))
			it.hnext = sh.table[b]
			sh.table[b] = h
			h = next
		}
	}
	freeTable(oldMap)
}
