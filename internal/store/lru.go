package store

// LRU lists are doubly linked through the prev/next fields of the item
// headers, one list per segment per class, all under the class lock. Heads
// are the most recently linked or bumped items.

// linkLRULocked puts item h at the head of segment seg. Caller holds c.mu.
func (s *Store) linkLRULocked(c *slabClass, h uint32, it *hdr, seg int) {
	it.setSeg(seg)
	it.prev = 0
	it.next = c.head[seg]
	if it.next != 0 {
		s.hdr(it.next).prev = h
	}
	c.head[seg] = h
	if c.tail[seg] == 0 {
		c.tail[seg] = h
	}
	c.n[seg]++
}

// removeLRULocked takes item h off its segment list. Caller holds c.mu.
func (s *Store) removeLRULocked(c *slabClass, h uint32, it *hdr) {
	seg := it.seg()
	if it.prev != 0 {
		s.hdr(it.prev).next = it.next
	} else {
		c.head[seg] = it.next
	}
	if it.next != 0 {
		s.hdr(it.next).prev = it.prev
	} else {
		c.tail[seg] = it.prev
	}
	it.prev, it.next = 0, 0
	c.n[seg]--
}

// unlinkLRULocked removes a linked item from the class: off its LRU list
// and out of the item counts. The caller frees the chunk next (with
// freeLocked). Caller holds c.mu and the item's shard lock.
func (s *Store) unlinkLRULocked(c *slabClass, h uint32, it *hdr) {
	s.removeLRULocked(c, h, it)
	it.state.And(^uint32(stLinked))
	c.requested -= uint64(it.size())
	if s.vb != nil {
		s.vbUnlink(h, it)
	}
}

// moveLocked moves item h to the head of segment seg.
func (s *Store) moveLocked(c *slabClass, h uint32, it *hdr, seg int) {
	s.removeLRULocked(c, h, it)
	s.linkLRULocked(c, h, it, seg)
}

// balanceLocked keeps HOT and WARM within their shares of the class's items,
// moving at most a few tail items per call (it runs on every link, so the
// segments converge). Caller holds c.mu.
func (s *Store) balanceLocked(c *slabClass) {
	total := c.n[segHot] + c.n[segWarm] + c.n[segCold]
	hotMax := total * uint64(max(0, s.hotPct.Load())) / 100
	warmMax := total * uint64(max(0, s.warmPct.Load())) / 100
	for i := 0; i < 2 && c.n[segHot] > hotMax; i++ {
		h := c.tail[segHot]
		it := s.hdr(h)
		if it.has(stActive) {
			it.setBit(stActive, false)
			s.moveLocked(c, h, it, segWarm)
			c.st.movesToWarm++
		} else {
			s.moveLocked(c, h, it, segCold)
			c.st.movesToCold++
		}
	}
	for i := 0; i < 2 && c.n[segWarm] > warmMax; i++ {
		h := c.tail[segWarm]
		it := s.hdr(h)
		if it.has(stActive) {
			it.setBit(stActive, false)
			s.moveLocked(c, h, it, segWarm)
			c.st.movesWithinLRU++
		} else {
			s.moveLocked(c, h, it, segCold)
			c.st.movesToCold++
		}
	}
}

// evictOrder is the order in which segment tails are searched. In flat
// mode only COLD is used, but HOT and WARM may still hold items from before
// a SetLRU switch.
var evictOrder = [...]int{segCold, segHot, segWarm}

// evictLocked frees one chunk of class c by reclaiming an expired or flushed
// item or evicting one from the LRU tails (COLD, then HOT, then WARM),
// examining at most evictSearch items. A victim's shard is taken with
// TryLock (the lock order is shard → class, and the caller already holds
// c.mu); the caller's own shard (held) is already locked and can be used
// directly, except for its item keep. Active items at the COLD tail get a
// second chance in WARM (or at the head of the flat list), the first
// evictChances of them only: after those an active item is evicted like any
// other (memcached's evicting pull evicts the COLD tail whatever its active
// bit), so a tail of active items cannot use up the search and leave the
// class without a victim. An eviction (not a reclaim) is told to tx's
// OnEvict callback while LogEvictions is on. Caller holds c.mu.
func (s *Store) evictLocked(c *slabClass, held *shard, keep uint32, now uint32, tx *Tx) bool {
	flat := s.flat.Load()
	budget := evictSearch
	chances := evictChances
	for _, seg := range evictOrder {
		h := c.tail[seg]
		for h != 0 && budget > 0 {
			budget--
			it := s.hdr(h)
			prev := it.prev
			if h == keep {
				h = prev
				continue
			}
			if seg == segCold && it.has(stActive) && chances > 0 {
				chances--
				it.setBit(stActive, false)
				if flat {
					s.moveLocked(c, h, it, segCold)
					c.st.movesWithinLRU++
				} else {
					s.moveLocked(c, h, it, segWarm)
					c.st.movesToWarm++
				}
				h = prev
				continue
			}
			hash := s.keyHash(it) // linked, so its key is fixed under c.mu
			sh := s.shardOf(hash)
			if sh != held && !sh.mu.TryLock() {
				c.st.tailRefLocked++
				h = prev
				continue
			}
			st := it.state.Load()
			if s.deadLocked(it, now) != Hit {
				c.st.reclaimed++
				if st&stFetched == 0 {
					c.st.expiredUnfetched++
				}
			} else {
				c.st.evicted++
				if it.exptime != 0 {
					c.st.evictedNonzero++
				}
				if st&stFetched == 0 {
					c.st.evictedUnfetched++
				}
				if st&stActive != 0 {
					c.st.evictedActive++
				}
				c.st.evictedTime = uint64(now - min(now, it.atime.Load()))
				if s.evictLog.Load() && tx.onEvict != nil {
					tx.noteEvictionLocked(c, it, st, now)
				}
			}
			s.unlinkIndexLocked(sh, bucket(sh, hash), h, it)
			s.unlinkLRULocked(c, h, it)
			s.freeLocked(c, h, it)
			if sh != held {
				sh.mu.Unlock()
			}
			return true
		}
	}
	return false
}

// deadLocked reports whether a linked item is expired (Expired), flushed
// (Flushed) or alive (Hit) at store time now. The caller has latched a
// delayed flush_all due at now (latchDue) since it read now, so that
// flushSeq alone says what is flushed. Caller holds the item's shard lock.
func (s *Store) deadLocked(it *hdr, now uint32) Outcome {
	if it.exptime != 0 && it.exptime <= now {
		return Expired
	}
	if it.cas <= s.flushSeq.Load() {
		return Flushed
	}
	return Hit
}

// checkClassLocked verifies a class's lists and counts (Config.VerifyFrees).
func (s *Store) checkClassLocked(c *slabClass) {
	var req uint64
	for seg := 0; seg < nSegs; seg++ {
		var n uint64
		prev := uint32(0)
		for h := c.head[seg]; h != 0; h = s.hdr(h).next {
			it := s.hdr(h)
			if it.prev != prev || it.seg() != seg || !it.has(stLinked) || int(it.class()) != int(c.id) {
				panic("store: corrupt LRU list")
			}
			req += uint64(it.size())
			prev = h
			n++
		}
		if n != c.n[seg] || prev != c.tail[seg] {
			panic("store: LRU count or tail mismatch")
		}
	}
	if req != c.requested {
		panic("store: mem_requested mismatch")
	}
	var nf uint64
	for h := c.freeHead; h != 0; h = s.hdr(h).next {
		if !s.hdr(h).has(stFree) {
			panic("store: non-free chunk on free list")
		}
		nf++
	}
	if nf != c.nfree {
		panic("store: free count mismatch")
	}
}
