package manager

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Fencing: when the leader may fail a node over (DESIGN.md §3; the
// node's side is internal/server/lease.go).
//
// A node serves its active vbuckets only while it holds a lease: from the
// leader, which grants one with every probe, or from its peers, when a
// majority of its quorum set (the members, as the last grant named them)
// says it hears no manager. The leader may promote a failed node's
// replicas only once the node can hold neither:
//
//   - The manager's lease: a grant's lease runs from when the node handled
//     the latest grant whose answer the leader had when it sent it, which
//     is before that answer came back. So it has surely ended L+margin
//     after the newest answer from the node (and, for grants of an
//     earlier leader, L+margin after this leadership began; a leader
//     whose etcd session ended stops granting, and its successor is
//     elected only once that session's lease has expired in etcd).
//     Failover first stops granting to the node, then waits for that.
//   - A peer lease: the node extends its lease by the duration from when
//     it asked, on the word of a majority of its quorum set that holds no
//     manager's lease worth vouching for (less than a quarter of it left),
//     and only after it has taken the view of any newer map an answer
//     names. Failover commits the new map and pushes it before it
//     promotes anything. Then the node can hold no peer lease that lets
//     it serve its old vbuckets if a majority of each quorum set it may
//     use answered the push while it surely held a lease worth vouching
//     for, without a break since L+margin before now (so every answer
//     such a member gave in the window either said "I hear the manager"
//     or named the new map); or, failing that, once L+margin has passed
//     since the push reached a majority (any peer lease given on the old
//     map has ended, and any later one was given with the new map).
//
// L here is the longest lease any leader may have granted (the lease
// record, lease_record.go), not only this leader's --lease: a node keeps
// the lease of the last grant it handled, from whichever leader, and
// extends by that duration on its peers' word.
//
// Margin covers the clocks' rates differing (a twentieth of L) and the
// rounding of durations on the wire. A failover that cannot be sure (the
// push reached no majority of a quorum set) says so and asks for --force.
// A node that still answers is simply told first (every vbucket it holds
// turns dead): then nothing needs waiting for.
//
// Everything here is a pure function of what the leader recorded; the
// grants and the waits are in ops.go and failover.go, and read time from
// Config.Clock (a fake in TestFailoverWaitsForLeaseOnFakeClock).

// leaseParams are a leadership's lease settings.
type leaseParams struct {
	L      time.Duration // a grant's duration
	Margin time.Duration // added to every wait
}

// newLeaseParams returns the parameters for a lease of l.
func newLeaseParams(l time.Duration) leaseParams {
	return leaseParams{L: l, Margin: l/20 + 100*time.Millisecond}
}

// wait is a lease and its margin: how long after a grant's start the
// lease has surely ended.
func (p leaseParams) wait() time.Duration { return p.L + p.Margin }

// vouch is how much of a lease a node must have left for its word ("I
// hear the manager") to count (internal/server's vouchFraction).
func (p leaseParams) vouch() time.Duration { return p.L / 4 }

// leaseRec is what a leader knows of the leases it granted one node.
type leaseRec struct {
	seq       uint64    // the last grant number sent
	ackedSeq  uint64    // the newest grant whose answer came (0: none)
	ackedSent time.Time // when that grant was sent
	ackedAt   time.Time // when its answer came
	// heldFrom, heldUntil: an interval over which the node surely held
	// a lease worth vouching for (zero: none yet).
	heldFrom, heldUntil time.Time
	// quorums are the quorum sets of the grants sent since, and
	// including, the newest answered one: any of them may be the node's.
	quorums []sentQuorum
	// stopped: no more grants (the node is being failed over).
	stopped bool
	// inc is the node's incarnation as its last answer said (0: not
	// known): an answer from another is a new process (answeredBy).
	inc uint64
}

// sentQuorum is a quorum set sent with the grants from number from on.
type sentQuorum struct {
	from uint64
	set  []string
}

// sending records that the next grant, naming quorum, is about to be
// sent, and returns its number and the grant it runs from (0: none).
func (r *leaseRec) sending(quorum []string) (seq, acked uint64) {
	r.seq++
	if len(r.quorums) == 0 || !slices.Equal(r.quorums[len(r.quorums)-1].set, quorum) {
		r.quorums = append(r.quorums, sentQuorum{from: r.seq, set: slices.Clone(quorum)})
	}
	return r.seq, r.ackedSeq
}

// answered records the answer, at at, to grant seq sent at sent with
// quorum, which ran from grant acked sent at ackedSent.
func (r *leaseRec) answered(p leaseParams, seq uint64, sent, at time.Time, acked uint64, ackedSent time.Time) {
	if acked > 0 {
		// The node's lease runs until it handled grant acked (after
		// ackedSent) plus L; it is worth vouching for until vouch before
		// that, and it surely had it from at (it handled seq before).
		until := ackedSent.Add(p.L - p.vouch() - p.Margin)
		if !r.heldUntil.IsZero() && at.Before(r.heldUntil) {
			r.heldUntil = maxTime(r.heldUntil, until)
		} else if at.Before(until) {
			r.heldFrom, r.heldUntil = at, until
		}
	}
	if seq > r.ackedSeq {
		r.ackedSeq, r.ackedSent, r.ackedAt = seq, sent, at
		// A set only grants before this one carried can no longer be
		// the node's (it handles grants in order).
		for len(r.quorums) > 1 && r.quorums[1].from <= seq {
			r.quorums = r.quorums[1:]
		}
	}
}

// answeredBy is answered for an answer that says the node's incarnation
// (known, inc). An answer from another incarnation than the last one
// recorded comes from a new process at the node's address (restarted),
// which handled no grant before this one: what its predecessor held is
// forgotten (it vouches for no one), and this grant, which ran from a
// grant the new process never handled, extends nothing. It reports such
// a restart. The vbcache_unsafe_incarnation build tag ignores
// incarnations.
func (r *leaseRec) answeredBy(p leaseParams, known bool, inc, seq uint64, sent, at time.Time, acked uint64, ackedSent time.Time) (restarted bool) {
	if known && incarnations {
		restarted = r.inc != 0 && r.inc != inc
		r.inc = inc
	}
	if restarted {
		r.heldFrom, r.heldUntil = time.Time{}, time.Time{}
		acked = 0
	}
	r.answered(p, seq, sent, at, acked, ackedSent)
	return restarted
}

// managerLeaseEnd is when node's lease from the managers has surely
// ended, provided no grant is sent to it any more.
func (p leaseParams) managerLeaseEnd(r *leaseRec, leadSince time.Time) time.Time {
	t := leadSince
	if r != nil && r.ackedAt.After(t) {
		t = r.ackedAt
	}
	return t.Add(p.L + p.Margin)
}

// quorumsReachable reports whether, for every quorum set node may hold
// (current when this leader granted it nothing), a majority of the set
// other than node answers the manager (live): otherwise no push can make
// a failover sure, and it must not start.
func quorumsReachable(node string, r *leaseRec, current []string, live func(string) bool) (bool, string) {
	sets := [][]string{current}
	if r != nil && len(r.quorums) > 0 {
		sets = sets[:0]
		for _, q := range r.quorums {
			sets = append(sets, q.set)
		}
	}
	for _, q := range sets {
		need, n := len(q)/2+1, 0
		for _, b := range q {
			if b != node && live(b) {
				n++
			}
		}
		if n < need {
			return false, fmt.Sprintf("%d of its quorum set %v answer the manager, and %d are needed to tell it it is out", n, q, need)
		}
	}
	return true, ""
}

// peerVerdict says whether node can still hold a peer lease that lets it
// serve the map it had before a failover's new map was pushed.
type peerVerdict struct {
	Sure bool      // it cannot: promote now
	At   time.Time // when not Sure: it surely cannot from then on (zero: never, without --force)
	Why  string
}

// peerLease decides, at now, after the new map's push was answered by
// the members in pushed (member → when its answer came; the push ended at
// pushEnd), whether node may still hold a peer lease on its old map. r is
// what this leader granted the node; when it granted nothing, the node's
// quorum set is taken to be current (the members, as the state names
// them) and a peer lease is ruled out only by time.
func (p leaseParams) peerLease(now time.Time, node string, r *leaseRec, current []string, recs map[string]*leaseRec, pushed map[string]time.Time, pushEnd time.Time) peerVerdict {
	var quorums [][]string
	if r != nil {
		for _, q := range r.quorums {
			quorums = append(quorums, q.set)
		}
	}
	sure, reached := len(quorums) > 0, true
	var why []string
	if len(quorums) == 0 {
		quorums = [][]string{current}
		why = append(why, "this leadership granted it nothing, and what its predecessor did is not known")
	}
	for _, q := range quorums {
		need := len(q)/2 + 1
		vouched, got := 0, 0
		for _, b := range q {
			if b == node {
				continue
			}
			at, ok := pushed[b]
			if !ok {
				continue
			}
			got++
			rb := recs[b]
			if rb != nil && !rb.heldFrom.IsZero() && !rb.heldFrom.After(now.Add(-p.L-p.Margin)) && !rb.heldUntil.Before(at) {
				vouched++
			}
		}
		if vouched < need && sure {
			sure = false
			why = append(why, fmt.Sprintf("%d of %d members of its quorum set vouched for the manager without a break until they had the new map (%d needed)", vouched, len(q), need))
		}
		if got < need {
			reached = false
			why = append(why, fmt.Sprintf("the new map reached %d of the %d other members of its quorum set (%d needed)", got, len(q)-1, need))
		}
	}
	switch {
	case sure:
		return peerVerdict{Sure: true}
	case reached:
		return peerVerdict{At: pushEnd.Add(p.L + p.Margin), Why: strings.Join(why, "; ")}
	}
	return peerVerdict{Why: strings.Join(why, "; ")}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
