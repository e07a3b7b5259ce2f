package store

// The eviction log, for the server's "watch evictions" (memcached's
// LOGGER_EVICTION lines). memcached logs an item when its LRU pull evicts
// it to make room (lru_pull_tail with LRU_PULL_EVICT); so does this store,
// from evictLocked. Items reclaimed because they had expired or were
// flushed are not evictions, nor are the items a page rescue or a slabs
// reassign empties out (memcached does not log its slab mover's either).
//
// Cost while nobody watches: evictLocked loads one atomic (the store's
// switch) per eviction; nothing allocates. The callback is per Tx, so that
// the line lands with the connection whose store made the room.

// Eviction describes an item the LRU evicted: what memcached's eviction
// line prints.
type Eviction struct {
	// Key aliases slab memory: it is valid only during the callback.
	Key []byte
	// Fetched: the item was read since it was stored (memcached's
	// ITEM_FETCHED).
	Fetched bool
	// TTL is the seconds it had left, -1 when it never expired.
	TTL int64
	// LastAccess is the seconds since it was last stored, fetched or
	// touched.
	LastAccess uint32
	// ClassID is its slab class.
	ClassID int
	// Size is its value's bytes.
	Size int
}

// LogEvictions turns the eviction log on or off for the whole store.
// While it is off, no Tx's OnEvict callback is called.
func (s *Store) LogEvictions(on bool) { s.evictLog.Store(on) }

// OnEvict makes the store call fn, while LogEvictions is on, for each item
// the LRU evicts to find room for a Store made through this Tx (nil: none).
// Set it once, before the Tx is first used. fn runs with the Tx's shard
// lock, a class lock and possibly the victim's shard lock held: it must be
// quick, must not block (no channel send, no I/O) and must not call into
// the store. The Eviction it gets is reused by the next call.
func (tx *Tx) OnEvict(fn func(*Eviction)) { tx.onEvict = fn }

// noteEvictionLocked tells tx's callback of it, evicted at store time now
// from class c. Caller holds c.mu and the item's shard lock.
func (tx *Tx) noteEvictionLocked(c *slabClass, it *hdr, st uint32, now uint32) {
	ev := &tx.ev
	*ev = Eviction{
		Key:        it.key(),
		Fetched:    st&stFetched != 0,
		TTL:        -1,
		LastAccess: now - min(now, it.atime.Load()),
		ClassID:    int(c.id),
		Size:       int(it.nbytes),
	}
	if it.exptime != 0 {
		ev.TTL = int64(it.exptime) - int64(now)
	}
	tx.onEvict(ev)
}

// EvictionLogOn reports whether LogEvictions is on.
func (s *Store) EvictionLogOn() bool { return s.evictLog.Load() }
