package store

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestCrawl(t *testing.T) {
	s, fk := newTest(t, Config{})
	s.SetCrawler(false)
	for i := 0; i < 1000; i++ {
		exp := uint32(0)
		if i%2 == 0 {
			exp = s.RelTime(10)
		}
		k := strconv.Itoa(i)
		mustSet(t, s, k, k, exp)
	}
	s.Crawl()
	var st Stats
	s.ReadStats(&st)
	if st.CrawlerReclaimed != 0 || st.CrawlerItemsChecked != 1000 {
		t.Fatalf("before expiry: %+v", st)
	}
	fk.Advance(10 * time.Second)
	s.Crawl()
	s.ReadStats(&st)
	if st.CrawlerReclaimed != 500 || st.CurrItems != 500 || st.ExpiredUnfetched != 500 {
		t.Fatalf("after expiry: %+v", st)
	}
	s.ResetStats()
	s.ReadStats(&st)
	if st.CrawlerReclaimed != 0 || st.CurrItems != 500 {
		t.Fatalf("after reset: %+v", st)
	}
	checkAll(t, s, true)
}

// TestStress runs sets, gets, deletes, appends and incr-style overwrites
// from several goroutines on a small store, checking every value it reads.
func TestStress(t *testing.T) {
	s, fk := newTest(t, Config{MaxBytes: 1 << 20, SlabPageSize: 64 << 10, ItemSizeMax: 64 << 10, Shards: 16, HashPower: 4})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			var tx Tx
			for i := 0; i < 20000; i++ {
				key := "key" + strconv.Itoa(rng.IntN(3000))
				switch op := rng.IntN(10); {
				case op < 4:
					if s.Begin(&tx, []byte(key)) == Hit {
						tx.Bump()
						if !checkValue(key, tx.Value()) {
							t.Errorf("wrong data for %s", key)
						}
					}
					tx.End()
				case op < 8:
					s.Begin(&tx, []byte(key))
					err := tx.Store(0, s.RelTime(int64(rng.IntN(3))), 0, valueFor(key, 1+rng.IntN(1<<rng.IntN(14))), nil)
					if err != nil && !errors.Is(err, ErrNoMemory) {
						t.Errorf("store: %v", err)
					}
					tx.End()
				case op < 9:
					s.Begin(&tx, []byte(key))
					tx.Delete()
					tx.End()
				default:
					if s.Begin(&tx, []byte(key)) == Hit {
						v := tx.Value()
						tx.Overwrite(v[:len(v)/2*0+len(v)]) // same bytes, fresh CAS
					}
					tx.End()
				}
				if g == 0 && i%5000 == 0 {
					fk.Advance(time.Second)
					s.Crawl()
				}
			}
		}(g)
	}
	wg.Wait()
	checkAll(t, s, true)
	var st Stats
	s.ReadStats(&st)
	if st.TotalMalloced > 1<<20 || st.Evictions == 0 {
		t.Fatalf("malloced %d", st.TotalMalloced)
	}
}

// TestNoSlabReassignAndMemLimit: without slab reassign a class's first page
// is granted over the limit (memcached's do_slabs_newslab), since no page
// can come from another class; after that the class evicts its own items,
// and a raised limit gives it more pages.
func TestNoSlabReassignAndMemLimit(t *testing.T) {
	s, _ := newTest(t, Config{MaxBytes: 1 << 20, NoSlabReassign: true})
	mustSet(t, s, "small", "v", 0)
	big := string(make([]byte, 5000))
	mustSet(t, s, "big", big, 0) // its class's first page, over the limit
	var st Stats
	s.ReadStats(&st)
	if st.TotalMalloced != 2<<20 {
		t.Fatalf("malloced %d after the second class's first set", st.TotalMalloced)
	}
	for i := 0; i < 1000; i++ { // five pages' worth: the class evicts its own
		mustSet(t, s, "big"+strconv.Itoa(i), big, 0)
	}
	wantGet(t, s, "small", "v", Hit)
	s.ReadStats(&st)
	if st.TotalMalloced != 2<<20 || st.Evictions == 0 || st.SlabsMoved != 0 || st.OutOfMemory != 0 {
		t.Fatalf("stats %+v", st)
	}
	if err := s.SetMemLimit(3 << 20); err != nil {
		t.Fatal(err)
	}
	mustSet(t, s, "big", big, 0)
	for i := 0; i < 1000 && st.TotalMalloced < 3<<20; i++ {
		mustSet(t, s, "more"+strconv.Itoa(i), big, 0)
		s.ReadStats(&st)
	}
	if err := s.SetMemLimit(0); err == nil {
		t.Fatal("zero limit accepted")
	}
	s.ReadStats(&st)
	if st.LimitMaxbytes != 3<<20 || st.TotalMalloced != 3<<20 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSegmentsAndDumps(t *testing.T) {
	s, _ := newTest(t, Config{})
	for i := 0; i < 100; i++ {
		mustSet(t, s, "k"+strconv.Itoa(i), "v", 0)
	}
	for i := 0; i < 100; i += 2 {
		get(s, "k"+strconv.Itoa(i))
	}
	var cs []ClassStats
	s.ReadClassStats(func(c *ClassStats) { cs = append(cs, *c) })
	if len(cs) != 1 {
		t.Fatalf("%d classes", len(cs))
	}
	c := cs[0]
	if c.Number != 100 || c.NumberHot+c.NumberWarm+c.NumberCold != 100 || c.NumberHot > 20 || c.MovesToCold == 0 {
		t.Fatalf("class stats %+v", c)
	}
	if c.HitsToHot+c.HitsToWarm+c.HitsToCold != 50 || c.UsedChunks != 100 || c.TotalPages != 1 {
		t.Fatalf("class stats %+v", c)
	}
	n := 0
	s.CacheDump(c.ID, 10, func(d *DumpItem) {
		n++
		if d.Nbytes != 1 || d.Exptime != -1 || d.Size != hdrSize+len(d.Key)+1 {
			t.Errorf("dump %+v", d)
		}
	})
	if n != 10 {
		t.Fatalf("cachedump gave %d", n)
	}
	n = 0
	s.MetaDump(func(d *DumpItem) { n++ })
	if n != 100 {
		t.Fatalf("metadump gave %d", n)
	}
	var tx Tx
	s.Begin(&tx, []byte("k0"))
	if !tx.Fetched() || tx.LastAccess() != 0 || tx.Stale() || tx.TokenSent() {
		t.Fatal("k0 bits")
	}
	tx.SetStale(true)
	tx.SetTokenSent(true)
	tx.End()
	s.Begin(&tx, []byte("k0"))
	if !tx.Stale() || !tx.TokenSent() {
		t.Fatal("bits not kept")
	}
	tx.End()
	if s.ClassFor(1, 0, 1) != 1 || s.ClassFor(250, 0, 1<<20) != 0 {
		t.Fatal("ClassFor")
	}
}

// TestModel compares random operations against a map (no eviction, no
// expiry races: a fake clock moves in whole seconds).
func TestModel(t *testing.T) {
	s, fk := newTest(t, Config{VerifyFrees: true, HashPower: 1, Shards: 1})
	type ent struct {
		val   string
		exp   uint32
		flags uint32
	}
	model := map[string]ent{}
	rng := rand.New(rand.NewPCG(3, 4))
	var tx Tx
	for i := 0; i < 20000; i++ {
		key := "m" + strconv.Itoa(rng.IntN(200))
		now, _ := s.Now()
		m, ok := model[key]
		if ok && m.exp != 0 && m.exp <= now {
			delete(model, key)
			ok = false
		}
		out := s.Begin(&tx, []byte(key))
		if (out == Hit) != ok {
			t.Fatalf("op %d %s: outcome %v, model has %v", i, key, out, ok)
		}
		if ok && (string(tx.Value()) != m.val || tx.Flags() != m.flags) {
			t.Fatalf("op %d %s: %q/%d, model %q/%d", i, key, tx.Value(), tx.Flags(), m.val, m.flags)
		}
		switch rng.IntN(6) {
		case 0, 1:
			v := strconv.Itoa(rng.IntN(1 << rng.IntN(20)))
			e := uint32(0)
			if rng.IntN(3) == 0 {
				e = s.RelTime(int64(rng.IntN(5)))
			}
			f := rng.Uint32()
			if err := tx.Store(f, e, 0, []byte(v), nil); err != nil {
				t.Fatal(err)
			}
			model[key] = ent{v, e, f}
		case 2:
			tx.Delete()
			delete(model, key)
		case 3:
			if ok {
				add := strconv.Itoa(i)
				if err := tx.Store(m.flags, m.exp, 0, tx.Value(), []byte(add)); err != nil {
					t.Fatal(err)
				}
				m.val += add
				model[key] = m
			}
		case 4:
			if ok && len(m.val) > 1 {
				tx.Overwrite([]byte(m.val[:1]))
				m.val = m.val[:1] + strings.Repeat(" ", len(m.val)-1)
				model[key] = m
			}
		case 5:
			if rng.IntN(100) == 0 {
				fk.Advance(time.Second)
			}
		}
		tx.End()
	}
	checkAll(t, s, false)
}

func TestHotPathAllocs(t *testing.T) {
	s, _ := newTest(t, Config{Clock: nil})
	key, val := []byte("somekey"), []byte("somevalue")
	mustSet(t, s, string(key), string(val), 0)
	var tx Tx
	if n := testing.AllocsPerRun(1000, func() {
		s.Begin(&tx, key)
		tx.Bump()
		_ = tx.Value()
		tx.End()
	}); n != 0 {
		t.Fatalf("get allocates %v", n)
	}
	if n := testing.AllocsPerRun(1000, func() {
		s.Begin(&tx, key)
		tx.Store(0, 0, 0, val, nil)
		tx.End()
	}); n != 0 {
		t.Fatalf("set allocates %v", n)
	}
}

func benchStore(b *testing.B) *Store {
	s, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	var tx Tx
	for i := 0; i < 10000; i++ {
		s.Begin(&tx, []byte("key:"+strconv.Itoa(i)))
		tx.Store(0, 0, 0, []byte("value-value-value-value-value-value"), nil)
		tx.End()
	}
	return s
}

func BenchmarkGet(b *testing.B) {
	s := benchStore(b)
	key := []byte("key:1234")
	var tx Tx
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		if s.Begin(&tx, key) != Hit {
			b.Fatal("miss")
		}
		tx.Bump()
		buf = append(buf[:0], tx.Value()...)
		tx.End()
	}
}

func BenchmarkSet(b *testing.B) {
	s := benchStore(b)
	key := []byte("key:1234")
	val := []byte("value-value-value-value-value-value")
	var tx Tx
	b.ReportAllocs()
	b.SetBytes(int64(len(val)))
	for b.Loop() {
		s.Begin(&tx, key)
		if err := tx.Store(0, 0, 0, val, nil); err != nil {
			b.Fatal(err)
		}
		tx.End()
	}
}

func BenchmarkGetParallel(b *testing.B) {
	s := benchStore(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var tx Tx
		var buf []byte
		key := []byte("key:0000")
		i := rand.IntN(10000) // goroutines walk different keys
		for pb.Next() {
			i++
			key = strconv.AppendInt(key[:4], int64(i%10000), 10)
			if s.Begin(&tx, key) != Hit {
				panic("miss")
			}
			tx.Bump()
			buf = append(buf[:0], tx.Value()...)
			tx.End()
		}
	})
}

func BenchmarkSetParallel(b *testing.B) {
	s := benchStore(b)
	val := []byte("value-value-value-value-value-value")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var tx Tx
		key := []byte("key:0000")
		i := rand.IntN(10000) // goroutines walk different keys
		for pb.Next() {
			i++
			key = strconv.AppendInt(key[:4], int64(i%10000), 10)
			s.Begin(&tx, key)
			if err := tx.Store(0, 0, 0, val, nil); err != nil {
				panic(err)
			}
			tx.End()
		}
	})
}

// BenchmarkSetEvict sets unique keys into a small store, so that every set
// evicts.
func BenchmarkSetEvict(b *testing.B) {
	s, err := New(Config{MaxBytes: 4 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	val := make([]byte, 100)
	key := []byte("key:0000")
	var tx Tx
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		key = strconv.AppendInt(key[:4], int64(i), 10)
		s.Begin(&tx, key)
		if err := tx.Store(0, 0, 0, val, nil); err != nil {
			b.Fatal(err)
		}
		tx.End()
	}
}

func TestCloseStopsGoroutine(t *testing.T) {
	before := runtime.NumGoroutine()
	s, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Close() // idempotent
	// The goroutine has returned (Close waited); let it finish exiting.
	for i := 0; i < 1000 && runtime.NumGoroutine() > before; i++ {
		runtime.Gosched()
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines after Close, %d before", n, before)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, cfg := range []Config{
		{GrowthFactor: 1},
		{Shards: 3},
		{HotLRUPct: 60, WarmLRUPct: 40},
		{ItemSizeMax: 10},
	} {
		if s, err := New(cfg); err == nil {
			s.Close()
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// A limit beyond what page handles can address is capped, not refused:
// memcached accepts any -m and cache_memlimit.
func TestHugeLimitIsCapped(t *testing.T) {
	s, err := New(Config{MaxBytes: 1 << 50})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var st Stats
	s.ReadStats(&st)
	if st.LimitMaxbytes == 0 || st.LimitMaxbytes >= 1<<50 {
		t.Errorf("limit = %d, want a cap below 1<<50", st.LimitMaxbytes)
	}
	if err := s.SetMemLimit(1 << 40); err != nil {
		t.Errorf("SetMemLimit(1 TiB): %v", err)
	}
}

func TestReassignSetLRUKeyBinary(t *testing.T) {
	s, _ := newTest(t, Config{MaxBytes: 4 << 20})
	small := s.ClassFor(2, 0, 10)
	for i := 0; i < 30000; i++ { // a few pages of class `small`
		k := strconv.Itoa(i)
		mustSet(t, s, k, k, 0)
	}
	big := s.ClassFor(2, 0, 5000)
	if err := s.Reassign(small, small); !errors.Is(err, ErrSameClass) {
		t.Fatal(err)
	}
	if err := s.Reassign(0, big); !errors.Is(err, ErrBadClass) {
		t.Fatal(err)
	}
	if err := s.Reassign(big, small); !errors.Is(err, ErrNoSpare) {
		t.Fatal(err)
	}
	if err := s.Reassign(small, big); err != nil {
		t.Fatal(err)
	}
	if err := s.Reassign(-1, big); err != nil {
		t.Fatal(err)
	}
	var st Stats
	s.ReadStats(&st)
	if st.SlabsMoved != 2 {
		t.Fatalf("slabs moved %d", st.SlabsMoved)
	}
	s.SetLRU(10, 10, true)
	mustSet(t, s, "bin", "bin", 0)
	var tx Tx
	s.Begin(&tx, []byte("bin"))
	tx.SetKeyBinary(true)
	tx.End()
	s.Begin(&tx, []byte("bin"))
	if !tx.KeyBinary() {
		t.Fatal("binary bit lost")
	}
	tx.End()
	s.SetLRU(20, 40, false)
	checkAll(t, s, true)
}

// TestDropVBucket: dropping a vbucket removes exactly its items, keeps the
// lists consistent through deletes, replaces and evictions, and races
// cleanly with writers to other vbuckets.
func TestDropVBucket(t *testing.T) {
	s, _ := newTest(t, Config{MaxBytes: 8 << 20, VBuckets: 16})
	set := func(key string, vb uint16, val string) {
		var tx Tx
		tx.SetVBucket(vb)
		s.Begin(&tx, []byte(key))
		if err := tx.Store(0, 0, 0, []byte(val), nil); err != nil {
			t.Fatal(err)
		}
		tx.End()
	}
	for i := 0; i < 2000; i++ {
		set("k"+strconv.Itoa(i), uint16(i%16), strings.Repeat("v", i%300))
	}
	// Replace some items of vbucket 3 and delete others.
	for i := 3; i < 2000; i += 16 * 3 {
		set("k"+strconv.Itoa(i), 3, "new")
	}
	var tx Tx
	s.Begin(&tx, []byte("k19"))
	tx.Delete()
	tx.End()
	if n := s.VBucketItems(3); n != 2000/16-1 {
		t.Fatalf("vbucket 3 holds %d items, want %d", n, 2000/16-1)
	}
	done := make(chan struct{})
	go func() { // a writer to other vbuckets during the drop
		defer close(done)
		for i := 0; i < 2000; i++ {
			set("w"+strconv.Itoa(i), uint16(4+i%8), "x")
		}
	}()
	if n := s.DropVBucket(3); n != 2000/16-1 {
		t.Fatalf("dropped %d, want %d", n, 2000/16-1)
	}
	<-done
	if n := s.VBucketItems(3); n != 0 {
		t.Fatalf("vbucket 3 still holds %d", n)
	}
	for i := 0; i < 2000; i++ {
		v, out := get(s, "k"+strconv.Itoa(i))
		ok := out == Hit
		if (i%16 == 3) == ok {
			t.Fatalf("k%d (vbucket %d): found %v", i, i%16, ok)
		}
		if ok && i%16 != 3 && v != strings.Repeat("v", i%300) {
			t.Fatalf("k%d: wrong value", i)
		}
	}
	// Fill far past the limit: evictions must unlink from the lists too.
	for i := 0; i < 20000; i++ {
		set("e"+strconv.Itoa(i), uint16(i%16), strings.Repeat("e", 1000))
	}
	var total uint64
	for vb := 0; vb < 16; vb++ {
		total += s.VBucketItems(vb)
	}
	var st Stats
	s.ReadStats(&st)
	if total != st.CurrItems {
		t.Fatalf("vbucket lists hold %d items, the store %d", total, st.CurrItems)
	}
}

// BenchmarkDropVBucket drops one vbucket of a store holding a million
// items over 1024 vbuckets: the cost follows the vbucket's ~1000 items,
// not the million (compare ns/op with BenchmarkSet × 1000).
func BenchmarkDropVBucket(b *testing.B) {
	const vbs, total = 1024, 1 << 20
	s, err := New(Config{MaxBytes: 1 << 30, VBuckets: vbs})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	fill := func(vb int) {
		var tx Tx
		tx.SetVBucket(uint16(vb))
		for i := vb; i < total; i += vbs {
			k := []byte("key:" + strconv.Itoa(i))
			s.Begin(&tx, k)
			if err := tx.Store(0, 0, 0, k, nil); err != nil {
				b.Fatal(err)
			}
			tx.End()
		}
	}
	for vb := 0; vb < vbs; vb++ {
		fill(vb)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		vb := i % vbs
		if n := s.DropVBucket(vb); n != total/vbs {
			b.Fatalf("dropped %d", n)
		}
		b.StopTimer()
		fill(vb)
		b.StartTimer()
	}
}

// BenchmarkGetSpread reads a million 100-byte items in a scattered order,
// so that nearly every lookup misses the CPU caches and the TLB: the cost
// of the index and of the page layout, not of the code around them. The
// sub-benchmarks compare slab pages on huge pages (the default) with
// ordinary ones (-o no_hugepages).
func BenchmarkGetSpread(b *testing.B) {
	for _, noHuge := range []bool{false, true} {
		name := "hugepages"
		if noHuge {
			name = "no_hugepages"
		}
		b.Run(name, func(b *testing.B) { benchGetSpread(b, noHuge) })
	}
}

func benchGetSpread(b *testing.B, noHuge bool) {
	const n = 1 << 20
	s, err := New(Config{MaxBytes: 512 << 20, NoHugePages: noHuge})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	keys := make([][]byte, n)
	val := make([]byte, 100)
	var tx Tx
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("key:%07d", i))
		s.Begin(&tx, keys[i])
		if err := tx.Store(0, 0, 0, val, nil); err != nil {
			b.Fatal(err)
		}
		tx.End()
	}
	var buf []byte
	i := uint32(0)
	b.ReportAllocs()
	for b.Loop() {
		i = i*1664525 + 1013904223 // an LCG with full period; its top 20 bits pick the key
		if s.Begin(&tx, keys[i>>12]) != Hit {
			b.Fatal("miss")
		}
		tx.Bump()
		buf = append(buf[:0], tx.Value()...)
		tx.End()
	}
}
