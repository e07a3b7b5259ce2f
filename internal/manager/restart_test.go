package manager

import (
	"testing"

	"github.com/vbcache/vbcache/internal/admin"
)

// TestRestartWatch pins restart.go's rule, answer by answer: two answers
// in a row holding nothing while the map gives the node actives, with
// nothing running, are a restart that lost the data; anything else in
// between starts the count again; an incarnation change is reported
// whatever the node holds; an older node's empty answer knows nothing.
func TestRestartWatch(t *testing.T) {
	type answer struct {
		inc     uint64 // 0: an older node's empty answer
		held    int
		actives int
		busy    bool
		lost    bool   // lost() after it
		changed uint64 // restartSeen.Was
	}
	for _, tc := range []struct {
		name    string
		answers []answer
	}{
		{"restart", []answer{
			{inc: 1, held: 40, actives: 20},
			{inc: 2, held: 0, actives: 20, changed: 1},
			{inc: 2, held: 0, actives: 20, lost: true},
			{inc: 2, held: 0, actives: 20, lost: true},
		}},
		{"first answers of a leadership, already empty", []answer{
			{inc: 5, held: 0, actives: 3},
			{inc: 5, held: 0, actives: 3, lost: true},
		}},
		{"a move commits between an answer and the map's reading", []answer{
			{inc: 1, held: 0, actives: 0},
			{inc: 1, held: 0, actives: 1}, // the node took the vbucket over after it answered
			{inc: 1, held: 1, actives: 1},
			{inc: 1, held: 1, actives: 1},
		}},
		{"a rebalance or failover runs", []answer{
			{inc: 1, held: 0, actives: 4, busy: true},
			{inc: 1, held: 0, actives: 4, busy: true},
			{inc: 1, held: 0, actives: 4},
			{inc: 1, held: 0, actives: 4, busy: true},
			{inc: 1, held: 0, actives: 4},
			{inc: 1, held: 0, actives: 4, lost: true},
		}},
		{"the map gives it replicas only", []answer{
			{inc: 1, held: 0, actives: 0},
			{inc: 1, held: 0, actives: 0},
		}},
		{"restarted, and holds vbuckets again", []answer{
			{inc: 1, held: 8, actives: 4},
			{inc: 9, held: 2, actives: 4, changed: 1},
			{inc: 9, held: 2, actives: 4},
		}},
		{"an older node", []answer{
			{inc: 0, held: 0, actives: 4},
			{inc: 0, held: 0, actives: 4},
			{inc: 3, held: 0, actives: 4}, // upgraded: no change reported, none was known
			{inc: 3, held: 0, actives: 4, lost: true},
			{inc: 0, held: 0, actives: 4}, // downgraded: nothing known
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w restartWatch
			for i, a := range tc.answers {
				ans := admin.LeaseAnswer{Known: a.inc != 0, Incarnation: a.inc, Held: a.held}
				seen := w.answered(ans, a.actives, a.busy)
				if seen.Was != a.changed || w.lost() != a.lost {
					t.Fatalf("answer %d %+v (map: %d actives, busy %v): incarnation change from %#x (want %#x), lost %v (want %v)",
						i, ans, a.actives, a.busy, seen.Was, a.changed, w.lost(), a.lost)
				}
			}
		})
	}
}
