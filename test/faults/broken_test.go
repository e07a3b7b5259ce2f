package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/internal/vbucket"
	"github.com/vbcache/vbcache/memcache"
	"github.com/vbcache/vbcache/test/history"
	"github.com/vbcache/vbcache/test/nodeproc"
)

// TestCheckerCatchesUnfencedNode proves the history check is not blind
// (issue 21): the cluster runs a build without fencing (-tags
// vbcache_nofence, see internal/server's lease.go), and a node cut off
// from the manager (asymmetric: clients still reach it) keeps serving its
// vbuckets after the manager has failed it over and promoted their
// replicas. One group of clients keeps the map from before the fault and
// reads and writes keys of the node's vbuckets there: it never refreshes
// in the background, and the unfenced node never answers NOT_MY_VBUCKET or
// TMPFAIL, so nothing tells it otherwise. A second group, made after the
// failover from the other nodes' map, reads and writes the same keys on
// the promoted replicas. A probe makes a violation certain, whatever the
// load did: keys of their own, written through the old map before the
// fault (replicated, so the unfenced node serves them at once; a write
// through it after the fault is never confirmed under
// --sync-replication, and a read of that key waits for it and is
// refused), written again through the new map after the failover, and
// read through the old map: the unfenced node answers with the first
// value.
//
// The check must find the history not linearizable, and porcupine's HTML
// (written to $VBCACHE_ARTIFACTS, else the temporary directory) must show
// it.
func TestCheckerCatchesUnfencedNode(t *testing.T) {
	began := time.Now()
	bin, err := nodeproc.BuildVbcacheTags(t.TempDir(), "vbcache_nofence")
	if err != nil {
		t.Fatal(err)
	}
	c := startClusterBin(t, bin, []string{"--sync-replication"}, "--failover-after", "2s", "--lease", "4s")
	victim := c.nodes[0]
	va := victim.Addr(11211)
	before := c.config()
	keys := unfencedKeys(t, before, va, 8)

	ctx := context.Background()
	opts := func() *memcache.ClusterOptions {
		return &memcache.ClusterOptions{DialContext: c.client.DialContext, Timeout: 3 * time.Second, RefreshInterval: -1}
	}
	var seeds []string
	for _, n := range c.nodes {
		seeds = append(seeds, n.Addr(11211))
	}
	oldMC, err := memcache.NewCluster(ctx, seeds, opts())
	if err != nil {
		t.Fatal(err)
	}
	defer oldMC.Close()
	oldEpoch, oldRev := oldMC.ConfigRevision()

	rec := history.NewRecorder()
	const (
		oldPerClient = 3000             // operations of an old-map client, at most
		newPerClient = 500              // of a new-map client
		loadFor      = 90 * time.Second // and for at most this long
	)
	var oldOps, newOps atomic.Int64
	var stopOld, stopNew atomic.Bool
	var wg sync.WaitGroup
	load := func(id int, mc *memcache.Client, limit int, stop *atomic.Bool, count *atomic.Int64) {
		wg.Add(1)
		go func() { // owned by the test, which waits for it
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(id), 21))
			deadline := time.Now().Add(loadFor)
			for n := 0; n < limit && !stop.Load() && time.Now().Before(deadline); n++ {
				in := history.Input{Kind: history.Get, Key: keys[rng.IntN(len(keys))]}
				if rng.IntN(2) == 0 {
					in.Kind, in.Value = history.Set, fmt.Sprintf("c%d-%d", id, n)
				}
				unfencedOp(rec, id, mc, in)
				count.Add(1)
				time.Sleep(2 * time.Millisecond) // pacing: a bounded, modest load
			}
		}()
	}
	defer func() { stopOld.Store(true); stopNew.Store(true); wg.Wait() }()
	for id := range 2 {
		load(id, oldMC, oldPerClient, &stopOld, &oldOps)
	}
	c.waitFor("some history before the fault", 30*time.Second, func() bool { return rec.Len() >= 200 })
	// The probe's keys, written once before the fault, replicated: the
	// unfenced node serves them afterwards without waiting (a read under
	// --sync-replication waits for its own key's last write only).
	probes := unfencedProbeKeys(t, before, va, 8)
	for i, k := range probes {
		if o := unfencedOp(rec, 4, oldMC, history.Input{Kind: history.Set, Key: k, Value: fmt.Sprintf("probe-old-%d", i)}); o.Outcome != history.OK {
			t.Fatalf("the probe's write of %s before the fault: %+v", k, o)
		}
	}

	c.lab.Cut(c.mgr, victim)
	cutAt, cutOps := time.Now(), rec.Len()
	c.waitFor("the failover of the node", 60*time.Second, func() bool { return slices.Contains(c.status().FailedOver, va) })
	failedAt := time.Now()
	after := c.config()
	for _, k := range keys { // the promotions follow the new map
		vb := vbmap.VBucketString(k, vbuckets)
		a := after.Active(vb)
		if a < 0 || after.VBucketServerMap.ServerList[a] == va {
			t.Fatalf("the map after the failover gives vbucket %d no active other than %s", vb, va)
		}
		owner := after.VBucketServerMap.ServerList[a]
		ac := c.dial(owner)
		c.waitFor(fmt.Sprintf("vbucket %d active on %s", vb, owner), 30*time.Second, func() bool {
			st, err := ac.GetVBucket(vb)
			return err == nil && st == vbucket.Active
		})
	}
	t.Logf("%s failed over %v after the cut (%d operations meanwhile), its vbuckets of the test's keys active elsewhere %v after it",
		va, failedAt.Sub(cutAt).Round(time.Millisecond), rec.Len()-cutOps, time.Since(failedAt).Round(time.Millisecond))

	var newMC *memcache.Client
	c.waitFor("a client with the new map from the other nodes", 30*time.Second, func() bool {
		mc, err := memcache.NewCluster(ctx, seeds[1:], opts())
		if err != nil {
			return false
		}
		if e, r := mc.ConfigRevision(); e < after.RevEpoch || e == after.RevEpoch && r < after.Rev {
			mc.Close()
			return false
		}
		newMC = mc
		return true
	})
	defer newMC.Close()
	oldAtNew := oldOps.Load()
	for id := 2; id < 4; id++ {
		load(id, newMC, newPerClient, &stopNew, &newOps)
	}
	// The unfenced node's writes may be slow now: once the map it fetched
	// from its peers gives those vbuckets a replica again (the manager
	// rebuilds them after the failover), which no stream from it feeds,
	// each waits out the synchronous replication's 1 s before it is
	// answered, and the client's reads queue behind them on the shared
	// connection. A few of its operations are enough.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if newOps.Load() >= 2*newPerClient && oldOps.Load()-oldAtNew >= 20 {
			break
		}
	}
	stopOld.Store(true)
	stopNew.Store(true)
	wg.Wait()
	t.Logf("both groups together: %d operations of the old-map group, %d of the new-map group", oldOps.Load()-oldAtNew, newOps.Load())

	loadBad := unfencedViolations(rec.Operations())

	// The probe: on each key, a write through the old map, a later write
	// through the new one, then a read through the old map. The unfenced
	// node answers that read with the first value, which the second write
	// had overwritten for every client that completed after it.
	// The probe's reads go to the unfenced node itself, as a client
	// that kept the old map sends them: oldMC may have fetched the new
	// map by now (a refusal makes it ask).
	stale := 0
	vc := c.dial(va)
	for i, k := range probes {
		second := unfencedOp(rec, 4, newMC, history.Input{Kind: history.Set, Key: k, Value: fmt.Sprintf("probe-new-%d", i)})
		end := rec.Begin(5, history.Input{Kind: history.Get, Key: k})
		var read history.Output
		v, err := vc.Do(protocol.OpGet, uint16(vbmap.VBucketString(k, vbuckets)), nil, []byte(k), nil)
		switch {
		case admin.IsStatus(err, protocol.StatusKeyNotFound):
		case err != nil:
			read.Outcome = history.Unknown
		default:
			read.Hit, read.Value = true, string(v)
		}
		end(read)
		if second.Outcome == history.OK && read.Hit && read.Value == fmt.Sprintf("probe-old-%d", i) {
			stale++
		}
	}

	e, r := oldMC.ConfigRevision()
	ne, nr := newMC.ConfigRevision()
	t.Logf("the old-map client's map is rev %d/%d at the end (%d/%d at the start), the new-map client's %d/%d", e, r, oldEpoch, oldRev, ne, nr)

	h := rec.Operations()
	unsure := 0
	for _, o := range h {
		if o.Output.(history.Output).Outcome != history.OK {
			unsure++
		}
	}
	checkAt := time.Now()
	res := history.Check(h, 60*time.Second)
	bad := unfencedViolations(h)
	t.Logf("%d operations (%d without a definite answer), %d of %d probes read the overwritten value from %s; linearizable %v (checked in %v); keys with a violation: %d of %d %v (%d before the probe)",
		len(h), unsure, stale, len(probes), va, res.OK, time.Since(checkAt).Round(time.Millisecond), len(bad), len(keys)+len(probes), bad, len(loadBad))
	switch {
	case res.OK && stale == 0:
		t.Fatalf("the history is linearizable, but the unfenced node never served an overwritten value: the scenario did not happen")
	case res.OK:
		t.Fatalf("the history is linearizable although %d reads returned an overwritten value: the checker is blind", stale)
	case res.TimedOut:
		t.Fatalf("porcupine could not decide within 60 s")
	}
	path := writeVisualisation(t, res, "unfenced")
	if path == "" {
		t.Fatal("porcupine's visualisation was not written")
	}
	html, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(html) == 0 || !slices.ContainsFunc(bad, func(k string) bool { return strings.Contains(string(html), k) }) {
		t.Fatalf("porcupine's visualisation (%d bytes) names none of the keys with a violation %v", len(html), bad)
	}
	t.Logf("the whole test took %v", time.Since(began).Round(time.Millisecond))
}

// startClusterBin is startClusterNodes with every process (the nodes and
// the manager) running bin instead of vbcacheBin. It swaps vbcacheBin for
// the call, which is safe because no test of this package runs in
// parallel (none calls t.Parallel); the binary is read only while the
// processes start.
func startClusterBin(t *testing.T, bin string, nodeFlags []string, mgrFlags ...string) *cluster {
	saved := vbcacheBin
	vbcacheBin = bin
	defer func() { vbcacheBin = saved }()
	return startClusterNodes(t, nodeFlags, mgrFlags...)
}

// unfencedKeys returns n keys in n different vbuckets that cfg makes
// active on addr, each with a replica.
// unfencedProbeKeys is n keys, other than unfencedKeys', of vbuckets
// that cfg makes addr the active of, with a replica.
func unfencedProbeKeys(t *testing.T, cfg *vbmap.Config, addr string, n int) []string {
	t.Helper()
	me := slices.Index(cfg.VBucketServerMap.ServerList, addr)
	var keys []string
	for i := 0; len(keys) < n && i < 100000; i++ {
		k := fmt.Sprintf("probe-%d", i)
		if row := cfg.VBucketServerMap.VBucketMap[vbmap.VBucketString(k, vbuckets)]; row[0] == me && len(row) > 1 && row[1] >= 0 {
			keys = append(keys, k)
		}
	}
	if len(keys) < n {
		t.Fatalf("only %d probe keys in vbuckets active on %s with a replica", len(keys), addr)
	}
	return keys
}

func unfencedKeys(t *testing.T, cfg *vbmap.Config, addr string, n int) []string {
	t.Helper()
	me := slices.Index(cfg.VBucketServerMap.ServerList, addr)
	if me < 0 {
		t.Fatalf("%s is not in the map", addr)
	}
	used := map[int]bool{}
	var keys []string
	for i := 0; len(keys) < n && i < 100000; i++ {
		k := fmt.Sprintf("unfenced-%d", i)
		vb := vbmap.VBucketString(k, vbuckets)
		if row := cfg.VBucketServerMap.VBucketMap[vb]; row[0] == me && len(row) > 1 && row[1] >= 0 && !used[vb] {
			used[vb] = true
			keys = append(keys, k)
		}
	}
	if len(keys) < n {
		t.Fatalf("only %d keys in vbuckets active on %s with a replica", len(keys), addr)
	}
	return keys
}

// unfencedOp runs one operation through mc, records it as client id's in
// rec and returns what the client saw.
func unfencedOp(rec *history.Recorder, id int, mc *memcache.Client, in history.Input) history.Output {
	end := rec.Begin(id, in)
	var out history.Output
	switch in.Kind {
	case history.Set:
		if err := mc.Set(&memcache.Item{Key: in.Key, Value: []byte(in.Value)}); err != nil {
			out.Outcome = history.Unknown
		}
	case history.Get:
		it, err := mc.Get(in.Key)
		switch {
		case errors.Is(err, memcache.ErrCacheMiss):
		case err != nil:
			out.Outcome = history.Unknown
		default:
			out.Hit, out.Value = true, string(it.Value)
		}
	}
	end(out)
	return out
}

// unfencedViolations checks each key's operations on their own and
// returns the keys whose history is not linearizable.
func unfencedViolations(h []porcupine.Operation) []string {
	byKey := map[string][]porcupine.Operation{}
	for _, o := range h {
		k := o.Input.(history.Input).Key
		byKey[k] = append(byKey[k], o)
	}
	var bad []string
	for k, ops := range byKey {
		if res := history.Check(ops, 30*time.Second); !res.OK && !res.TimedOut {
			bad = append(bad, k)
		}
	}
	slices.Sort(bad)
	return bad
}
