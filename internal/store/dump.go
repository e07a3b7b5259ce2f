package store

// fillDump describes a linked item. Caller holds its shard lock.
func (s *Store) fillDump(d *DumpItem, it *hdr) {
	*d = DumpItem{
		Key:        it.key(),
		Exptime:    -1,
		LastAccess: s.base + int64(it.atime.Load()),
		CAS:        it.cas,
		Fetched:    it.has(stFetched),
		ClassID:    int(it.class()),
		Size:       it.size(),
		Nbytes:     int(it.nbytes),
	}
	if it.exptime != 0 {
		d.Exptime = s.base + int64(it.exptime)
	}
	if s.cfg.DisableCAS {
		d.CAS = 0
	}
}

// cacheDump implements CacheDump. It collects the class's handles in LRU
// order under the class lock, with their keys' hashes (a linked item's key
// does not change under the class lock), then revisits each under its
// shard lock, skipping those no longer indexed there or whose chunk now
// holds another key.
func (s *Store) cacheDump(classID, limit int, fn func(*DumpItem)) {
	if classID < 1 || classID >= len(s.classes) {
		return
	}
	c := &s.classes[classID]
	type ref struct {
		h    uint32
		hash uint64
	}
	var refs []ref
	c.mu.Lock()
	for _, seg := range [...]int{segHot, segWarm, segCold} {
		for h := c.head[seg]; h != 0 && (limit <= 0 || len(refs) < limit); h = s.hdr(h).next {
			refs = append(refs, ref{h, s.keyHash(s.hdr(h))})
		}
	}
	c.mu.Unlock()
	now := s.nowLatched()
	var d DumpItem
	for _, r := range refs {
		sh := s.shardOf(r.hash)
		sh.mu.Lock()
		if s.inChainLocked(sh, bucket(sh, r.hash), r.h) {
			if it := s.hdr(r.h); s.keyHash(it) == r.hash && s.deadLocked(it, now) == Hit {
				s.fillDump(&d, it)
				fn(&d)
			}
		}
		sh.mu.Unlock()
	}
}

// metaDump implements MetaDump: shard by shard, under each shard lock.
func (s *Store) metaDump(fn func(*DumpItem)) {
	now := s.nowLatched()
	var d DumpItem
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, h := range sh.table {
			for ; h != 0; h = s.hdr(h).hnext {
				if it := s.hdr(h); s.deadLocked(it, now) == Hit {
					s.fillDump(&d, it)
					fn(&d)
				}
			}
		}
		sh.mu.Unlock()
	}
}

func (s *Store) classForSize(nkey int, nbytes int) int {
	if nkey < 0 || nbytes < 0 || itemSize(nkey, nbytes) > s.cfg.ItemSizeMax || nkey > 255 {
		return 0
	}
	return s.classFor(itemSize(nkey, nbytes))
}
