package store

import "sync"

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
// the low bits pick the shard).
func bucket(sh *shard, hash uint64) uint32 { return uint32(hash>>32) & sh.mask }

// lookupLocked finds key in sh. Caller holds sh.mu.
func (s *Store) lookupLocked(sh *shard, hash uint64, key []byte) (uint32, *hdr) {
	for h := sh.table[bucket(sh, hash)]; h != 0; {
		it := s.hdr(h)
		if it.hash == hash && string(it.key()) == string(key) {
			return h, it
		}
		h = it.hnext
	}
	return 0, nil
}

// insertIndexLocked adds item h (not yet indexed) to sh. Caller holds sh.mu.
func (s *Store) insertIndexLocked(sh *shard, h uint32, it *hdr) {
	b := bucket(sh, it.hash)
	it.hnext = sh.table[b]
	sh.table[b] = h
	sh.count++
	if sh.count > len(sh.table)+len(sh.table)/2 {
		s.growLocked(sh)
	}
}

// replaceIndexLocked puts item h where old was in sh's chain.
func (s *Store) replaceIndexLocked(sh *shard, old uint32, h uint32, it *hdr) {
	p := &sh.table[bucket(sh, it.hash)]
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

// unlinkIndexLocked removes item h from sh. Caller holds sh.mu.
func (s *Store) unlinkIndexLocked(sh *shard, h uint32, it *hdr) {
	p := &sh.table[bucket(sh, it.hash)]
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
func (s *Store) growLocked(sh *shard) {
	old, oldMap := sh.table, sh.tmap
	sh.table, sh.tmap = allocTable(2 * len(old))
	sh.mask = uint32(len(sh.table) - 1)
	for _, h := range old {
		for h != 0 {
			it := s.hdr(h)
			next := it.hnext
			b := bucket(sh, it.hash)
			it.hnext = sh.table[b]
			sh.table[b] = h
			h = next
		}
	}
	freeTable(oldMap)
}
