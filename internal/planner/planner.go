// Package planner computes the target cluster map for a rebalance: given
// the current map (who holds each vbucket's active copy and replicas) and
// the servers the cluster should run on, Plan returns the map to move to.
// The manager executes the difference (Diff) as vbucket moves (DESIGN.md
// §3). The package is pure: no I/O, no clocks, no randomness, no map
// iteration, so the same input always gives the same output.
//
// # What a target map guarantees
//
//   - The number of vbuckets never changes, and every row has replicas+1
//     entries: [active, replica1, ..., replicaR].
//   - Every vbucket has an active copy on one of the target servers.
//   - No server holds two copies of one vbucket (so no replica shares a
//     server with its active).
//   - Actives are balanced: every server holds ⌊N/S⌋ or ⌈N/S⌉ of the N
//     vbuckets' actives (S servers), i.e. within one of the mean.
//   - Replicas are balanced the same way, counted per server as the total
//     over all replica positions: ⌊N·R/S⌋ or ⌈N·R/S⌉.
//   - With fewer servers than replicas+1 only S-1 replicas per vbucket can
//     be placed; the positions past S-1 are -1. Adding servers later fills
//     them.
//
// # Cost model
//
// What a move costs depends on whether the receiving server already holds
// a copy of the vbucket, in any position:
//
//   - copy: the server holds nothing of the vbucket, so a stream must
//     backfill every item over the network. Cost 1. This is what we
//     minimise.
//   - swap: the server already holds a copy (a replica promoted to active,
//     an old active demoted to replica, a replica changing position). No
//     data moves, only vbucket states and the map change. Cost 0 in
//     copies, but it is still a move in Diff, so among equal-copy choices
//     the planner keeps servers in place.
//   - drop: a copy that is no longer wanted is deleted. Free.
//
// Measure reports these counts for any two maps. A useful lower bound on
// copies is the larger of (a) the copies servers must gain to reach their
// minimum load, Σ max(0, ⌊N/S⌋+⌊N·R/S⌋ − copies already held), and (b)
// the copies lost with removed servers, Σ max(0, R+1 − surviving copies).
// Growing 3→4 servers with 1024 vbuckets and R replicas, the new server
// must receive 256·(R+1) copies; the planner does exactly that.
//
// # Algorithm
//
// Optimal placement is a min-cost flow problem; the planner instead runs
// a few greedy passes that are linear in the number of vbuckets (times the
// number of servers) and are optimal on the common shapes (grow, shrink,
// failover). Ties are always broken by the lower vbucket or server index.
//
//  1. Actives. Keep every active whose server stays. A failed-over
//     vbucket (active -1) serves nothing, so a surviving replica is
//     promoted in place at once (the one on the server with the fewest
//     actives), and it stays there unless the balance needs it moved.
//     Each server's active quota is ⌊N/S⌋, and the N mod S extra ones go
//     to the servers that already hold the most actives. The active of a
//     removed server (still serving until the move) goes to a server under
//     quota that holds a replica of it (a swap); servers over quota hand
//     actives to such servers too. What is left is copied to the server
//     furthest under quota: a removed server's actives (copying directly
//     costs one copy and keeps the replica; promoting onto a full server
//     would cost a re-replication and a shed), vbuckets with no copy at
//     all (an empty cluster, populated round-robin, or lost data), then
//     the excess of servers over quota, vbuckets that lost a copy first
//     (their demoted active fills the lost replica slot for free) and
//     just-promoted vbuckets last.
//  2. Replicas. The candidates for a vbucket's replicas are the servers
//     that hold a copy of it and are not its new active: its surviving
//     replicas in position order, then its demoted old active. Replica
//     quotas are split like active quotas, the extra ones going to servers
//     with the most candidates, and capped so that no server needs more
//     replicas than vbuckets it does not hold as active. A server with
//     more candidates than quota drops some: first surplus candidates
//     (free), then candidates of vbuckets that a server under quota could
//     take a fresh copy of (growing by one server, a vbucket whose active
//     just moved to the new server cannot have its replica there, so it
//     keeps its old copies). The missing replicas are then copied,
//     vbuckets with the fewest eligible servers first, each to the server
//     furthest under quota, breaking ties toward the server that least
//     often replicates this active's server (so a failover spreads its
//     promotions) and then cyclically after the active. When a vbucket's
//     last slot can only go to servers that already hold it, another
//     vbucket's replica is moved to free an eligible server (free when
//     that replica was itself a fresh copy, else one extra copy).
//  3. Positions. A kept replica stays in its position when it can; new
//     replicas fill the open positions, each going to the server that
//     holds that position least often, so that replica1, replica2, …
//     stay roughly balanced on their own.
//
// The cost is O(N·S) time plus O(S²) memory for the pair counts; 65536
// vbuckets plan in tens of milliseconds. The final repair is a search
// over vbuckets and can be quadratic on adversarial inputs, but is rare.
//
// The passes are greedy, not optimal: on unusual inputs (random maps, many
// removed servers) the copy count can exceed the lower bound. The tests
// pin the counts for each scenario next to the bound.
package planner

import (
	"errors"
	"fmt"
	"slices"
)

// MaxReplicas is the most replicas Plan places per vbucket.
const MaxReplicas = 3

// Errors returned by Plan for inputs it cannot plan.
var (
	// ErrNoVBuckets is returned when the current map has no vbuckets:
	// the count never changes, so it must come from the current map
	// (all -1 rows for a cluster not populated yet).
	ErrNoVBuckets = errors.New("planner: map has no vbuckets")
	// ErrNoServers is returned when the target server list is empty.
	ErrNoServers = errors.New("planner: no servers")
)

// Map is a cluster map: which server holds each vbucket's active copy and
// replicas.
type Map struct {
	Servers  []string // server addresses; indexes below refer to this list
	VBuckets [][]int  // per vbucket: [active, replica1, ..., replicaR]; -1 = none
}

// Plan returns the target map for the given servers (in the order the
// cluster lists them; servers of cur absent from servers are being removed,
// servers absent from cur are being added) with the given number of
// replicas (0..MaxReplicas). The result's Servers is a copy of servers and
// each row has replicas+1 entries; with fewer than replicas+1 servers the
// replica positions that cannot be placed are -1. cur is not modified, and
// the result shares no memory with cur or servers.
//
// cur may have rows of any length (a change of the replica count), -1
// anywhere (an empty cluster, or one after a failover), and duplicate
// servers within a row (later duplicates are ignored). Indexes outside
// cur.Servers, duplicate or empty server names are errors.
func Plan(cur Map, servers []string, replicas int) (Map, error) {
	if replicas < 0 || replicas > MaxReplicas {
		return Map{}, fmt.Errorf("planner: %d replicas, want 0..%d", replicas, MaxReplicas)
	}
	if len(cur.VBuckets) == 0 {
		return Map{}, ErrNoVBuckets
	}
	if len(servers) == 0 {
		return Map{}, ErrNoServers
	}
	index := make(map[string]int32, len(servers))
	for i, s := range servers {
		if s == "" {
			return Map{}, fmt.Errorf("planner: server %d has an empty name", i)
		}
		if _, dup := index[s]; dup {
			return Map{}, fmt.Errorf("planner: server %q listed twice", s)
		}
		index[s] = int32(i)
	}
	// trans maps an index of cur.Servers to an index of servers, -1 for a
	// server being removed.
	trans := make([]int32, len(cur.Servers))
	seen := make(map[string]bool, len(cur.Servers))
	for i, s := range cur.Servers {
		if seen[s] {
			return Map{}, fmt.Errorf("planner: current map lists server %q twice", s)
		}
		seen[s] = true
		t, ok := index[s]
		if !ok {
			t = -1
		}
		trans[i] = t
	}
	p, err := newPlanner(cur, trans, len(servers), replicas)
	if err != nil {
		return Map{}, err
	}
	p.placeActives()
	if err := p.placeReplicas(); err != nil {
		return Map{}, err
	}
	return p.result(servers, replicas+1), nil
}

// planner is the working state of one Plan call. Servers are identified
// by their index in the target list.
type planner struct {
	n   int // target servers
	nvb int // vbuckets
	r   int // replicas placed per vbucket: min(replicas, n-1)

	// hold lists, per vbucket, the target servers that hold a copy in the
	// current map, in the order of their position there, padded with -1;
	// holdPos is each one's position (0 = active).
	width   int
	hold    []int32
	holdPos []int8

	failed []bool  // the current active is -1 (failed over), not on a removed server
	act    []int32 // new active per vbucket, -1 while unplaced
	prom   []bool  // the active was promoted in place because it had failed
	rep    []int32 // nvb*r new replicas, unordered; -1 while unplaced
	nrep   []uint8 // how many of rep[v*r:] are placed

	actCount, actQuota []int
	repCount, repQuota []int
	pair               []int32 // n*n: pair[a*n+b] = vbuckets with active a and a replica on b
	repairFrom         int     // where repair resumes its search
}

func newPlanner(cur Map, trans []int32, n, replicas int) (*planner, error) {
	nvb := len(cur.VBuckets)
	width := 1
	for _, row := range cur.VBuckets {
		width = max(width, len(row))
	}
	p := &planner{
		n: n, nvb: nvb, r: min(replicas, n-1),
		width:    width,
		hold:     make([]int32, nvb*width),
		holdPos:  make([]int8, nvb*width),
		act:      make([]int32, nvb),
		prom:     make([]bool, nvb),
		failed:   make([]bool, nvb),
		actCount: make([]int, n),
		repCount: make([]int, n),
		pair:     make([]int32, n*n),
	}
	for v, row := range cur.VBuckets {
		h := p.hold[v*width : (v+1)*width]
		for i := range h {
			h[i] = -1
		}
		p.failed[v] = len(row) == 0 || row[0] == -1
		k := 0
		for pos, s := range row {
			if s < -1 || s >= len(trans) {
				return nil, fmt.Errorf("planner: vbucket %d position %d: server index %d outside 0..%d", v, pos, s, len(trans)-1)
			}
			if s == -1 || trans[s] < 0 || slices.Contains(h[:k], trans[s]) {
				continue
			}
			h[k] = trans[s]
			p.holdPos[v*width+k] = int8(min(pos, 127))
			k++
		}
	}
	p.rep = make([]int32, nvb*p.r)
	for i := range p.rep {
		p.rep[i] = -1
	}
	p.nrep = make([]uint8, nvb)
	return p, nil
}

// holders returns the servers holding a copy of v and their positions.
func (p *planner) holders(v int) ([]int32, []int8) {
	h := p.hold[v*p.width : (v+1)*p.width]
	k := 0
	for k < len(h) && h[k] >= 0 {
		k++
	}
	return h[:k], p.holdPos[v*p.width : v*p.width+k]
}

// quotas splits total over the servers as evenly as possible: each gets
// total/n, and the total%n servers first in rank (with room under limit,
// when limit is not nil) get one more.
func quotas(total, n int, rank []int, limit []int) []int {
	q := make([]int, n)
	base, extra := total/n, total%n
	for i := range q {
		q[i] = base
	}
	for _, i := range rank {
		if extra == 0 {
			break
		}
		if limit != nil && limit[i] < base+1 {
			continue
		}
		q[i]++
		extra--
	}
	return q
}

// rankBy returns the server indexes sorted by key descending, then by
// tie ascending, then by index.
func rankBy(n int, key, tie []int) []int {
	rank := make([]int, n)
	for i := range rank {
		rank[i] = i
	}
	slices.SortStableFunc(rank, func(a, b int) int {
		if key[a] != key[b] {
			return key[b] - key[a]
		}
		if tie != nil && tie[a] != tie[b] {
			return tie[a] - tie[b]
		}
		return a - b
	})
	return rank
}

// placeActives is step 1 of the package comment.
func (p *planner) placeActives() {
	for v := range p.nvb {
		p.act[v] = -1
		if h, pos := p.holders(v); len(h) > 0 && pos[0] == 0 {
			p.act[v] = h[0]
			p.actCount[h[0]]++
		}
	}
	// A failed-over vbucket (active -1) serves nothing until it has an
	// active: promote a surviving replica in place, at once, whatever the
	// balance, and keep it there if the balance allows.
	for v := range p.nvb {
		if p.act[v] >= 0 || !p.failed[v] {
			continue
		}
		best := int32(-1)
		h, _ := p.holders(v)
		for _, s := range h {
			if best < 0 || p.actCount[s] < p.actCount[best] {
				best = s
			}
		}
		if best >= 0 {
			p.act[v], p.prom[v] = best, true
			p.actCount[best]++
		}
	}
	p.actQuota = quotas(p.nvb, p.n, rankBy(p.n, p.actCount, nil), nil)

	// Swaps: the active of a removed server goes to a replica's server
	// under quota, then servers over quota hand actives to such servers.
	for v := range p.nvb {
		if p.act[v] < 0 {
			if s := p.underQuotaHolder(v); s >= 0 {
				p.act[v] = s
				p.actCount[s]++
			}
		}
	}
	for v := range p.nvb {
		if a := p.act[v]; a >= 0 && p.actCount[a] > p.actQuota[a] {
			if s := p.underQuotaHolder(v); s >= 0 {
				p.moveActive(v, s)
			}
		}
	}
	// Copies: the actives of removed servers whose replicas' servers are
	// all full, the vbuckets with no copy anywhere, then the remaining
	// excess (vbuckets just promoted last) go to the server furthest under
	// quota. A removed server's active is copied, not promoted and then
	// replaced, because that would cost a re-replication and a shed.
	for v := range p.nvb {
		if p.act[v] < 0 {
			t := p.mostUnderQuota()
			p.act[v] = t
			p.actCount[t]++
		}
	}
	//
	// Shedding prefers vbuckets that lost a copy (fewest holders first):
	// the demoted active then fills the replica slot the lost copy left,
	// where shedding a vbucket with all its copies would make the demoted
	// active surplus and leave the lost slot to another copy.
	for _, promoted := range []bool{false, true} {
		for nh := 1; nh <= p.width; nh++ {
			for v := range p.nvb {
				if a := p.act[v]; p.prom[v] == promoted && p.actCount[a] > p.actQuota[a] && p.numHolders(v) == nh {
					p.moveActive(v, p.mostUnderQuota())
				}
			}
		}
	}
}

// numHolders returns how many target servers hold a copy of v.
func (p *planner) numHolders(v int) int {
	h, _ := p.holders(v)
	return len(h)
}

// underQuotaHolder returns the server furthest under its active quota
// among those holding a copy of v other than its active, or -1.
func (p *planner) underQuotaHolder(v int) int32 {
	best, bestDef := int32(-1), 0
	h, _ := p.holders(v)
	for _, s := range h {
		if def := p.actQuota[s] - p.actCount[s]; s != p.act[v] && def > bestDef {
			best, bestDef = s, def
		}
	}
	return best
}

func (p *planner) moveActive(v int, to int32) {
	p.actCount[p.act[v]]--
	p.act[v] = to
	p.actCount[to]++
}

// mostUnderQuota returns the server with the most actives missing from
// its quota, the lowest index on a tie.
func (p *planner) mostUnderQuota() int32 {
	best, bestDef := int32(0), p.actQuota[0]-p.actCount[0]
	for i := 1; i < p.n; i++ {
		if def := p.actQuota[i] - p.actCount[i]; def > bestDef {
			best, bestDef = int32(i), def
		}
	}
	return best
}

// result is step 3 of the package comment: it lays the chosen replicas
// out in positions and builds the Map.
func (p *planner) result(servers []string, rows int) Map {
	m := Map{
		Servers:  slices.Clone(servers),
		VBuckets: make([][]int, p.nvb),
	}
	flat := make([]int, p.nvb*rows)
	posCount := make([]int, (p.r+1)*p.n)
	for v := range p.nvb {
		row := flat[v*rows : (v+1)*rows : (v+1)*rows]
		m.VBuckets[v] = row
		for i := range row {
			row[i] = -1
		}
		row[0] = int(p.act[v])
		reps := p.replicas(v)
		var placed [MaxReplicas]bool
		h, pos := p.holders(v)
		for k, s := range reps {
			if i := slices.Index(h, s); i >= 0 && pos[i] >= 1 && int(pos[i]) <= p.r && row[pos[i]] < 0 {
				row[pos[i]] = int(s)
				placed[k] = true
			}
		}
		for at := 1; at <= p.r; at++ {
			if row[at] >= 0 {
				continue
			}
			best := -1
			for k, s := range reps {
				if !placed[k] && (best < 0 || posCount[at*p.n+int(s)] < posCount[at*p.n+int(reps[best])]) {
					best = k
				}
			}
			row[at] = int(reps[best])
			placed[best] = true
		}
		for at := 1; at <= p.r; at++ {
			posCount[at*p.n+row[at]]++
		}
	}
	return m
}
