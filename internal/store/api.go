package store

// This file is the contract between the store and its callers (the server's
// protocol handlers). Signatures and documented semantics are fixed; the
// bodies delegate to the implementation in the other files (see doc.go).

import (
	"errors"

	"github.com/vbcache/vbcache/internal/clock"
)

// Errors returned by mutations. They are answers, not failures: the caller
// turns them into protocol replies and the connection stays usable.
var (
	// ErrTooLarge means the item (header + key + value) does not fit in
	// the largest item the store was configured for (-I).
	ErrTooLarge = errors.New("store: object too large for cache")
	// ErrNoMemory means no chunk could be found for the item: the memory
	// limit is reached and eviction is disabled (-M) or found no victim.
	ErrNoMemory = errors.New("store: out of memory storing object")
)

// Config describes a store. Zero values mean "use the default", which are
// memcached 1.6's defaults.
type Config struct {
	MaxBytes       int64       // -m: limit on item memory in bytes (64 MiB)
	ItemSizeMax    int         // -I: largest item in bytes, this store's header included (1 MiB)
	ChunkSizeMin   int         // -n: minimum space for key+value+flags in the smallest chunk (48)
	GrowthFactor   float64     // -f: chunk size factor between slab classes (1.25)
	SlabPageSize   int         // bytes per slab page (1 MiB)
	SlabChunkMax   int         // largest slab chunk; bigger items span pages (SlabPageSize/2)
	DisableCAS     bool        // -C: every CAS reads 0 and is never checked
	NoEvict        bool        // -M: return ErrNoMemory instead of evicting
	HotLRUPct      int         // share of a class's items kept in HOT (20)
	WarmLRUPct     int         // share of a class's items kept in WARM (40)
	FlatLRU        bool        // -o no_modern / lru mode flat: one plain LRU per class
	NoSlabReassign bool        // -o no_slab_reassign: pages never move between classes
	NoHugePages    bool        // -o no_hugepages: slab memory is not advised MADV_HUGEPAGE (arena.go)
	Shards         int         // number of index shards, a power of two (default 4×GOMAXPROCS rounded up, at least 16)
	HashPower      int         // -o hashpower: log2 of initial index buckets over all shards (16)
	Clock          clock.Clock // time source for expiry (clock.Real)
	// VBuckets, when positive, makes the store keep a list of each
	// vbucket's items (Tx.SetVBucket names an item's vbucket) so that
	// DropVBucket costs time in proportion to the vbucket (cluster mode).
	VBuckets int
	// VerifyFrees, if set, makes the store check its invariants after every
	// mutation (tests only; slow).
	VerifyFrees bool
}

// Outcome is the result of a lookup.
type Outcome uint8

// Lookup outcomes. Expired and Flushed items are reclaimed by the lookup and
// are misses; the distinction only feeds the get_expired / get_flushed stats.
const (
	Miss Outcome = iota
	Hit
	Expired
	Flushed
)

// Tx is a transaction on one key: Begin locks the index shard that owns the
// key, and every method of Tx runs under that lock until End. A Tx is owned
// by the caller (typically embedded in a connection) so that beginning one
// allocates nothing. A Tx must not be used by two goroutines, and a
// goroutine must not hold two Txs at once (lock order: one shard, then the
// slab class locks inside it).
//
// The value slice returned by Value aliases slab memory: it is valid only
// until End or the next mutating call on the Tx.
type Tx struct {
	txState // implementation-defined fields
}

// Begin starts a transaction on key and looks it up. The key bytes must stay
// unchanged until End. Expired or flushed items are unlinked by the lookup.
func (s *Store) Begin(tx *Tx, key []byte) Outcome {
	return s.begin(tx, key)
}

// End releases the shard lock. The Tx may then be reused for another Begin.
func (tx *Tx) End() {
	tx.end()
}

// Found reports whether the transaction currently holds a live item (after
// Begin's lookup, and after any Store or Delete made through the Tx).
func (tx *Tx) Found() bool {
	return tx.cur != 0
}

// Value returns the held item's data (valid until End or a mutation).
func (tx *Tx) Value() []byte {
	if tx.it == nil {
		return nil
	}
	return tx.it.value()
}

// Flags returns the held item's 32-bit client flags.
func (tx *Tx) Flags() uint32 {
	if tx.it == nil {
		return 0
	}
	return tx.it.flags
}

// CAS returns the held item's CAS unique (0 when CAS is disabled).
func (tx *Tx) CAS() uint64 {
	if tx.it == nil || tx.s.cfg.DisableCAS {
		return 0
	}
	return tx.it.cas
}

// TTL returns the seconds left before the held item expires, or -1 when it
// never expires.
func (tx *Tx) TTL() int64 {
	if tx.it == nil || tx.it.exptime == 0 {
		return -1
	}
	return int64(tx.it.exptime) - int64(tx.now)
}

// LastAccess returns the seconds since the held item was last accessed
// (stored, fetched or touched).
func (tx *Tx) LastAccess() int64 {
	if tx.it == nil {
		return 0
	}
	return int64(tx.now) - int64(tx.it.atime.Load())
}

// Fetched reports whether the held item was fetched since it was stored.
func (tx *Tx) Fetched() bool {
	return tx.it != nil && tx.it.has(stFetched)
}

// ClassID returns the slab class id of the held item (for me / metadump).
func (tx *Tx) ClassID() int {
	if tx.it == nil {
		return 0
	}
	return int(tx.it.class())
}

// Size returns the total bytes the held item occupies (header + key +
// value), for "size=" in me and metadump. It is this store's size, not
// memcached's ITEM_ntotal (which counts a 48-byte header, a NUL, the CRLF
// and the CAS and flags when present): it is the size that chose the
// item's class and that mem_requested sums.
func (tx *Tx) Size() int {
	if tx.it == nil {
		return 0
	}
	return tx.it.size()
}

// Bump records an access: it sets the fetched and active bits and the last
// access time (what a get does unless meta's u flag asks not to).
func (tx *Tx) Bump() {
	tx.bump()
}

// Touch sets the held item's expiry to exptime, a relative store time as
// returned by Store.RelTime.
func (tx *Tx) Touch(exptime uint32) {
	if tx.it != nil {
		tx.it.exptime = exptime
		tx.it.atime.Store(tx.now)
		if tx.s.vb != nil {
			tx.observe(MutStore, tx.cur, tx.it)
		}
	}
}

// Stale and TokenSent are the meta protocol's invalidation bits (X/W/Z).
func (tx *Tx) Stale() bool {
	return tx.it != nil && tx.it.has(stStale)
}

// TokenSent reports whether a recache token (W) was already handed out.
func (tx *Tx) TokenSent() bool {
	return tx.it != nil && tx.it.has(stToken)
}

// SetStale sets the stale bit (meta I).
func (tx *Tx) SetStale(v bool) {
	if tx.it != nil {
		tx.it.setBit(stStale, v)
	}
}

// SetTokenSent sets the win-token bit.
func (tx *Tx) SetTokenSent(v bool) {
	if tx.it != nil {
		tx.it.setBit(stToken, v)
	}
}

// SetCAS overwrites the held item's CAS (meta E, and "md I" bumping the CAS
// uses NextCAS).
func (tx *Tx) SetCAS(cas uint64) {
	if tx.it != nil && !tx.s.cfg.DisableCAS {
		tx.it.cas = cas
	}
}

// NextCAS returns a fresh CAS unique from the store's counter (0 when CAS is
// disabled).
func (tx *Tx) NextCAS() uint64 {
	return tx.s.nextCAS()
}

// Store links a new item for the transaction's key, replacing the held item
// if any. The value is the concatenation of a and b (b may be nil; append and
// prepend pass the old and new data in the right order, incr passes the new
// digits). cas 0 means "take a fresh CAS from the counter". After a
// successful Store the Tx holds the new item. a and b may alias the held
// item's Value (they are copied before it is freed); they may be reused
// after the call. Keys longer than 255 bytes give ErrTooLarge (the server
// checks memcached's 250 first). On ErrTooLarge and ErrNoMemory
// nothing changes (the caller deletes the old item itself where memcached
// does).
func (tx *Tx) Store(flags uint32, exptime uint32, cas uint64, a, b []byte) error {
	return tx.store(flags, exptime, cas, a, b)
}

// Overwrite replaces the held item's value in place with v, which must not
// be longer than the current value, and gives it a fresh CAS (memcached's
// in-place incr/decr). A shorter v is padded with spaces up to the old
// length, so the value length never changes (as memcached's incr does).
// It returns false when it cannot (then use Store).
func (tx *Tx) Overwrite(v []byte) bool {
	return tx.overwrite(v)
}

// Delete unlinks the held item. Afterwards Found is false.
func (tx *Tx) Delete() {
	tx.delete()
}

// Store is the item store.
type Store struct {
	storeState // implementation-defined fields
}

// New returns a store for cfg (after applying defaults and validating).
func New(cfg Config) (*Store, error) {
	return newStore(cfg)
}

// Close stops the store's background goroutines (the LRU crawler) and waits
// for them to exit.
func (s *Store) Close() {
	s.close()
}

// RelTime converts a protocol exptime (memcached's rules: 0 never; up to 30
// days relative; larger is absolute unix time; negative is already expired)
// to store time. 0 means never.
func (s *Store) RelTime(exptime int64) uint32 {
	return s.relTime(exptime)
}

// Now returns the current store time (seconds since the store started, as
// memcached's current_time) and the matching unix time.
func (s *Store) Now() (rel uint32, unix int64) {
	rel = s.now()
	return rel, s.base + int64(rel)
}

// Flush makes every item stored before the given moment invisible
// (flush_all). exptime uses RelTime's rules; 0 means now.
func (s *Store) Flush(exptime int64) {
	s.flush(exptime)
}

// SetMemLimit changes the memory limit (cache_memlimit). Lowering it below
// what is in use evicts lazily as new items arrive.
func (s *Store) SetMemLimit(bytes int64) error {
	return s.setMemLimit(bytes)
}

// Stats are the store-wide counters, named after memcached's "stats" keys.
type Stats struct {
	CurrItems, TotalItems, Bytes                                uint64
	Evictions, Reclaimed, ExpiredUnfetched, EvictedUnfetched    uint64
	EvictedActive, CrawlerReclaimed, CrawlerItemsChecked        uint64
	MovesToCold, MovesToWarm, MovesWithinLRU, DirectReclaims    uint64
	SlabsMoved, SlabReassignRescues, SlabReassignEvictionsNoMem uint64
	OutOfMemory, LRUTailRefLocked                               uint64
	LimitMaxbytes, TotalMalloced, SlabGlobalPagePool            uint64
	HashPowerLevel, HashBytes                                   uint64
	MallocFails                                                 uint64
}

// ClassStats are one slab class's counters, for "stats items" and
// "stats slabs".
type ClassStats struct {
	ID                                                       int
	ChunkSize, ChunksPerPage, TotalPages, TotalChunks        uint64
	UsedChunks, FreeChunks, FreeChunksEnd, MemRequested      uint64
	Number, NumberHot, NumberWarm, NumberCold                uint64
	AgeHot, AgeWarm, Age                                     uint64
	Evicted, EvictedNonzero, EvictedTime, OutOfMemory        uint64
	Reclaimed, ExpiredUnfetched, EvictedUnfetched            uint64
	EvictedActive, CrawlerReclaimed, CrawlerItemsChecked     uint64
	MovesToCold, MovesToWarm, MovesWithinLRU, DirectReclaims uint64
	HitsToHot, HitsToWarm, HitsToCold                        uint64
}

// ReadStats fills st with the current counters.
func (s *Store) ReadStats(st *Stats) {
	s.readStats(st)
}

// ReadClassStats calls fn for each slab class that has ever held a page, in
// class id order.
func (s *Store) ReadClassStats(fn func(*ClassStats)) {
	s.readClassStats(fn)
}

// ResetStats zeroes the resettable counters (stats reset).
func (s *Store) ResetStats() {
	s.resetStats()
}

// DumpItem describes one item for cachedump, metadump and me.
type DumpItem struct {
	Key        []byte // aliases slab memory; valid only during the callback
	Exptime    int64  // unix time of expiry, or -1 for never (metadump exp=); cachedump prints it as memcached does
	LastAccess int64  // unix time of last access (metadump la=)
	CAS        uint64
	Fetched    bool
	ClassID    int
	Size       int // total item size
	Nbytes     int // value length (cachedump's "[<bytes> b; ...")
}

// CacheDump calls fn for up to limit items of class id (0 = no limit),
// most recently used first (stats cachedump): HOT, then WARM, then COLD.
// fn runs under a shard lock and must not call into the store.
func (s *Store) CacheDump(classID, limit int, fn func(*DumpItem)) {
	s.cacheDump(classID, limit, fn)
}

// MetaDump calls fn for every live item (lru_crawler metadump all), in no
// particular order. fn runs under a shard lock and must not call into the
// store.
func (s *Store) MetaDump(fn func(*DumpItem)) {
	s.metaDump(fn)
}

// Crawl reclaims the expired items of all classes now (lru_crawler crawl).
func (s *Store) Crawl() {
	s.crawl()
}

// SetCrawler enables or disables the background crawler.
func (s *Store) SetCrawler(on bool) {
	s.crawlerOn.Store(on)
}

// ClassFor returns the slab class id an item of this key and value length
// would use, or 0 when it is too large. The class is chosen by the item's
// own size (header, key and value): flags do not change it, as they do
// memcached's.
func (s *Store) ClassFor(nkey int, flags uint32, nbytes int) int {
	return s.classForSize(nkey, nbytes)
}
