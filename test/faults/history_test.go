package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vbcache/vbcache/memcache"
	"github.com/vbcache/vbcache/test/history"
)

// TestPartitionHistoryLinearizable: with --sync-replication, a load of
// reads and writes through the vbucket client, from the client host,
// while the manager's packets to one node are dropped until the manager
// has failed it over, then healed; every operation is recorded and the
// history checked with porcupine against the cache model
// (test/history). There must be no violation. On one, porcupine's HTML
// is written to $VBCACHE_ARTIFACTS (else the temporary directory) and its
// path logged.
func TestPartitionHistoryLinearizable(t *testing.T) {
	historyUnderFault(t, "the manager's packets to it dropped", func(c *cluster) (inject, heal func()) {
		return func() { c.lab.Cut(c.mgr, c.nodes[0]) }, func() { c.lab.Heal(c.nodes[0]) }
	})
}

// TestPauseHistoryLinearizable is the same with the node paused (SIGSTOP)
// until its failover, then resumed (SIGCONT).
func TestPauseHistoryLinearizable(t *testing.T) {
	historyUnderFault(t, "paused", func(c *cluster) (inject, heal func()) {
		return func() { c.procs[0].Signal(syscall.SIGSTOP) }, func() { c.procs[0].Signal(syscall.SIGCONT) }
	})
}

// historyUnderFault runs the load, injects the fault on the first node
// once 300 operations are recorded, heals it once the manager has failed
// the node over, and checks the whole history.
func historyUnderFault(t *testing.T, what string, fault func(*cluster) (inject, heal func())) {
	c := startClusterNodes(t, []string{"--sync-replication"}, "--failover-after", "2s", "--lease", "4s")
	victim := c.nodes[0].Addr(11211)
	inject, heal := fault(c)
	healed := false
	defer func() {
		if !healed {
			heal()
		}
	}()
	var seeds []string
	for _, n := range c.nodes {
		seeds = append(seeds, n.Addr(11211))
	}
	ctx := context.Background()
	mc, err := memcache.NewCluster(ctx, seeds, &memcache.ClusterOptions{DialContext: c.client.DialContext, Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()

	rec := history.NewRecorder()
	const (
		keys    = 40
		clients = 3
		maxOps  = 6000
	)
	var stop atomic.Bool
	var ops atomic.Int64
	var wg sync.WaitGroup
	for cl := range clients {
		wg.Add(1)
		go func() { // owned by the test, which waits for it
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(cl), 21))
			for n := 0; !stop.Load() && ops.Add(1) <= maxOps; n++ {
				key := fmt.Sprintf("h%02d", rng.IntN(keys))
				if rng.IntN(2) == 0 {
					v := fmt.Sprintf("c%d-%d", cl, n)
					end := rec.Begin(cl, history.Input{Kind: history.Set, Key: key, Value: v})
					if err := mc.Set(&memcache.Item{Key: key, Value: []byte(v)}); err != nil {
						end(history.Output{Outcome: history.Unknown})
					} else {
						end(history.Output{Outcome: history.OK})
					}
				} else {
					end := rec.Begin(cl, history.Input{Kind: history.Get, Key: key})
					it, err := mc.Get(key)
					switch {
					case errors.Is(err, memcache.ErrCacheMiss):
						end(history.Output{Outcome: history.OK})
					case err != nil:
						end(history.Output{Outcome: history.Unknown})
					default:
						end(history.Output{Outcome: history.OK, Hit: true, Value: string(it.Value)})
					}
				}
				time.Sleep(2 * time.Millisecond) // pacing: a bounded, modest load
			}
		}()
	}
	defer func() { stop.Store(true); wg.Wait() }()

	c.waitFor("some history before the fault", 30*time.Second, func() bool { return rec.Len() >= 300 })
	inject()
	faultAt, faultOps := time.Now(), rec.Len()
	c.waitFor("the failover of the node", 60*time.Second, func() bool { return slices.Contains(c.status().FailedOver, victim) })
	t.Logf("%s (%s) failed over %v after the fault (%d operations meanwhile)", victim, what, time.Since(faultAt).Round(time.Millisecond), rec.Len()-faultOps)
	heal()
	healed = true
	healedAt := rec.Len()
	c.waitFor("some history after the heal", 60*time.Second, func() bool { return rec.Len() >= healedAt+300 || ops.Load() >= maxOps })
	stop.Store(true)
	wg.Wait()

	h := rec.Operations()
	unsure := 0
	for _, o := range h {
		if o.Output.(history.Output).Outcome != history.OK {
			unsure++
		}
	}
	res := history.Check(h, 60*time.Second)
	t.Logf("%d operations (%d without a definite answer) over the fault, the failover and the heal: linearizable %v", len(h), unsure, res.OK)
	if !res.OK {
		writeVisualisation(t, res, "history")
		if res.TimedOut {
			t.Fatalf("porcupine could not decide within 60 s")
		}
		t.Fatalf("the history is not linearizable under the cache model")
	}
}
