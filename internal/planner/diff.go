package planner

// Diff and Measure (planner.go's "# Cost model"): the moves between two
// maps and what they cost.

// Move is one change between two maps: the server at Position of VBucket
// changes From one server To another.
type Move struct {
	VBucket  int
	Position int    // 0 active, 1.. replica
	From, To string // server addresses; "" for none
}

// Diff returns the moves that turn cur into target, ordered by vbucket
// then position. Servers are compared by address, so the two maps may
// list servers in different orders. A vbucket or position missing from
// one map counts as "" (none).
func Diff(cur, target Map) []Move {
	var moves []Move
	for v := range max(len(cur.VBuckets), len(target.VBuckets)) {
		cr, tr := row(cur, v), row(target, v)
		for pos := range max(len(cr), len(tr)) {
			from, to := name(cur, cr, pos), name(target, tr, pos)
			if from != to {
				moves = append(moves, Move{VBucket: v, Position: pos, From: from, To: to})
			}
		}
	}
	return moves
}

func row(m Map, v int) []int {
	if v < len(m.VBuckets) {
		return m.VBuckets[v]
	}
	return nil
}

func name(m Map, r []int, pos int) string {
	if pos >= len(r) || r[pos] < 0 || r[pos] >= len(m.Servers) {
		return ""
	}
	return m.Servers[r[pos]]
}

// Cost is what executing the difference between two maps costs, in the
// package's cost model.
type Cost struct {
	Moves  int // len(Diff(cur, target))
	Copies int // moves to a server that held no copy of the vbucket: a full backfill each
	Swaps  int // moves to a server that already held a copy (promotion, demotion, reposition): no data
	Drops  int // moves to none: a copy deleted and not replaced
}

// Measure returns the cost of moving from cur to target.
func Measure(cur, target Map) Cost {
	var c Cost
	for _, m := range Diff(cur, target) {
		c.Moves++
		switch {
		case m.To == "":
			c.Drops++
		case held(cur, m.VBucket, m.To):
			c.Swaps++
		default:
			c.Copies++
		}
	}
	return c
}

// held reports whether server s holds a copy of vbucket v in m.
func held(m Map, v int, s string) bool {
	r := row(m, v)
	for pos := range r {
		if name(m, r, pos) == s {
			return true
		}
	}
	return false
}
