package cluster

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vbcache/vbcache/memcache"
)

// loadStats counts what a load saw in one phase.
type loadStats struct {
	hits, misses, errs, wrong atomic.Int64
	lastErr                   atomic.Pointer[string]
}

func (l *loadStats) reads() int64 {
	return l.hits.Load() + l.misses.Load() + l.errs.Load() + l.wrong.Load()
}

func (l *loadStats) String() string {
	return fmt.Sprintf("%d reads: %d hits, %d misses, %d errors, %d wrong", l.reads(), l.hits.Load(), l.misses.Load(), l.errs.Load(), l.wrong.Load())
}

func (l *loadStats) hitRate() float64 {
	n := l.reads()
	if n == 0 {
		return 0
	}
	return float64(l.hits.Load()) / float64(n)
}

// load reads existing keys (whose values never change) and writes new
// ones until stop closes. Reads count into *cur, which the test switches
// between phases.
type load struct {
	c      *memcache.Client
	keys   int
	cur    atomic.Pointer[loadStats]
	acked  sync.Map // new key -> value, for every acknowledged write
	nacked atomic.Int64
	werrs  atomic.Int64
	stop   chan struct{}
	wg     sync.WaitGroup
}

func oldKey(i int) string { return fmt.Sprintf("key-%d", i) }
func oldValue(i int) string {
	return fmt.Sprintf("value-%d-%s", i, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")
}

func (l *load) start(readers, writers int) {
	l.stop = make(chan struct{})
	for r := range readers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 7))
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				i := rng.IntN(l.keys)
				st := l.cur.Load()
				it, err := l.c.Get(oldKey(i))
				switch {
				case err == nil && string(it.Value) == oldValue(i):
					st.hits.Add(1)
				case err == nil:
					st.wrong.Add(1)
				case errors.Is(err, memcache.ErrCacheMiss):
					st.misses.Add(1)
				default:
					st.errs.Add(1)
					msg := err.Error()
					st.lastErr.Store(&msg)
				}
			}
		}()
	}
	for w := range writers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for n := 0; ; n++ {
				select {
				case <-l.stop:
					return
				default:
				}
				k, v := fmt.Sprintf("new-%d-%d", w, n), fmt.Sprintf("v%d", n)
				if err := l.c.Set(&memcache.Item{Key: k, Value: []byte(v)}); err != nil {
					l.werrs.Add(1)
					continue
				}
				l.acked.Store(k, v)
				l.nacked.Add(1)
			}
		}()
	}
}

func (l *load) halt() {
	close(l.stop)
	l.wg.Wait()
}

// checkAll reads every old key and every acknowledged new key.
func checkAll(t *testing.T, c *memcache.Client, keys int, l *load) {
	t.Helper()
	bad := 0
	for i := range keys {
		it, err := c.Get(oldKey(i))
		if err != nil || string(it.Value) != oldValue(i) {
			if bad < 5 {
				t.Errorf("%s after the rebalance: %v", oldKey(i), err)
			}
			bad++
		}
	}
	lost := 0
	l.acked.Range(func(k, v any) bool {
		it, err := c.Get(k.(string))
		if err != nil || string(it.Value) != v.(string) {
			if lost < 5 {
				t.Errorf("acknowledged write %s lost: %v", k, err)
			}
			lost++
		}
		return true
	})
	if bad > 0 || lost > 0 {
		t.Errorf("%d of %d old keys miss, %d of %d acknowledged writes lost", bad, keys, lost, l.nacked.Load())
	}
}

// TestGrowAndShrinkUnderLoad is the end-to-end test: three nodes
// with 100,000 keys (20,000 under -race or -short), a load through the
// vbucket client while a fourth node joins and a rebalance completes, then
// while it leaves again. Every old key must still hit afterwards, the hit
// rate of old keys during each rebalance must be at least 99.9%, and no
// read may return a wrong value.
func TestGrowAndShrinkUnderLoad(t *testing.T) {
	keys := 100_000
	if raceEnabled || testing.Short() {
		keys = 20_000
	}
	nodes := startNodes(t, 3)
	m := mgr{t: t, url: startManager(t, "--replicas", "1", "--failover-after", "0").URL()}
	m.waitLeader()
	for _, n := range nodes {
		m.addNode(n.Addr)
	}
	r := m.rebalance(60 * time.Second)
	t.Logf("populated: %d vbuckets placed in %v", r.Done, r.Finished.Sub(r.Started).Round(time.Millisecond))

	c := client(t, addrs(nodes))
	start := time.Now()
	var wg sync.WaitGroup
	var werr atomic.Int64
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < keys; i += 8 {
				if err := c.Set(&memcache.Item{Key: oldKey(i), Value: []byte(oldValue(i))}); err != nil {
					werr.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if werr.Load() > 0 {
		t.Fatalf("%d of %d initial writes failed", werr.Load(), keys)
	}
	t.Logf("wrote %d keys in %v", keys, time.Since(start).Round(time.Millisecond))

	l := &load{c: c, keys: keys}
	before := &loadStats{}
	l.cur.Store(before)
	l.start(4, 2)
	// So many reads in each phase before and after a rebalance, about
	// what 300 ms gave under -race.
	const phaseReads = 1000
	waitFor(t, 30*time.Second, fmt.Sprintf("%d reads before the rebalances", phaseReads), func() bool { return before.reads() >= phaseReads })

	for _, phase := range []struct {
		name string
		act  func() string
	}{
		{"grow 3→4", func() string {
			n4 := startNodes(t, 1)[0]
			nodes = append(nodes, n4)
			m.addNode(n4.Addr)
			return n4.Addr
		}},
		{"shrink 4→3", func() string {
			gone := nodes[3].Addr
			m.removeNode(gone)
			return gone
		}},
	} {
		during := &loadStats{}
		node := phase.act()
		l.cur.Store(during)
		r := m.rebalance(5 * time.Minute)
		after := &loadStats{}
		l.cur.Store(after)
		waitFor(t, 30*time.Second, fmt.Sprintf("%d reads after the rebalance", phaseReads), func() bool { return after.reads() >= phaseReads })
		t.Logf("%s (%s): %d vbuckets moved in %v, %.1f MB", phase.name, node, r.Done,
			r.Finished.Sub(r.Started).Round(time.Millisecond), float64(r.Bytes)/1e6)
		t.Logf("  during: %s; hit rate %.4f%%", during, 100*during.hitRate())
		t.Logf("  after:  %s", after)
		if e := during.lastErr.Load(); e != nil {
			t.Logf("  last error during: %s", *e)
		}
		if during.wrong.Load()+after.wrong.Load() > 0 {
			t.Errorf("%s: wrong answers", phase.name)
		}
		if during.hits.Load() == 0 || during.hitRate() < 0.999 {
			t.Errorf("%s: hit rate during the rebalance %.4f%%, want >= 99.9%%", phase.name, 100*during.hitRate())
		}
		if after.hitRate() != 1 {
			t.Errorf("%s: hit rate after the rebalance %.4f%%, want 100%%", phase.name, 100*after.hitRate())
		}
	}
	l.halt()
	t.Logf("before: %s; writes acknowledged %d, failed %d", before, l.nacked.Load(), l.werrs.Load())
	checkAll(t, c, keys, l)
	st := m.status()
	for _, n := range st.Nodes {
		t.Logf("  %s member=%v active=%d replica=%d", n.Addr, n.Member, n.Active, n.Replica)
	}
}

func startManager(t *testing.T, flags ...string) interface{ URL() string } {
	t.Helper()
	return nodeprocStartManager(t, append(etcdFlags(t), flags...)...)
}
