package history

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// op builds an operation by hand: client c ran in over [call, ret].
func op(c int, in Input, call, ret int64, out Output) porcupine.Operation {
	return porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret}
}

func set(k, v string) Input { return Input{Kind: Set, Key: k, Value: v} }
func get(k string) Input    { return Input{Kind: Get, Key: k} }

var (
	ok        = Output{Outcome: OK}
	miss      = Output{Outcome: OK}
	unknown   = Output{Outcome: Unknown}
	failed    = Output{Outcome: Failed}
	ambiguous = Output{Outcome: Ambiguous}
)

func hit(v string) Output { return Output{Outcome: OK, Hit: true, Value: v} }

// TestModel: histories a cache may and may not produce.
func TestModel(t *testing.T) {
	for _, c := range []struct {
		name   string
		ok     bool
		noLoss bool // what NoLossModel says, where it differs from ok
		ops    []porcupine.Operation
	}{
		{"read your write", true, true, []porcupine.Operation{
			op(0, set("a", "1"), 0, 1, ok), op(1, get("a"), 2, 3, hit("1"))}},
		{"a read concurrent with a write sees either", true, true, []porcupine.Operation{
			op(0, set("a", "1"), 0, 1, ok), op(0, set("a", "2"), 2, 5, ok),
			op(1, get("a"), 3, 4, hit("1")), op(2, get("a"), 3, 4, hit("2"))}},
		{"a stale read", false, false, []porcupine.Operation{
			op(0, set("a", "1"), 0, 1, ok), op(0, set("a", "2"), 2, 3, ok), op(1, get("a"), 4, 5, hit("1"))}},
		{"a value nobody wrote", false, false, []porcupine.Operation{
			op(0, set("a", "1"), 0, 1, ok), op(1, get("a"), 2, 3, hit("x"))}},
		{"a miss is always allowed", true, false, []porcupine.Operation{
			op(0, set("a", "1"), 0, 1, ok), op(1, get("a"), 2, 3, miss)}},
		{"a miss before any write", true, true, []porcupine.Operation{
			op(1, get("a"), 0, 1, miss), op(0, set("a", "1"), 2, 3, ok), op(1, get("a"), 4, 5, hit("1"))}},
		{"a miss concurrent with the first write", true, true, []porcupine.Operation{
			op(0, set("a", "1"), 0, 3, ok), op(1, get("a"), 1, 2, miss)}},
		{"a miss after a write that may never have landed", true, true, []porcupine.Operation{
			op(0, set("a", "1"), 0, math.MaxInt64, unknown), op(1, get("a"), 2, 3, miss)}},
		{"a miss after a delete", true, true, []porcupine.Operation{
			op(0, set("a", "1"), 0, 1, ok), op(0, Input{Kind: Delete, Key: "a"}, 2, 3, ok), op(1, get("a"), 4, 5, miss)}},
		{"a copy back from the dead after a miss", false, false, []porcupine.Operation{
			op(0, set("a", "1"), 0, 1, ok), op(1, get("a"), 2, 3, miss), op(1, get("a"), 4, 5, hit("1"))}},
		{"a write of unknown outcome may land late", true, true, []porcupine.Operation{
			op(0, set("a", "1"), 0, 1, ok), op(0, set("a", "2"), 2, math.MaxInt64, unknown),
			op(1, get("a"), 3, 4, hit("1")), op(1, get("a"), 5, 6, hit("2"))}},
		{"or never", true, true, []porcupine.Operation{
			op(0, set("a", "1"), 0, 1, ok), op(0, set("a", "2"), 2, math.MaxInt64, unknown), op(1, get("a"), 5, 6, hit("1"))}},
		{"an ambiguous write may have landed before its answer", true, true, []porcupine.Operation{
			op(0, set("a", "1"), 0, 1, ok), op(0, set("a", "2"), 2, 3, ambiguous), op(1, get("a"), 4, 5, hit("2"))}},
		{"or never", true, true, []porcupine.Operation{
			op(0, set("a", "1"), 0, 1, ok), op(0, set("a", "2"), 2, 3, ambiguous), op(1, get("a"), 4, 5, hit("1"))}},
		{"but never after its answer", false, false, []porcupine.Operation{
			op(0, set("a", "1"), 0, 1, ok), op(0, set("a", "2"), 2, 3, ambiguous), op(0, set("a", "3"), 4, 5, ok),
			op(1, get("a"), 6, 7, hit("2"))}},
		{"a refused write did nothing", false, false, []porcupine.Operation{
			op(0, set("a", "1"), 0, 1, ok), op(0, set("a", "2"), 2, 3, failed), op(1, get("a"), 5, 6, hit("2"))}},
		{"keys are independent", true, true, []porcupine.Operation{
			op(0, set("a", "1"), 0, 1, ok), op(0, set("b", "2"), 2, 3, ok), op(1, get("a"), 4, 5, hit("1")), op(1, get("b"), 4, 5, hit("2"))}},
		{"delete", false, false, []porcupine.Operation{
			op(0, set("a", "1"), 0, 1, ok), op(0, Input{Kind: Delete, Key: "a"}, 2, 3, ok), op(1, get("a"), 4, 5, hit("1"))}},
	} {
		if r := Check(c.ops, 10*time.Second); r.OK != c.ok || r.TimedOut {
			t.Errorf("%s: linearizable %v (timed out %v), want %v", c.name, r.OK, r.TimedOut, c.ok)
		}
		if r := CheckModel(NoLossModel, c.ops, 10*time.Second); r.OK != c.noLoss || r.TimedOut {
			t.Errorf("%s: with no loss allowed, linearizable %v (timed out %v), want %v", c.name, r.OK, r.TimedOut, c.noLoss)
		}
	}
}

// TestRecorderAndVisualization records a stale read from concurrent
// goroutines' point of view and writes porcupine's HTML for it.
func TestRecorderAndVisualization(t *testing.T) {
	r := NewRecorder()
	r.Begin(0, set("k", "old"))(ok)
	r.Begin(0, set("k", "new"))(ok)
	r.Begin(1, get("k"))(hit("old"))
	r.Begin(2, set("j", "x"))(unknown)
	if r.Len() != 4 {
		t.Fatalf("Len %d", r.Len())
	}
	for _, o := range r.Operations() {
		if in := o.Input.(Input); in.Key == "j" && o.Return != math.MaxInt64 {
			t.Errorf("a write of unknown outcome returns at %d, want the end of the history", o.Return)
		}
	}
	res := Check(r.Operations(), 10*time.Second)
	if res.OK {
		t.Fatal("a stale read checked as linearizable")
	}
	var b bytes.Buffer
	if err := res.Visualize(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `set(k, \"new\") → ok`) {
		t.Errorf("the visualization does not show the operations (%d bytes)", b.Len())
	}
}

// TestLosses: a write lost at a failover is counted when it is a
// candidate, and a violation when it is not; a candidate that was not
// lost is not counted.
func TestLosses(t *testing.T) {
	h := []porcupine.Operation{
		op(0, set("a", "1"), 0, 1, ok),
		op(0, set("a", "2"), 2, 3, ok), // lost: the read below sees "1"
		op(0, set("b", "1"), 2, 3, ok), // not lost: read back
		op(1, get("a"), 10, 11, hit("1")),
		op(1, get("b"), 10, 11, hit("1")),
		op(0, set("c", "1"), 2, 3, ok), // lost: missing later
		op(1, get("c"), 10, 11, miss),
	}
	window := func(o porcupine.Operation) bool { return o.Call >= 2 }
	res, lost := Losses(NoLossModel, h, window, 10*time.Second)
	if !res.OK {
		t.Fatal("the history with the window's writes allowed to be lost does not check")
	}
	var got []string
	for _, o := range lost {
		in := o.Input.(Input)
		got = append(got, in.Key+"="+in.Value)
	}
	slices.Sort(got)
	if want := []string{"a=2", "c=1"}; !slices.Equal(got, want) {
		t.Errorf("lost %v, want %v", got, want)
	}
	if res, _ := Losses(NoLossModel, h, func(o porcupine.Operation) bool { return o.Input.(Input).Key == "c" }, 10*time.Second); res.OK {
		t.Error("a lost write outside the candidates checked")
	}
}

// TestFirstFailure: the prefix that first fails ends at the stale read,
// not at the end of the history; a linearizable history gives 0.
func TestFirstFailure(t *testing.T) {
	h := []porcupine.Operation{
		op(0, set("a", "1"), 0, 1, ok), op(1, get("a"), 2, 3, hit("1")),
		op(0, set("a", "2"), 4, 5, ok), op(1, get("a"), 6, 7, hit("1")), // stale: the 4th
		op(0, set("a", "3"), 8, 9, ok), op(1, get("a"), 10, 11, hit("3")),
	}
	if n := FirstFailure(NoLossModel, h, time.Second); n != 4 {
		t.Errorf("FirstFailure = %d, want 4", n)
	}
	if n := FirstFailure(NoLossModel, h[:3], time.Second); n != 0 {
		t.Errorf("FirstFailure of a linearizable history = %d, want 0", n)
	}
}
