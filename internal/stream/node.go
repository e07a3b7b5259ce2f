package stream

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbcache/vbcache/internal/store"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// Node is a cache node's stream machinery: the mutation log, the producers
// serving other nodes, and the consumers feeding this node's replica and
// incoming vbuckets. The server creates one in cluster mode.
type Node struct {
	Store  *store.Store
	States *vbucket.Table
	Log    *Log
	// Name identifies this node to producers (host:port).
	Name string
	// ClusterName, if set, is the name the cluster's map knows this node
	// by ("" while unknown: no manager has granted it a lease). A
	// consumer sends it in its OPEN instead of Name, marked as the map's
	// name, so that a producer can tell a stream to a node its map no
	// longer names for a vbucket (Replicated). Set before the first
	// stream starts.
	ClusterName func() string
	// Logf, if set, receives notable events (aborted takeovers).
	Logf func(format string, args ...any)
	// Dial, if set, opens the connection to a producer and logs in to it
	// (the server's --cluster-auth credentials); nil dials plain TCP.
	// Set before the first stream starts.
	Dial func(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error)

	moved atomic.Uint64 // takeovers completed as a producer
	// branchRebuilds counts streams that could not resume because the
	// consumer ran past the end of its branch here (Log.Resume).
	branchRebuilds atomic.Uint64

	// handoverPause is a failpoint for tests (environment variable
	// VBCACHE_FAILPOINT_HANDOVER_PAUSE, a Go duration): a producer waits
	// this long after turning a vbucket dead in a takeover.
	handoverPause time.Duration
	// drainedPause is a failpoint for tests (environment variable
	// VBCACHE_FAILPOINT_DRAINED_PAUSE): a producer waits this long once
	// a takeover stream is drained, before it asks the consumer to turn
	// pending (the consumer still a replica, this node still active).
	drainedPause time.Duration

	wg sync.WaitGroup // replication goroutines

	// ackMu and acks: Replicated's waiters sleep on acks, broadcast when
	// a consumer acknowledges or a producer goes away. ackMu protects no
	// field; WaitReplicated holds it while it takes mu and the producers'
	// locks (ackMu, then mu, then a producer's mu), so acked is never
	// called with mu or a producer's mu held.
	ackMu sync.Mutex
	acks  *sync.Cond

	// mu protects everything below; taken before a producer's mu, never
	// after. Nothing waits under it: StopReplication and AbortTakeover
	// wait for a replicator's or a takeover's goroutine (which take mu)
	// after letting go of it, and Replicate pokes r.changed without
	// blocking.
	mu        sync.Mutex
	prog      []progress // per vbucket: where the last consumer got to
	producers map[*producer]struct{}
	consumers map[string]map[*cstream]struct{} // by source node
	reps      map[string]*replicator           // replication by source node
	repOf     map[uint16]string                // vbucket → its replication source
	takeovers map[uint16]*takeoverRun          // takeovers in progress, by vbucket
	closed    bool                             // Close has stopped replication: a replicator started since stops at once
}

// takeoverRun is a takeover in progress on this node (the consumer side).
type takeoverRun struct {
	src    string
	cancel context.CancelFunc
	done   chan struct{} // closed when Takeover returns
}

// progress is a consumer's position in a vbucket's history.
type progress struct {
	uuid, seq uint64
}

// NewNode returns the stream machinery for st and states, with a ring
// budget of maxRing bytes per streamed vbucket (0: the default).
func NewNode(st *store.Store, states *vbucket.Table, maxRing int) *Node {
	n := &Node{Store: st, States: states, Log: NewLog(states, maxRing),
		prog: make([]progress, states.Len()), producers: map[*producer]struct{}{},
		consumers: map[string]map[*cstream]struct{}{}, reps: map[string]*replicator{},
		repOf: map[uint16]string{}, takeovers: map[uint16]*takeoverRun{}}
	n.acks = sync.NewCond(&n.ackMu)
	if d, err := time.ParseDuration(os.Getenv("VBCACHE_FAILPOINT_HANDOVER_PAUSE")); err == nil {
		n.handoverPause = d
	}
	if d, err := time.ParseDuration(os.Getenv("VBCACHE_FAILPOINT_DRAINED_PAUSE")); err == nil {
		n.drainedPause = d
	}
	return n
}

// Close stops replication and waits for its goroutines. Producers end
// with their connections, which the server closes; takeovers end with
// their callers' contexts.
func (n *Node) Close() {
	n.mu.Lock()
	n.closed = true
	for _, r := range n.reps {
		r.cancel()
	}
	n.mu.Unlock()
	n.wg.Wait()
}

func (n *Node) logf(format string, args ...any) {
	if n.Logf != nil {
		n.Logf(format, args...)
	}
}

func (n *Node) newUUID() uint64 {
	for {
		if u := rand.Uint64(); u != 0 {
			return u
		}
	}
}

func (n *Node) progress(vb int) (uuid, seq uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := n.prog[vb]
	return p.uuid, p.seq
}

func (n *Node) setProgress(vb int, uuid, seq uint64) {
	n.mu.Lock()
	n.prog[vb] = progress{uuid, seq}
	n.mu.Unlock()
}

func (n *Node) addProducer(p *producer) {
	n.mu.Lock()
	n.producers[p] = struct{}{}
	n.mu.Unlock()
}

func (n *Node) removeProducer(p *producer) {
	n.mu.Lock()
	delete(n.producers, p)
	n.mu.Unlock()
	n.acked()
}

// Poke wakes WaitReplicated's waiters to look again, for a change they
// do not see themselves (what their want function says).
func (n *Node) Poke() { n.acked() }

// acked wakes WaitReplicated's waiters to look again.
func (n *Node) acked() {
	n.ackMu.Lock()
	n.acks.Broadcast()
	n.ackMu.Unlock()
}

// Replicated reports whether every stream of vbucket vb that this node
// feeds (its replicas', and a move's) has acknowledged the mutations up
// to seq, and at least want streams copy vb. With want 0, a vbucket no
// stream copies is replicated by definition.
//
// A replication stream whose consumer named itself by the map's name
// for it (ClusterName) and that outside says the map no longer names
// for vb is not waited for, nor counted: a replica failed over while
// paused keeps its connection, and its stream, open for as long as it
// is paused, and would hold every write of vb up until it resumed
// (issue 43). outside nil: every stream counts. A takeover stream
// always counts.
func (n *Node) Replicated(vb int, seq uint64, want int, outside func(name string) bool) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	open := 0
	for p := range n.producers {
		p.mu.Lock()
		for _, s := range p.streams {
			if int(s.vb) != vb || s.closing.Load() {
				continue
			}
			if outside != nil && p.named && !s.takeover && syncSkipsOutsiders && outside(p.name) {
				continue
			}
			if s.acked.Load() < seq {
				p.mu.Unlock()
				return false
			}
			open++
		}
		p.mu.Unlock()
	}
	return open >= want
}

// WaitReplicated waits until Replicated(vb, seq, want(), outside) or ctx
// ends, and reports which. want and outside are asked again at each look
// (Poke makes one).
func (n *Node) WaitReplicated(ctx context.Context, vb int, seq uint64, want func() int, outside func(name string) bool) bool {
	if n.Replicated(vb, seq, want(), outside) {
		return true
	}
	stop := context.AfterFunc(ctx, n.acked)
	defer stop()
	// Checked under ackMu, which acked takes to broadcast: no
	// acknowledgement slips between a check and the wait. (Replicated
	// takes mu and the producers' locks; nothing holds those while it
	// takes ackMu.)
	n.ackMu.Lock()
	defer n.ackMu.Unlock()
	for {
		if n.Replicated(vb, seq, want(), outside) {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		n.acks.Wait()
	}
}

func (n *Node) registerConsumer(src string, s *cstream) {
	n.mu.Lock()
	m := n.consumers[src]
	if m == nil {
		m = map[*cstream]struct{}{}
		n.consumers[src] = m
	}
	m[s] = struct{}{}
	n.mu.Unlock()
}

func (n *Node) unregisterConsumer(src string, s *cstream) {
	n.mu.Lock()
	delete(n.consumers[src], s)
	if len(n.consumers[src]) == 0 {
		delete(n.consumers, src)
	}
	n.mu.Unlock()
}

// Errors from the control operations.
var (
	ErrActiveHere = errors.New("vbucket is active on this node")
	ErrBusy       = errors.New("a takeover of this vbucket is already running")
	ErrBadVBucket = errors.New("vbucket out of range")
)

// Forget is called when the vbucket is deleted here (DEL_VBUCKET): its
// history goes, and so does where a consumer had got to.
func (n *Node) Forget(vb int) {
	n.Log.Forget(vb)
	n.setProgress(vb, 0, 0)
}

// Takeover moves vbucket vb here from the node at src and returns when it
// is active here (nil) or the move failed (DESIGN.md §3). The vbucket is a
// replica here while it is copied and pending for the handover. If the
// move fails after the source asked this node to turn pending, the
// vbucket stays here as a replica with everything that arrived, for the
// manager to promote or drop (see doc.go). If it fails before, a vbucket
// that was a replica fed from src when the takeover began stays a
// replica with its copy (no longer fed: the caller decides whether to
// feed it again or promote it), as long as that copy is whole: it holds
// what a replica of src holds, every write src acknowledged under
// --sync-replication, and dropping it would lose the vbucket if src is
// gone. Any other copy (a partial one from this takeover, a replica fed
// from elsewhere, one caught mid-way through a reset backfill) is
// dropped and the vbucket is dead here again.
func (n *Node) Takeover(ctx context.Context, vb int, src string) error {
	if vb < 0 || vb >= n.States.Len() {
		return ErrBadVBucket
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	run := &takeoverRun{src: src, cancel: cancel, done: make(chan struct{})}
	n.mu.Lock()
	if _, busy := n.takeovers[uint16(vb)]; busy {
		n.mu.Unlock()
		return ErrBusy
	}
	n.takeovers[uint16(vb)] = run
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.takeovers, uint16(vb))
		n.mu.Unlock()
		close(run.done)
	}()
	// fedFromSrc: vb is a replica here streamed from src, the node it is
	// taken over from; its copy is kept if the takeover fails early.
	fedFromSrc := false
	switch n.States.Get(vb) {
	case vbucket.Active:
		return ErrActiveHere
	case vbucket.Replica:
		// A replica fed by replication continues from where it is.
		n.mu.Lock()
		fedFromSrc = n.repOf[uint16(vb)] == src
		n.mu.Unlock()
		n.StopReplication(vb)
	default:
		n.Store.DropVBucket(vb)
		n.Forget(vb)
		if _, err := n.States.Set(vb, vbucket.Replica); err != nil {
			return err
		}
	}
	c := &consumer{n: n, src: src, takeover: true, vbs: []uint16{uint16(vb)}}
	err := c.run(ctx)
	if err == nil {
		return nil
	}
	switch n.States.Get(vb) {
	case vbucket.Active:
		// The source told us to turn active and we did; only its
		// STREAM_END was lost.
		return nil
	case vbucket.Pending:
		// The source may already be dead for vb: keep what arrived.
		n.States.CompareAndSet(vb, vbucket.Pending, vbucket.Replica)
		return fmt.Errorf("takeover of vbucket %d from %s failed after the handover began (vbucket kept here as replica): %w", vb, src, err)
	case vbucket.Replica:
		// A reset backfill drops the copy when it begins; cut off
		// before its snapshot closed, what is here is part of it.
		s := c.streams[uint16(vb)]
		if fedFromSrc && (s == nil || !s.inSnap || s.snapFlags&SnapReset == 0) {
			return fmt.Errorf("takeover of vbucket %d from %s failed before the handover began (vbucket kept here as the replica it was, no longer fed): %w", vb, src, err)
		}
	}
	n.Store.DropVBucket(vb)
	n.Forget(vb)
	n.States.CompareAndSet(vb, vbucket.Replica, vbucket.Dead)
	return fmt.Errorf("takeover of vbucket %d from %s failed: %w", vb, src, err)
}

// AbortTakeover stops a takeover of vb in progress on this node (the
// operator changed or deleted the vbucket here) and waits until it has
// stopped. The source, cut off before it told this node to turn active,
// turns itself back active.
func (n *Node) AbortTakeover(vb int) {
	n.mu.Lock()
	run := n.takeovers[uint16(vb)]
	n.mu.Unlock()
	if run == nil {
		return
	}
	run.cancel()
	<-run.done
}

// EndTakeoverFrom ends every takeover of vb from this node to another
// (an operator's or a failover's SET_VBUCKET or DEL_VBUCKET here
// overrides it, as AbortTakeover does on the target) and waits until each
// has finished. A takeover stream has its connection to itself, which is
// closed: a handover that made vb dead here and had not yet told its
// consumer to turn active turns it back active (finish); one that had
// told it leaves it dead. Without this, a handover held up by a silent
// target (paused) went on when it answered again, after a failover had
// made this copy active again: it turned it dead, or told the target to
// turn active beside it (issue 43).
func (n *Node) EndTakeoverFrom(vb int) {
	if !endTakeovers {
		return
	}
	var ps []*producer
	n.mu.Lock()
	for p := range n.producers {
		p.mu.Lock()
		for _, s := range p.streams {
			if int(s.vb) == vb && s.takeover {
				ps = append(ps, p)
				break
			}
		}
		p.mu.Unlock()
	}
	n.mu.Unlock()
	for _, p := range ps {
		p.nc.Close()
		<-p.ended
	}
}

// replicator keeps one consumer connection to a source node streaming the
// vbuckets replicated from it, reconnecting with backoff. Its goroutine is
// owned by the Node (Node.wg) and stops when its cancel is called: by
// StopReplication when its last vbucket goes, or by Node.Close.
//
// A vbucket added to or removed from the set goes on or off the running
// connection (consumer.add, consumer.drop), and the other streams go on.
// When that cannot be done (no connection is up, or a stream of the same
// vbucket closed on it has not ended yet) the connection restarts: the
// consumer resumes every stream from where it was, which costs a round
// trip, not a copy, and additions within reconfigureDelay share one
// restart.
type replicator struct {
	src    string
	cancel context.CancelFunc // stops the goroutine
	done   chan struct{}      // closed when the goroutine returns

	// Under Node.mu:
	vbs        map[uint16]struct{}
	live       *consumer          // the current connection's consumer (nil between connections)
	connCancel context.CancelFunc // ends the current connection
	restarting bool               // a coalesced restart is scheduled
	changed    chan struct{}      // cap 1: the set changed (wakes an idle goroutine)

	err atomic.Pointer[string] // the last connection error, for stats
}

const reconfigureDelay = 10 * time.Millisecond

// Replicate makes vb a replica here fed from the node at src (star or
// chained: src may itself hold a replica). It returns at once; the stream
// (re)connects in the background until StopReplication.
func (n *Node) Replicate(vb int, src string) error {
	if vb < 0 || vb >= n.States.Len() {
		return ErrBadVBucket
	}
	switch n.States.Get(vb) {
	case vbucket.Active, vbucket.Pending:
		return ErrActiveHere
	case vbucket.Dead, vbucket.Unknown:
		if _, err := n.States.Set(vb, vbucket.Replica); err != nil {
			return err
		}
	}
	n.mu.Lock()
	if _, busy := n.takeovers[uint16(vb)]; busy {
		n.mu.Unlock()
		return ErrBusy
	}
	old := n.repOf[uint16(vb)]
	n.mu.Unlock()
	if old == src {
		return nil
	}
	if old != "" {
		n.StopReplication(vb)
	}
	n.mu.Lock()
	n.repOf[uint16(vb)] = src
	r := n.reps[src]
	if r == nil {
		r = n.startReplicatorLocked(src)
	}
	r.vbs[uint16(vb)] = struct{}{}
	select {
	case r.changed <- struct{}{}:
	default:
	}
	live := r.live
	n.mu.Unlock()
	// A connection made from here on asks for vb; the one up now (if any)
	// is asked for it now.
	if live != nil && live.add(uint16(vb)) {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if r.connCancel != nil && !r.restarting {
		r.restarting = true
		time.AfterFunc(reconfigureDelay, func() {
			n.mu.Lock()
			r.restarting = false
			cancel := r.connCancel
			n.mu.Unlock()
			if cancel != nil {
				cancel()
			}
		})
	}
	return nil
}

// ReplicaSource is the node vb is fed from here ("" when none: not a
// replica, or its replication stopped).
func (n *Node) ReplicaSource(vb int) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.repOf[uint16(vb)]
}

// StopReplication stops feeding vb (it keeps its state and items). When it
// returns, nothing more is applied to vb by replication.
func (n *Node) StopReplication(vb int) {
	n.mu.Lock()
	src, ok := n.repOf[uint16(vb)]
	if !ok {
		n.mu.Unlock()
		return
	}
	delete(n.repOf, uint16(vb))
	r := n.reps[src]
	if r == nil {
		n.mu.Unlock()
		return
	}
	delete(r.vbs, uint16(vb))
	if len(r.vbs) == 0 {
		delete(n.reps, src)
		r.cancel()
		n.mu.Unlock()
		<-r.done
		return
	}
	live := r.live
	n.mu.Unlock()
	// A connection made from here on does not ask for vb; the one up now
	// (if any) stops applying it before drop returns.
	if live != nil {
		live.drop(uint16(vb))
	}
}

// startReplicatorLocked starts the goroutine for src. n.mu is held.
// The goroutine's context is its own, not a caller's: it lives until
// r.cancel, which StopReplication or Close calls.
func (n *Node) startReplicatorLocked(src string) *replicator {
	ctx, cancel := context.WithCancel(context.Background())
	r := &replicator{src: src, vbs: map[uint16]struct{}{}, cancel: cancel, done: make(chan struct{}),
		changed: make(chan struct{}, 1)}
	if n.closed {
		cancel()
	}
	n.reps[src] = r
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer close(r.done)
		backoff := 50 * time.Millisecond
		for ctx.Err() == nil {
			n.mu.Lock()
			list := make([]uint16, 0, len(r.vbs))
			for v := range r.vbs {
				list = append(list, v)
			}
			sort.Slice(list, func(i, j int) bool { return list[i] < list[j] })
			cctx, ccancel := context.WithCancel(ctx)
			r.connCancel = ccancel
			var c *consumer
			if len(list) > 0 {
				c = &consumer{n: n, src: src, vbs: list}
				r.live = c
			}
			n.mu.Unlock()
			var err error
			if c != nil {
				err = c.run(cctx)
				n.mu.Lock()
				r.live = nil
				n.mu.Unlock()
			} else {
				select {
				case <-cctx.Done():
				case <-r.changed:
				}
			}
			reconfigured := cctx.Err() != nil && ctx.Err() == nil
			ccancel()
			if ctx.Err() != nil {
				return
			}
			if reconfigured || len(list) == 0 {
				backoff = 50 * time.Millisecond
				continue
			}
			msg := err.Error()
			r.err.Store(&msg)
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-r.changed:
				t.Stop()
			case <-t.C:
			}
			backoff = min(2*backoff, 2*time.Second)
		}
	}()
	return r
}

// Moved returns how many takeovers this node completed as the source.
func (n *Node) Moved() uint64 { return n.moved.Load() }

// Stats calls add for every "stats streams" line: each producer's streams
// (what it sent, what was acknowledged, the lag in sequence numbers and
// bytes) and each consumer stream (where it got to).
//
// With only >= 0, just that vbucket's streams are shown.
func (n *Node) Stats(only int, add func(name, value string)) {
	n.mu.Lock()
	prods := make([]*producer, 0, len(n.producers))
	for p := range n.producers {
		prods = append(prods, p)
	}
	type cs struct {
		src string
		s   *cstream
	}
	var cons []cs
	for src, m := range n.consumers {
		for s := range m {
			cons = append(cons, cs{src, s})
		}
	}
	reps := make([]*replicator, 0, len(n.reps))
	for _, r := range n.reps {
		reps = append(reps, r)
	}
	n.mu.Unlock()
	sort.Slice(prods, func(i, j int) bool { return prods[i].name < prods[j].name })
	sort.Slice(cons, func(i, j int) bool {
		if cons[i].src != cons[j].src {
			return cons[i].src < cons[j].src
		}
		return cons[i].s.vb < cons[j].s.vb
	})
	add("log_ring_bytes", fmt.Sprint(n.Log.RingBytes()))
	add("takeovers_out", fmt.Sprint(n.moved.Load()))
	add("branch_rebuilds", fmt.Sprint(n.branchRebuilds.Load()))
	for _, p := range prods {
		p.stats(only, add)
	}
	for _, c := range cons {
		if only >= 0 && int(c.s.vb) != only {
			continue
		}
		q := fmt.Sprintf("consumer:%s:vb_%d:", c.src, c.s.vb)
		done := c.s.completeSeen.Load()
		high := c.s.producerHigh.Load()
		kind := "replication"
		if c.s.takeover {
			kind = "takeover"
		}
		add(q+"type", kind)
		add(q+"seqno", fmt.Sprint(done))
		add(q+"producer_seqno", fmt.Sprint(high))
		add(q+"seqno_behind", fmt.Sprint(high-min(high, done)))
		add(q+"items_received", fmt.Sprint(c.s.items.Load()))
	}
	for _, r := range reps {
		if e := r.err.Load(); e != nil {
			add("replication:"+r.src+":last_error", *e)
		}
	}
}

// NewBranch starts a new branch of vb's history here (Log.NewBranch):
// the copy is about to turn active where another active may have written
// past it.
func (n *Node) NewBranch(vb int) { n.Log.NewBranch(vb, n.newUUID) }
