// Package move moves one vbucket from one node to another, as DESIGN.md §3
// describes, and settles every way that can fail. It is synchronous,
// starts no goroutine that outlives it, and talks to the nodes only
// through their control requests (internal/admin).
//
// Two callers: `vbcache ctl move-vbucket` calls Move, which publishes the
// map itself (step 3 below). The cluster manager (internal/manager) runs
// every active move of a rebalance through Move, and a move a previous
// leader left in flight or unpublished through Recover, both with
// Options.Publish set to its own step 3 (its commit in etcd, then its
// push) and Options.Halt ending the move when its leadership ends. Its
// failover promotes each replica of the failed node through Promote,
// after it committed and pushed the map and made sure the node serves
// nothing: the same rules with the source fenced (below).
//
// # The happy path
//
//  1. Preflight: the source holds the vbucket active; the target does not.
//     The process id of each node is noted, so that a node that restarts
//     during the move (and so lost its copy) is recognised later.
//  2. TAKEOVER on the target. The target streams the vbucket from the
//     source (replica while it copies, pending for the handover); the
//     source turns dead once drained, sends the rest and tells the target
//     to turn active (internal/stream). TAKEOVER is answered when the
//     vbucket is active on the target, or with the reason it is not.
//  3. Publish the new map: the newest cluster config (by revEpoch, rev)
//     among the nodes, with row vb's active set to the target (added to
//     serverList, nodes and nodesExt if absent; removed from the row's
//     replicas), rev+1, pushed with SET_CLUSTER_CONFIG to every node of its
//     serverList and to both ends of the move. When no node holds a config
//     there is nothing to publish, and Result says so. With
//     Options.Publish, the caller's function does this step instead.
//  4. Only once both ends of the move hold the new map (or there is no map;
//     or Options.Publish returned nil) is the old copy deleted
//     (DEL_VBUCKET on the source), unless Options.KeepOld says the caller
//     will make it a replica. Until then the dead copy is the fallback if
//     the target is lost.
//
// # Recovery rules
//
// When TAKEOVER fails (the node answered an error, or the connection
// broke, or it timed out), Move looks at both nodes, every Settle/50 for up
// to Options.Settle (default 5 s), and applies the first rule that fits.
// "Settled" means the target is not pending and neither node still has a
// takeover stream of the vbucket between them open (replication cannot
// turn the target active, so it is not waited for): the takeover is over
// on both sides, so no state can change behind our back. "Lost" means
// connection refused (on one machine: the process is gone) or a different process id
// than at preflight (the node restarted and every vbucket it held is
// gone), or, for Promote only, fenced: the caller has proof the source
// serves nothing, and it is not asked.
//
// The invariant each rule keeps is "never two actives": the target turns
// active only when the source, already dead, tells it to; so the source
// being active proves the target is not, and the target being active
// proves the source turned dead for good (it stays dead once it has sent
// "go active").
//
//   - R1 the target is active → the move happened (only its answer was
//     lost): publish and delete the old copy as on the happy path. If the
//     source is reachable and active too, that is two actives, which the
//     stream protocol must never produce: nothing is touched and the move
//     is unresolved.
//   - R2 the target is pending, or a takeover stream of the vbucket is
//     still open on either node → the handover is in flight: wait.
//   - R3 the source is active → aborted cleanly: the source never told the
//     target to go active (or the target refused), so the target cannot be
//     active. The target's partial copy (replica) is dropped with
//     DEL_VBUCKET when the target is reachable and settled; a target
//     that was the vbucket's replica at preflight keeps its copy (the
//     takeover kept it, internal/stream Node.Takeover) and is set to
//     replicate from the source again (REPLICATE), as before the move.
//   - R4 the source is dead (reachable, same process) and the target is
//     settled and not active, or lost → set the source active again and
//     drop the target's copy (or feed it again, as R3). Justification: the target is not active and
//     no stream can make it so (settled, or its process is gone), and the
//     source's dead copy holds every write it ever acknowledged (a dead
//     vbucket keeps its items until DEL_VBUCKET). This deliberately does
//     NOT promote a replica target here, though the source "sent
//     everything before go active": sent is not received. When the
//     connection broke after the last mutations were written, the target
//     may lack some of them, while the source certainly has them. A dead
//     source that holds nothing (no item, no sequence number) while the
//     target is a replica holding items is not R4's: its process was
//     replaced (Recover knows no process ids to tell) and it counts as
//     lost, for R5 (issue 43; the vbcache_unsafe_emptysource build tag
//     turns that off). Nor is a dead source with no lineage for the
//     vbucket ("stats vbucket N": vb_N:uuid 0) R4's: a source that began
//     a handover has one (its takeover stream opened it) until the move
//     deletes its copy, once the target is active, so it is a process
//     started again or a copy deleted behind the move's back. Set active
//     again it would be active empty while the vbucket's replicas (no
//     end of the move) may hold the data: unresolved
//     (source-without-history; it waits while the target does not
//     answer), for the restart rule or a failover to promote the best
//     copy (issue 43; the vbcache_unsafe_sourcehistory build tag turns
//     that off).
//   - R5 the source is lost and the target is settled as a replica → the
//     handover had begun, or the target was the vbucket's replica, fed
//     from the source, before the move (a target that fails before it
//     turns pending drops its copy and goes dead unless it was that
//     replica, internal/stream Node.Takeover), so the target holds every
//     write the source acknowledged before the handover began (or, as
//     that replica, what a failover would promote: every write under
//     --sync-replication), and the source can answer nothing: promote the
//     target (SET_VBUCKET active) and publish the map. The old copy is not
//     deleted (its node is gone). Writes the source acknowledged between
//     the drain and its turning dead, and the tail it had not yet sent,
//     are lost with the source; this is a cache, and the alternative is
//     losing the whole vbucket.
//   - Anything else (a node that times out without refusing, the source
//     lost while the target is dead or lost, a state the protocol does not
//     produce, or R2 still waiting when Settle runs out) → unresolved:
//     states are left alone and the error says what each node reported.
//
// The rules act as soon as one fits, so R4 does not wait for the source
// to turn itself back active (it does so when its stream ends without
// "go active"): setting it active ourselves gives the same state.
//
// Recover applies the same rules to a move it did not begin (no TAKEOVER
// of its own, no preflight): the rules read the nodes' states, which say
// where a handover got to whoever started it.
//
// Promote applies them with a fenced source to a replica its caller has
// already named the vbucket's active (a failover): R5 promotes it, R1
// finds it active already, R2 waits for a handover in flight into it;
// anything else is unresolved. A fenced source is never active, dead or
// streaming to the rules (it is not asked), so R3 and R4 cannot apply.
// There is no publish step (the caller published first) and no old copy
// to delete (its node is out of the cluster).
//
// Move's ctx bounds the preflight and the TAKEOVER request. Closing the
// TAKEOVER connection does not stop the move on the target (the request
// runs on the node, not on the connection), so recovery always runs,
// bounded by Settle, even after ctx ended.
//
// A target that stops answering while its TAKEOVER is in flight (paused,
// or cut off) may have turned active and its answer be lost: Move does not
// wait MoveTimeout for it. A watchdog asks the target for the vbucket's
// state on a second connection about once a second and abandons the
// request once the target has been silent for Settle, or at once when
// Options.Abandon says the caller is failing an end of the move over
// (recovery's waits stop then too); recovery then finds the target
// silent, and the move is unresolved, for the failover to settle: it
// fences the target and makes the source's copy active again (the
// manager's failover.go). When Options.TargetLost says the target alone
// is being failed over, recovery stops at once, even in the middle of a
// look at it (vbcache_unsafe_targetwait turns that off). The build tag
// vbcache_unsafe_takeoverwatch turns the watchdog off, for tests.
package move

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// Options tune a move. The zero value uses the defaults.
type Options struct {
	// Nodes are further nodes to read the cluster config from (and to
	// push the new one to), besides the two ends of the move and the
	// config's serverList.
	Nodes []string
	// Settle bounds recovery after a failed TAKEOVER: how long Move waits
	// for the two nodes to reach a state a rule can act on (default 5 s).
	Settle time.Duration
	// MoveTimeout bounds the TAKEOVER request itself (default 10 minutes).
	MoveTimeout time.Duration
	// RequestTimeout bounds every other control request (default 3 s).
	RequestTimeout time.Duration
	// Logf, if set, receives a line per step.
	Logf func(format string, args ...any)
	// Abandon, if set, is asked every 50 ms while the TAKEOVER
	// request is in flight: true (an end of the move is being failed
	// over) abandons the request at once, as a target silent for Settle
	// does (see takeover); recovery follows.
	Abandon func() bool
	// TargetLost, if set, is asked every 50 ms while recovery looks at
	// the nodes: true (the caller is failing the target over, not the
	// source) ends recovery at once, unresolved, even in the middle of
	// a look at the target. The caller's failover fences the target
	// and makes the source's copy active again; waiting for a paused
	// target's answer would only hold that failover up (Settle).
	TargetLost func() bool
	// Credentials log the move's control connections in (the cluster
	// administrator's); nil: none, for nodes run with --insecure-cluster.
	Credentials *admin.Credentials
	// Conn, if set, runs f on a control connection to addr for the
	// looks at a node (Observe, the preflight, the recovery's looks),
	// which only read: the cluster manager's pool, so that a move does
	// not dial and log in for each look. A look that fails on it for
	// want of an answer is made again on a fresh connection, whose dial
	// tells a node that refuses connections (gone) from one that does
	// not answer. Requests that change a node always dial their own.
	Conn func(ctx context.Context, addr string, f func(c *admin.Conn) error) error

	// Publish, if set, is step 3 instead of Move's own: it makes the
	// cluster's map say that vb is active on to, and returns nil once
	// that map is stored and pushed (the cluster manager: its commit in
	// etcd, rev+1, then its push to every node) with the new rev. Move
	// deletes the old copy only after it returned nil; on an error the
	// old copy is kept and Move returns ErrNotPublished. Options.Nodes
	// is then unused, and Result.PublishedTo stays empty.
	Publish func(ctx context.Context, vb int, to string) (rev int64, err error)
	// KeepOld keeps the source's dead copy after the publish instead of
	// deleting it (step 4): the caller makes it the new active's replica,
	// which resumes from where the handover left it (internal/stream:
	// the source notes its position) instead of copying the vbucket
	// again. The cluster manager's swaps ([a, b] to [b, a]) set it.
	KeepOld bool
	// Halt, if set, is asked after the TAKEOVER request before each
	// change Move makes: before the action a recovery rule decides on
	// (setting a state, then dropping the target's copy), before the
	// publish, before deleting the old copy, and before each look while
	// recovery waits. A non-nil answer stops the move there, the nodes'
	// states left as they are, and the error wraps ErrHalted;
	// Result.Outcome says where the vbucket was (Unresolved while
	// recovery had not decided). A halt after the publish only keeps the
	// old copy (Result.DeleteErr), and the error is nil. The cluster
	// manager halts a move when its leadership ends, so that a deposed
	// leader stops acting on the nodes and its successor finishes the
	// move (Recover). The answer and the change are not atomic: a
	// leadership that ends between them still makes that one change.
	Halt func() error
}

// Defaults for Options' zero values.
const (
	DefaultSettle         = 5 * time.Second
	DefaultMoveTimeout    = 10 * time.Minute
	DefaultRequestTimeout = 3 * time.Second
)

func (o Options) withDefaults() Options {
	if o.Settle <= 0 {
		o.Settle = DefaultSettle
	}
	if o.MoveTimeout <= 0 {
		o.MoveTimeout = DefaultMoveTimeout
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	return o
}

// halted is Halt's answer, wrapped in ErrHalted (nil without Halt).
func (o *Options) halted() error {
	if o.Halt == nil {
		return nil
	}
	if err := o.Halt(); err != nil {
		return fmt.Errorf("%w: %v", ErrHalted, err)
	}
	return nil
}

func (o *Options) logf(format string, args ...any) {
	if o.Logf != nil {
		o.Logf(format, args...)
	}
}

// Outcome is how a move ended.
type Outcome uint8

const (
	// NotStarted: the preflight failed; nothing was changed.
	NotStarted Outcome = iota
	// Moved: the vbucket is active on the target and dead on the source.
	Moved
	// Aborted: the vbucket is active on the source, as before the move.
	Aborted
	// Promoted: the source was lost during the handover and the target,
	// which held the vbucket as a replica, was made active.
	Promoted
	// Unresolved: Move could not tell what happened and changed nothing
	// after the failure; Result.Detail says what each node reported.
	Unresolved
)

// String returns the outcome's name.
func (o Outcome) String() string {
	switch o {
	case NotStarted:
		return "not-started"
	case Moved:
		return "moved"
	case Aborted:
		return "aborted"
	case Promoted:
		return "promoted"
	case Unresolved:
		return "unresolved"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Errors Move wraps; test with errors.Is.
var (
	ErrPreflight    = errors.New("move: preflight failed")
	ErrAborted      = errors.New("move: aborted, the source is active")
	ErrUnresolved   = errors.New("move: unresolved")
	ErrNotPublished = errors.New("move: new map not published")
	ErrHalted       = errors.New("move: halted")
)

// Result reports a move.
type Result struct {
	VBucket  int
	From, To string
	Outcome  Outcome
	// TakeoverErr is what the TAKEOVER request returned (nil: success).
	TakeoverErr error
	// Rule names the recovery rule applied after a failed TAKEOVER, or
	// the one Promote applied.
	Rule string
	// Detail describes the recovery: what each node reported.
	Detail string

	// Published is true when the new map was stored by the nodes that
	// matter (both ends, or the target alone after source loss); Rev and
	// RevEpoch are then its revision. NoConfig is true when no node had a
	// config, so none was published.
	Published     bool
	NoConfig      bool
	Rev, RevEpoch int64
	// PublishedTo lists the nodes that hold the new map; PublishFailed the
	// others, with the reason.
	PublishedTo   []string
	PublishFailed map[string]string
	// OldCopyDeleted is true when DEL_VBUCKET on the source succeeded;
	// DeleteErr says why it was not, if it was tried.
	OldCopyDeleted bool
	DeleteErr      error
	// TargetCopyDropped is true when an aborted move dropped the target's
	// partial copy.
	TargetCopyDropped bool
	// TargetRefed is true when an aborted move's target, the vbucket's
	// replica before the move, was set to replicate from the source
	// again instead (its copy kept).
	TargetRefed bool
	// Fenced is true for Promote: the source was fenced, not asked, and
	// the caller had published the map.
	Fenced bool

	// Timings.
	Duration                               time.Duration // the whole move
	Preflight, Takeover, Recovery, Publish time.Duration
	Delete                                 time.Duration
}

// String is the outcome line, e.g. "moved vbucket 5 from a to b; map rev
// 7 published to 3 nodes; old copy deleted".
func (r *Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s vbucket %d from %s to %s", r.Outcome, r.VBucket, r.From, r.To)
	if r.Rule != "" {
		fmt.Fprintf(&b, " (recovery %s)", r.Rule)
	}
	switch {
	case r.Published && r.PublishedTo == nil: // Options.Publish did it
		fmt.Fprintf(&b, "; map rev %d published", r.Rev)
	case r.Published:
		fmt.Fprintf(&b, "; map rev %d (epoch %d) published to %d nodes", r.Rev, r.RevEpoch, len(r.PublishedTo))
	case r.NoConfig:
		b.WriteString("; no node holds a cluster map, none published")
	case r.Fenced:
		b.WriteString("; source fenced, map published before")
	case r.Outcome == Moved || r.Outcome == Promoted:
		b.WriteString("; map NOT published")
	}
	if r.OldCopyDeleted {
		b.WriteString("; old copy deleted")
	}
	if r.TargetCopyDropped {
		b.WriteString("; target's partial copy dropped")
	}
	if r.TargetRefed {
		b.WriteString("; target a replica fed from the source again")
	}
	return b.String()
}

// Timings is a line of the move's durations.
func (r *Result) Timings() string {
	ms := func(d time.Duration) string { return d.Round(time.Microsecond).String() }
	return fmt.Sprintf("total %s: preflight %s, takeover %s, recovery %s, publish %s, delete %s",
		ms(r.Duration), ms(r.Preflight), ms(r.Takeover), ms(r.Recovery), ms(r.Publish), ms(r.Delete))
}

// Move moves vbucket vb from the node at from to the node at to (both
// host:port) and settles the outcome (see the package comment). The error
// is nil when the vbucket ends active on the target with the map
// published (or no map anywhere): Outcome Moved, or Promoted after the
// source was lost. Otherwise it wraps ErrPreflight, ErrAborted,
// ErrUnresolved or ErrNotPublished, and Result says what happened.
func Move(ctx context.Context, vb int, from, to string, opt Options) (res Result, err error) {
	opt = opt.withDefaults()
	start := time.Now()
	res = Result{VBucket: vb, From: from, To: to}
	defer func() { res.Duration = time.Since(start) }()
	if from == to {
		return res, fmt.Errorf("%w: source and target are both %s", ErrPreflight, from)
	}
	if vb < 0 || vb > 0xffff {
		return res, fmt.Errorf("%w: vbucket %d out of range", ErrPreflight, vb)
	}
	m := &mover{vb: vb, from: from, to: to, opt: opt}

	// 1. Preflight.
	t0 := time.Now()
	fv := m.observe(ctx, from, "", "")
	tv := m.observe(ctx, to, "", from)
	res.Preflight = time.Since(t0)
	switch {
	case fv.reach != reachOK:
		return res, fmt.Errorf("%w: source %s: %w", ErrPreflight, from, fv.err)
	case fv.state != vbucket.Active:
		return res, fmt.Errorf("%w: source %s holds vbucket %d as %s, not active", ErrPreflight, from, vb, fv.state)
	case tv.reach != reachOK:
		return res, fmt.Errorf("%w: target %s: %w", ErrPreflight, to, tv.err)
	case tv.state == vbucket.Active:
		return res, fmt.Errorf("%w: target %s already holds vbucket %d active", ErrPreflight, to, vb)
	}
	m.fromPID, m.toPID = fv.pid, tv.pid
	m.toWasReplica = tv.state == vbucket.Replica
	opt.logf("preflight: %s holds vbucket %d active (pid %s); %s holds it %s (pid %s)", from, vb, fv.pid, to, tv.state, tv.pid)

	// 2. TAKEOVER on the target.
	t0 = time.Now()
	res.TakeoverErr = m.takeover(ctx)
	res.Takeover = time.Since(t0)
	if res.TakeoverErr == nil {
		opt.logf("takeover: vbucket %d active on %s after %s", vb, to, res.Takeover.Round(time.Millisecond))
		res.Outcome = Moved
		return res, m.finish(&res, true /* deleteOld */)
	}
	opt.logf("takeover failed after %s: %v", res.Takeover.Round(time.Millisecond), res.TakeoverErr)

	// Recovery (the rules in the package comment).
	t0 = time.Now()
	err = m.recover(&res)
	res.Recovery = time.Since(t0)
	return res, err
}

// Recover settles a move that was begun and not finished by someone who
// can no longer finish it (the cluster manager's leader that died during
// it): it looks at both nodes and applies the recovery rules of the
// package comment exactly as Move does after a failed TAKEOVER, waiting
// up to Options.Settle for the nodes to settle, publishing and then
// deleting the old copy under R1, setting the source active again under
// R4, promoting the target under R5. The result and the error are
// Move's.
//
// Recover knows no process ids from a preflight, so a node that
// restarted in the meantime is recognised by what it holds: a restarted
// source holds the vbucket dead and empty, and when the target is a
// replica holding items, the source counts as lost and the target is
// promoted (R5; before issue 43 it read as R4's dead source, set active
// again, empty, and the target's copy was dropped). A restarted source
// whose target holds nothing either is R4's: set active, empty, which
// loses nothing more.
//
// To Recover, an active source with no takeover stream open is R3, an
// aborted move: call it only when the takeover may have begun (the target
// is pending or active, the source is not active, or the source has a
// takeover stream of the vbucket open), and Move otherwise.
//
// It takes no context: like Move's recovery, it runs to its end once
// begun, bounded by Settle and the request timeouts; Options.Halt stops
// it.
func Recover(vb int, from, to string, opt Options) (res Result, err error) {
	opt = opt.withDefaults()
	start := time.Now()
	res = Result{VBucket: vb, From: from, To: to}
	defer func() { res.Duration = time.Since(start) }()
	if from == to || from == "" || to == "" {
		return res, fmt.Errorf("%w: recovering a move from %q to %q", ErrPreflight, from, to)
	}
	m := &mover{vb: vb, from: from, to: to, opt: opt}
	err = m.recover(&res)
	res.Recovery = time.Since(start)
	return res, err
}

// Promote makes vb active on to, a replica of it whose source from is
// fenced: the caller has proof that from serves nothing and will turn
// nothing active (the cluster manager's failover: the node was told its
// vbuckets are dead, or its lease ran out and its peers hold the map
// without it, or the operator forced it), and has already published the
// map that names to as vb's active. from is never asked.
//
// The recovery rules of the package comment decide, with the source
// fenced (it counts as lost): a replica on to is promoted (R5:
// SET_VBUCKET active, which also stops its replication); an active one
// is done (R1: Outcome Moved, nothing touched); a pending one, or one
// with a takeover stream of vb open, is waited for (R2) up to
// Options.Settle, after which it is unresolved; a target that does not
// answer is waited for the same way (R5-wait); a target that refuses
// connections or holds vb dead is unresolved (source-and-copy-lost).
// Nothing is published and no old copy is deleted: the caller published
// first, and the source's node is out. Result.Rule names the rule that
// decided, also in the error.
//
// The replication stream from from that feeds a replica on to is not
// looked at: it is no handover, and it stays open for as long as a
// paused node's socket does, which would hold every promotion of a
// paused node for Settle. A takeover from from into to shows as pending
// for its handover, which R2 waits for. Promote knows no process ids, so
// a target that restarted is recognised only by what it holds (a node
// restarts with every vbucket dead: unresolved).
//
// ctx bounds each request and the wait; Options.Halt is asked before
// each look and before the promotion, as in Move. The error is nil when
// vb ends active on to (Outcome Promoted or Moved); otherwise it wraps
// ErrUnresolved or ErrHalted.
func Promote(ctx context.Context, vb int, from, to string, opt Options) (res Result, err error) {
	opt = opt.withDefaults()
	start := time.Now()
	res = Result{VBucket: vb, From: from, To: to, Fenced: true}
	defer func() {
		res.Duration = time.Since(start)
		res.Recovery = res.Duration
	}()
	if from == to || to == "" {
		return res, fmt.Errorf("%w: promoting vbucket %d on %q, fenced source %q", ErrPreflight, vb, to, from)
	}
	if vb < 0 || vb > 0xffff {
		return res, fmt.Errorf("%w: vbucket %d out of range", ErrPreflight, vb)
	}
	m := &mover{vb: vb, from: from, to: to, fenced: true, opt: opt}
	a, _, err := m.settle(ctx, &res)
	if err != nil {
		return res, err
	}
	switch a {
	case actMoved:
		res.Outcome = Moved
		return res, nil
	case actPromote:
		herr := opt.halted()
		if herr == nil && ctx.Err() != nil {
			herr = fmt.Errorf("%w: %v", ErrHalted, ctx.Err())
		}
		if herr != nil {
			res.Outcome = Unresolved
			return res, fmt.Errorf("vbucket %d (%s): %s: %w", vb, res.Rule, res.Detail, herr)
		}
		err := m.withConn(ctx, to, func(c *admin.Conn) error { return c.SetVBucket(vb, vbucket.Active) })
		if err != nil {
			res.Outcome = Unresolved
			return res, fmt.Errorf("%w: vbucket %d (%s): promoting %s failed (%v); %s", ErrUnresolved, vb, res.Rule, to, err, res.Detail)
		}
		res.Outcome = Promoted
		opt.logf("promoted vbucket %d on %s (%s; source %s fenced)", vb, to, res.Rule, from)
		return res, nil
	case actWait, actAborted, actReactivate:
		// decide acts on the source only when it answered, and settle
		// never returns actWait.
		panic(fmt.Sprintf("move: rule %s (action %d) with a fenced source", res.Rule, a))
	}
	res.Outcome = Unresolved
	return res, fmt.Errorf("%w: vbucket %d (%s): %s", ErrUnresolved, vb, res.Rule, res.Detail)
}

// Reach is how a node answered Observe.
type Reach uint8

const (
	// Reached: the node answered every request.
	Reached Reach = iota
	// Refused: the connection was refused; nothing listens there (on one
	// machine: the process is gone).
	Refused
	// NoReply: a timeout, a reset or an error answer; the node may be
	// alive.
	NoReply
)

// Observation is one look at one node's copy of a vbucket, what the
// recovery rules decide on.
type Observation struct {
	Reach Reach
	Err   error         // why not Reached
	State vbucket.State // the vbucket's state there (Reached only)
	PID   string        // the node's process id ("stats" pid)
	// Streaming: a stream of the vbucket is open there: a takeover
	// producer of it, or, when Observe was given a peer, a consumer of
	// it fed from peer (a replica's replication stream counts too).
	Streaming bool
}

// Observe looks at vb on the node at addr: its state, the node's pid,
// and whether a stream of the vbucket is open there (see Observation).
// It makes no change.
func Observe(ctx context.Context, vb int, addr, peer string, opt Options) Observation {
	m := &mover{vb: vb, opt: opt.withDefaults()}
	v := m.observe(ctx, addr, "", peer)
	o := Observation{Err: v.err, State: v.state, PID: v.pid, Streaming: v.streaming}
	switch v.reach {
	case reachRefused:
		o.Reach = Refused
	case reachNoReply:
		o.Reach = NoReply
	}
	return o
}

// withReadConn runs f, which only reads, on Options.Conn's connection to
// addr, and again on a fresh one (withConn) if that failed for want of a
// node's answer; without Options.Conn, on a fresh one.
func (m *mover) withReadConn(ctx context.Context, addr string, f func(c *admin.Conn) error) error {
	if m.opt.Conn == nil {
		return m.withConn(ctx, addr, f)
	}
	dctx, cancel := context.WithTimeout(ctx, m.opt.RequestTimeout)
	err := m.opt.Conn(dctx, addr, func(c *admin.Conn) error {
		saved := c.Timeout
		c.Timeout = m.opt.RequestTimeout
		defer func() { c.Timeout = saved }()
		return f(c)
	})
	cancel()
	var se *admin.StatusError
	if err == nil || errors.As(err, &se) {
		return err
	}
	return m.withConn(ctx, addr, f)
}

// mover is one Move's state.
type mover struct {
	vb             int
	from, to       string
	fromPID, toPID string
	fenced         bool // Promote: the source is fenced and never asked
	toWasReplica   bool // Move: the target held the vbucket as a replica at preflight
	opt            Options
}

// takeover sends TAKEOVER to the target and waits for its answer. The
// connection is closed if ctx ends; the move itself goes on on the node.
//
// While the request is in flight a watchdog asks the target for the
// vbucket's state on a second connection, about once a second: a target
// that has not answered for Settle (paused, or cut off: its answer to
// TAKEOVER may never come, and MoveTimeout is ten minutes) has the
// request abandoned, and so does Options.Abandon saying so. Abandoning
// closes the connection; what the nodes did is for recovery to read.
func (m *mover) takeover(ctx context.Context) error {
	c, err := admin.DialWith(ctx, m.to, m.opt.Credentials)
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	wctx, wstop := context.WithCancel(ctx)
	why := make(chan string, 1)
	watched := make(chan struct{})
	go func() { // owned by takeover, which waits for it (watched)
		defer close(watched)
		if r := m.watchTarget(wctx); r != "" {
			why <- r
			c.Close()
		}
	}()
	c.MoveTimeout = m.opt.MoveTimeout
	err = c.Takeover(m.vb, m.from)
	wstop()
	<-watched
	select {
	case r := <-why:
		if err != nil {
			return fmt.Errorf("TAKEOVER abandoned: %s (%v)", r, err)
		}
	default:
	}
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return err
}

// watchTarget is takeover's watchdog: it returns why the TAKEOVER is to
// be abandoned, or "" when ctx ends first.
func (m *mover) watchTarget(ctx context.Context) string {
	if !takeoverWatch {
		<-ctx.Done()
		return ""
	}
	// Abandon is asked every tick (it takes no I/O), the target every
	// ping.
	const tick = 50 * time.Millisecond
	every := min(time.Second, max(m.opt.Settle/5, tick))
	t := time.NewTicker(tick)
	defer t.Stop()
	var c *admin.Conn
	defer func() {
		if c != nil {
			c.Close()
		}
	}()
	lastOK, lastPing := time.Now(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return ""
		case <-t.C:
		}
		if m.opt.Abandon != nil && m.opt.Abandon() {
			return "the caller is failing an end of the move over"
		}
		if time.Since(lastPing) < every {
			continue
		}
		lastPing = time.Now()
		ok := false
		if c == nil {
			dctx, cancel := context.WithTimeout(ctx, every)
			c, _ = admin.DialWith(dctx, m.to, m.opt.Credentials)
			cancel()
		}
		if c != nil {
			c.Timeout = every
			if _, err := c.GetVBucket(m.vb); err == nil {
				ok = true
			} else {
				c.Close()
				c = nil
			}
		}
		if ok {
			lastOK = time.Now()
		} else if silent := time.Since(lastOK); silent >= m.opt.Settle {
			return fmt.Sprintf("the target %s has not answered for %v", m.to, silent.Round(time.Millisecond))
		}
	}
}

// finish publishes the map after the vbucket became active on the target
// and, if deleteOld, then deletes the source's copy. res.Outcome is set.
func (m *mover) finish(res *Result, deleteOld bool) error {
	ctx := context.Background() // bounded by RequestTimeout per request
	if err := m.opt.halted(); err != nil {
		return fmt.Errorf("vbucket %d is active on %s, the map not yet published: %w", m.vb, m.to, err)
	}
	t0 := time.Now()
	var p published
	if m.opt.Publish != nil {
		p = m.callerPublish(ctx)
	} else {
		p = m.publish(ctx)
	}
	res.Publish = time.Since(t0)
	res.Rev, res.RevEpoch, res.NoConfig = p.rev, p.epoch, p.noConfig
	res.PublishedTo, res.PublishFailed = p.stored, p.failed
	need := []string{m.to}
	if deleteOld {
		need = append(need, m.from)
	}
	if !p.noConfig {
		res.Published = p.err == nil
		for _, n := range need {
			if _, bad := p.failed[n]; bad {
				res.Published = false
			}
		}
		if !res.Published {
			why := p.err
			if why == nil {
				why = fmt.Errorf("%v", p.failed)
			}
			return fmt.Errorf("%w: vbucket %d is active on %s but the map says otherwise: %v; the old copy on %s is kept",
				ErrNotPublished, m.vb, m.to, why, m.from)
		}
		m.opt.logf("published map rev %d (epoch %d) to %s", p.rev, p.epoch, strings.Join(p.stored, ","))
	} else {
		m.opt.logf("no node holds a cluster map: nothing published")
	}
	if !deleteOld {
		return nil
	}
	if m.opt.KeepOld {
		m.opt.logf("old copy on %s kept, for the caller to make it a replica", m.from)
		return nil
	}
	if err := m.opt.halted(); err != nil {
		res.DeleteErr = err
		m.opt.logf("old copy on %s kept: %v", m.from, err)
		return nil
	}
	t0 = time.Now()
	res.DeleteErr = m.withConn(ctx, m.from, func(c *admin.Conn) error { return c.DelVBucket(m.vb) })
	res.Delete = time.Since(t0)
	res.OldCopyDeleted = res.DeleteErr == nil
	if res.DeleteErr != nil {
		// The copy is dead: it serves nothing and only holds memory.
		m.opt.logf("could not delete the old copy on %s: %v", m.from, res.DeleteErr)
	}
	return nil
}

// withConn runs f on a fresh control connection to addr.
func (m *mover) withConn(ctx context.Context, addr string, f func(c *admin.Conn) error) error {
	dctx, cancel := context.WithTimeout(ctx, m.opt.RequestTimeout)
	defer cancel()

	c, err := admin.DialWith(dctx, addr, m.opt.Credentials)
	if err != nil {
		return err
	}
	defer c.Close()
	c.Timeout = m.opt.RequestTimeout
	return f(c)
}
