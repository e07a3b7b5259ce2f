//go:build !vbcache_unsafe_bestreplica

package manager

import (
	"strconv"
	"strings"
	"testing"
)

// TestBestReplica pins bestReplica's ranking: the highest seqno among
// the replicas that report a copy, ties by row order, silent nodes after
// them and nodes without a copy last, dead members never.
func TestBestReplica(t *testing.T) {
	type p = copyPos
	for _, tc := range []struct {
		name string
		row  []int
		dead []int
		pos  map[int]p // absent: the node did not answer
		want int
		why  string // a substring of the reason; "" for none
	}{
		{"one replica", []int{0, 1}, nil, map[int]p{1: {"replica", 7, 10, 0, ""}}, 1, ""},
		{"equal", []int{0, 1, 2}, nil, map[int]p{1: {"replica", 7, 300, 0, ""}, 2: {"replica", 7, 300, 0, ""}}, 1, ""},
		{"second ahead", []int{0, 1, 2}, nil, map[int]p{1: {"replica", 7, 10, 0, ""}, 2: {"replica", 7, 300, 0, ""}}, 2, "seqno 300 of lineage 0000000000000007; n1 at 10"},
		{"first ahead", []int{0, 1, 2}, nil, map[int]p{1: {"replica", 7, 300, 0, ""}, 2: {"replica", 7, 10, 0, ""}}, 1, "n2 at 10"},
		{"tie after a laggard", []int{0, 1, 2, 3}, nil, map[int]p{1: {"replica", 7, 5, 0, ""}, 2: {"replica", 7, 9, 0, ""}, 3: {"replica", 7, 9, 0, ""}}, 2, "n1 at 5, n3 at 9"},
		{"ahead but dead", []int{0, 1, 2}, []int{2}, map[int]p{1: {"replica", 7, 10, 0, ""}, 2: {"replica", 7, 300, 0, ""}}, 1, ""},
		{"silent before none", []int{0, 1, 2, 3}, nil, map[int]p{1: {"dead", 0, 0, 0, ""}, 3: {"", 0, 0, 0, ""}}, 2, "no replica reported a copy, it is the first whose node did not answer; n1 holds no copy, n3 holds no copy"},
		{"reported before silent", []int{0, 1, 2}, nil, map[int]p{2: {"replica", 7, 1, 0, ""}}, 2, "n1 did not answer"},
		{"no copy anywhere", []int{0, 1, 2}, nil, map[int]p{1: {"dead", 0, 0, 0, ""}, 2: {"", 0, 0, 0, ""}}, 1, "no replica holds a copy"},
		{"a move's target, active", []int{0, 1, 2}, nil, map[int]p{1: {"replica", 7, 10, 0, ""}, 2: {"active", 7, 11, 0, ""}}, 2, "seqno 11"},
		{"a copy with no lineage", []int{0, 1, 2}, nil, map[int]p{1: {"replica", 0, 1126, 0, ""}, 2: {"replica", 7, 1126, 0, ""}}, 2, "n1 has no lineage yet"},
		{"only a copy with no lineage", []int{0, 1, 2}, nil, map[int]p{1: {"replica", 0, 1126, 0, ""}, 2: {"dead", 0, 0, 0, ""}}, 1, "no replica holds a copy"},
		{"none live", []int{0, 1, 2}, []int{1, 2}, nil, -1, ""},
		{"empty slots", []int{0, -1, 2}, nil, map[int]p{2: {"replica", 7, 3, 0, ""}}, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			live := func(i int) bool {
				for _, d := range tc.dead {
					if d == i {
						return false
					}
				}
				return i > 0
			}
			pos := func(i int) (copyPos, bool) { q, ok := tc.pos[i]; return q, ok }
			name := func(i int) string { return "n" + strconv.Itoa(i) }
			got, why := bestReplica(tc.row, live, pos, name)
			if got != tc.want {
				t.Errorf("promoted %d, want %d (why %q)", got, tc.want, why)
			}
			if (tc.why == "") != (why == "") || !strings.Contains(why, tc.why) {
				t.Errorf("why %q, want one with %q", why, tc.why)
			}
		})
	}
}

// TestParsePositions reads a node's "stats vbucket" as the failover does.
func TestParsePositions(t *testing.T) {
	got := parsePositions([][2]string{
		{"vb_3", "replica"}, {"vb_3:items", "2"}, {"vb_3:uuid", "99"}, {"vb_3:high_seqno", "41"},
		{"vb_12", "dead"}, {"vb_12:uuid", "0"}, {"vb_12:high_seqno", "7"},
		{"lease_ms_left", "100"}, {"vb_x:uuid", "1"},
	})
	want := map[int]copyPos{3: {"replica", 99, 41, 2, ""}, 12: {"dead", 0, 7, 0, ""}}
	if len(got) != len(want) || got[3] != want[3] || got[12] != want[12] {
		t.Fatalf("parsePositions = %v, want %v", got, want)
	}
}
