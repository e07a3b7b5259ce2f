package streams

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/move"
	"github.com/vbcache/vbcache/internal/movecheck"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/memcache"
	"github.com/vbcache/vbcache/test/nodeproc"
)

// sample is one get: when it started and how long it took.
type sample struct {
	start time.Time
	d     time.Duration
}

func percentiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no samples"
	}
	slices.Sort(ds)
	p := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	return fmt.Sprintf("n=%d p50=%v p99=%v max=%v", len(ds), p(0.50).Round(time.Microsecond),
		p(0.99).Round(time.Microsecond), ds[len(ds)-1].Round(time.Microsecond))
}

// TestMoveThroughput (-long): a vbucket holding 20,000 items of 100 bytes
// moves back and forth 10 times between two nodes while two clients read
// its keys through the cluster client. It reports the items/s and MB/s
// of each move's TAKEOVER and the get latency before the moves and during
// them, and checks that every item arrives.
func TestMoveThroughput(t *testing.T) {
	if !long() {
		t.Skip("-long (or VBCACHE_LONG=1) runs the throughput test")
	}
	nodes := addrs(startNodes(t, 2))
	ctx := context.Background()
	if ok, err := movecheck.Init(ctx, nodes, numVBuckets, nodeproc.ClusterCredentials()); err != nil || !ok {
		t.Fatalf("Init: %v %v", ok, err)
	}
	const vb, items, size = 13, 20000, 100
	owner := nodes[vb%2] // vbmap.Spread
	c := dialCtl(t, owner)
	keys := keysFor("tp", vb, items)
	val := strings.Repeat("v", size)
	var bytes int
	for _, k := range keys {
		c.set(vb, k, val)
		bytes += len(k) + size
	}

	var mu sync.Mutex // protects samples, misses
	var samples []sample
	var misses []string
	var gets atomic.Int64 // gets answered so far, for the waits below
	loadCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for r := range 2 {
		cl, err := memcache.NewCluster(ctx, nodes, &memcache.ClusterOptions{MaxTries: 40, MaxBackoff: 20 * time.Millisecond, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(r), 1))
			var mine []sample
			var bad []string
			for loadCtx.Err() == nil {
				k := keys[rnd.IntN(len(keys))]
				t0 := time.Now()
				_, err := cl.GetContext(loadCtx, k)
				if loadCtx.Err() != nil {
					break
				}
				if err != nil {
					bad = append(bad, fmt.Sprintf("%s: %v", k, err))
					continue
				}
				mine = append(mine, sample{t0, time.Since(t0)})
				gets.Add(1)
			}
			mu.Lock()
			samples = append(samples, mine...)
			misses = append(misses, bad...)
			mu.Unlock()
		}()
	}
	// The "before" window, and the load between moves: so many gets
	// (about what 1 s and 300 ms gave under -race), not so much time.
	const beforeGets, betweenGets = 5000, 1500
	eventually(t, 30*time.Second, func() (bool, string) {
		return gets.Load() >= beforeGets, fmt.Sprintf("%d of %d gets before the moves", gets.Load(), beforeGets)
	})
	type window struct{ from, to time.Time }
	var moves []window
	firstMove := time.Now()
	const rounds = 10
	for i := range rounds {
		from, to := owner, nodes[0]
		if owner == nodes[0] {
			to = nodes[1]
		}
		t0 := time.Now()
		res, err := move.Move(ctx, vb, from, to, move.Options{Nodes: nodes, Credentials: nodeproc.ClusterCredentials()})
		moves = append(moves, window{t0, time.Now()})
		if err != nil {
			t.Fatalf("move %d: %v\n%s", i, err, res.String())
		}
		owner = to
		tk := res.Takeover.Seconds()
		t.Logf("move %d %s→%s: takeover %v (%.0f items/s, %.1f MB/s), whole move %v [%s]", i, from, to,
			res.Takeover.Round(time.Microsecond), items/tk, float64(bytes)/tk/1e6, res.Duration.Round(time.Microsecond), res.Timings())
		n := gets.Load()
		eventually(t, 30*time.Second, func() (bool, string) {
			return gets.Load()-n >= betweenGets, fmt.Sprintf("%d of %d gets after move %d", gets.Load()-n, betweenGets, i)
		})
	}
	stop()
	wg.Wait()
	var before, during, between []time.Duration
	for _, s := range samples {
		in := false
		for _, w := range moves {
			if !s.start.Before(w.from) && s.start.Before(w.to) {
				in = true
				break
			}
		}
		switch {
		case in:
			during = append(during, s.d)
		case s.start.Before(firstMove):
			before = append(before, s.d)
		default:
			between = append(between, s.d)
		}
	}
	t.Logf("gets before the moves: %s", percentiles(before))
	t.Logf("gets during the moves: %s", percentiles(during))
	t.Logf("gets between the moves: %s", percentiles(between))
	if len(misses) > 0 {
		t.Errorf("%d gets failed, e.g. %s", len(misses), misses[0])
	}
	if len(before) == 0 || len(during) == 0 {
		t.Errorf("no samples: %d before, %d during", len(before), len(during))
	}
	// Every item is on the final owner.
	oc := dialCtl(t, owner)
	for _, k := range keys {
		v, err := oc.Do(protocol.OpGet, vb, nil, []byte(k), nil)
		if err != nil || string(v) != val {
			t.Fatalf("%s on the final owner: %q %v", k, v, errors.Unwrap(err))
		}
	}
}
