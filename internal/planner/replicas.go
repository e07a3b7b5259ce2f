package planner

import (
	"fmt"
	"slices"
)

// The replica pass of Plan (planner.go's "# Algorithm"): replicas are
// placed after the actives, keeping the copies servers already hold.

// placeReplicas is step 2 of the package comment.
func (p *planner) placeReplicas() error {
	if p.r == 0 {
		return nil
	}
	cand := make([]int, p.n)
	limit := make([]int, p.n)
	for v := range p.nvb {
		h, _ := p.holders(v)
		for _, s := range h {
			if s != p.act[v] {
				cand[s]++
			}
		}
	}
	for i := range limit {
		limit[i] = p.nvb - p.actCount[i]
	}
	p.repQuota = quotas(p.nvb*p.r, p.n, rankBy(p.n, cand, p.actCount), limit)

	p.keepCandidates(cand)
	for _, v := range p.fillOrder() {
		for int(p.nrep[v]) < p.r {
			s := p.pickReplica(v)
			if s < 0 {
				s = p.repair(v)
			}
			if s < 0 {
				return fmt.Errorf("planner: cannot place replica %d of vbucket %d", p.nrep[v]+1, v)
			}
			p.addReplica(v, s)
		}
	}
	return nil
}

// fillOrder returns the vbuckets that still miss replicas, those with the
// fewest eligible servers under quota first (ties by index), so that the
// last ones to be filled are the easiest.
func (p *planner) fillOrder() []int {
	var need, opts []int
	for v := range p.nvb {
		if int(p.nrep[v]) == p.r {
			continue
		}
		k := 0
		for i := range p.n {
			if p.repCount[i] < p.repQuota[i] && p.eligible(v, int32(i)) {
				k++
			}
		}
		need = append(need, v)
		opts = append(opts, k)
	}
	idx := make([]int, len(need))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return opts[a] - opts[b] })
	order := make([]int, len(need))
	for i, j := range idx {
		order[i] = need[j]
	}
	return order
}

// candidates appends to buf the servers that hold a copy of v and are
// not its new active, in order of preference: current replicas in
// position order, then the old active.
func (p *planner) candidates(buf []int32, v int) []int32 {
	buf = buf[:0]
	h, pos := p.holders(v)
	for k, s := range h {
		if pos[k] > 0 && s != p.act[v] {
			buf = append(buf, s)
		}
	}
	for k, s := range h {
		if pos[k] == 0 && s != p.act[v] {
			buf = append(buf, s)
		}
	}
	return buf
}

// keepCandidates decides which candidates stay replicas. A server with
// more candidates than its quota must drop some, and every dropped
// candidate of a vbucket needing it becomes a fresh copy that only a
// server under quota not holding the vbucket can take. So drops are
// chosen where they cost least:
//
//  1. A vbucket with more candidates than replicas (a demoted active, or
//     fewer replicas than before) drops its surplus, the least preferred
//     candidate whose server has excess, else the least preferred. Free.
//  2. The remaining excess is dropped from vbuckets that some server
//     under quota could take a fresh copy of, at most as many per vbucket
//     as there are such servers: growing by one server, a vbucket whose
//     active just moved there cannot get its replica there too, so it
//     keeps its old copies, and a vbucket that can is chosen instead.
//  3. The rest is kept while its server is under quota.
func (p *planner) keepCandidates(cand []int) {
	excess := make([]int, p.n)
	var receivers []int32
	for i := range p.n {
		excess[i] = max(0, cand[i]-p.repQuota[i])
		if p.repQuota[i] > cand[i] {
			receivers = append(receivers, int32(i))
		}
	}
	dropped := make([]bool, p.nvb*p.width) // by index in candidates(v)
	var buf []int32
	for v := range p.nvb {
		c := p.candidates(buf, v)
		buf = c
		d := dropped[v*p.width:]
		for range len(c) - p.r {
			best := -1
			for k, s := range c {
				if !d[k] && (best < 0 || excess[s] > 0 || excess[c[best]] == 0) {
					best = k
				}
			}
			d[best] = true
			excess[c[best]] = max(0, excess[c[best]]-1)
		}
	}
	for v := range p.nvb {
		c := p.candidates(buf, v)
		buf = c
		if len(c) > p.r {
			continue
		}
		h, _ := p.holders(v)
		opts := 0
		for _, s := range receivers {
			if s != p.act[v] && !slices.Contains(h, s) {
				opts++
			}
		}
		// Start at a different position for each vbucket, so that the
		// fresh copies spread over the replica positions.
		d := dropped[v*p.width:]
		for i := range len(c) {
			if opts == 0 {
				break
			}
			if k := (v + i) % len(c); excess[c[k]] > 0 {
				d[k] = true
				excess[c[k]]--
				opts--
			}
		}
	}
	for v := range p.nvb {
		c := p.candidates(buf, v)
		buf = c
		for k, s := range c {
			if !dropped[v*p.width+k] && int(p.nrep[v]) < p.r && p.repCount[s] < p.repQuota[s] {
				p.addReplica(v, s)
			}
		}
	}
}

func (p *planner) replicas(v int) []int32 {
	return p.rep[v*p.r : v*p.r+int(p.nrep[v])]
}

func (p *planner) addReplica(v int, s int32) {
	p.rep[v*p.r+int(p.nrep[v])] = s
	p.nrep[v]++
	p.repCount[s]++
	p.pair[int(p.act[v])*p.n+int(s)]++
}

// eligible reports whether s may take a replica of v: it is not v's
// active and holds none of v's replicas.
func (p *planner) eligible(v int, s int32) bool {
	return s != p.act[v] && !slices.Contains(p.replicas(v), s)
}

// pickReplica returns the server to receive a new replica of v: under
// quota and eligible, the furthest under quota, then the one that
// replicates v's active least, then the first after the active in
// cyclic order. It returns -1 when no server qualifies.
func (p *planner) pickReplica(v int) int32 {
	a := int(p.act[v])
	best, bestRoom, bestPair, bestDist := int32(-1), 0, int32(0), 0
	for i := range p.n {
		s := int32(i)
		room := p.repQuota[i] - p.repCount[i]
		if room <= 0 || !p.eligible(v, s) {
			continue
		}
		pr := p.pair[a*p.n+i]
		dist := (i - a + p.n) % p.n
		if best < 0 || room > bestRoom || room == bestRoom && (pr < bestPair || pr == bestPair && dist < bestDist) {
			best, bestRoom, bestPair, bestDist = s, room, pr, dist
		}
	}
	return best
}

// repair frees an eligible server for v when every server under quota
// already holds v: it moves some other vbucket u's replica from a server y
// eligible for v to a server x under quota, and returns y. It first looks
// for a y that is itself a fresh copy (then the exchange costs nothing
// extra), then for any y (one extra copy). It returns -1 when no such
// exchange exists.
func (p *planner) repair(v int) int32 {
	for _, fresh := range []bool{true, false} {
		for i := range p.n {
			x := int32(i)
			if p.repCount[i] >= p.repQuota[i] {
				continue
			}
			for j := range p.nvb {
				// Resume where the last exchange was found: vbuckets
				// before it are likely still unsuitable.
				u := (p.repairFrom + j) % p.nvb
				if u == v || !p.eligible(u, x) {
					continue
				}
				h, _ := p.holders(u)
				reps := p.replicas(u)
				for k, y := range reps {
					if !p.eligible(v, y) || fresh && slices.Contains(h, y) {
						continue
					}
					reps[k] = x
					p.repCount[y]--
					p.repCount[x]++
					p.pair[int(p.act[u])*p.n+int(y)]--
					p.pair[int(p.act[u])*p.n+int(x)]++
					p.repairFrom = u
					return y
				}
			}
		}
	}
	return -1
}
