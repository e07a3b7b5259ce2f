package store

import (
	"errors"
	"hash/maphash"
	"math"
	"math/bits"
	"runtime"
	"time"

	"github.com/vbcache/vbcache/internal/clock"
)

const (
	// relStart is the store time at New: store time 1 is then always in
	// the past, which is how "already expired" exptimes are represented.
	relStart = 2
	// maxDelta is memcached's REALTIME_MAXDELTA: exptimes above it are
	// absolute unix times.
	maxDelta = 60 * 60 * 24 * 30
	// clockTick is how often the background goroutine refreshes the cached
	// store time when the clock is clock.Real.
	clockTick = 100 * time.Millisecond
	// defaultCrawlEvery is the background crawler's period.
	defaultCrawlEvery = 10 * time.Second
	maxClasses        = 255
)

// SetSizingDefaults replaces every zero sizing field of cfg (MaxBytes,
// ItemSizeMax, ChunkSizeMin, GrowthFactor, SlabPageSize, SlabChunkMax,
// HotLRUPct, WarmLRUPct) with memcached 1.6's default, the value New uses
// for it. It leaves Shards, HashPower and Clock alone: they are not
// memcached settings, and New picks them itself. A caller that checks or
// reports the sizing before New (the server's Config.Validate, "stats
// settings") calls it so that there is one source of the defaults.
func (cfg *Config) SetSizingDefaults() {
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = 64 << 20
	}
	if cfg.ItemSizeMax == 0 {
		cfg.ItemSizeMax = 1 << 20
	}
	if cfg.ChunkSizeMin == 0 {
		cfg.ChunkSizeMin = 48
	}
	if cfg.GrowthFactor == 0 {
		cfg.GrowthFactor = 1.25
	}
	if cfg.SlabPageSize == 0 {
		cfg.SlabPageSize = 1 << 20
	}
	if cfg.SlabChunkMax == 0 {
		cfg.SlabChunkMax = cfg.SlabPageSize / 2
	}
	if cfg.HotLRUPct == 0 {
		cfg.HotLRUPct = 20
	}
	if cfg.WarmLRUPct == 0 {
		cfg.WarmLRUPct = 40
	}
}

// setDefaults fills every zero field of cfg with the value New uses.
func (cfg *Config) setDefaults() {
	cfg.SetSizingDefaults()
	if cfg.Shards == 0 {
		n := 4 * runtime.GOMAXPROCS(0)
		cfg.Shards = max(16, 1<<bits.Len(uint(n-1)))
	}
	if cfg.HashPower == 0 {
		cfg.HashPower = 16
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
}

func (cfg *Config) validate() error {
	switch {
	case cfg.MaxBytes < 0:
		return errors.New("store: MaxBytes must be positive")
	case cfg.ItemSizeMax < 1024 || cfg.ItemSizeMax > 1<<30:
		return errors.New("store: ItemSizeMax must be between 1 KiB and 1 GiB")
	case cfg.ChunkSizeMin < 1:
		return errors.New("store: ChunkSizeMin must be positive")
	case cfg.GrowthFactor <= 1:
		return errors.New("store: GrowthFactor must be greater than 1")
	case cfg.SlabPageSize < 1024 || cfg.SlabPageSize > 1<<30:
		return errors.New("store: SlabPageSize must be between 1 KiB and 1 GiB")
	case cfg.SlabChunkMax < hdrSize+cfg.ChunkSizeMin || cfg.SlabChunkMax > cfg.SlabPageSize:
		return errors.New("store: SlabChunkMax must be between the smallest chunk and SlabPageSize")
	case cfg.HotLRUPct < 0 || cfg.WarmLRUPct < 0 || cfg.HotLRUPct+cfg.WarmLRUPct >= 100:
		return errors.New("store: HotLRUPct+WarmLRUPct must be below 100")
	case cfg.Shards < 1 || cfg.Shards&(cfg.Shards-1) != 0 || cfg.Shards > 1<<16:
		return errors.New("store: Shards must be a power of two up to 65536")
	case cfg.HashPower < 1 || cfg.HashPower > 32:
		return errors.New("store: HashPower must be between 1 and 32")
	}
	return nil
}

func roundUp8(n int) int { return (n + 7) &^ 7 }

// newStore implements New.
func newStore(cfg Config) (*Store, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Store{}
	s.cfg = cfg
	s.seed = maphash.MakeSeed()
	if cfg.VBuckets > 0 {
		s.vb = &vbLists{head: make([]uint32, cfg.VBuckets), count: make([]uint64, cfg.VBuckets), bytes: make([]uint64, cfg.VBuckets)}
	}

	// Slab classes: memcached's slabs_init.
	s.classes = make([]slabClass, 1, 64)
	s.sizes = []uint32{0}
	chunkMax := min(cfg.SlabChunkMax, roundUp8(cfg.ItemSizeMax))
	add := func(size int, pageSize int) {
		id := len(s.classes)
		s.classes = append(s.classes, slabClass{})
		c := &s.classes[id]
		c.id = uint8(id)
		c.size = uint32(size)
		c.pageSize = int64(pageSize)
		c.perPage = uint32(pageSize / size)
		s.sizes = append(s.sizes, uint32(size))
	}
	// memcached's slabs_init: the first chunk is its item header plus -n,
	// each next one the previous times -f (truncated, then aligned to 8),
	// until the size reaches slab_chunk_max/f.
	for size := roundUp8(mcItemHeader + cfg.ChunkSizeMin); len(s.classes) < maxClasses-8; {
		if float64(size) >= float64(chunkMax)/cfg.GrowthFactor {
			break
		}
		add(size, cfg.SlabPageSize)
		size = max(size+8, roundUp8(int(float64(size)*cfg.GrowthFactor)))
	}
	add(chunkMax, cfg.SlabPageSize)
	minPage := cfg.SlabPageSize
	// Large classes: one chunk per page, the page sized to the chunk.
	for size := chunkMax; size < cfg.ItemSizeMax; {
		size = min(roundUp8(int(float64(size)*cfg.GrowthFactor)), roundUp8(cfg.ItemSizeMax))
		if len(s.classes) >= maxClasses {
			size = roundUp8(cfg.ItemSizeMax)
		}
		add(size, size)
		minPage = min(minPage, size)
	}
	if len(s.classes) > maxClasses+1 {
		return nil, errors.New("store: too many slab classes; raise GrowthFactor")
	}

	perPage := uint32(cfg.SlabPageSize / int(s.sizes[1]))
	s.chunkBits = uint32(max(1, bits.Len32(perPage-1)))
	s.chunkMask = 1<<s.chunkBits - 1
	s.maxPages = 1<<(32-s.chunkBits) - 1
	s.dir = make([]*pageGroup, int(s.maxPages)>>groupBits+1)
	s.nextPage = 1
	limit, err := s.clampLimit(cfg.MaxBytes, minPage)
	if err != nil {
		return nil, err
	}
	s.limit = limit

	s.shards = make([]shard, cfg.Shards)
	s.shardMask = uint64(cfg.Shards - 1)
	perShard := max(16, (1<<cfg.HashPower)/cfg.Shards)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.table, sh.tmap = allocTable(perShard)
		sh.mask = uint32(perShard - 1)
		sh.hits = make([]uint64, len(s.classes)*nSegs)
	}
	unmapTablesOnCleanup(s, s.shards)
	s.arena = newPageArena(s, cfg.SlabPageSize, cfg.NoHugePages)

	// Time: store time relStart is now.
	s.base = cfg.Clock.Now().Unix() - relStart
	_, s.cached = cfg.Clock.(clock.Real)
	s.relNow.Store(relStart)

	s.hotPct.Store(int32(cfg.HotLRUPct))
	s.warmPct.Store(int32(cfg.WarmLRUPct))
	s.flat.Store(cfg.FlatLRU)
	s.crawlerOn.Store(true)
	s.crawlTicks = int(defaultCrawlEvery / clockTick)
	s.done = make(chan struct{})
	s.wg.Add(1)
	go s.background()
	return s, nil
}

// clampLimit checks a page budget and caps it at what the handle space
// can address (page numbers have 32-chunkBits bits: 256 GiB of 1 MiB pages
// with the default classes). memcached accepts any -m or cache_memlimit and
// only allocates on demand; a cap the node can never reach changes nothing.
func (s *Store) clampLimit(limit int64, minPage int) (int64, error) {
	if limit <= 0 {
		return 0, errors.New("store: memory limit must be positive")
	}
	if max := (int64(s.maxPages) - int64(len(s.classes)) - 2) * int64(minPage); limit > max {
		limit = max
	}
	return limit, nil
}

func (s *Store) minPageSize() int {
	m := s.cfg.SlabPageSize
	for i := 1; i < len(s.classes); i++ {
		m = min(m, int(s.classes[i].pageSize))
	}
	return m
}

func (s *Store) setMemLimit(bytes int64) error {
	bytes, err := s.clampLimit(bytes, s.minPageSize())
	if err != nil {
		return err
	}
	s.pageMu.Lock()
	s.limit = bytes
	s.pageMu.Unlock()
	return nil
}

// now returns the current store time.
func (s *Store) now() uint32 {
	if s.cached {
		return s.relNow.Load()
	}
	return s.relOf(s.cfg.Clock.Now().Unix())
}

func (s *Store) relOf(unix int64) uint32 {
	d := unix - s.base
	if d < relStart {
		return relStart // the clock went backwards; store time does not
	}
	if d > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(d)
}

func (s *Store) relTime(exptime int64) uint32 {
	switch {
	case exptime == 0:
		return 0
	case exptime < 0:
		return 1
	case exptime > maxDelta:
		if exptime <= s.base {
			return 1
		}
		return uint32(min(exptime-s.base, math.MaxUint32))
	}
	return uint32(min(int64(s.now())+exptime, math.MaxUint32))
}

func (s *Store) flush(exptime int64) {
	now := s.now()
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	// A delayed flush whose moment has passed unseen still takes effect
	// before another replaces it.
	if t := s.flushAt.Load(); t != 0 && t <= now {
		s.latchFlushLocked()
	}
	if exptime != 0 {
		if t := s.relTime(exptime); t > now {
			s.flushAt.Store(t)
			return
		}
	}
	s.flushAt.Store(0)
	s.flushSeq.Store(max(s.flushSeq.Load(), s.casSeq.Load()))
}

// nowLatched returns the current store time, having latched a delayed
// flush_all due by then. Whoever judges items with deadLocked, and every
// Tx (whose Store takes a sequence number), reads the time through it.
func (s *Store) nowLatched() uint32 {
	now := s.now()
	s.latchDue(now)
	return now
}

// latchDue latches a delayed flush_all whose moment T has come by store
// time now: one atomic load when none is due. Because a Tx latches at its
// Begin, before its Store takes a sequence number, no item stored at or
// after T gets a sequence at or below the latched one, and every item
// stored before T has one.
func (s *Store) latchDue(now uint32) {
	if s.flushAt.Load()-1 < now { // flushAt != 0 && flushAt <= now (0-1 wraps to the largest)
		s.latchDueSlow(now)
	}
}

// latchDueSlow is latchDue's rare half, kept apart so that latchDue inlines.
func (s *Store) latchDueSlow(now uint32) {
	s.flushMu.Lock()
	if t := s.flushAt.Load(); t != 0 && t <= now {
		s.latchFlushLocked()
	}
	s.flushMu.Unlock()
}

// latchFlushLocked turns the pending delayed flush into a flush of every
// sequence handed out so far. flushSeq is raised before flushAt is
// cleared, so a reader that sees flushAt 0 sees the new flushSeq, and one
// that still sees flushAt waits on flushMu. Caller holds s.flushMu.
func (s *Store) latchFlushLocked() {
	s.flushSeq.Store(max(s.flushSeq.Load(), s.casSeq.Load()))
	s.flushAt.Store(0)
}

// background refreshes the cached clock and runs the crawler. It exits when
// s.done is closed.
func (s *Store) background() {
	defer s.wg.Done()
	t := time.NewTicker(clockTick)
	defer t.Stop()
	ticks := 0
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		if s.cached {
			s.relNow.Store(s.relOf(s.cfg.Clock.Now().Unix()))
		}
		ticks++
		if ticks >= s.crawlTicks {
			ticks = 0
			if s.crawlerOn.Load() {
				s.crawl()
			}
		}
	}
}

func (s *Store) close() {
	s.closeOnce.Do(func() { close(s.done) })
	s.wg.Wait()
}
