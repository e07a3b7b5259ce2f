// Package movecheck is the takeover correctness checker: writers and
// readers hammer keys of one vbucket through the vbucket-aware client
// (memcache.NewCluster) while the vbucket moves from node to node (A → B
// → A …, or round the ring of nodes given), many times, and every answer
// is checked.
//
// # What is checked
//
//   - Every acknowledged write is readable afterwards: when the load
//     stops, each key is read from the final owner (directly, with the
//     vbucket id, not through the client) and must hold at least the
//     last value whose SET was acknowledged.
//   - No read goes back in time: each writer owns a disjoint set of keys
//     and writes an increasing counter to each; before a read starts the
//     reader loads the key's last acknowledged counter, and the value it
//     gets must not be smaller (nor a miss). Writers read their own key
//     back after each acknowledged write (read-your-writes); readers are
//     other clients (a write acknowledged to one client is seen by all).
//     A value larger than any counter sent for the key is also a
//     violation (it was never written).
//   - No request is answered by a node that did not own the vbucket: a
//     stale owner would serve the value it had when it lost the vbucket,
//     older than writes acknowledged since by the new owner, which the
//     read check catches. Values do not name the node that served them.
//   - Never two actives: a poller asks GET_VBUCKET of the current move's
//     target, then of its source, and of every other node. Within one
//     move round the target turns active only after the source turned
//     dead for good, so "target active, then source active" in a poll
//     that no round boundary crossed means both were active at once. Any
//     third node active is a violation too.
//
// # Goroutines
//
// Run owns everything it starts: the writers, readers and the poller
// stop when the moves are done (or ctx ends) and Run waits for them
// before it reads the keys back. The mover is Run's own goroutine. Each
// load goroutine has its own cluster client and each poller its own
// control connections, so nothing but the atomic counters is shared.
//
// # Moves
//
// Config.Move performs one move; by default ManagedMove, which is
// internal/move's Move (TAKEOVER on the target, the new map at rev+1 on
// every node, the old copy deleted, recovery rules on failure).
// TakeoverMove is a minimal alternative without the recovery rules. A move that
// fails is counted; the owner afterwards is found by asking the nodes.
package movecheck

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/internal/vbucket"
	"github.com/vbcache/vbcache/memcache"
)

// MoveFunc moves vbucket vb from the node at from to the node at to and
// publishes the new map. nodes are all the cluster's nodes.
type MoveFunc func(ctx context.Context, nodes []string, vb int, from, to string) error

// Config is one checker run.
type Config struct {
	// Nodes are the cluster's nodes (host:port, as in the config's
	// serverList). The vbucket moves round them in this order, starting
	// at its owner in the newest config.
	Nodes []string
	// Credentials log the checker's control connections in (the cluster
	// administrator's --cluster-auth); nil: none.
	Credentials *admin.Credentials
	// VBucket is the vbucket that moves.
	VBucket int
	// Moves is how many moves to make (default 20).
	Moves int
	// Duration, if set, spreads the moves over this time: move i starts
	// no earlier than i*Duration/Moves after the load began. Zero: one
	// move after the other, with only Pause between.
	Duration time.Duration
	// Pause is the least time between two moves (default 0).
	Pause time.Duration
	// Writers (default 4) and Readers (default 2; negative: none) are
	// the load goroutines, each with its own client.
	Writers, Readers int
	// Keys is the number of keys per writer (default 16).
	Keys int
	// ValueSize pads the values to this many bytes (default 32).
	ValueSize int
	// KeyPrefix starts every key (default "movecheck:<random>:", new for
	// each run). Keys that already hold values when the run starts are
	// reported as phantom reads, so a fixed prefix needs a clean cluster.
	KeyPrefix string
	// Move performs a move (default ManagedMove).
	Move MoveFunc
	// ClientTimeout is the clients' socket timeout (default 5 s).
	ClientTimeout time.Duration
	// Log, if set, receives a line per move.
	Log io.Writer
}

func (c *Config) defaults() {
	if c.Moves <= 0 {
		c.Moves = 20
	}
	if c.Writers <= 0 {
		c.Writers = 4
	}
	if c.Readers < 0 {
		c.Readers = 0
	} else if c.Readers == 0 {
		c.Readers = 2
	}
	if c.Keys <= 0 {
		c.Keys = 16
	}
	if c.ValueSize <= 0 {
		c.ValueSize = 32
	}
	if c.KeyPrefix == "" {
		// A fresh prefix per run: values left by an earlier run on the
		// same cluster would look like values never written.
		c.KeyPrefix = fmt.Sprintf("movecheck:%08x:", rand.Uint32())
	}
	if c.Move == nil {
		c.Move = ManagedMove
	}
	if c.ClientTimeout <= 0 {
		c.ClientTimeout = 5 * time.Second
	}
}

// Violation kinds.
const (
	LostWrite    = "lost-write"   // an acknowledged write is not on the final owner
	StaleRead    = "stale-read"   // a read returned less than the last acknowledged value (or a miss)
	PhantomRead  = "phantom-read" // a read returned a value never written
	TwoActives   = "two-actives"  // two nodes active for the vbucket at once
	FinalState   = "final-state"  // after the run the vbucket is not active on exactly its owner
	maxDetailsPK = 20             // details kept per kind
)

// Violation is one broken promise.
type Violation struct {
	Kind   string
	Detail string
}

// Report is a run's outcome.
type Report struct {
	Moves       int              // moves that completed
	MovesFailed int              // moves that returned an error
	Owner       string           // the vbucket's owner at the end
	Elapsed     time.Duration    // load time
	Writes      int64            // acknowledged writes
	Reads       int64            // reads answered (hit or miss)
	ReadBacks   int64            // keys read back at the end
	Polls       int64            // GET_VBUCKET polls that counted
	Errors      map[string]int64 // failed requests by kind (not violations)
	ErrorSample map[string]string
	MoveErrors  []string
	Violations  map[string]int64 // count by kind
	Details     []Violation      // the first few of each kind
	Durations   []time.Duration  // of the completed moves, in order
}

// OK reports whether the run found no violation.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// MoveStats returns the min, median and max completed move time.
func (r *Report) MoveStats() (lo, med, hi time.Duration) {
	if len(r.Durations) == 0 {
		return 0, 0, 0
	}
	d := slices.Clone(r.Durations)
	slices.Sort(d)
	return d[0], d[len(d)/2], d[len(d)-1]
}

// WriteText prints the report.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	lo, med, hi := r.MoveStats()
	fmt.Fprintf(&b, "moves: %d done, %d failed; owner at the end: %s\n", r.Moves, r.MovesFailed, r.Owner)
	fmt.Fprintf(&b, "move time: min %v median %v max %v\n", lo.Round(time.Microsecond), med.Round(time.Microsecond), hi.Round(time.Microsecond))
	fmt.Fprintf(&b, "load: %v, %d acknowledged writes, %d reads, %d keys read back, %d state polls\n",
		r.Elapsed.Round(time.Millisecond), r.Writes, r.Reads, r.ReadBacks, r.Polls)
	for _, k := range sortedKeys(r.Errors) {
		fmt.Fprintf(&b, "errors %s: %d (e.g. %s)\n", k, r.Errors[k], r.ErrorSample[k])
	}
	for _, e := range r.MoveErrors {
		fmt.Fprintf(&b, "move error: %s\n", e)
	}
	if r.OK() {
		b.WriteString("violations: none\n")
	}
	for _, k := range sortedKeys(r.Violations) {
		fmt.Fprintf(&b, "VIOLATIONS %s: %d\n", k, r.Violations[k])
	}
	for _, v := range r.Details {
		fmt.Fprintf(&b, "  %s: %s\n", v.Kind, v.Detail)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// keyState is one key's history as the checker knows it.
type keyState struct {
	key   string
	sent  atomic.Int64 // highest counter sent (acknowledged or not)
	acked atomic.Int64 // highest counter acknowledged
}

// recorder collects errors and violations from every goroutine.
type recorder struct {
	mu         sync.Mutex // protects the maps and details
	errors     map[string]int64
	errSample  map[string]string
	violations map[string]int64
	details    []Violation
}

func (rc *recorder) violation(kind, format string, args ...any) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.violations[kind]++
	if rc.violations[kind] <= maxDetailsPK {
		rc.details = append(rc.details, Violation{kind, fmt.Sprintf(format, args...)})
	}
}

func (rc *recorder) error(op string, err error) {
	kind := op + ":" + errKind(err)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.errors[kind]++
	if _, ok := rc.errSample[kind]; !ok {
		rc.errSample[kind] = err.Error()
	}
}

// errKind names an error's class for the report.
func errKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, memcache.ErrNotMyVBucket):
		return "not_my_vbucket"
	case errors.Is(err, memcache.ErrTemporaryFailure):
		return "tmpfail"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, memcache.ErrServerError):
		return "server_error"
	case errors.As(err, &ne):
		return "network"
	}
	return "other"
}

// round says which move is under way: the poller's frame of reference.
type round struct {
	n        int64
	src, dst int // indexes into Config.Nodes
}

// Run runs the checker and returns its report. The error is for a run
// that could not be carried out (no config, the vbucket active nowhere,
// a move that left no owner); violations are in the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	ctx = withCredentials(ctx, cfg.Credentials)
	if len(cfg.Nodes) < 2 {
		return nil, errors.New("movecheck: need at least two nodes")
	}
	mc, err := newestConfig(ctx, cfg.Nodes)
	if err != nil {
		return nil, fmt.Errorf("movecheck: %w", err)
	}
	if mc == nil {
		return nil, errors.New("movecheck: no node has a cluster config (start the cluster, or use Init)")
	}
	n := mc.NumVBuckets()
	if cfg.VBucket < 0 || cfg.VBucket >= n {
		return nil, fmt.Errorf("movecheck: vbucket %d out of range (the map has %d)", cfg.VBucket, n)
	}
	for _, a := range cfg.Nodes {
		if serverIndex(mc, a) < 0 {
			return nil, fmt.Errorf("movecheck: %s is not in the config's serverList %v", a, mc.VBucketServerMap.ServerList)
		}
	}
	owner, err := findActive(ctx, cfg.Nodes, cfg.VBucket)
	if err != nil {
		return nil, err
	}
	if owner < 0 {
		return nil, fmt.Errorf("movecheck: vbucket %d is active on no node", cfg.VBucket)
	}
	if i := mc.Active(cfg.VBucket); i < 0 || mc.VBucketServerMap.ServerList[i] != cfg.Nodes[owner] {
		// Make the map agree with the states before the load begins.
		if err := publish(ctx, cfg.Nodes, withOwner(mc, cfg.VBucket, serverIndex(mc, cfg.Nodes[owner]))); err != nil {
			return nil, fmt.Errorf("movecheck: %w", err)
		}
	}

	// Keys: Writers groups of Keys keys, all in the vbucket.
	keys := make([]*keyState, 0, cfg.Writers*cfg.Keys)
	for i := 0; len(keys) < cap(keys); i++ {
		k := cfg.KeyPrefix + strconv.Itoa(i)
		if vbmap.VBucketString(k, n) == cfg.VBucket {
			keys = append(keys, &keyState{key: k})
		}
	}

	rc := &recorder{errors: map[string]int64{}, errSample: map[string]string{}, violations: map[string]int64{}}
	var writes, reads, polls atomic.Int64
	var cur atomic.Pointer[round]
	cur.Store(&round{n: 0, src: owner, dst: (owner + 1) % len(cfg.Nodes)})

	clients := make([]*memcache.Client, 0, cfg.Writers+cfg.Readers)
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for range cfg.Writers + cfg.Readers {
		opts := &memcache.ClusterOptions{
			MaxTries: 40, MaxBackoff: 50 * time.Millisecond, Timeout: cfg.ClientTimeout, RefreshInterval: time.Second}
		if cr := cfg.Credentials; cr != nil && cr.TLS != nil {
			// Nodes with -Z: the load goes over TLS too.
			opts.DialContext = (&tls.Dialer{Config: cr.TLS}).DialContext
		}
		c, err := memcache.NewCluster(ctx, cfg.Nodes, opts)
		if err != nil {
			return nil, fmt.Errorf("movecheck: %w", err)
		}
		clients = append(clients, c)
	}

	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var wg sync.WaitGroup
	var warm sync.WaitGroup // each writer has written each of its keys once
	warm.Add(cfg.Writers)
	pad := strings.Repeat("x", cfg.ValueSize)
	for w := range cfg.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := keys[w*cfg.Keys : (w+1)*cfg.Keys]
			writer(loadCtx, clients[w], mine, pad, rc, &writes, &reads, warm.Done)
		}()
	}
	for r := range cfg.Readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reader(loadCtx, clients[cfg.Writers+r], keys, uint64(r), rc, &reads)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		poller(loadCtx, cfg.Nodes, cfg.VBucket, &cur, rc, &polls)
	}()
	stopAndWait := func() {
		stopLoad()
		wg.Wait()
	}
	warmed := make(chan struct{})
	go func() { // ends when every writer called warm.Done, which each does before it returns
		warm.Wait()
		close(warmed)
	}()
	select {
	case <-warmed:
	case <-ctx.Done():
		stopAndWait()
		<-warmed
		return nil, ctx.Err()
	}

	rep := &Report{Errors: rc.errors, ErrorSample: rc.errSample, Violations: rc.violations}
	start := time.Now()
	var runErr error
	for i := 0; i < cfg.Moves && ctx.Err() == nil; i++ {
		if cfg.Duration > 0 {
			if err := sleepUntil(ctx, start.Add(time.Duration(i)*cfg.Duration/time.Duration(cfg.Moves))); err != nil {
				break
			}
		}
		src, dst := owner, (owner+1)%len(cfg.Nodes)
		cur.Store(&round{n: int64(i), src: src, dst: dst})
		t0 := time.Now()
		err := cfg.Move(ctx, cfg.Nodes, cfg.VBucket, cfg.Nodes[src], cfg.Nodes[dst])
		d := time.Since(t0)
		if err == nil {
			rep.Moves++
			rep.Durations = append(rep.Durations, d)
			owner = dst
		} else {
			rep.MovesFailed++
			rep.MoveErrors = append(rep.MoveErrors, fmt.Sprintf("move %d %s → %s: %v", i, cfg.Nodes[src], cfg.Nodes[dst], err))
			o, ferr := findActive(ctx, cfg.Nodes, cfg.VBucket)
			if ferr != nil || o < 0 {
				runErr = fmt.Errorf("movecheck: after failed move %d the vbucket is active nowhere (%v): %w", i, ferr, err)
				break
			}
			owner = o
		}
		// The next round begins only once this one's outcome is known.
		cur.Store(&round{n: int64(i) + 1, src: owner, dst: (owner + 1) % len(cfg.Nodes)})
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, "move %d: %s → %s in %v (err %v)\n", i, cfg.Nodes[src], cfg.Nodes[dst], d.Round(time.Microsecond), err)
		}
		if cfg.Pause > 0 {
			if err := sleepUntil(ctx, time.Now().Add(cfg.Pause)); err != nil {
				break
			}
		}
	}
	stopAndWait()
	<-warmed
	rep.Elapsed = time.Since(start)
	rep.Owner = cfg.Nodes[owner]
	if runErr != nil {
		return rep, runErr
	}
	if err := ctx.Err(); err != nil {
		return rep, err
	}

	// The end: exactly one active, the owner; every acknowledged write on it.
	for i, a := range cfg.Nodes {
		st, err := stateOf(ctx, a, cfg.VBucket)
		if err != nil {
			return rep, fmt.Errorf("movecheck: final state of %s: %w", a, err)
		}
		if (i == owner) != (st == vbucket.Active) {
			rc.violation(FinalState, "%s is %v (owner: %s)", a, st, cfg.Nodes[owner])
		}
	}
	if err := readBack(ctx, cfg.Nodes[owner], cfg.VBucket, keys, rc); err != nil {
		return rep, err
	}
	rep.ReadBacks = int64(len(keys))
	rep.Writes, rep.Reads, rep.Polls = writes.Load(), reads.Load(), polls.Load()
	rc.mu.Lock()
	rep.Details = append([]Violation(nil), rc.details...)
	rc.mu.Unlock()
	return rep, nil
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// findActive returns the index of the one node on which vb is active, -1
// when there is none, and an error when there are several or a node
// cannot be asked.
func findActive(ctx context.Context, nodes []string, vb int) (int, error) {
	found := -1
	for i, a := range nodes {
		st, err := stateOf(ctx, a, vb)
		if err != nil {
			return -1, fmt.Errorf("movecheck: GET_VBUCKET %d on %s: %w", vb, a, err)
		}
		if st == vbucket.Active {
			if found >= 0 {
				return -1, fmt.Errorf("movecheck: vbucket %d is active on %s and %s", vb, nodes[found], a)
			}
			found = i
		}
	}
	return found, nil
}

// counter parses the counter at the start of a value ("<n>:xxxx").
func counter(v []byte) (int64, bool) {
	s := string(v)
	if i := strings.IndexByte(s, ':'); i >= 0 {
		s = s[:i]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// checkRead checks a value read for ks whose last acknowledged counter was
// acked when the read began.
func checkRead(rc *recorder, who string, ks *keyState, acked int64, it *memcache.Item, err error) {
	if errors.Is(err, memcache.ErrCacheMiss) {
		if acked > 0 {
			rc.violation(StaleRead, "%s: %s missing, last acknowledged %d", who, ks.key, acked)
		}
		return
	}
	got, ok := counter(it.Value)
	if !ok {
		rc.violation(PhantomRead, "%s: %s = %q, not a counter", who, ks.key, it.Value)
		return
	}
	if got < acked {
		rc.violation(StaleRead, "%s: %s = %d, last acknowledged %d when the read began", who, ks.key, got, acked)
	}
	if sent := ks.sent.Load(); got > sent {
		rc.violation(PhantomRead, "%s: %s = %d, never sent (highest sent %d)", who, ks.key, got, sent)
	}
}

// writer writes increasing counters to its keys, reading each back after
// an acknowledged write. It calls warm once every key has been written
// (or when it stops first).
func writer(ctx context.Context, c *memcache.Client, keys []*keyState, pad string, rc *recorder, writes, reads *atomic.Int64, warm func()) {
	warmed := false
	defer func() {
		if !warmed {
			warm()
		}
	}()
	var next int64
	for pass := 0; ctx.Err() == nil; pass++ {
		for _, ks := range keys {
			if ctx.Err() != nil {
				return
			}
			next++
			ks.sent.Store(next)
			val := strconv.FormatInt(next, 10) + ":" + pad
			if err := c.SetContext(ctx, &memcache.Item{Key: ks.key, Value: []byte(val)}); err != nil {
				if ctx.Err() == nil {
					rc.error("set", err)
				}
				continue
			}
			ks.acked.Store(next)
			writes.Add(1)
			it, err := c.GetContext(ctx, ks.key)
			if err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
				if ctx.Err() == nil {
					rc.error("get", err)
				}
				continue
			}
			reads.Add(1)
			checkRead(rc, "writer read-back", ks, next, it, err)
		}
		if pass == 0 {
			warmed = true
			warm()
		}
	}
}

// reader reads random keys and checks each value against the key's last
// acknowledged counter as of the read's start.
func reader(ctx context.Context, c *memcache.Client, keys []*keyState, seed uint64, rc *recorder, reads *atomic.Int64) {
	rnd := rand.New(rand.NewPCG(seed, 0x6d6f7665))
	for ctx.Err() == nil {
		ks := keys[rnd.IntN(len(keys))]
		acked := ks.acked.Load()
		it, err := c.GetContext(ctx, ks.key)
		if err != nil && !errors.Is(err, memcache.ErrCacheMiss) {
			if ctx.Err() == nil {
				rc.error("get", err)
			}
			continue
		}
		reads.Add(1)
		checkRead(rc, "reader", ks, acked, it, err)
	}
}

// poller asks GET_VBUCKET of the round's target, then its source, then
// the other nodes, and counts two actives in one round as a violation.
func poller(ctx context.Context, nodes []string, vb int, cur *atomic.Pointer[round], rc *recorder, polls *atomic.Int64) {
	conns := make([]*admin.Conn, len(nodes))
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	state := func(i int) (vbucket.State, bool) {
		if conns[i] == nil {
			c, err := admin.DialWith(ctx, nodes[i], credentials(ctx))
			if err != nil {
				return 0, false
			}
			conns[i] = c
		}
		st, err := conns[i].GetVBucket(vb)
		if err != nil {
			conns[i].Close()
			conns[i] = nil
			if ctx.Err() == nil {
				rc.error("poll", err)
			}
			return 0, false
		}
		return st, true
	}
	for ctx.Err() == nil {
		r := cur.Load()
		dstSt, ok1 := state(r.dst)
		srcSt, ok2 := state(r.src)
		var others []string
		ok3 := true
		for i := range nodes {
			if i == r.src || i == r.dst {
				continue
			}
			st, ok := state(i)
			ok3 = ok3 && ok
			if st == vbucket.Active {
				others = append(others, nodes[i])
			}
		}
		if cur.Load() != r || !ok1 || !ok2 || !ok3 {
			continue
		}
		polls.Add(1)
		if dstSt == vbucket.Active && srcSt == vbucket.Active {
			rc.violation(TwoActives, "round %d: target %s active, then source %s active", r.n, nodes[r.dst], nodes[r.src])
		}
		if len(others) > 0 {
			rc.violation(TwoActives, "round %d (%s → %s): %v active too", r.n, nodes[r.src], nodes[r.dst], others)
		}
	}
}

// readBack reads every key that had an acknowledged write from addr and
// checks it holds at least that value.
func readBack(ctx context.Context, addr string, vb int, keys []*keyState, rc *recorder) error {
	c, err := admin.DialWith(ctx, addr, credentials(ctx))
	if err != nil {
		return fmt.Errorf("movecheck: read back from %s: %w", addr, err)
	}
	defer c.Close()
	for _, ks := range keys {
		acked := ks.acked.Load()
		v, err := c.Do(protocol.OpGet, uint16(vb), nil, []byte(ks.key), nil)
		switch {
		case admin.IsStatus(err, protocol.StatusKeyNotFound):
			if acked > 0 {
				rc.violation(LostWrite, "%s missing on %s, last acknowledged %d", ks.key, addr, acked)
			}
			continue
		case err != nil:
			return fmt.Errorf("movecheck: read back %s from %s: %w", ks.key, addr, err)
		}
		got, ok := counter(v)
		switch {
		case !ok:
			rc.violation(PhantomRead, "read back %s = %q, not a counter", ks.key, v)
		case got < acked:
			rc.violation(LostWrite, "%s = %d on %s, last acknowledged %d", ks.key, got, addr, acked)
		case got > ks.sent.Load():
			rc.violation(PhantomRead, "read back %s = %d, never sent (highest %d)", ks.key, got, ks.sent.Load())
		}
	}
	return nil
}
