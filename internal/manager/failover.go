package manager

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/move"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// FailoverReport says what a failover did.
type FailoverReport struct {
	Node     string `json:"node"`
	Promoted int    `json:"promoted"` // vbuckets whose replica became active
	Lost     int    `json:"lost"`     // vbuckets with no replica: active again, empty, elsewhere
	Replicas int    `json:"replicas"` // replica copies dropped from the map
	// Unactivated counts vbuckets whose new active did not become
	// active: its activation failed, or its promotion did not resolve
	// (move.Promote; the log names the rule). The map names it, and it
	// answers NOT_MY_VBUCKET until an operator activates it (vbcache
	// ctl) or a rebalance moves it.
	Unactivated int `json:"unactivated,omitempty"`
	// Reactivated counts vbuckets moving into the node, not committed,
	// whose source's dead copy was made active again (reactivate).
	Reactivated int `json:"reactivated,omitempty"`
	// Choices lists the vbuckets whose live replicas differed (in how
	// much of the node's history they held, or in answering), with the
	// replica promoted and why (bestReplica).
	Choices []PromotionChoice `json:"choices,omitempty"`

	fencing string // how it was sure the node stopped serving, for the log
}

// PromotionChoice is one vbucket's promotion where the failover had a
// choice to make.
type PromotionChoice struct {
	VBucket  int    `json:"vbucket"`
	Promoted string `json:"promoted"`
	Why      string `json:"why"`
}

// replicaPositions asks the replicas of the vbuckets that the node at
// idx is active for, where a row has more than one, where their copies
// are (positions): the failover promotes the one that holds the most.
// Replicas the probes think down are asked too (at once, for a second at
// most): one that answers is back, and may hold the most. Rows with one
// replica leave nothing to choose, and cost no request.
func (m *Manager) replicaPositions(ctx context.Context, s *State, idx int) map[string]map[int]copyPos {
	ask := map[string]bool{}
	for _, row := range s.Map {
		if idx < 0 || row[0] != idx {
			continue
		}
		var rs []string
		for _, r := range row[1:] {
			if r >= 0 && r != idx {
				rs = append(rs, s.server(r))
			}
		}
		if len(rs) > 1 {
			for _, a := range rs {
				ask[a] = true
			}
		}
	}
	if len(ask) == 0 {
		return nil
	}
	return m.positions(ctx, slices.Sorted(maps.Keys(ask)))
}

// FailoverOptions are a failover's.
type FailoverOptions struct {
	// Rebuild starts a rebalance afterwards, which restores the replicas
	// on the remaining members.
	Rebuild bool
	// Force promotes at once, without being sure the node stopped
	// serving (fencing.go): for a node known to be gone when the
	// cluster cannot tell.
	Force bool

	// auto marks the probes' own failovers, for the metrics.
	auto bool
}

// ErrNotSure: a failover could not be sure the node stopped serving.
var ErrNotSure = errors.New("cannot be sure the node stopped serving (--force fails it over anyway)")

// Failover takes addr out of the cluster. For each vbucket it was active
// for, the live replica that holds the most of its history is promoted
// through move.Promote (bestReplica: it holds every write any surviving
// replica had; writes inside every replica's replication lag are lost); a vbucket without a live replica becomes active, empty, on the
// least loaded live member, so the cluster keeps serving (a cache loses
// data, never availability).
//
// Unless opt.Force, nothing is promoted before the node has surely
// stopped serving (fencing.go): it is told first (every vbucket it holds
// turns dead there) and, when it does not answer, the failover waits for
// its lease to run out; the new map is committed and pushed before any
// promotion. A failover that cannot be sure returns ErrNotSure, and
// changes nothing if it knew that before the commit.
func (m *Manager) Failover(ctx context.Context, addr string, opt FailoverOptions) error {
	_, err := m.FailoverReport(ctx, addr, opt)
	return err
}

// FailoverReport is Failover, with what the failover did.
func (m *Manager) FailoverReport(ctx context.Context, addr string, opt FailoverOptions) (FailoverReport, error) {
	rep, err := m.failover(ctx, addr, opt.Force)
	m.obs.failover(opt.auto, err)
	if err != nil {
		return rep, err
	}
	unact := ""
	if rep.Unactivated > 0 {
		unact = fmt.Sprintf(", %d NOT activated", rep.Unactivated)
	}
	m.cfg.Logf("manager: failed over %s: %d vbuckets promoted, %d lost, %d replicas dropped%s%s", addr, rep.Promoted, rep.Lost, rep.Replicas, unact, rep.fencing)
	if opt.Rebuild && m.State().Replicas > 0 {
		if err := m.StartRebalance(ctx); err != nil && err != ErrRebalancing {
			return rep, fmt.Errorf("failover done; rebuilding replicas: %w", err)
		}
	}
	return rep, nil
}

// fence turns every vbucket the failed node holds dead on it (those of
// its rows, and also, into, those moving into it), if it answers within
// a second, and reports whether it did.
func (m *Manager) fence(ctx context.Context, addr string, s *State, idx int, into []int) bool {
	fctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := admin.DialWith(fctx, addr, m.credentials())
	if err != nil {
		return false
	}
	defer c.Close()
	c.Timeout = time.Second
	n := 0
	for vb, row := range s.Map {
		if !(idx >= 0 && slices.Contains(row, idx)) && !slices.Contains(into, vb) {
			continue
		}
		if err := c.SetVBucket(vb, vbucket.Dead); err != nil {
			m.cfg.Logf("manager: fencing %s before its failover: %v", addr, err)
			return false
		}
		n++
	}
	m.cfg.Logf("manager: %s still answered: its %d vbuckets are dead there before the failover", addr, n)
	return true
}

// stopGrants makes the probes grant addr no more leases (until the next
// leadership, which starts afresh), waits for a grant in flight, and
// returns its record and when its lease from the managers has surely
// ended.
func (m *Manager) stopGrants(addr string, lp leaseParams) (*leaseRec, time.Time) {
	m.mu.Lock()
	r := m.leases[addr]
	if r == nil {
		r = &leaseRec{}
		m.leases[addr] = r
	}
	r.stopped = true
	nc := m.grantConns[addr]
	m.mu.Unlock()
	if nc != nil {
		nc.mu.Lock() // a grant in flight records its answer under it
		nc.mu.Unlock()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return r, lp.managerLeaseEnd(r, m.leadSince)
}

// failingOver reports whether a failover of addr is running: the moves
// of the rebalance it stops abandon their TAKEOVER into or out of addr
// (move.Options.Abandon) instead of holding the failover up.
func (m *Manager) failingOver(addr string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.failing[addr] > 0
}

// resumeGrants undoes stopGrants, for a failover that changed nothing.
func (m *Manager) resumeGrants(addr string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.leases[addr]; r != nil {
		r.stopped = false
	}
}

// movingInto lists the vbuckets s's forward map moves into addr whose
// row does not name addr active yet.
func movingInto(s *State, addr string) []int {
	var into []int
	if s.Forward == nil {
		return nil
	}
	for vb, row := range s.Map {
		if vb < len(s.Forward) && len(s.Forward[vb]) > 0 && s.server(s.Forward[vb][0]) == addr && s.server(row[0]) != addr {
			into = append(into, vb)
		}
	}
	return into
}

// sleepUntil waits until t on the manager's clock, or ctx's end.
func (m *Manager) sleepUntil(ctx context.Context, t time.Time) error {
	d := t.Sub(m.cfg.Clock.Now())
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-m.cfg.Clock.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (m *Manager) failover(ctx context.Context, addr string, force bool) (rep FailoverReport, err error) {
	// Moves into the failed node (see below), read first: once the node
	// is marked failing, its moves end at once (cancelOnTargetFailover),
	// and the rebalance, its moves ended, may clear the forward map
	// before this failover gets opMu (a CI run lost a vbucket's source
	// that way: dead, and never made active again).
	early := movingInto(m.State(), addr)
	m.mu.Lock()
	m.failovers++
	m.failing[addr]++
	m.mu.Unlock()
	m.runHook("failover-marked", -1)
	defer func() {
		m.mu.Lock()
		m.failovers--
		if m.failing[addr]--; m.failing[addr] <= 0 {
			delete(m.failing, addr)
		}
		m.mu.Unlock()
	}()
	m.opMu.Lock()
	defer m.opMu.Unlock()
	rep = FailoverReport{Node: addr}
	s := m.State()
	idx := slices.Index(s.Servers, addr)
	if idx < 0 && !slices.Contains(s.Nodes, addr) {
		return rep, fmt.Errorf("%s: %w", addr, ErrUnknownNode)
	}
	// Moves into the failed node (the forward map's active) that were
	// not committed: it may have turned active (the handover done, its
	// answer lost) while the row still names the source, whose copy is
	// dead then. Once the node is fenced (below), the source's copy,
	// which holds every write it acknowledged, is made active again
	// (reactivate), or the vbucket would have no active at all. Read
	// before the rebalance stops: its end clears the forward map.
	intoFailed := movingInto(s, addr)
	if earlyInto {
		for _, vb := range early {
			// A move committed since names addr in its row: its
			// promotion, not reactivate, settles it (reactivate skips
			// it).
			if !slices.Contains(intoFailed, vb) {
				intoFailed = append(intoFailed, vb)
			}
		}
		slices.Sort(intoFailed)
	}
	// A running rebalance stops: its plan includes the failed node.
	if s.Rebalance != nil && s.Rebalance.Running {
		if _, err := m.update(ctx, func(s *State) error {
			s.Rebalance.Stopping = true
			return nil
		}); err != nil {
			return rep, err
		}
		m.opMu.Unlock()
		m.mu.Lock()
		done := m.rebDone
		m.mu.Unlock()
		if done != nil {
			<-done
		}
		m.opMu.Lock()
		s = m.State()
		idx = slices.Index(s.Servers, addr)
	}
	lp := newLeaseParams(m.leaseCeiling())
	rec, leaseEnd := m.stopGrants(addr, lp)
	committed := false
	defer func() {
		if !committed {
			m.resumeGrants(addr)
		}
	}()
	// The node must stop serving before any of its vbuckets is promoted
	// elsewhere, or a client with an old map could write to it and be
	// acknowledged. A node that answers is told; one that does not is
	// waited for until its lease from the managers has run out.
	// A node that holds no row and nothing moving into it serves nothing.
	fenced := (idx < 0 && len(intoFailed) == 0) || m.fence(ctx, addr, s, idx, intoFailed)
	sure := fenced || force
	if !sure {
		end := leaseEnd
		if d := end.Sub(m.cfg.Clock.Now()); d > 0 {
			m.cfg.Logf("manager: failover of %s: waiting %v for its lease to run out", addr, d.Round(time.Millisecond))
		}
		if err := m.sleepUntil(ctx, end); err != nil {
			return rep, err
		}
		// The new map must reach a majority of each quorum set the node
		// may hold before anything is promoted; without one, say so now.
		m.mu.Lock()
		ok, why := quorumsReachable(addr, rec, quorumSet(s), func(a string) bool { h := m.health[a]; return h == nil || h.OK })
		m.mu.Unlock()
		if !ok {
			return rep, fmt.Errorf("%w: %s", ErrNotSure, why)
		}
	}
	// The new map: the live replica that holds the most of the node's
	// history is promoted (bestReplica); a vbucket without one goes,
	// empty, to the least loaded live member.
	live := func(i int) bool { return i >= 0 && i != idx && m.healthy(s.Servers[i]) }
	pos := m.replicaPositions(ctx, s, idx)
	load := map[int]int{}
	for _, row := range s.Map {
		if row[0] >= 0 {
			load[row[0]]++
		}
	}
	lost := map[int]bool{}    // vbuckets made active, empty, elsewhere
	changed := map[int]bool{} // vbuckets whose active changes
	// keptOld: vbuckets whose promoted replica is the old active of a
	// swap (Rebalance.Moving), its dead copy kept as the row's only
	// replica (commitActive); activate promotes that copy if it has not
	// resumed streaming yet.
	keptOld := map[int]bool{}
	newMap := make([][]int, len(s.Map))
	for vb, row := range s.Map {
		nr := append([]int(nil), row...)
		newMap[vb] = nr
		if idx < 0 || !slices.Contains(row, idx) {
			continue
		}
		if row[0] == idx {
			changed[vb] = true
			// A replica that answered where its copy is is alive now,
			// even if the probes have not seen it since a pause.
			promoted, why := bestReplica(row, func(i int) bool {
				_, answered := pos[s.server(i)]
				return live(i) || (i >= 0 && i != idx && answered)
			}, func(i int) (copyPos, bool) {
				p, ok := pos[s.Servers[i]]
				if !ok {
					return copyPos{}, false
				}
				return p[vb], true
			}, s.server)
			if why != "" {
				m.cfg.Logf("manager: failover of %s: vbucket %d: promoting %s: %s", addr, vb, s.server(promoted), why)
				rep.Choices = append(rep.Choices, PromotionChoice{VBucket: vb, Promoted: s.server(promoted), Why: why})
			}
			if promoted < 0 {
				best := -1
				for _, a := range s.Nodes {
					i := slices.Index(s.Servers, a)
					if a == addr || !m.healthy(a) || i < 0 {
						continue
					}
					if best < 0 || load[i] < load[best] {
						best = i
					}
				}
				if best < 0 {
					return rep, fmt.Errorf("no live member in the map to take vbucket %d", vb)
				}
				load[best]++
				rep.Lost++
				lost[vb] = true
				nr = []int{best}
			} else {
				rep.Promoted++
				nr = []int{promoted}
				if s.Rebalance != nil && s.Rebalance.Moving[vb] == s.server(promoted) &&
					!slices.ContainsFunc(row[1:], func(r int) bool { return r >= 0 && r != promoted }) {
					keptOld[vb] = true
				}
			}
			for _, r := range row[1:] {
				if r != promoted && r >= 0 && r != idx {
					nr = append(nr, r)
				}
			}
		} else {
			rep.Replicas++
			nr = []int{row[0]}
			for _, r := range row[1:] {
				if r != idx && r >= 0 {
					nr = append(nr, r)
				}
			}
		}
		for len(nr) < len(row) {
			nr = append(nr, -1)
		}
		newMap[vb] = nr
	}
	ns, err := m.update(ctx, func(s *State) error {
		s.Map = newMap
		s.Forward = nil
		if s.Rebalance != nil {
			s.Rebalance.Running, s.Rebalance.Stopping = false, false
		}
		s.Nodes = slices.DeleteFunc(s.Nodes, func(a string) bool { return a == addr })
		if !slices.Contains(s.FailedOver, addr) {
			s.FailedOver = append(s.FailedOver, addr)
		}
		s.compact()
		s.Rev++
		// What is promoted next, for a successor should this leader die
		// before it is done (intent.go).
		s.Intents = withIntent(s.Intents, intentOf(addr, s.Rev, s.RevEpoch, changed, lost, keptOld, intoFailed))
		return nil
	})
	if err != nil {
		return rep, err
	}
	committed = true
	m.runHook("failover-committed", -1)
	m.mu.Lock()
	delete(m.told, addr) // it is to be told again that it is out
	delete(m.unpromoted, addr)
	m.mu.Unlock()
	// The new map goes out before any promotion: a peer the node asks for
	// a lease then names it, and the node takes its view first.
	pushed, pushEnd := m.pushConfigAcks(ctx, ns)
	m.publishedAt(ns)
	switch {
	case fenced:
		rep.fencing = "; it was told first"
	case force:
		rep.fencing = "; forced, without waiting for its lease"
	default:
		m.mu.Lock()
		v := lp.peerLease(m.cfg.Clock.Now(), addr, rec, quorumSet(s), m.leases, pushed, pushEnd)
		m.mu.Unlock()
		switch {
		case v.Sure:
			rep.fencing = "; its lease had run out and its peers had the new map"
		case !v.At.IsZero():
			m.cfg.Logf("manager: failover of %s: waiting %v before promoting (%s)", addr, v.At.Sub(m.cfg.Clock.Now()).Round(time.Millisecond), v.Why)
			if err := m.sleepUntil(ctx, v.At); err != nil {
				return rep, err
			}
			rep.fencing = "; its lease and any its peers gave had run out"
		default:
			// The map names the new actives; the node is told it is
			// out when it answers again (tellFailedOver), and that
			// fences it: the promotions are done then
			// (finishPromotion), if the map has not changed since.
			m.mu.Lock()
			m.unpromoted[addr] = &promotion{ns: ns, changed: changed, lost: lost, keptOld: keptOld, into: intoFailed}
			m.mu.Unlock()
			return rep, fmt.Errorf("%w: the map without it is committed, but nothing was promoted (it will be once the node answers and is told it is out): %s", ErrNotSure, v.Why)
		}
	}
	var emptied int
	rep.Unactivated, emptied = m.promote(ctx, addr, &promotion{ns: ns, changed: changed, lost: lost, keptOld: keptOld, into: intoFailed})
	rep.Promoted -= emptied
	rep.Lost += emptied
	rep.Reactivated = m.reactivate(ctx, addr, ns, intoFailed)
	if ctx.Err() == nil {
		m.clearIntent(ctx, addr, ns.Rev)
	}
	return rep, nil
}

// reactivate makes active again, on the active the map names, each
// vbucket of vbs whose move into the failed node addr was not committed
// and whose copy there is dead or pending (the handover was done, or
// under way, when addr stopped answering): addr is fenced, so that copy
// is the only one that may serve, and it holds every write it
// acknowledged. It returns how many it made active. A copy found active
// (the handover not begun) is set active again all the same, which
// aborts the takeover running there. A pending copy was left out until
// the fault schedule found one (pause-target-mid-rb, seed
// 1796635436413354491): the source had gone pending for the last items
// when the target stopped, and served nothing for the 30 s the test
// waited; the janitor now repairs it too. A dead or pending copy with no
// lineage ("stats vbucket N": vb_N:uuid 0) is a source started again
// while the failed node was its target (two faults together): it holds
// nothing and stays dead (issue 43; the vbcache_unsafe_reactivatehistory
// build tag turns that check off). With the vbcache_unsafe_takeoverwatch
// build tag it does nothing, as before.
func (m *Manager) reactivate(ctx context.Context, addr string, ns *State, vbs []int) int {
	if !takeoverWatch {
		return 0
	}
	n := 0
	for _, vb := range vbs {
		a := ns.server(ns.Map[vb][0])
		if a == "" || a == addr {
			continue
		}
		err := m.conn(ctx, a, func(c *admin.Conn) error {
			st, err := c.GetVBucket(vb)
			if err != nil || (st != vbucket.Dead && st != vbucket.Pending && st != vbucket.Active) {
				return err
			}
			if st != vbucket.Active && reactivateHistory {
				// A dead or pending copy with no lineage is not the
				// process that began the handover (its takeover
				// stream gave it one, kept until the move deletes the
				// copy): it was started again, and holds nothing.
				// Active, it would serve the vbucket empty while the
				// row's replicas hold it; the restart rule fails the
				// node over and promotes the best of them.
				v, err := askCopy(c, vb)
				if err != nil {
					return err
				}
				if v.UUID == 0 {
					m.cfg.Logf("manager: failover of %s: vbucket %d, moving into it, is not made active again on %s: that copy has no history (a restarted process); its replicas are promoted when %s is failed over", addr, vb, a, a)
					return nil
				}
			}
			if st != vbucket.Active {
				n++
			}
			// Active too: SET_VBUCKET aborts a takeover still running
			// there (its stream to the failed node, in backfill), which
			// would otherwise go on when the node comes back and turn
			// this copy dead and the failed node's active.
			return c.SetVBucket(vb, vbucket.Active)
		})
		if err != nil {
			m.cfg.Logf("manager: failover of %s: vbucket %d, moving into it, could not be made active again on %s: %v", addr, vb, a, err)
			continue
		}
	}
	if n > 0 {
		m.cfg.Logf("manager: failover of %s: %d vbuckets whose move into it was not committed are active again on their sources", addr, n)
	}
	return n
}

// promotion is what a failover of a node promotes: the vbuckets of
// changed on their new actives in ns, with activate's lost and keptOld.
type promotion struct {
	ns                     *State
	changed, lost, keptOld map[int]bool
	into                   []int // vbuckets moving into the node, for reactivate
}

// promote does p's promotions (activate) and points the surviving
// replicas at the new actives; it returns activate's counts.
func (m *Manager) promote(ctx context.Context, addr string, p *promotion) (unactivated, emptied int) {
	ns := p.ns
	unactivated, emptied = m.activate(ctx, addr, ns, p.changed, p.lost, p.keptOld)
	// Surviving replicas follow the new actives.
	for vb, row := range ns.Map {
		for j := 1; j < len(row); j++ {
			if row[j] < 0 {
				continue
			}
			src := ns.server(row[0])
			if ns.Chain && j > 1 && row[j-1] >= 0 {
				src = ns.server(row[j-1])
			}
			m.conn(ctx, ns.server(row[j]), func(c *admin.Conn) error { return c.Replicate(vb, src) })
		}
	}
	return unactivated, emptied
}

// finishPromotion does the promotions a failover of addr left undone
// (unpromoted), now that addr has been told it is out (tellFailedOver:
// every vbucket dead there, and the new map): it is fenced, the proof a
// failover looks for. Only if the map is still the failover's own (the
// same rev): a map changed since may have given those vbuckets to
// others. It takes opMu, as a failover does, after the tell has ended
// (AddNode waits for a tell while holding opMu).
func (m *Manager) finishPromotion(ctx context.Context, addr string) {
	m.mu.Lock()
	p := m.unpromoted[addr]
	told := m.told[addr]
	m.mu.Unlock()
	if p == nil || !told {
		return
	}
	m.opMu.Lock()
	defer m.opMu.Unlock()
	m.mu.Lock()
	if m.unpromoted[addr] != p {
		m.mu.Unlock()
		return // taken, or replaced by a later failover
	}
	delete(m.unpromoted, addr)
	m.mu.Unlock()
	if s := m.State(); s.Rev != p.ns.Rev || s.RevEpoch != p.ns.RevEpoch {
		m.cfg.Logf("manager: %s was told it is out; its failover's promotions are not done: the map changed since (rev %d, the failover's %d)", addr, s.Rev, p.ns.Rev)
		return
	}
	unact, emptied := m.promote(ctx, addr, p)
	m.reactivate(ctx, addr, p.ns, p.into)
	if ctx.Err() == nil {
		m.clearIntent(ctx, addr, p.ns.Rev)
	}
	m.cfg.Logf("manager: %s was told it is out: its failover's promotions done: %d vbuckets promoted, %d lost, %d NOT activated",
		addr, len(p.changed)-len(p.lost)-emptied-unact, len(p.lost)+emptied, unact)
}

// promoteSettle is move.Options.Settle for failover's promotions: how
// long a promotion waits for a target that is pending (a handover into it
// in flight) or does not answer. The rebalance was stopped before the
// failover, so neither is expected.
const promoteSettle = 5 * time.Second

// activate makes each vbucket of changed active on its new active in ns,
// the failed node addr being fenced (failover made sure it serves
// nothing, or the operator forced it), and returns how many did not
// become active. A vbucket whose new active was a replica is promoted
// through move.Promote (internal/move's rules with a fenced source: R5
// promotes it, R1 finds it active, R2 waits for a handover into it;
// anything else is unresolved and logged with the rule; a replica that
// holds no copy, "source-and-copy-lost", is activated empty there, as a
// cache loses data, never availability, and counted in emptiedN), except
// for a vbucket of keptOld: its replica is the dead copy a swap kept on
// its old active (commitActive), not yet streaming, which holds every
// write the failed node acknowledged under --sync-replication (with the
// row naming a replica and no stream open, it acknowledged none after
// the handover), so that copy is activated as it is. A vbucket of lost
// had no replica: it is not a move, and it is activated, empty, as it is
// (its old copy there, if any, deleted first).
//
// The new actives are worked on at once, one goroutine each, every
// vbucket of one in turn; activate returns when all are done.
func (m *Manager) activate(ctx context.Context, addr string, ns *State, changed, lost, keptOld map[int]bool) (unactivated, emptiedN int) {
	byNode := map[string][]int{}
	for vb := range changed {
		a := ns.server(ns.Map[vb][0])
		byNode[a] = append(byNode[a], vb)
	}
	opt := move.Options{Settle: promoteSettle, RequestTimeout: 5 * time.Second, Credentials: m.credentials()}
	var failed, emptied atomic.Int64
	// activateEmpty drops any copy of vb on a and makes it active there.
	activateEmpty := func(vb int, a string) bool {
		err := m.conn(ctx, a, func(c *admin.Conn) error {
			c.DelVBucket(vb)
			return c.SetVBucket(vb, vbucket.Active)
		})
		if err != nil {
			m.cfg.Logf("manager: failover of %s: activating vbucket %d, empty, on %s: %v", addr, vb, a, err)
		}
		return err == nil
	}
	var wg sync.WaitGroup
	for a, vbs := range byNode {
		slices.Sort(vbs)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, vb := range vbs {
				if lost[vb] {
					if !activateEmpty(vb, a) {
						failed.Add(1)
					}
					continue
				}
				res, err := move.Promote(ctx, vb, addr, a, opt)
				switch {
				case err != nil && res.Rule == "source-and-copy-lost" && keptOld[vb]:
					m.cfg.Logf("manager: failover of %s: vbucket %d on %s is the dead copy its swap kept (%s): activating it as it is", addr, vb, a, res.Detail)
					err := m.conn(ctx, a, func(c *admin.Conn) error { return c.SetVBucket(vb, vbucket.Active) })
					if err != nil {
						m.cfg.Logf("manager: failover of %s: activating vbucket %d on %s: %v", addr, vb, a, err)
						failed.Add(1)
					}
				case err != nil && res.Rule == "source-and-copy-lost":
					// The replica holds no copy (its node restarted, or it
					// was dropped): a cache loses data, never availability,
					// so it turns active, empty, as a vbucket without a
					// replica does.
					m.cfg.Logf("manager: failover of %s: promoting vbucket %d on %s: %s: %v; activating it empty there", addr, vb, a, res.Rule, err)
					if activateEmpty(vb, a) {
						emptied.Add(1)
					} else {
						failed.Add(1)
					}
				case err != nil:
					m.cfg.Logf("manager: failover of %s: promoting vbucket %d on %s: %s: %v", addr, vb, a, res.Rule, err)
					failed.Add(1)
				case res.Rule != "R5":
					m.cfg.Logf("manager: failover of %s: vbucket %d on %s: %s", addr, vb, a, res.String())
				}
			}
		}()
	}
	wg.Wait()
	return int(failed.Load()), int(emptied.Load())
}
