package manager

import (
	"slices"

	"github.com/vbcache/vbcache/internal/admin"
)

// Restarts: a node killed and started again at the same address before
// FailoverAfter has passed answers its grants again, so the probes never
// find it down; but a cache node keeps nothing across a restart, so it
// comes back holding no vbucket, and the map still names it active for
// its old ones, which it answers NOT_MY_VBUCKET for. Nothing else repairs
// that (its replicas hold the data, and nobody promotes them), so the
// leader fails it over, as it would a node that is down.
//
// Each grant's answer says what the node is (internal/server, lease.go):
// its incarnation, chosen at its start, how many vbuckets it holds as
// active, replica or pending, and how many of them active. The rule: a
// node that answers, twice in a row, that it holds no active while the
// map names it the active of at least one vbucket, with no rebalance and
// no failover running when either grant was sent or answered and the map
// unchanged across each, has restarted and lost its data. It is failed
// over at once (probeLoop, the automatic failover's path, one at a time,
// Rebuild on) when automatic failover is on (FailoverAfter > 0) and the
// cluster has replicas; otherwise a warning is logged once.
//
// The actives are counted, not every copy: an operation begun before the
// restart (a move's or a failover's REPLICATE) may make the new process
// a replica within its first probe, and a replica serves none of the
// vbuckets it lost (the schedule met that, issue 43: the node then held
// one replica, and its 21 actives were served by no one for as long as
// the cluster ran). An older node, which does not say its actives, is
// judged by all it holds.
//
// Once an answer has shown a new incarnation, the node is known to have
// lost what it held, and answers holding fewer actives than the map
// gives it count too (a move into it, begun before the restart, may have
// given it one active back); the mark ends when it holds as many.
//
// A rebalance holds the count off, except for a node that showed a new
// incarnation: it lost what it held whatever the moves do, and a
// rebalance may wait for it (the vbcache_unsafe_restartmidrb build tag
// holds the count off for it too, as before).
//
// The guards are for the moments when a node rightly holds less than
// the map says, which are short: a move commits its new active only once
// the target is active (DESIGN.md §3), but the answer is counted when it
// reached the manager and the map read after it, so one answer may
// predate a commit it is compared with; and a failover commits and
// pushes its map before it activates the new actives, which may take
// longer than a probe when a node is slow to take the push. The second
// answer in a row, and the running operations' resetting the count,
// cover those. A node that the map gives replicas only is not caught:
// it serves nothing, so nothing is unavailable, but its copies are gone
// and the map still names them until the node is failed over or the
// vbuckets move.
//
// The count starts afresh with each leadership (lead) and each
// membership (AddNode drops the node's health): answers counted before
// a node was failed over and added back must not fail it over again.
//
// An incarnation that differs from the previous answer's is logged, and
// fails nothing over by itself.
//
// The vbcache_unsafe_restartactives build tag (restartCountsActives
// false) counts every copy again, for tests to show the hole.

// restartAnswers is how many answers in a row must hold nothing, while
// the map gives the node actives, before the node counts as restarted.
const restartAnswers = 2

// restartWatch is what the grants' answers told of one node, in its
// nodeHealth (under mu).
type restartWatch struct {
	known       bool   // the last answer said what follows (an older node's does not)
	incarnation uint64 // the last answer's
	held        int    // the vbuckets it held, as the last answer said
	actives     int    // of them active (an older node's answer: all it held)
	restarted   bool   // an answer showed a new incarnation, and none since held as many actives as the map gave
	empty       int    // answers in a row holding too few actives (the rule), nothing running
	warned      bool   // the warning that it is not failed over was logged (for this run of empty answers)
}

// restartSeen is what one answer told of a restart.
type restartSeen struct {
	// Was is the previous answer's incarnation when the answer's
	// differs from it (0: no change, or none known before).
	Was uint64
}

// answered records an answer a, read while the map gave the node actives
// actives; busy says a failover ran, or the map changed, and rebalance
// that a rebalance ran, between the grant's sending and the map's
// reading. A running rebalance does not hold the count off once a new
// incarnation was seen: that node lost what it held, and a rebalance
// may not end without its failover (one waited for the restarted node,
// made a replica by its old process, to catch up: the schedule's
// restart-node-mid-rb). The map unchanged across each answer, twice in a
// row, still guards against a move into it that committed meanwhile.
func (w *restartWatch) answered(a admin.LeaseAnswer, actives int, busy, rebalance bool) restartSeen {
	var seen restartSeen
	if !a.Known {
		*w = restartWatch{}
		return seen
	}
	if w.known && w.incarnation != a.Incarnation {
		seen.Was = w.incarnation
		w.restarted = true
	}
	if rebalance && !(w.restarted && restartCountsActives && restartMidRebalance) {
		busy = true // as lostDuring has it
	}
	have := a.Held
	if a.ActivesKnown && restartCountsActives {
		have = a.Actives
	}
	w.known, w.incarnation, w.held, w.actives = true, a.Incarnation, a.Held, have
	if have >= actives && !busy {
		w.restarted = false
	}
	if (have == 0 || restartCountsActives && w.restarted && have < actives) && actives > 0 && !busy {
		w.empty++
	} else {
		w.empty, w.warned = 0, false
	}
	return seen
}

// lost reports whether the node restarted and lost its data: the rule
// above held on restartAnswers answers in a row.
func (w *restartWatch) lost() bool { return w.empty >= restartAnswers }

// lostDuring is lost, while a rebalance runs or not: during one, only a
// node that showed a new incarnation counts.
func (w *restartWatch) lostDuring(rebalance bool) bool {
	return w.lost() && (!rebalance || w.restarted && restartCountsActives && restartMidRebalance)
}

// activesOf counts the vbuckets s's map gives addr as active.
func activesOf(s *State, addr string) int {
	i := slices.Index(s.Servers, addr)
	if i < 0 {
		return 0
	}
	n := 0
	for _, row := range s.Map {
		if len(row) > 0 && row[0] == i {
			n++
		}
	}
	return n
}

// rebalancing reports whether s has a rebalance running.
func rebalancing(s *State) bool { return s != nil && s.Rebalance != nil && s.Rebalance.Running }

// restartFacts is what an answer is compared with: the current map's.
type restartFacts struct {
	epoch, rev int64
	busy       bool // a failover runs
	rebalance  bool // a rebalance runs
	actives    int  // the vbuckets the map gives the node as active
}

// restartFacts reads, without copying the state, what the restart check
// compares addr's answer with (addr "": the actives are not counted).
func (m *Manager) restartFacts(addr string) restartFacts {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := restartFacts{busy: m.failovers > 0, rebalance: rebalancing(m.st)}
	if m.st != nil {
		f.epoch, f.rev = m.st.RevEpoch, m.st.Rev
		if addr != "" {
			f.actives = activesOf(m.st, addr)
		}
	}
	return f
}
