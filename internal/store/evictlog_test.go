package store

import (
	"strconv"
	"testing"
	"time"
)

// The eviction log tells a Tx's callback of each item the LRU evicts for
// it while LogEvictions is on, with memcached's eviction-line fields, and
// only of items really gone; while it is off the callback is never
// called and an evicting Store allocates nothing.
func TestEvictionLog(t *testing.T) {
	s, fk := newTest(t, Config{MaxBytes: 2 << 20})
	var got []Eviction
	var tx Tx
	tx.OnEvict(func(ev *Eviction) {
		e := *ev
		e.Key = append([]byte(nil), ev.Key...) // ev.Key is slab memory
		got = append(got, e)
	})
	evictions := func() uint64 {
		var st Stats
		s.ReadStats(&st)
		return st.Evictions
	}
	val := make([]byte, 1000)
	var kbuf []byte
	store := func(key string, exptime uint32) {
		t.Helper()
		kbuf = append(kbuf[:0], key...)
		s.Begin(&tx, kbuf)
		if err := tx.Store(0, exptime, 0, val, nil); err != nil {
			t.Fatal(err)
		}
		tx.End()
	}
	store("first", s.RelTime(1000))
	fk.Advance(3 * time.Second)
	i := 0
	for ; evictions() == 0; i++ { // fill the store, the log off
		store("k"+strconv.Itoa(i), 0)
	}
	if len(got) != 0 {
		t.Fatalf("%d evictions told with the log off", len(got))
	}
	num := func(i int) []byte { return strconv.AppendInt(append(kbuf[:0], 'k'), int64(i), 10) }
	if n := testing.AllocsPerRun(100, func() {
		i++
		s.Begin(&tx, num(i))
		if err := tx.Store(0, 0, 0, val, nil); err != nil {
			t.Fatal(err)
		}
		tx.End()
	}); n != 0 {
		t.Errorf("an evicting Store with the log off allocates %.1f times", n)
	}
	s.LogEvictions(true)
	before := evictions()
	for range 50 {
		i++
		store("k"+strconv.Itoa(i), 0)
	}
	s.LogEvictions(false)
	if n := evictions() - before; uint64(len(got)) != n || n == 0 {
		t.Fatalf("%d evictions told, %d made", len(got), n)
	}
	for _, e := range got {
		if s.Begin(&tx, e.Key) != Miss {
			t.Errorf("%s: told evicted, still there", e.Key)
		}
		tx.End()
		if e.Fetched || e.Size != 1000 || e.ClassID == 0 || e.LastAccess > 60 || e.TTL != -1 && (e.TTL < 1 || e.TTL > 1000) {
			t.Errorf("%+v", e)
		}
	}
}
