package store

import "math/bits"

// hitsByClass sums the per-shard hit counters, taking each shard lock in turn.
func (s *Store) hitsByClass() []uint64 {
	out := make([]uint64, len(s.classes)*nSegs)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for j, v := range sh.hits {
			out[j] += v
		}
		sh.mu.Unlock()
	}
	return out
}

// classStatsLocked fills cs from c. Caller holds c.mu.
func (s *Store) classStatsLocked(c *slabClass, cs *ClassStats, now uint32, hits []uint64) {
	age := func(seg int) uint64 {
		if t := c.tail[seg]; t != 0 {
			return uint64(now - min(now, s.hdr(t).atime.Load()))
		}
		return 0
	}
	number := c.n[segHot] + c.n[segWarm] + c.n[segCold]
	*cs = ClassStats{
		ID:                  int(c.id),
		ChunkSize:           uint64(c.size),
		ChunksPerPage:       uint64(c.perPage),
		TotalPages:          uint64(len(c.pages)),
		TotalChunks:         uint64(len(c.pages)) * uint64(c.perPage),
		FreeChunks:          c.nfree,
		FreeChunksEnd:       uint64(c.perPage-c.endNext) * b2u(c.endPage != 0),
		MemRequested:        c.requested,
		Number:              number,
		NumberHot:           c.n[segHot],
		NumberWarm:          c.n[segWarm],
		NumberCold:          c.n[segCold],
		AgeHot:              age(segHot),
		AgeWarm:             age(segWarm),
		Age:                 age(segCold),
		Evicted:             c.st.evicted,
		EvictedNonzero:      c.st.evictedNonzero,
		EvictedTime:         c.st.evictedTime,
		OutOfMemory:         c.st.outOfMemory,
		Reclaimed:           c.st.reclaimed,
		ExpiredUnfetched:    c.st.expiredUnfetched + c.crawlExpUnfetch.Load(),
		EvictedUnfetched:    c.st.evictedUnfetched,
		EvictedActive:       c.st.evictedActive,
		CrawlerReclaimed:    c.crawlReclaimed.Load(),
		CrawlerItemsChecked: c.crawlChecked.Load(),
		MovesToCold:         c.st.movesToCold,
		MovesToWarm:         c.st.movesToWarm,
		MovesWithinLRU:      c.st.movesWithinLRU,
		DirectReclaims:      c.st.directReclaims,
	}
	// Chunks of a page being drained are neither free-listed nor used.
	cs.UsedChunks = number
	if hits != nil {
		base := int(c.id) * nSegs
		cs.HitsToHot, cs.HitsToWarm, cs.HitsToCold = hits[base+segHot], hits[base+segWarm], hits[base+segCold]
	}
}

func (s *Store) readStats(st *Stats) {
	*st = Stats{}
	now := s.now()
	var cs ClassStats
	for i := 1; i < len(s.classes); i++ {
		c := &s.classes[i]
		c.mu.Lock()
		s.classStatsLocked(c, &cs, now, nil)
		st.TotalItems += c.st.totalItems
		st.LRUTailRefLocked += c.st.tailRefLocked
		c.mu.Unlock()
		st.CurrItems += cs.Number
		st.Bytes += cs.MemRequested
		st.Evictions += cs.Evicted
		st.Reclaimed += cs.Reclaimed
		st.ExpiredUnfetched += cs.ExpiredUnfetched
		st.EvictedUnfetched += cs.EvictedUnfetched
		st.EvictedActive += cs.EvictedActive
		st.CrawlerReclaimed += cs.CrawlerReclaimed
		st.CrawlerItemsChecked += cs.CrawlerItemsChecked
		st.MovesToCold += cs.MovesToCold
		st.MovesToWarm += cs.MovesToWarm
		st.MovesWithinLRU += cs.MovesWithinLRU
		st.DirectReclaims += cs.DirectReclaims
	}
	st.SlabsMoved = s.slabsMoved.Load()
	st.SlabReassignEvictionsNoMem = s.pageEvictions.Load()
	st.OutOfMemory = s.globalOOM.Load()
	s.pageMu.Lock()
	st.LimitMaxbytes = uint64(s.limit)
	st.TotalMalloced = uint64(s.malloced)
	s.pageMu.Unlock()
	var buckets uint64
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		buckets += uint64(len(sh.table))
		sh.mu.Unlock()
	}
	st.HashPowerLevel = uint64(bits.Len64(buckets) - 1)
	st.HashBytes = buckets * 4
}

func (s *Store) readClassStats(fn func(*ClassStats)) {
	hits := s.hitsByClass()
	now := s.now()
	var cs ClassStats
	for i := 1; i < len(s.classes); i++ {
		c := &s.classes[i]
		c.mu.Lock()
		if !c.everPaged {
			c.mu.Unlock()
			continue
		}
		s.classStatsLocked(c, &cs, now, hits)
		c.mu.Unlock()
		fn(&cs)
	}
}

func (s *Store) resetStats() {
	for i := 1; i < len(s.classes); i++ {
		c := &s.classes[i]
		c.mu.Lock()
		c.st = classCounters{}
		c.mu.Unlock()
		c.crawlReclaimed.Store(0)
		c.crawlChecked.Store(0)
		c.crawlExpUnfetch.Store(0)
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		clear(sh.hits)
		sh.mu.Unlock()
	}
	s.slabsMoved.Store(0)
	s.pageEvictions.Store(0)
	s.globalOOM.Store(0)
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
