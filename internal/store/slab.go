package store

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// slabClass is one size class: its chunks, free list, LRU and counters.
type slabClass struct {
	mu sync.Mutex // protects every field below except the atomics, and the prev/next links of its chunks

	id       uint8
	size     uint32 // chunk size in bytes
	perPage  uint32 // chunks per page
	pageSize int64  // bytes per page (SlabPageSize, or size for large classes)

	pages      []uint32 // pages owned by the class
	rescueNext int      // round-robin cursor for page rescue
	everPaged  bool
	freeHead   uint32
	nfree      uint64
	endPage    uint32 // newest page, handed out chunk by chunk from endNext (0 = none)
	endNext    uint32 // chunks of endPage at and after endNext were never used

	head, tail [nSegs]uint32 // LRU lists; FlatLRU uses segCold only
	n          [nSegs]uint64
	requested  uint64 // sum of item sizes linked

	st classCounters

	npages          atomic.Int32 // len(pages), read without the lock to pick a rescue victim
	crawlReclaimed  atomic.Uint64
	crawlChecked    atomic.Uint64
	crawlExpUnfetch atomic.Uint64

	_ [64]byte // keep neighbouring classes' locks off one cache line
}

// classCounters are the resettable per-class counters (class lock).
type classCounters struct {
	totalItems, evicted, evictedNonzero, evictedTime, outOfMemory uint64
	reclaimed, expiredUnfetched, evictedUnfetched, evictedActive  uint64
	movesToCold, movesToWarm, movesWithinLRU, directReclaims      uint64
	tailRefLocked                                                 uint64
}

const (
	evictSearch  = 32 // tail items examined per eviction attempt
	evictChances = 16 // of those, active COLD items given a second chance instead of evicted
	allocRetries = 4  // rounds of free list / page / evict / rescue
	drainPasses  = 64 // passes over a page being emptied for another class
)

// pushFreeLocked puts chunk h on c's free list. Caller holds c.mu.
func (s *Store) pushFreeLocked(c *slabClass, h uint32, it *hdr) {
	it.state.Store(stFree)
	it.prev = 0
	it.next = c.freeHead
	if c.freeHead != 0 {
		s.hdr(c.freeHead).prev = h
	}
	c.freeHead = h
	c.nfree++
}

// removeFreeLocked takes chunk h off c's free list. Caller holds c.mu.
func (s *Store) removeFreeLocked(c *slabClass, h uint32, it *hdr) {
	if it.prev != 0 {
		s.hdr(it.prev).next = it.next
	} else {
		c.freeHead = it.next
	}
	if it.next != 0 {
		s.hdr(it.next).prev = it.prev
	}
	it.prev, it.next = 0, 0
	c.nfree--
}

// freeLocked returns an unlinked chunk to its class. Caller holds c.mu.
func (s *Store) freeLocked(c *slabClass, h uint32, it *hdr) {
	if s.slot(h >> s.chunkBits).draining {
		it.state.Store(stFree) // the drainer collects it
		return
	}
	s.pushFreeLocked(c, h, it)
}

// addPageLocked gives page p to class c. The page is not split up front:
// its chunks are handed out in order from endNext (memcached's
// free_chunks_end), so a page taken from another class costs nothing to
// rechunk and chunks never handed out are never read. Caller holds c.mu.
func (s *Store) addPageLocked(c *slabClass, p uint32) {
	s.retireEndLocked(c)
	sl := s.slot(p)
	sl.class = c.id
	sl.csize = c.size
	sl.draining = false
	if s.vb != nil && len(sl.links) != int(c.perPage) {
		sl.links = make([]uint64, c.perPage)
		sl.vbs = make([]uint16, c.perPage)
	}
	c.pages = append(c.pages, p)
	c.npages.Store(int32(len(c.pages)))
	c.everPaged = true
	c.endPage, c.endNext = p, 0
}

// retireEndLocked moves the unused tail of c's end page to the free list.
func (s *Store) retireEndLocked(c *slabClass) {
	if c.endPage == 0 {
		return
	}
	for i := c.perPage; i > c.endNext; i-- {
		h := c.endPage<<s.chunkBits | (i - 1)
		s.pushFreeLocked(c, h, s.hdr(h))
	}
	c.endPage, c.endNext = 0, 0
}

// newPageLocked allocates a page for c from the global budget. The first
// page of the store is always granted, so that a limit below one page still
// works. When pages cannot come from another class (NoEvict, -M, or
// NoSlabReassign), a class that has no page yet is granted its first one
// even over the limit: that is memcached's rule (do_slabs_newslab), what
// decides which sets get "out of memory" under -M, and what lets a class
// first used after the limit was reached store anything at all without
// slab reassign. Otherwise the limit is hard and page rescue feeds classes
// instead. Caller holds c.mu (lock order: class → pageMu).
func (s *Store) newPageLocked(c *slabClass) bool {
	s.pageMu.Lock()
	firstOverLimit := (s.cfg.NoEvict || s.cfg.NoSlabReassign) && len(c.pages) == 0
	if s.malloced > 0 && s.malloced+c.pageSize > s.limit && !firstOverLimit {
		s.pageMu.Unlock()
		return false
	}
	var p uint32
	if n := len(s.freeSlots); n > 0 {
		p = s.freeSlots[n-1]
		s.freeSlots = s.freeSlots[:n-1]
	} else {
		if s.nextPage > s.maxPages {
			s.pageMu.Unlock()
			return false
		}
		p = s.nextPage
		s.nextPage++
		if s.dir[p>>groupBits] == nil {
			s.dir[p>>groupBits] = new(pageGroup)
		}
	}
	var buf []byte
	if c.pageSize == int64(s.arena.size) {
		buf = s.arena.page()
	} else {
		buf = make([]byte, c.pageSize) // a large class's page
	}
	sl := s.slot(p)
	sl.buf = buf
	sl.base = unsafe.Pointer(unsafe.SliceData(buf))
	s.malloced += c.pageSize
	s.pageMu.Unlock()
	s.addPageLocked(c, p)
	return true
}

// releasePage drops an emptied page's buffer (only when a page moves to a
// class with a different page size) and returns its bytes to the budget.
func (s *Store) releasePage(p uint32) {
	s.pageMu.Lock()
	sl := s.slot(p)
	s.malloced -= int64(len(sl.buf))
	if len(sl.buf) == s.arena.size {
		s.arena.release(sl.buf)
	}
	sl.buf, sl.base = nil, nil
	s.freeSlots = append(s.freeSlots, p)
	s.pageMu.Unlock()
}

// alloc returns a chunk of class c that is neither free nor linked (the
// caller owns it until it links or frees it). held is the shard the caller
// has locked (nil if none) and keep an item that must not be evicted (the
// Tx's current item). now is the current store time; tx is told of
// evictions (evictlog.go).
func (s *Store) alloc(c *slabClass, held *shard, keep uint32, now uint32, tx *Tx) (uint32, error) {
	for round := 0; round < allocRetries; round++ {
		c.mu.Lock()
		for {
			if h := c.freeHead; h != 0 {
				it := s.hdr(h)
				s.removeFreeLocked(c, h, it)
				it.state.Store(0)
				c.mu.Unlock()
				return h, nil
			}
			if c.endPage != 0 && c.endNext < c.perPage {
				h := c.endPage<<s.chunkBits | c.endNext
				c.endNext++
				s.hdr(h).state.Store(0)
				c.mu.Unlock()
				return h, nil
			}
			if s.newPageLocked(c) {
				continue
			}
			if s.cfg.NoEvict {
				break
			}
			if s.evictLocked(c, held, keep, now, tx) {
				c.st.directReclaims++
				continue
			}
			break
		}
		c.mu.Unlock()
		if s.cfg.NoEvict || s.cfg.NoSlabReassign || !s.rescuePage(c, held, keep) {
			break
		}
	}
	c.mu.Lock()
	c.st.outOfMemory++
	c.mu.Unlock()
	s.globalOOM.Add(1)
	return 0, ErrNoMemory
}

// rescuePage empties one page of the class holding the most pages and gives
// it to c (or, when page sizes differ, releases it to the budget so that c
// can allocate its own). Caller holds no class lock.
func (s *Store) rescuePage(c *slabClass, held *shard, keep uint32) bool {
	var v *slabClass
	best := int32(0)
	for i := 1; i < len(s.classes); i++ {
		o := &s.classes[i]
		if n := o.npages.Load(); o != c && n > best {
			best, v = n, o
		}
	}
	return v != nil && s.movePage(v, c, held, keep, 1)
}

// movePage moves one page from class v to class c, evicting its items, if
// v has at least minPages pages. Caller holds no class lock.
func (s *Store) movePage(v, c *slabClass, held *shard, keep uint32, minPages int) bool {
	v.mu.Lock()
	for try := 0; try < 3 && len(v.pages) >= minPages && len(v.pages) > 0; try++ {
		idx := v.rescueNext % len(v.pages)
		v.rescueNext++
		p := v.pages[idx]
		if s.slot(p).draining || (keep != 0 && keep>>s.chunkBits == p) {
			continue
		}
		if !s.drainPageLocked(v, p, held, keep) {
			continue
		}
		// drainPageLocked may have dropped v.mu; find p again.
		for i, q := range v.pages {
			if q == p {
				v.pages[i] = v.pages[len(v.pages)-1]
				v.pages = v.pages[:len(v.pages)-1]
				break
			}
		}
		v.npages.Store(int32(len(v.pages)))
		v.mu.Unlock()
		s.slabsMoved.Add(1)
		if v.pageSize == c.pageSize {
			c.mu.Lock()
			s.addPageLocked(c, p)
			c.mu.Unlock()
		} else {
			s.releasePage(p)
		}
		return true
	}
	v.mu.Unlock()
	return false
}

// reassign implements Store.Reassign (memcached's "slabs reassign"): the
// source must keep at least one page, as in memcached.
func (s *Store) reassign(src, dst int) error {
	n := len(s.classes)
	if dst < 1 || dst >= n || src == 0 || src < -1 || src >= n {
		return ErrBadClass
	}
	if src == dst {
		return ErrSameClass
	}
	c := &s.classes[dst]
	if src == -1 {
		for i := 1; i < n; i++ {
			if v := &s.classes[i]; v != c && v.npages.Load() >= 2 && s.movePage(v, c, nil, 0, 2) {
				return nil
			}
		}
		return ErrNoSpare
	}
	if !s.movePage(&s.classes[src], c, nil, 0, 2) {
		return ErrNoSpare
	}
	return nil
}

// drainPageLocked evicts every item of page p (class v) and takes its free
// chunks off v's free list. It returns false, leaving the page usable, if it
// could not empty the page. Caller holds v.mu; it is dropped and retaken
// between passes (the draining flag keeps the page's chunks off the free
// list meanwhile).
func (s *Store) drainPageLocked(v *slabClass, p uint32, held *shard, keep uint32) bool {
	sl := s.slot(p)
	base := p << s.chunkBits
	// Only chunks below used were ever handed out; the rest hold garbage.
	used := v.perPage
	if p == v.endPage {
		used = v.endNext
	}
	// A lent chunk (Borrow) comes back only when its borrower is done:
	// the page stays. No chunk of p can be lent from here on, v.mu being
	// held until the draining flag keeps p's chunks off the free list.
	for i := uint32(0); i < used; i++ {
		if s.hdr(base|i).state.Load()&stBorrowed != 0 {
			return false
		}
	}
	sl.draining = true
	if p == v.endPage {
		v.endPage, v.endNext = 0, 0
	}
	for i := uint32(0); i < used; i++ {
		it := s.hdr(base | i)
		if it.state.Load()&stFree != 0 {
			s.removeFreeLocked(v, base|i, it)
		}
	}
	for pass := 0; pass < drainPasses; pass++ {
		busy := 0
		for i := uint32(0); i < used; i++ {
			h := base | i
			it := s.hdr(h)
			st := it.state.Load()
			if st&stFree != 0 {
				continue
			}
			if st&stLinked == 0 || h == keep { // being stored right now
				busy++
				continue
			}
			hash := s.keyHash(it) // linked, so its key is fixed under v.mu
			sh := s.shardOf(hash)
			if sh != held && !sh.mu.TryLock() {
				busy++
				continue
			}
			s.unlinkIndexLocked(sh, bucket(sh, hash), h, it)
			s.unlinkLRULocked(v, h, it)
			s.freeLocked(v, h, it)
			if sh != held {
				sh.mu.Unlock()
			}
			s.pageEvictions.Add(1)
		}
		if busy == 0 {
			return true
		}
		v.mu.Unlock()
		runtime.Gosched()
		v.mu.Lock()
	}
	// Give up: put the free chunks back.
	sl.draining = false
	for i := uint32(0); i < used; i++ {
		it := s.hdr(base | i)
		if it.state.Load()&stFree != 0 {
			s.pushFreeLocked(v, base|i, it)
		}
	}
	for i := used; i < v.perPage; i++ {
		s.pushFreeLocked(v, base|i, s.hdr(base|i))
	}
	return false
}
