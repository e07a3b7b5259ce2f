// Package store is vbcache's item store: memcached's slab allocator, hash
// index, segmented LRU, expiry and CAS, reshaped for Go so that the item
// data stays out of the garbage collector's view and a hit takes one mutex
// and allocates nothing.
//
// # Memory: slab pages, classes and handles
//
// Items live in slab pages: []byte buffers of Config.SlabPageSize (1 MiB),
// allocated lazily from a global budget (Config.MaxBytes, changed by
// SetMemLimit) and never returned to the Go heap, only handed from class to
// class. The sum of page bytes never exceeds the budget, except that the
// store's very first page is always granted (so a limit below one page still
// works), and that when pages cannot move between classes (NoEvict or
// NoSlabReassign) a class with no page is granted its first one over the
// limit, as memcached grants it; otherwise a class first used after the
// limit was reached could store nothing. Each page belongs to one slab
// class and is cut into equal chunks: class 1's chunk is memcached's
// 48-byte item header plus Config.ChunkSizeMin rounded up to 8 bytes (so
// that class ids and chunk sizes are memcached's), each next class is
// GrowthFactor times larger (rounded up to 8), and the last ordinary class
// is SlabChunkMax (half a page). Items bigger than that (up to
// ItemSizeMax, 1 MiB by default) use "large" classes that continue the
// growth series up to ItemSizeMax, with one chunk per page and the page
// sized to the chunk, so that every value is one contiguous slice and Value
// never copies. A new page is not split up front: chunks are handed out in
// order from the class's end page (memcached's free_chunks_end), so moving
// a page between classes costs nothing.
//
// A chunk can also be lent (Borrow, borrow.go): the server reads a large
// value still arriving into one, so that its buffer counts against the
// budget as the item will; a lent chunk is on no list, is never evicted,
// and keeps its page from being drained until it is returned. Loans may
// take at most half of the budget.
//
// An item is addressed by a uint32 handle, page<<chunkBits | chunk, where
// chunkBits fits the most chunks a page can hold and page 0 is never used,
// so handle 0 means "none". Page numbers index a fixed directory of
// 1024-slot groups holding each page's base pointer and chunk size. With 1
// MiB pages and the default chunk sizes there are 18 page bits: 256K pages,
// so the budget can reach about 128 GiB (New and SetMemLimit refuse more).
//
// The item header (hdr, 40 bytes, overlaid on the chunk with unsafe; it
// contains no Go pointers; item.go draws it) is followed by the key and the
// value. It holds the LRU prev/next handles (also the free-list links), the
// hash-chain next handle, exptime and last access (store seconds), a state
// word, client flags, the value length, and the CAS, which is also the
// store sequence number used by flush_all. The state word's low ten bits
// are the chunk's flags (linked, free, fetched, active, stale, token-sent,
// binary key, lent) and the LRU segment; while an item is linked they
// change only by atomic Or, And and CompareAndSwap of those bits. Its top
// two bytes are the class id and the key length, written with the rest of
// the word before the item is linked and never changed while it is. The header keeps no hash of the key: the index compares
// keys, and whoever needs an item's shard without the key in hand
// (eviction, page rescue, dumps, vbucket snapshots, a growing table)
// hashes the key again (keyHash). Nor does it keep the vbucket id: in
// cluster mode each page has a side array of them beside its vbucket links
// (vbucket.go); a standalone store, where every item is in vbucket 0, has
// neither.
//
// An item's size is its own: header (40) + key + value. It goes to the
// smallest chunk that holds that, on memcached's grid of chunk sizes; a
// 100-byte value under an 11-byte key (151 bytes) takes a 152-byte chunk
// where memcached's item (48 + 11 + 1 + 102 + 8 for the CAS = 170 bytes)
// takes a 192-byte one. Our size is always 11 bytes or more below
// memcached's ITEM_ntotal (its header is 48, and it adds a NUL to the key,
// CRLF to the value, 8 bytes of CAS unless -C and 4 of flags unless 0), and
// at most 23 below it, so with memcached's default grid (whose classes are
// at least 24 bytes apart) an item lands in memcached's class or the one
// below it; a finer -f can put it further down. Whatever fits memcached's
// item size limit fits ours. The server still applies -I in
// memcached's units, so that the limit falls where memcached's does. The
// size the stats report is ours, not memcached's: mem_requested and
// "bytes" sum it, Tx.Size, me's and metadump's size= and the vbucket byte
// counts give it. memcached's sizes would not be honest here: they would
// count bytes the item does not use, and could exceed the chunk the item
// is in.
//
// # Index
//
// The index is Config.Shards shards picked by the low bits of a per-store
// maphash of the key. Each shard has its own mutex and a chained hash table
// of handles (chains run through the headers' hnext); the high half of the
// hash picks the bucket, and a shard doubles its table at a load of 1.5
// (rehashing at once, under its lock, each key hashed again; a shard is
// small). No per-item Go
// pointers exist anywhere: the GC sees a few slices per shard and page.
//
// # Locks (and the lock order)
//
//	shard.mu → slabClass.mu → Store.pageMu
//
// A shard lock protects its table and count and, for the items it indexes,
// hnext, exptime, cas and the value bytes (Overwrite). A class lock
// protects the class's free list, LRU lists (prev/next links), counts,
// end page and counters. pageMu protects the page budget and the page
// directory. flushMu serialises flush_all and the latching of a delayed one
// (below); it is a leaf, taken under shard and class locks and taking none.
// Key, flags, lengths, class and vbucket are written
// before the item is linked and never change while it is linked, so holders
// of the class lock read them without the shard lock. The last-access time
// and the state word are atomics, because gets update them under the shard
// lock only and LRU maintenance reads them under the class lock. No one
// holds two class locks or two shard locks at once.
//
// A Tx holds its shard lock from Begin to End. Tx.Store allocates while
// holding it, and allocation may have to evict an item of another shard
// while holding the class lock: it takes that shard with TryLock and skips
// the item if that fails (memcached's item-lock trylock). Items of the
// caller's own shard are evicted directly (its lock is already held), except
// the Tx's own current item. Functions that expect a lock held are suffixed
// Locked.
//
// # LRU segments and eviction
//
// Each class keeps three lists, HOT, WARM and COLD (or one, COLD, with
// Config.FlatLRU). New items enter HOT. On every link the class moves up
// to two items off the HOT tail while HOT exceeds HotLRUPct of the class's
// items (to WARM if their active bit is set, clearing it; otherwise to
// COLD), and likewise off the WARM tail beyond WarmLRUPct (active ones are
// bumped within WARM, others go to COLD). memcached does this in its LRU
// maintainer thread; here it is done inline, so there is no such thread.
// Gets never take a class lock: Bump only sets the fetched and active bits
// and the last-access time. SetLRU changes the percentages and the mode at
// run time (atomics); after a switch to flat, items left in HOT and WARM are
// still evicted, after COLD. Reassign ("slabs reassign") moves a page with
// the same machinery as the rescue below, leaving the source at least one
// page; if the two classes' page sizes differ the page goes back to the
// budget and the destination allocates its own when it needs one.
//
// When a class needs a chunk it tries, in order: its free list; its end
// page; a new page from the budget; (with NoEvict, ErrNoMemory) the LRU
// tails, COLD then HOT then WARM, examining at most evictSearch items: an
// expired or flushed item is reclaimed (counted as reclaimed), an active
// COLD item gets a second chance in WARM (or at the head of the flat list),
// and otherwise the item is evicted. Only the first evictChances active
// items of a search get that chance; after them an active item is evicted
// too (counted in evicted_active), as memcached's evicting pull takes the
// COLD tail whatever its active bit, so that a tail of items all fetched
// since they were stored cannot use up the search. Finally, unless
// NoSlabReassign, it takes a page rescued from the class holding the most
// pages: all of its items are evicted (counted in slabs_moved and
// slab_reassign_evictions_nomem) and the page is given to the needy class
// (or, if the two classes' page sizes differ, released to the budget so
// that the class allocates its own; this is the only case where page
// memory goes back to the Go heap). Only when all of this fails is
// ErrNoMemory returned (outofmemory). While LogEvictions is on, each LRU
// eviction (not a reclaim, not a rescue) is told to the OnEvict callback
// of the Tx whose Store needed the room, from under the locks above
// (evictlog.go); while it is off the cost is one atomic load per
// eviction. With far more classes in use than
// pages in the budget, pages ping-pong between classes and the cache holds
// little; memcached avoids that by letting each class take its first page
// over the limit, which this store does only when pages cannot move.
//
// # Time, expiry and flush_all
//
// Store time is seconds since the store started, starting at 2 so that 1
// can stand for "already expired" (memcached starts at 62 for the same
// reason). RelTime applies memcached's rules: 0 is never; negative is 1;
// up to 30 days (2592000 included) is relative; larger is an absolute unix
// time, 1 if not after the store's base time. An item is expired when
// exptime != 0 && exptime <= now. With clock.Real the current store time is
// cached in an atomic refreshed every 100 ms by the store's background
// goroutine, so a get reads no clock; any other Config.Clock (clock.Fake in
// tests) is read on every call, so tests see time move at once.
//
// Every Store takes a sequence number from the store's counter, which is
// also the CAS unless DisableCAS (then CAS reads 0) or the caller passes one.
// flush_all now records the counter: items with a sequence at or below it
// are flushed, so an item stored after the flush in the same second stays
// visible, with or without CAS. A delayed flush_all records its moment T
// (flushAt); the first one to read the store time at or past T (a Begin,
// the crawler, a dump, ReadRef, Borrow) latches it, recording the
// counter as an immediate flush_all would, and clears T. A Tx latches at
// Begin, before its Store takes a sequence, so every item stored from T on
// has a sequence above the latched one and every item stored before T has
// one at or below it, however late the latch comes; the item header needs
// no store time for it. Latching takes flushMu (a leaf lock) once per
// delayed flush; otherwise it costs one atomic load per Begin. Lookups
// reclaim expired and flushed items lazily (outcomes Expired and Flushed).
//
// The sequence is the CAS, so an item stored with an explicit CAS (a
// stream consumer applying another node's item) is ordered by that CAS:
// one at or below the last flush's counter is flushed at once.
//
// # The crawler and the background goroutine
//
// New starts one goroutine, stopped and waited for by Close. It refreshes
// the cached clock and, while SetCrawler(true) (the default), runs a crawl
// every 10 s. A crawl (also Crawl, synchronously) walks each shard's hash
// table 1024 buckets per lock hold and reclaims expired and flushed items
// (crawler_reclaimed). It walks shards rather than LRUs so that it can take
// the shard lock outright instead of TryLock.
//
// # What can go wrong
//
// Value returns slab memory: it is valid until End or a mutation through
// the Tx, and a caller that keeps it longer reads another item's bytes.
// The callbacks of MetaDump and CacheDump run under a shard lock and must
// not call back into the store. Rehashing a large shard and dumping it
// stall that shard's requests for the duration. Config.VerifyFrees checks a
// class's lists and counts after every mutation (tests only).
package store
