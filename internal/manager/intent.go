package manager

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"
)

// Failover intents: a failover commits its new map, and then promotes
// (promote, reactivate). A leader that dies between the two left the map
// naming replicas that are not active, with nothing to repair them: its
// promotions lived in its memory only. So the commit also records them
// in etcd (State.Intents), and they are cleared once done. A successor
// finishes every intent it finds when it begins to lead (finishIntents):
//
//   - if the map has changed since the failover's commit (another
//     revision), the intent is dropped: what changed it decided anew;
//   - the failed node is told first (every vbucket of the intent dead
//     there): if it answers, it is fenced, and the promotions are done at
//     once;
//   - otherwise they wait two lease ceilings (lease_record.go) from the
//     successor's start: the managers' lease the node may hold from any
//     earlier leader has ended within one; a peer lease it may have
//     taken before the successor's grants reached its peers (after them
//     its peers vouch for the manager) within the second. The successor
//     pushed its map when it began, so a node that asks its peers takes
//     the new map's view first.
//
// The build tag vbcache_unsafe_intents records no intent, so that tests
// show they catch a half-done failover.

// intentOf is the intent of a failover of node whose map ns commits.
func intentOf(node string, rev, revEpoch int64, changed, lost, keptOld map[int]bool, into []int) FailoverIntent {
	keys := func(m map[int]bool) []int { return slices.Sorted(maps.Keys(m)) }
	return FailoverIntent{Node: node, Rev: rev, RevEpoch: revEpoch, Changed: keys(changed), Lost: keys(lost), KeptOld: keys(keptOld), Into: slices.Clone(into)}
}

// withIntent returns intents with in for its node (replacing one for the
// same node), for the commit of a failover.
func withIntent(intents []FailoverIntent, in FailoverIntent) []FailoverIntent {
	if !intentsOn {
		return intents
	}
	out := slices.DeleteFunc(slices.Clone(intents), func(x FailoverIntent) bool { return x.Node == in.Node })
	return append(out, in)
}

// clearIntent removes node's intent of map revision rev, its promotions
// done (or given up).
func (m *Manager) clearIntent(ctx context.Context, node string, rev int64) {
	s := m.State()
	if !slices.ContainsFunc(s.Intents, func(x FailoverIntent) bool { return x.Node == node && x.Rev == rev }) {
		return
	}
	if _, err := m.update(ctx, func(s *State) error {
		s.Intents = slices.DeleteFunc(s.Intents, func(x FailoverIntent) bool { return x.Node == node && x.Rev == rev })
		return nil
	}); err != nil {
		m.cfg.Logf("manager: clearing the failover intent of %s: %v (a successor will find it done)", node, err)
	}
}

// finishIntents finishes, on goroutines it waits for, the intents a
// previous leader left: see above.
func (m *Manager) finishIntents(ctx context.Context) {
	s := m.State()
	var wg sync.WaitGroup
	for _, in := range s.Intents {
		wg.Add(1)
		go func() { // owned by finishIntents, which waits for it
			defer wg.Done()
			m.finishIntent(ctx, in)
		}()
	}
	wg.Wait()
}

func (m *Manager) finishIntent(ctx context.Context, in FailoverIntent) {
	s := m.State()
	if s.Rev != in.Rev || s.RevEpoch != in.RevEpoch {
		m.cfg.Logf("manager: the failover of %s left its promotions undone, but the map changed since (rev %d, its %d): dropped", in.Node, s.Rev, in.Rev)
		m.clearIntent(ctx, in.Node, in.Rev)
		return
	}
	vbs := append(slices.Clone(in.Changed), in.Into...)
	how := "it was told it is out"
	if !m.fence(ctx, in.Node, s, -1, vbs) {
		m.mu.Lock()
		since := m.leadSince
		m.mu.Unlock()
		at := since.Add(2 * newLeaseParams(m.leaseCeiling()).wait())
		if d := at.Sub(m.cfg.Clock.Now()); d > 0 {
			m.cfg.Logf("manager: the failover of %s left %d promotions undone: waiting %v for any lease it may hold to run out", in.Node, len(vbs), d.Round(time.Millisecond))
		}
		if err := m.sleepUntil(ctx, at); err != nil {
			return
		}
		how = "two lease ceilings after this leadership began"
	}
	m.opMu.Lock()
	defer m.opMu.Unlock()
	if cur := m.State(); cur.Rev != in.Rev || cur.RevEpoch != in.RevEpoch {
		m.cfg.Logf("manager: the failover of %s left its promotions undone, but the map changed while waiting (rev %d, its %d): dropped", in.Node, cur.Rev, in.Rev)
		m.clearIntent(ctx, in.Node, in.Rev)
		return
	}
	set := func(vbs []int) map[int]bool {
		out := map[int]bool{}
		for _, vb := range vbs {
			out[vb] = true
		}
		return out
	}
	unact, emptied := m.promote(ctx, in.Node, &promotion{ns: s, changed: set(in.Changed), lost: set(in.Lost), keptOld: set(in.KeptOld), into: in.Into})
	re := m.reactivate(ctx, in.Node, s, in.Into)
	if ctx.Err() != nil {
		return // the next leader finishes it
	}
	m.cfg.Logf("manager: finished the failover of %s that a previous leader left half done (%s): %d vbuckets promoted, %d emptied, %d NOT activated, %d active again on their sources",
		in.Node, how, len(in.Changed)-len(in.Lost)-emptied-unact, len(in.Lost)+emptied, unact, re)
	m.clearIntent(ctx, in.Node, in.Rev)
}
