package manager

import (
	"fmt"
	"slices"
	"strings"

	"github.com/vbcache/vbcache/internal/move"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// The rebalance's decisions, as pure functions of the state in etcd and
// of what the nodes said: planVB (what to do next for one vbucket) and
// pickNext (which vbucket to move next). The I/O around them is in
// rebalance.go: moveVBucket looks, asks planVB and runs its steps;
// runRebalance asks pickNext. testdata/*.txt pins both
// (TestDecisions).

// vbFacts is what planVB decides on for one vbucket.
type vbFacts struct {
	// Row and Forward are the vbucket's rows of the map and of the
	// forward map in etcd, as addresses ("" for none).
	Row, Forward []string
	// MovedFrom is Rebalance.Moving's entry for the vbucket: the old
	// active of a move whose new active is committed and whose move is
	// not finished ("" for none).
	MovedFrom string
	Chain     bool
	// From and To are looks (move.Observe) at Row[0] (peer "") and at
	// Forward[0] (peer Row[0]), taken only when both are set and differ.
	// When only Forward[0] is set, To is a look at it.
	From, To move.Observation
	// OldDeleted: this leader has deleted MovedFrom's copy already (the
	// move it ran deleted it after the publish).
	OldDeleted bool
}

// stepKind is one thing moveVBucket does.
type stepKind uint8

const (
	// stepDone: the row is the forward row and no move is pending.
	stepDone stepKind = iota
	// stepActivate: SET_VBUCKET active on Node; nobody holds the
	// vbucket, so there is nothing to move.
	stepActivate
	// stepCommitActive: commit Node as the row's active (rev+1) and push
	// it; for a vbucket nobody held.
	stepCommitActive
	// stepMove: move.Move from Src to Node, the manager publishing (its
	// commit and push) before the old copy is deleted.
	stepMove
	// stepRecover: move.Recover from Src to Node: a takeover that may
	// have begun (a previous leader's, or one whose answer was lost) is
	// settled by internal/move's rules R1-R5.
	stepRecover
	// stepStuck: nothing safe to do now; Why says what. The move fails
	// and the rebalance tries it again later (at most maxFailures
	// times).
	stepStuck
	// stepDeleteOld: DEL_VBUCKET on Node, the committed move's old
	// active, which the forward row does not keep.
	stepDeleteOld
	// stepReplicate: Node replicates the vbucket from Src.
	stepReplicate
	// stepCatchUp: wait until Node's stream of the vbucket has reached
	// the active's sequence number as it was when the wait began.
	stepCatchUp
	// stepCommitRow: commit the forward row as the row (rev+1,
	// progress+1, the Moving entry cleared) and push it.
	stepCommitRow
	// stepDropReplica: stop Node's replication of the vbucket and delete
	// its copy; the forward row drops it.
	stepDropReplica
)

// step is one of planVB's steps.
type step struct {
	Kind      stepKind
	Node, Src string
	Why       string // stepStuck, stepRecover: the reason
	// Build (stepMove): forward replicas to build from Src before the
	// takeover, one for each replica slot the new row would otherwise
	// leave empty (the target was the row's replica): committed with the
	// new active, they keep the vbucket a replica holding every
	// acknowledged write at every moment of the move.
	Build []string
	// Keep (stepMove): the source is a forward replica (a swap): its
	// dead copy is kept (move.Options.KeepOld) and committed as a
	// replica with the new active, and then resumes as one from where
	// the handover left it, instead of being deleted and copied again.
	Keep bool
}

func (s step) String() string {
	switch s.Kind {
	case stepDone:
		return "done"
	case stepActivate:
		return "activate " + s.Node
	case stepCommitActive:
		return "commit-active " + s.Node
	case stepMove:
		out := "move " + s.Src + " -> " + s.Node
		if len(s.Build) > 0 {
			out += " (replicas built first: " + strings.Join(s.Build, ",") + ")"
		}
		if s.Keep {
			out += " (old copy kept as a replica)"
		}
		return out
	case stepRecover:
		return "recover " + s.Src + " -> " + s.Node + " (" + s.Why + ")"
	case stepStuck:
		return "stuck: " + s.Why
	case stepDeleteOld:
		return "delete-old " + s.Node
	case stepReplicate:
		return "replicate " + s.Node + " from " + s.Src
	case stepCatchUp:
		return "catch-up " + s.Node
	case stepCommitRow:
		return "commit-row"
	case stepDropReplica:
		return "drop-replica " + s.Node
	}
	return fmt.Sprintf("step(%d)", s.Kind)
}

// planVB says what remains to do for one vbucket of a rebalance, in
// order. While the row's active differs from the forward row's, the plan
// is one step (the active's): its outcome changes the state in etcd or on
// the nodes, and moveVBucket looks again and asks again. Once the active
// is committed, the plan is the rest of the move (the old copy, the
// replicas, the row's commit), which moveVBucket runs through.
//
// The active's step, for a row whose active a is not the forward row's b:
//
//   - nobody holds the vbucket (a is ""): activate b and commit it, or
//     only commit it if b is active already (a previous leader activated
//     it);
//   - a and b both active: stuck, touching nothing (the stream protocol
//     never produces it; an operator must look);
//   - b active: recover (R1: the move happened; publish, then delete a's
//     copy), whatever a says: b turns active only once a is dead for good;
//   - b pending: recover (R2 waits for the handover; then R1, R3, or R5
//     if a is gone by then);
//   - a not answering (refused, or no reply): stuck. A new leader cannot
//     tell a replica that a handover made on b (R5 would promote it) from
//     one that replication made, which only a failover may promote (and,
//     once nodes hold leases (issue 20), only after the lease of the node
//     it replaces has run out);
//   - a active with a takeover stream of the vbucket open: recover (R2
//     waits for the takeover a previous leader began);
//   - a active, b answers: move (a move not begun, or aborted cleanly: R3),
//     building first the forward replicas the new row would lack
//     (buildFirst); b not answering: stuck;
//   - a answering and not active (dead: the handover, or an aborted one
//     not yet reverted): recover (R2 while a stream is open, then R1, R3
//     or R4, which sets a active again).
//
// Recover is never asked while a is active with no takeover stream open:
// to internal/move that is R3, an aborted move, whose clean-up drops a
// settled replica's copy; and a b that is the row's replica, fed from a
// by replication, is never settled to it (its stream from a stays open).
func planVB(f vbFacts) []step {
	if f.Forward == nil {
		return []step{{Kind: stepDone}}
	}
	cur, to := at(f.Row, 0), at(f.Forward, 0)
	if to == "" {
		return []step{{Kind: stepStuck, Why: "the forward row has no active"}}
	}
	if cur != to {
		st := activeStep(cur, to, f.From, f.To)
		if st.Kind == stepMove {
			st.Build = buildFirst(f.Row, f.Forward)
			st.Keep = slices.Contains(f.Forward[1:], cur)
		}
		return []step{st}
	}
	if slices.Equal(f.Row, f.Forward) && f.MovedFrom == "" {
		return []step{{Kind: stepDone}}
	}
	var plan []step
	if f.MovedFrom != "" && !f.OldDeleted && !slices.Contains(f.Forward, f.MovedFrom) {
		plan = append(plan, step{Kind: stepDeleteOld, Node: f.MovedFrom})
	}
	for j := 1; j < len(f.Forward); j++ {
		if r := f.Forward[j]; r != "" {
			plan = append(plan, step{Kind: stepReplicate, Node: r, Src: replicaSource(f.Forward, j, f.Chain)})
		}
	}
	for j := 1; j < len(f.Forward); j++ {
		if r := f.Forward[j]; r != "" && !slices.Contains(f.Row[1:], r) {
			plan = append(plan, step{Kind: stepCatchUp, Node: r, Src: to})
		}
	}
	plan = append(plan, step{Kind: stepCommitRow})
	for _, x := range f.Row[1:] {
		if x != "" && !slices.Contains(f.Forward, x) {
			plan = append(plan, step{Kind: stepDropReplica, Node: x})
		}
	}
	return plan
}

// activeStep is planVB's step while the row's active (cur) is not the
// forward row's (to).
func activeStep(cur, to string, from, tgt move.Observation) step {
	tActive := tgt.Reach == move.Reached && tgt.State == vbucket.Active
	if cur == "" {
		switch {
		case tgt.Reach != move.Reached:
			return step{Kind: stepStuck, Why: fmt.Sprintf("target %s: %s", to, obsString(tgt))}
		case tActive:
			return step{Kind: stepCommitActive, Node: to}
		}
		return step{Kind: stepActivate, Node: to}
	}
	fActive := from.Reach == move.Reached && from.State == vbucket.Active
	switch {
	case fActive && tActive:
		return step{Kind: stepStuck, Why: fmt.Sprintf("vbucket active on both %s and %s", cur, to)}
	case tActive:
		return step{Kind: stepRecover, Src: cur, Node: to, Why: "target active"}
	case tgt.Reach == move.Reached && tgt.State == vbucket.Pending:
		return step{Kind: stepRecover, Src: cur, Node: to, Why: "target pending"}
	case from.Reach != move.Reached:
		return step{Kind: stepStuck, Why: fmt.Sprintf("source %s: %s; a failover's to settle, not a move's", cur, obsString(from))}
	case fActive && from.Streaming:
		return step{Kind: stepRecover, Src: cur, Node: to, Why: "takeover stream open on the source"}
	case fActive && tgt.Reach != move.Reached:
		return step{Kind: stepStuck, Why: fmt.Sprintf("target %s: %s", to, obsString(tgt))}
	case fActive:
		return step{Kind: stepMove, Src: cur, Node: to}
	}
	return step{Kind: stepRecover, Src: cur, Node: to, Why: "source " + obsString(from)}
}

// buildFirst is stepMove's Build: the forward replicas (in order) that
// the row does not hold, as many as the new row's empty replica slots
// (commitActive keeps the row's replicas other than the old and the new
// active, and fills the slots left with these). Without them a move into
// the row's replica leaves the vbucket with no replica from the commit
// until a new one has caught up, and a write the new active acknowledged
// then, even under --sync-replication, dies with it.
func buildFirst(row, fw []string) []string {
	cur, to := at(row, 0), at(fw, 0)
	kept := 0
	for _, x := range row[1:] {
		if x != "" && x != cur && x != to {
			kept++
		}
	}
	var b []string
	for _, r := range fw[1:] {
		if len(b) >= len(row)-1-kept {
			break
		}
		if r != "" && r != cur && r != to && !slices.Contains(row, r) {
			b = append(b, r)
		}
	}
	return b
}

// replicaSource is where forward replica j streams from: the active, or
// the previous replica when replication is chained.
func replicaSource(fw []string, j int, chain bool) string {
	if chain && j > 1 && fw[j-1] != "" {
		return fw[j-1]
	}
	return fw[0]
}

func at(row []string, i int) string {
	if i < len(row) {
		return row[i]
	}
	return ""
}

func obsString(o move.Observation) string {
	switch o.Reach {
	case move.Refused:
		return "connection refused"
	case move.NoReply:
		return fmt.Sprintf("no answer (%v)", o.Err)
	}
	s := o.State.String()
	if o.Streaming {
		s += ", stream open"
	}
	return s
}

// maxFailures is how many times the rebalance tries a vbucket's move
// before it gives up on the vbucket.
const maxFailures = 3

// pickVerdict is pickNext's answer.
type pickVerdict uint8

const (
	pickStart  pickVerdict = iota // start moving pick.VB
	pickWait                      // every unfinished vbucket is being moved: wait for one
	pickDone                      // every vbucket is at its forward row
	pickGaveUp                    // what is left failed maxFailures times each
)

// pick is pickNext's answer.
type pick struct {
	Verdict pickVerdict
	VB      int // pickStart: the vbucket to move
	Left    int // unfinished vbuckets, those being moved included
}

// pickNext chooses the vbucket a rebalance starts moving next, from the
// state in etcd (unfinished: the row differs from the forward row, or a
// committed move is not finished), the vbuckets being moved now and the
// failures so far. Moves a previous leader committed and did not finish
// (Rebalance.Moving) come first: their old copies hold memory and their
// rows lack replicas. Then the lowest vbucket not being moved and not
// given up on.
func pickNext(s *State, moving map[int]bool, failures map[int]int) pick {
	p := pick{VB: -1}
	startable := func(vb int) bool { return !moving[vb] && failures[vb] < maxFailures }
	if s.Rebalance != nil {
		var committed []int
		for vb := range s.Rebalance.Moving {
			if vb >= 0 && vb < len(s.Map) && startable(vb) {
				committed = append(committed, vb)
			}
		}
		if len(committed) > 0 {
			p.VB = slices.Min(committed)
		}
	}
	inFlight := 0
	for vb := range s.Map {
		if !s.unfinished(vb) {
			continue
		}
		p.Left++
		if moving[vb] {
			inFlight++
		}
		if p.VB < 0 && startable(vb) {
			p.VB = vb
		}
	}
	switch {
	case p.VB >= 0:
		p.Verdict = pickStart
	case p.Left == 0:
		p.Verdict = pickDone
	case inFlight > 0:
		p.Verdict = pickWait
	default:
		p.Verdict = pickGaveUp
	}
	return p
}

func (p pick) String() string {
	switch p.Verdict {
	case pickStart:
		return fmt.Sprintf("start %d (%d left)", p.VB, p.Left)
	case pickWait:
		return fmt.Sprintf("wait (%d left, all being moved)", p.Left)
	case pickDone:
		return "done"
	case pickGaveUp:
		return fmt.Sprintf("gave up (%d left)", p.Left)
	}
	return "pick(?)"
}

// planString is a plan on one line per step, for logs and tests.
func planString(plan []step) string {
	var b strings.Builder
	for i, s := range plan {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(s.String())
	}
	return b.String()
}
