package store

// crawlBatch is how many buckets the crawler scans per shard-lock hold.
const crawlBatch = 1024

// crawl implements Store.Crawl. It walks every shard's hash table (rather
// than the class LRUs, as memcached's crawler does) because there it can
// take the shard lock properly instead of TryLock, and it takes a class
// lock only to free what it reclaims. The shard lock is dropped every
// crawlBatch buckets; if the table grows meanwhile some items may be seen
// twice or not at all in this pass, which only delays their reclaim.
func (s *Store) crawl() {
	s.crawlMu.Lock()
	defer s.crawlMu.Unlock()
	for i := range s.shards {
		sh := &s.shards[i]
		for b := 0; ; b += crawlBatch {
			now := s.nowLatched()
			sh.mu.Lock()
			if b >= len(sh.table) {
				sh.mu.Unlock()
				break
			}
			end := min(b+crawlBatch, len(sh.table))
			for j := b; j < end; j++ {
				for h := sh.table[j]; h != 0; {
					it := s.hdr(h)
					next := it.hnext
					c := &s.classes[it.class()]
					c.crawlChecked.Add(1)
					if out := s.deadLocked(it, now); out != Hit {
						unfetched := !it.has(stFetched)
						if out == Expired && s.obs != nil && s.vb != nil {
							s.obs.Mutated(*s.vbOf(h), MutExpire, it.key(), it.nkey()+int(it.nbytes), 0)
						}
						s.unlinkIndexLocked(sh, uint32(j), h, it)
						c.mu.Lock()
						s.unlinkLRULocked(c, h, it)
						s.freeLocked(c, h, it)
						c.mu.Unlock()
						c.crawlReclaimed.Add(1)
						if out == Expired && unfetched {
							c.crawlExpUnfetch.Add(1)
						}
					}
					h = next
				}
			}
			sh.mu.Unlock()
		}
	}
}
