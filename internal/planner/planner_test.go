package planner

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output in testdata/*.txt")

// TestScenarios runs the scripts in testdata/*.txt. A script is a list of
// commands, each followed by its expected output:
//
//	# comment
//	<command> key=value ...
//	[input lines]
//	----
//	<expected output, no blank lines>
//	<blank line>
//
// The commands work on one current map:
//
//	empty vbuckets=N
//	    The current map becomes N vbuckets with no copies (a new cluster).
//	map servers=a,b,c
//	    The current map becomes the input, one row per line:
//	    "vb: active replica1 ..." with server names, "-" for none.
//	fail server=b
//	    Failover-shaped input: b's entries become -1 (b stays listed).
//	plan servers=a,b,c,d replicas=R [max-moves=N] [max-copies=N|lb|lb+N]
//	     [max-active-moves=N|lb|lb+N] [promoted] [show]
//	    Plans from the current map, checks every invariant (balance, no
//	    two copies on a server, row shape, determinism, idempotence, the
//	    input left alone) and the given bounds, prints the cost and the
//	    balance, and makes the result the current map. "promoted" asserts
//	    that every vbucket whose active was lost but had a surviving
//	    replica is now active on a server that held a copy. The map itself
//	    is printed with "show" or when there are at most 16 vbuckets.
//
// Run with -rewrite to regenerate the expected output, then review the
// diff.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			runScript(t, f)
		})
	}
}

func runScript(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var out strings.Builder
	var cur Map
	for i := 0; i < len(lines); {
		line := lines[i]
		if line == "" || strings.HasPrefix(line, "#") {
			out.WriteString(line + "\n")
			i++
			continue
		}
		cmdLine := i
		out.WriteString(line + "\n")
		i++
		var input []string
		for i < len(lines) && lines[i] != "----" {
			input = append(input, lines[i])
			out.WriteString(lines[i] + "\n")
			i++
		}
		if i == len(lines) {
			t.Fatalf("%s:%d: command without ----", path, cmdLine+1)
		}
		out.WriteString("----\n")
		i++
		var want []string
		for i < len(lines) && lines[i] != "" {
			want = append(want, lines[i])
			i++
		}
		got, err := runCommand(&cur, line, input)
		if err != nil {
			t.Errorf("%s:%d: %s: %v", path, cmdLine+1, line, err)
		}
		out.WriteString(got)
		if !*rewrite && got != strings.Join(want, "\n")+"\n" {
			t.Errorf("%s:%d: %s\ngot:\n%swant:\n%s", path, cmdLine+1, line, got, strings.Join(want, "\n")+"\n")
		}
		if i < len(lines) {
			out.WriteString("\n")
			i++
		}
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// runCommand runs one script command; an error is a failed check, and the
// output is still printed.
func runCommand(cur *Map, line string, input []string) (string, error) {
	fields := strings.Fields(line)
	args := map[string]string{}
	for _, f := range fields[1:] {
		k, v, _ := strings.Cut(f, "=")
		args[k] = v
	}
	var b strings.Builder
	switch fields[0] {
	case "empty":
		n, err := strconv.Atoi(args["vbuckets"])
		if err != nil {
			return "", err
		}
		*cur = Map{VBuckets: make([][]int, n)}
		for v := range cur.VBuckets {
			cur.VBuckets[v] = []int{-1}
		}
		fmt.Fprintf(&b, "%d vbuckets, no copies\n", n)
		return b.String(), nil
	case "map":
		m, err := parseMap(splitList(args["servers"]), input)
		if err != nil {
			return "", err
		}
		*cur = m
		fmt.Fprintf(&b, "%d vbuckets on %d servers\n", len(m.VBuckets), len(m.Servers))
		return b.String(), nil
	case "fail":
		s := slices.Index(cur.Servers, args["server"])
		if s < 0 {
			return "", fmt.Errorf("no server %q", args["server"])
		}
		lost := 0
		m := cloneMap(*cur)
		for _, row := range m.VBuckets {
			for pos := range row {
				if row[pos] == s {
					row[pos] = -1
					if pos == 0 {
						lost++
					}
				}
			}
		}
		*cur = m
		fmt.Fprintf(&b, "%d actives lost\n", lost)
		return b.String(), nil
	case "plan":
		return runPlan(cur, args)
	}
	return "", fmt.Errorf("unknown command %q", fields[0])
}

func runPlan(cur *Map, args map[string]string) (string, error) {
	servers := splitList(args["servers"])
	replicas, err := strconv.Atoi(args["replicas"])
	if err != nil {
		return "", err
	}
	before := cloneMap(*cur)
	got, err := Plan(*cur, servers, replicas)
	if err != nil {
		return "", err
	}
	var errs []string
	check := func(err error) {
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	check(checkPlan(before, *cur, got, servers, replicas))
	c := Measure(before, got)
	lb := copyLowerBound(before, servers, replicas)
	alb := activeMoveLowerBound(before, servers)
	am := 0
	for _, m := range Diff(before, got) {
		if m.Position == 0 {
			am++
		}
	}
	if s, ok := args["max-moves"]; ok {
		check(checkBound("moves", c.Moves, s, 0))
	}
	if s, ok := args["max-copies"]; ok {
		check(checkBound("copies", c.Copies, s, lb))
	}
	if s, ok := args["max-active-moves"]; ok {
		check(checkBound("active moves", am, s, alb))
	}
	if _, ok := args["promoted"]; ok {
		check(checkPromoted(before, got))
	}

	var b strings.Builder
	fmt.Fprintf(&b, "moves %d: copies %d, swaps %d, drops %d\n", c.Moves, c.Copies, c.Swaps, c.Drops)
	fmt.Fprintf(&b, "copies lower bound %d; active moves %d, lower bound %d\n", lb, am, alb)
	act, rep, perPos := counts(got)
	fmt.Fprintf(&b, "actives  %s\n", formatCounts(got.Servers, act))
	if replicas > 0 {
		fmt.Fprintf(&b, "replicas %s\n", formatCounts(got.Servers, rep))
		if replicas > 1 {
			for pos := 1; pos < len(perPos); pos++ {
				fmt.Fprintf(&b, "  r%d     %s\n", pos, formatCounts(got.Servers, perPos[pos]))
			}
		}
	}
	if failed, removed, promoted := lostActives(before, got); failed+removed > 0 {
		fmt.Fprintf(&b, "lost actives %d (failed %d, on removed servers %d): %d promoted, %d copied\n",
			failed+removed, failed, removed, promoted, failed+removed-promoted)
	}
	if _, ok := args["show"]; ok || len(got.VBuckets) <= 16 {
		b.WriteString(formatMap(got))
	}
	*cur = got
	if len(errs) > 0 {
		return b.String(), fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return b.String(), nil
}

// checkBound checks n against a bound written as N, "lb" or "lb+N".
func checkBound(what string, n int, bound string, lb int) error {
	limit := 0
	if rest, ok := strings.CutPrefix(bound, "lb"); ok {
		limit = lb
		if rest != "" {
			k, err := strconv.Atoi(strings.TrimPrefix(rest, "+"))
			if err != nil {
				return err
			}
			limit += k
		}
	} else {
		k, err := strconv.Atoi(bound)
		if err != nil {
			return err
		}
		limit = k
	}
	if n > limit {
		return fmt.Errorf("%s %d over the bound %s = %d", what, n, bound, limit)
	}
	return nil
}

// checkPlan checks every invariant of a Plan result, that Plan is
// deterministic and idempotent, and that it left its input alone.
func checkPlan(before, cur, got Map, servers []string, replicas int) error {
	if !reflect.DeepEqual(before, cur) {
		return fmt.Errorf("Plan modified its input")
	}
	if err := checkInvariants(before, got, servers, replicas); err != nil {
		return err
	}
	again, err := Plan(cur, servers, replicas)
	if err != nil || !reflect.DeepEqual(again, got) {
		return fmt.Errorf("Plan is not deterministic (err %v)", err)
	}
	same, err := Plan(got, servers, replicas)
	if err != nil {
		return fmt.Errorf("replanning the result: %v", err)
	}
	if d := Diff(got, same); len(d) != 0 {
		return fmt.Errorf("Plan is not idempotent: replanning the result moves %d, first %+v", len(d), d[0])
	}
	return nil
}

func checkInvariants(cur, got Map, servers []string, replicas int) error {
	n, nvb := len(servers), len(cur.VBuckets)
	reff := min(replicas, n-1)
	if !slices.Equal(got.Servers, servers) {
		return fmt.Errorf("servers %v, want %v", got.Servers, servers)
	}
	if len(got.VBuckets) != nvb {
		return fmt.Errorf("%d vbuckets, want %d", len(got.VBuckets), nvb)
	}
	for v, row := range got.VBuckets {
		if len(row) != replicas+1 {
			return fmt.Errorf("vbucket %d: row %v, want %d entries", v, row, replicas+1)
		}
		for pos, s := range row {
			if pos <= reff && (s < 0 || s >= n) {
				return fmt.Errorf("vbucket %d: position %d is %d", v, pos, s)
			}
			if pos > reff && s != -1 {
				return fmt.Errorf("vbucket %d: position %d is %d, want -1 with %d servers", v, pos, s, n)
			}
			if s >= 0 && slices.Contains(row[:pos], s) {
				return fmt.Errorf("vbucket %d: two copies on %s: %v", v, servers[s], row)
			}
		}
	}
	act, rep, _ := counts(got)
	if err := checkBalance("actives", act, nvb); err != nil {
		return err
	}
	return checkBalance("replicas", rep, nvb*reff)
}

// checkBalance checks that each count is ⌊total/n⌋ or ⌈total/n⌉.
func checkBalance(what string, c []int, total int) error {
	lo, hi := total/len(c), (total+len(c)-1)/len(c)
	for i, k := range c {
		if k < lo || k > hi {
			return fmt.Errorf("%s unbalanced: server %d has %d, want %d..%d (%v)", what, i, k, lo, hi, c)
		}
	}
	return nil
}

// checkPromoted checks that a vbucket whose active was lost and that kept
// a copy on a surviving server is active on one of those servers.
func checkPromoted(cur, got Map) error {
	for v, row := range cur.VBuckets {
		if len(row) > 0 && row[0] >= 0 && slices.Contains(got.Servers, cur.Servers[row[0]]) {
			continue
		}
		if len(row) > 0 && row[0] >= 0 {
			continue // on a removed server: promotion is preferred, not required
		}
		var had []string
		for _, s := range row {
			if s >= 0 && slices.Contains(got.Servers, cur.Servers[s]) {
				had = append(had, cur.Servers[s])
			}
		}
		if a := got.Servers[got.VBuckets[v][0]]; len(had) > 0 && !slices.Contains(had, a) {
			return fmt.Errorf("vbucket %d: active copied to %s, not promoted from %v", v, a, had)
		}
	}
	return nil
}

// lostActives counts the vbuckets whose active was -1 (failed) or on a
// removed server, and of those, how many are now active on a server that
// held a copy (promoted). Vbuckets with no copy at all are not counted.
func lostActives(cur, got Map) (failed, removed, promoted int) {
	for v, row := range cur.VBuckets {
		if len(row) > 0 && row[0] >= 0 && slices.Contains(got.Servers, cur.Servers[row[0]]) {
			continue
		}
		var had []string
		for _, s := range row {
			if s >= 0 && slices.Contains(got.Servers, cur.Servers[s]) {
				had = append(had, cur.Servers[s])
			}
		}
		if len(had) == 0 {
			continue
		}
		if len(row) > 0 && row[0] >= 0 {
			removed++
		} else {
			failed++
		}
		if slices.Contains(had, got.Servers[got.VBuckets[v][0]]) {
			promoted++
		}
	}
	return failed, removed, promoted
}

// copyLowerBound is the package comment's lower bound on copies: the
// larger of what servers must gain to reach their minimum load and what
// was lost with removed servers.
func copyLowerBound(cur Map, servers []string, replicas int) int {
	n, nvb := len(servers), len(cur.VBuckets)
	reff := min(replicas, n-1)
	held := make([]int, n)
	lost := 0
	for _, row := range cur.VBuckets {
		surv := 0
		for i, s := range servers {
			if heldBy(cur, row, s) {
				held[i]++
				surv++
			}
		}
		lost += max(0, reff+1-surv)
	}
	gain := 0
	for i := range held {
		gain += max(0, nvb/n+nvb*reff/n-held[i])
	}
	return max(gain, lost)
}

// activeMoveLowerBound bounds the moves of position 0: every lost active
// moves, every server over ⌈N/S⌉ sheds, every server under ⌊N/S⌋ gains.
func activeMoveLowerBound(cur Map, servers []string) int {
	n, nvb := len(servers), len(cur.VBuckets)
	act := make([]int, n)
	lost := 0
	for _, row := range cur.VBuckets {
		i := -1
		if len(row) > 0 && row[0] >= 0 {
			i = slices.Index(servers, cur.Servers[row[0]])
		}
		if i < 0 {
			lost++
			continue
		}
		act[i]++
	}
	gain, shed := 0, 0
	for _, k := range act {
		gain += max(0, nvb/n-k)
		shed += max(0, k-(nvb+n-1)/n)
	}
	return max(gain, lost+shed)
}

func heldBy(m Map, row []int, s string) bool {
	for _, i := range row {
		if i >= 0 && m.Servers[i] == s {
			return true
		}
	}
	return false
}

// counts returns actives per server, replicas per server (all
// positions), and replicas per server for each position.
func counts(m Map) (act, rep []int, perPos [][]int) {
	n := len(m.Servers)
	act, rep = make([]int, n), make([]int, n)
	width := 0
	for _, row := range m.VBuckets {
		width = max(width, len(row))
	}
	perPos = make([][]int, width)
	for i := range perPos {
		perPos[i] = make([]int, n)
	}
	for _, row := range m.VBuckets {
		for pos, s := range row {
			if s < 0 {
				continue
			}
			perPos[pos][s]++
			if pos == 0 {
				act[s]++
			} else {
				rep[s]++
			}
		}
	}
	return act, rep, perPos
}

func formatCounts(servers []string, c []int) string {
	parts := make([]string, len(c))
	for i, k := range c {
		parts[i] = fmt.Sprintf("%s=%d", servers[i], k)
	}
	return strings.Join(parts, " ")
}

func formatMap(m Map) string {
	var b strings.Builder
	for v, row := range m.VBuckets {
		fmt.Fprintf(&b, "%d:", v)
		for _, s := range row {
			if s < 0 {
				b.WriteString(" -")
			} else {
				b.WriteString(" " + m.Servers[s])
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func parseMap(servers []string, input []string) (Map, error) {
	m := Map{Servers: servers}
	for _, line := range input {
		idx, rest, ok := strings.Cut(line, ":")
		if !ok {
			return Map{}, fmt.Errorf("row %q: want \"vb: servers\"", line)
		}
		if v, err := strconv.Atoi(strings.TrimSpace(idx)); err != nil || v != len(m.VBuckets) {
			return Map{}, fmt.Errorf("row %q: want vbucket %d", line, len(m.VBuckets))
		}
		var row []int
		for _, f := range strings.Fields(rest) {
			i := -1
			if f != "-" {
				if i = slices.Index(servers, f); i < 0 {
					return Map{}, fmt.Errorf("row %q: no server %q", line, f)
				}
			}
			row = append(row, i)
		}
		m.VBuckets = append(m.VBuckets, row)
	}
	return m, nil
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func cloneMap(m Map) Map {
	c := Map{Servers: slices.Clone(m.Servers), VBuckets: make([][]int, len(m.VBuckets))}
	for v, row := range m.VBuckets {
		c.VBuckets[v] = slices.Clone(row)
	}
	return c
}

// TestRandom plans random valid inputs (1-8 servers before and after,
// 0-3 replicas before and after, holes, removed and added servers) and
// checks every invariant, determinism, idempotence, and that the copies
// are at least the lower bound (so the bound and Measure agree).
func TestRandom(t *testing.T) {
	iters := 2000
	if testing.Short() {
		iters = 200
	}
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := []int{1, 2, 3, 5, 8, 16, 64, 256, 1024}
	for it := range iters {
		cur, servers, replicas := randomInput(rng, sizes[rng.IntN(len(sizes))])
		before := cloneMap(cur)
		got, err := Plan(cur, servers, replicas)
		if err != nil {
			t.Fatalf("iteration %d: %v\ninput %v servers %v replicas %d", it, err, cur, servers, replicas)
		}
		if err := checkPlan(before, cur, got, servers, replicas); err != nil {
			t.Fatalf("iteration %d: %v\ninput %v\nservers %v replicas %d\ngot %v", it, err, cur, servers, replicas, got)
		}
		if c, lb := Measure(cur, got), copyLowerBound(cur, servers, replicas); c.Copies < lb {
			t.Fatalf("iteration %d: %d copies under the lower bound %d", it, c.Copies, lb)
		}
	}
}

// randomInput returns a random valid current map of nvb vbuckets and a
// random target.
func randomInput(rng *rand.Rand, nvb int) (Map, []string, int) {
	pool := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"}
	rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
	nCur := rng.IntN(9) // 0 = an empty cluster
	cur := Map{Servers: slices.Clone(pool[:nCur]), VBuckets: make([][]int, nvb)}
	width := rng.IntN(4) + 1
	hole := rng.Float64() * 0.3
	for v := range cur.VBuckets {
		row := make([]int, width)
		perm := rng.Perm(max(nCur, 1))
		for pos := range row {
			row[pos] = -1
			if pos < nCur && rng.Float64() >= hole {
				row[pos] = perm[pos]
			}
		}
		cur.VBuckets[v] = row
	}
	// Target: a random subset of the current servers plus new ones.
	var servers []string
	for _, s := range cur.Servers {
		if rng.IntN(4) != 0 {
			servers = append(servers, s)
		}
	}
	for _, s := range pool[nCur:] {
		if len(servers) >= 8 {
			break
		}
		if len(servers) == 0 || rng.IntN(3) == 0 {
			servers = append(servers, s)
		}
	}
	rng.Shuffle(len(servers), func(i, j int) { servers[i], servers[j] = servers[j], servers[i] })
	return cur, servers, rng.IntN(MaxReplicas + 1)
}

func TestErrors(t *testing.T) {
	ok := Map{Servers: []string{"a"}, VBuckets: [][]int{{0}}}
	for _, tc := range []struct {
		name     string
		cur      Map
		servers  []string
		replicas int
	}{
		{"no-vbuckets", Map{}, []string{"a"}, 0},
		{"no-servers", ok, nil, 0},
		{"negative-replicas", ok, []string{"a"}, -1},
		{"too-many-replicas", ok, []string{"a"}, MaxReplicas + 1},
		{"empty-name", ok, []string{"a", ""}, 0},
		{"duplicate-server", ok, []string{"a", "a"}, 0},
		{"duplicate-current-server", Map{Servers: []string{"a", "a"}, VBuckets: [][]int{{0}}}, []string{"a"}, 0},
		{"index-out-of-range", Map{Servers: []string{"a"}, VBuckets: [][]int{{1}}}, []string{"a"}, 0},
		{"index-below-minus-one", Map{Servers: []string{"a"}, VBuckets: [][]int{{-2}}}, []string{"a"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Plan(tc.cur, tc.servers, tc.replicas); err == nil {
				t.Errorf("Plan succeeded")
			}
		})
	}
}

func TestDiffMeasure(t *testing.T) {
	// The maps list servers in different orders: Diff compares names.
	cur := Map{Servers: []string{"a", "b", "c"}, VBuckets: [][]int{{0, 1}, {1, 2}, {2, 0}}}
	target := Map{Servers: []string{"c", "b", "d"}, VBuckets: [][]int{{0, 2}, {1, 0}, {0, 1}}}
	want := []Move{
		{VBucket: 0, Position: 0, From: "a", To: "c"},
		{VBucket: 0, Position: 1, From: "b", To: "d"},
		{VBucket: 2, Position: 1, From: "a", To: "b"},
	}
	if got := Diff(cur, target); !reflect.DeepEqual(got, want) {
		t.Errorf("Diff = %+v, want %+v", got, want)
	}
	short := Map{Servers: []string{"a"}, VBuckets: [][]int{{0, -1}}}
	long := Map{Servers: []string{"a", "b"}, VBuckets: [][]int{{1}, {0}}}
	want = []Move{{0, 0, "a", "b"}, {1, 0, "", "a"}}
	if got := Diff(short, long); !reflect.DeepEqual(got, want) {
		t.Errorf("Diff(short, long) = %+v, want %+v", got, want)
	}
	// None of the receiving servers held a copy of its vbucket.
	if got, want := Measure(cur, target), (Cost{Moves: 3, Copies: 3}); got != want {
		t.Errorf("Measure = %+v, want %+v", got, want)
	}
	promote := Map{Servers: []string{"a", "b"}, VBuckets: [][]int{{1, 0}}}
	base := Map{Servers: []string{"a", "b"}, VBuckets: [][]int{{0, 1}}}
	if got, want := Measure(base, promote), (Cost{Moves: 2, Swaps: 2}); got != want {
		t.Errorf("Measure(swap) = %+v, want %+v", got, want)
	}
	drop := Map{Servers: []string{"a"}, VBuckets: [][]int{{0, -1}}}
	if got, want := Measure(base, drop), (Cost{Moves: 1, Drops: 1}); got != want {
		t.Errorf("Measure(drop) = %+v, want %+v", got, want)
	}
}

// benchmarkPlan plans from a populated cluster of the first `from`
// servers to the first `to` servers.
func benchmarkPlan(b *testing.B, nvb, from, to, replicas int) {
	names := make([]string, max(from, to))
	for i := range names {
		names[i] = fmt.Sprintf("10.0.0.%d:11211", i+1)
	}
	empty := Map{VBuckets: make([][]int, nvb)}
	for v := range empty.VBuckets {
		empty.VBuckets[v] = []int{-1}
	}
	cur, err := Plan(empty, names[:from], replicas)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Plan(cur, names[:to], replicas); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPlan(b *testing.B) {
	for _, nvb := range []int{1024, 65536} {
		for _, c := range []struct{ from, to, replicas int }{{3, 4, 1}, {8, 9, 3}, {8, 6, 2}, {4, 4, 1}} {
			b.Run(fmt.Sprintf("vbuckets=%d/servers=%d-%d/replicas=%d", nvb, c.from, c.to, c.replicas), func(b *testing.B) {
				benchmarkPlan(b, nvb, c.from, c.to, c.replicas)
			})
		}
	}
}
