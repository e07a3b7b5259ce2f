package manager

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vbcache/vbcache/internal/move"
	"github.com/vbcache/vbcache/internal/vbucket"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output in testdata/*.txt")

// TestDecisions runs the scripts in testdata/*.txt against the
// rebalance's pure decisions (decide.go), in internal/planner's format:
//
//	# comment
//	<command> key=value ...
//	[input lines]
//	----
//	<expected output, no blank lines>
//	<blank line>
//
// Commands:
//
//	plan row=a,b fw=b,c [from=OBS] [to=OBS] [moved-from=a] [old-deleted] [chain]
//	    planVB for one vbucket: its row and forward row in etcd ("-" for
//	    none, fw=nil for no forward map), the Moving entry, and the looks
//	    at the row's active (from) and the forward row's active (to).
//	    OBS is a state (active, replica, pending, dead), refused or
//	    noreply, optionally followed by "+stream" (a stream of the
//	    vbucket open there). Prints the plan, one step a line.
//	pick [moving=1,2] [failures=vb:n,...] [moved=vb:addr,...]
//	    pickNext over the input rows ("vb: a b -> b c", the row then the
//	    forward row; "vb: a b" when they are equal), the vbuckets being
//	    moved, the failures so far and Rebalance.Moving. Prints the pick.
//
// Run with -rewrite to regenerate the expected output, then review the
// diff.
func TestDecisions(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			runScript(t, f, runCommand)
		})
	}
}

// runScript runs the script at path, each command through run, and
// compares (or with -rewrite, replaces) the expected output.
func runScript(t *testing.T, path string, run func(line string, input []string) (string, error)) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var out strings.Builder
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
		got, err := run(line, input)
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

func runCommand(line string, input []string) (string, error) {
	fields := strings.Fields(line)
	args := map[string]string{}
	for _, f := range fields[1:] {
		k, v, _ := strings.Cut(f, "=")
		args[k] = v
	}
	var b strings.Builder
	switch fields[0] {
	case "plan":
		f := vbFacts{Row: parseRow(args["row"]), MovedFrom: args["moved-from"]}
		if args["fw"] != "nil" {
			f.Forward = parseRow(args["fw"])
		}
		_, f.OldDeleted = args["old-deleted"]
		_, f.Chain = args["chain"]
		var err error
		if f.From, err = parseObs(args["from"]); err != nil {
			return "", err
		}
		if f.To, err = parseObs(args["to"]); err != nil {
			return "", err
		}
		for _, s := range planVB(f) {
			b.WriteString(s.String() + "\n")
		}
		return b.String(), nil
	case "pick":
		s, err := parseRows(input)
		if err != nil {
			return "", err
		}
		moving := map[int]bool{}
		for _, v := range splitList(args["moving"]) {
			vb, err := strconv.Atoi(v)
			if err != nil {
				return "", err
			}
			moving[vb] = true
		}
		failures := map[int]int{}
		for _, kv := range splitList(args["failures"]) {
			k, v, _ := strings.Cut(kv, ":")
			vb, err1 := strconv.Atoi(k)
			n, err2 := strconv.Atoi(v)
			if err := errors.Join(err1, err2); err != nil {
				return "", err
			}
			failures[vb] = n
		}
		for _, kv := range splitList(args["moved"]) {
			k, v, _ := strings.Cut(kv, ":")
			vb, err := strconv.Atoi(k)
			if err != nil {
				return "", err
			}
			s.Rebalance.Moving[vb] = v
		}
		before := s.clone()
		p := pickNext(s, moving, failures)
		if !slices.EqualFunc(before.Map, s.Map, slices.Equal) || len(before.Rebalance.Moving) != len(s.Rebalance.Moving) {
			return "", errors.New("pickNext changed the state")
		}
		return p.String() + "\n", nil
	}
	return "", fmt.Errorf("unknown command %q", fields[0])
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// parseRow is "a,b,-": "-" for none.
func parseRow(s string) []string {
	row := splitList(s)
	for i, x := range row {
		if x == "-" {
			row[i] = ""
		}
	}
	return row
}

// parseObs is "active", "replica+stream", "refused", "noreply"; "" is a
// node that was not looked at (it reads as refused).
func parseObs(s string) (move.Observation, error) {
	var o move.Observation
	name, stream := strings.CutSuffix(s, "+stream")
	o.Streaming = stream
	switch name {
	case "", "refused":
		o.Reach = move.Refused
	case "noreply":
		o.Reach, o.Err = move.NoReply, errors.New("i/o timeout")
	default:
		found := false
		for st := vbucket.Active; st <= vbucket.Dead; st++ {
			if st.String() == name {
				o.State, found = st, true
			}
		}
		if !found {
			return o, fmt.Errorf("observation %q", s)
		}
	}
	return o, nil
}

// parseRows builds a state from "vb: a b -> b c" lines (vbuckets from 0,
// in order; "-" for none); a line without "->" has its row as the
// forward row too.
func parseRows(input []string) (*State, error) {
	s := &State{Rebalance: &Rebalance{Running: true, Moving: map[int]string{}}}
	idx := func(a string) int {
		if a == "-" {
			return -1
		}
		return s.serverIndex(a)
	}
	for i, line := range input {
		n, rest, ok := strings.Cut(line, ":")
		if vb, err := strconv.Atoi(strings.TrimSpace(n)); !ok || err != nil || vb != i {
			return nil, fmt.Errorf("row %q: want \"%d: ...\"", line, i)
		}
		cur, fw, hasFw := strings.Cut(rest, "->")
		if !hasFw {
			fw = cur
		}
		var row, frow []int
		for _, a := range strings.Fields(cur) {
			row = append(row, idx(a))
		}
		for _, a := range strings.Fields(fw) {
			frow = append(frow, idx(a))
		}
		s.Map = append(s.Map, row)
		s.Forward = append(s.Forward, frow)
	}
	return s, nil
}
