package manager

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// The janitor repairs what no other duty of the leader will (issue 43):
// once a leadership begins and every Config.JanitorInterval after, it
// asks every member where its copies are ("stats vbucket", as a failover
// does) and compares that with the map. It acts only when the cluster is
// at rest and the whole of it answered:
//
//   - no rebalance runs, no move, no failover, no failover intent and no
//     promotion waits (janitorBusy): those own the vbuckets they touch,
//     and their copies are in flight by design;
//   - every member answered: a member that did not may hold an active
//     copy the janitor cannot see (a move's target paused after its
//     handover); its lease and the failover deal with it;
//   - the map did not change between the question and the repairs, which
//     run under opMu, as a failover's do.
//
// What it repairs (janitorPlan, a pure function of the map and the
// answers), each logged and counted (vbcache_manager_janitor_repairs_total):
//
//   - a stray active: a copy active on a node the map does not make
//     active (a TAKEOVER abandoned after the target turned active, a
//     SET_VBUCKET of a deposed leader that slipped through) is made dead,
//     and follows its source again when the row names it a replica (its
//     own branch is then rebuilt from the active, internal/stream);
//   - a vbucket with no active: when no member reports it active, its
//     map active is made active again if its copy is dead or pending and
//     holds at least what its replicas hold (a TAKEOVER whose source
//     turned dead and whose target never took it; a source left pending).
//     A replica that holds more is not overruled here: the janitor says
//     so and counts it unrepaired (a failover of the map's active
//     promotes the best replica). Nor is a map active that holds a
//     replica: that is a promotion not done, a failover's, which first
//     makes sure the node it failed over stopped serving; the janitor,
//     which asks only members, cannot (without intents, it would promote
//     beside a failed node that still serves);
//   - a replica that does not follow its row's source: where the row's
//     active is active, a member the row names as a replica that holds
//     no copy, or a replica fed from another node or from none (its
//     REPLICATE lost with the leader that sent it, a consumer stopped
//     behind the manager's back), is pointed at the row's source again
//     (REPLICATE: the active, or in a chain the replica before it). A
//     node that does not say where its replicas are fed from (no
//     vb_N:source) is left alone;
//   - an orphan: a replica or dead copy on a member that neither the map
//     nor a planned move names for its vbucket is dropped (DEL_VBUCKET).
//
// With the vbcache_unsafe_janitor build tag (janitorOn false) it never
// runs, so that tests show what it repairs.

// DefaultJanitorInterval is Config.JanitorInterval's default.
const DefaultJanitorInterval = 5 * time.Second

// janitorRepair is one repair janitorPlan asks for.
type janitorRepair struct {
	Kind   string // "deactivated", "activated", "dropped", "unrepaired"
	VB     int
	Node   string // where the repair is done (unrepaired: the map's active)
	Source string // deactivated: the copy follows Source again ("" : stays dead)
	Why    string
}

func (r janitorRepair) String() string {
	switch r.Kind {
	case "deactivated":
		if r.Source != "" {
			return fmt.Sprintf("vbucket %d: %s was active, the map's replica: made a replica of %s again (%s)", r.VB, r.Node, r.Source, r.Why)
		}
		return fmt.Sprintf("vbucket %d: %s was active, the map does not name it: made dead (%s)", r.VB, r.Node, r.Why)
	case "activated":
		return fmt.Sprintf("vbucket %d: no member had it active: made active on %s, the map's active (%s)", r.VB, r.Node, r.Why)
	case "dropped":
		return fmt.Sprintf("vbucket %d: %s held an orphan copy: dropped (%s)", r.VB, r.Node, r.Why)
	case "repointed":
		return fmt.Sprintf("vbucket %d: replica %s made to follow %s again (%s)", r.VB, r.Node, r.Source, r.Why)
	}
	return fmt.Sprintf("vbucket %d: NOT repaired: %s", r.VB, r.Why)
}

// janitorKinds are the repairs' kinds, in the order they are done.
var janitorKinds = []string{"deactivated", "activated", "repointed", "dropped", "unrepaired"}

// janitorPlan compares s's map with pos, every member's answer, and
// returns the repairs to do: stray actives first, then vbuckets with no
// active, then replicas that do not follow their source, then orphans.
func janitorPlan(s *State, pos map[string]map[int]copyPos) []janitorRepair {
	var out []janitorRepair
	var acts, repoints, orphans []janitorRepair
	for vb, row := range s.Map {
		rowNames := make([]string, len(row))
		for j, i := range row {
			rowNames[j] = s.server(i)
		}
		// named: the map or a planned move names a's copy.
		named := func(a string) bool {
			i := slices.Index(s.Servers, a)
			return i >= 0 && (slices.Contains(row, i) || s.Forward != nil && vb < len(s.Forward) && slices.Contains(s.Forward[vb], i))
		}
		active := rowNames[0]
		activeSeen := false
		for _, a := range slices.Sorted(maps.Keys(pos)) {
			p, ok := pos[a][vb]
			if !ok {
				continue
			}
			switch {
			case p.State == "active" && a == active:
				activeSeen = true
			case p.State == "active":
				r := janitorRepair{Kind: "deactivated", VB: vb, Node: a, Why: fmt.Sprintf("the map's active is %s", orNone(active))}
				if j := slices.Index(rowNames, a); j > 0 && active != "" {
					r.Source = replicaSource(rowNames, j, s.Chain)
				}
				out = append(out, r)
			case (p.State == "replica" || p.State == "dead") && !named(a):
				orphans = append(orphans, janitorRepair{Kind: "dropped", VB: vb, Node: a,
					Why: fmt.Sprintf("a %s copy of %d items the map does not name", p.State, p.Items)})
			}
		}
		if activeSeen {
			for j, r := range rowNames {
				if j == 0 || r == "" || r == active {
					continue
				}
				q, listed := pos[r]
				if !listed {
					continue // not a member that answered
				}
				p, holds := q[vb]
				want := replicaSource(rowNames, j, s.Chain)
				var why string
				switch {
				case !holds:
					why = "it holds no copy"
				case p.State != "replica" || p.Source == "" || p.Source == want:
					continue
				case p.Source == "none":
					why = "it followed no node"
				default:
					why = "it followed " + p.Source
				}
				repoints = append(repoints, janitorRepair{Kind: "repointed", VB: vb, Node: r, Source: want, Why: why})
			}
		}
		if active == "" || activeSeen {
			continue
		}
		if _, answered := pos[active]; !answered {
			continue // the map's active is not a member that answered: the failover's
		}
		p, listed := pos[active][vb]
		if listed && p.State == "replica" {
			// A promotion not done: a failover's, which makes sure the
			// node it failed over stopped serving first (fencing.go). The
			// janitor asks only members, and cannot.
			acts = append(acts, janitorRepair{Kind: "unrepaired", VB: vb, Node: active,
				Why: fmt.Sprintf("no member has it active, and the map's active %s holds a replica: a promotion that only a failover, fenced, may do", active)})
			continue
		}
		var ahead []string
		for _, r := range rowNames[1:] {
			q, ok := pos[r][vb]
			if r == "" || !ok || !q.holds() {
				continue
			}
			switch {
			case (!listed || p.UUID == 0) && q.Items > 0:
				// The map's active holds no copy, or one with no
				// lineage (nothing a stream fed it since a DEL_VBUCKET:
				// its seqno is not what it holds).
				ahead = append(ahead, fmt.Sprintf("%s holds %d items", r, q.Items))
			case listed && q.UUID == p.UUID && q.Seqno > p.Seqno:
				ahead = append(ahead, fmt.Sprintf("%s is at seqno %d", r, q.Seqno))
			}
		}
		if len(ahead) > 0 {
			why := fmt.Sprintf("no member has it active, and the map's active %s ", active)
			if listed {
				why += fmt.Sprintf("(%s, seqno %d) holds less than a replica: ", p.State, p.Seqno)
			} else {
				why += "holds no copy, while a replica does: "
			}
			acts = append(acts, janitorRepair{Kind: "unrepaired", VB: vb, Node: active, Why: why + strings.Join(ahead, ", ") + "; a failover of " + active + " promotes it"})
			continue
		}
		why := "it holds no copy, and no replica holds items"
		if listed {
			why = fmt.Sprintf("its copy was %s at seqno %d, no replica ahead", p.State, p.Seqno)
		}
		acts = append(acts, janitorRepair{Kind: "activated", VB: vb, Node: active, Why: why})
	}
	out = append(out, acts...)
	out = append(out, repoints...)
	return append(out, orphans...)
}

func orNone(a string) string {
	if a == "" {
		return "none"
	}
	return a
}

// janitorBusy says what keeps the janitor from looking ("" : nothing).
func (m *Manager) janitorBusy(s *State) string {
	switch {
	case rebalancing(s):
		return "a rebalance runs"
	case len(s.Intents) > 0:
		return "a failover's intent is not finished"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.failovers > 0 || len(m.failing) > 0:
		return "a failover runs"
	case len(m.unpromoted) > 0:
		return "a failover's promotions wait"
	case len(m.moving) > 0:
		return "a move runs"
	}
	return ""
}

// janitorLoop runs a janitor round when the leadership begins and every
// JanitorInterval after, until ctx ends.
func (m *Manager) janitorLoop(ctx context.Context) {
	if !janitorOn || m.cfg.JanitorInterval < 0 {
		return
	}
	t := time.NewTicker(m.cfg.JanitorInterval)
	defer t.Stop()
	for {
		m.janitorRound(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// janitorRound is one look and its repairs; it returns them (for tests).
func (m *Manager) janitorRound(ctx context.Context) []janitorRepair {
	s := m.State()
	if len(s.Map) == 0 || m.janitorBusy(s) != "" {
		return nil
	}
	members := quorumSet(s)
	pos := m.positions(ctx, members)
	if len(pos) < len(members) || ctx.Err() != nil {
		return nil // a silent member may hold what the janitor cannot see
	}
	plan := janitorPlan(s, pos)
	if len(plan) == 0 {
		return nil
	}
	m.opMu.Lock()
	defer m.opMu.Unlock()
	if cur := m.State(); cur.Rev != s.Rev || cur.RevEpoch != s.RevEpoch || m.janitorBusy(cur) != "" {
		return nil // the map moved on: look again next round
	}
	var done []janitorRepair
	for _, r := range plan {
		var err error
		switch r.Kind {
		case "deactivated":
			err = m.conn(ctx, r.Node, func(c *admin.Conn) error {
				if err := c.StopReplication(r.VB); err != nil {
					return err
				}
				if err := c.SetVBucket(r.VB, vbucket.Dead); err != nil || r.Source == "" {
					return err
				}
				return c.Replicate(r.VB, r.Source)
			})
		case "activated":
			err = m.conn(ctx, r.Node, func(c *admin.Conn) error { return c.SetVBucket(r.VB, vbucket.Active) })
		case "dropped":
			err = m.conn(ctx, r.Node, func(c *admin.Conn) error { return c.DelVBucket(r.VB) })
		case "repointed":
			if !janitorRepoints {
				continue
			}
			err = m.conn(ctx, r.Node, func(c *admin.Conn) error { return c.Replicate(r.VB, r.Source) })
		}
		if err != nil {
			m.cfg.Logf("manager: janitor: %v: failed: %v", r, err)
			continue
		}
		if r.Kind == "unrepaired" {
			// Said once, not every round, until it changes.
			m.mu.Lock()
			said := m.janitorSaid[r.VB] == r.Why
			m.janitorSaid[r.VB] = r.Why
			m.mu.Unlock()
			if said {
				continue
			}
		}
		m.cfg.Logf("manager: janitor: %v", r)
		m.obs.janitor.WithLabelValues(r.Kind).Inc()
		done = append(done, r)
	}
	return done
}
