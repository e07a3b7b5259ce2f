// Package history records what clients saw of a cache, operation by
// operation with its invocation and completion times, and checks it for
// linearizability with porcupine (github.com/anishathalye/porcupine, the
// checker Jepsen-style tests in Go use) against a model of a cache: issue
// 21's history checker.
//
// # The model
//
// Each key is checked on its own (porcupine partitions the history by
// key). A key's state is absent, or present with a value.
//
//   - A set that was acknowledged makes the key present with its value; a
//     delete that was acknowledged makes it absent.
//   - A write whose outcome is unknown (a timeout, a broken connection, a
//     temporary failure after the request was sent) may or may not have
//     taken effect, at any moment after it was sent: the model allows
//     both, and the recorder makes its completion the end of the history.
//   - An ambiguous write (Ambiguous: the server answered that it applied
//     the write but could not confirm its replication, so a failover may
//     lose it) took effect between its call and its answer, or never:
//     the model allows both, within that window only. Bounded so, a run
//     of them on one key stays cheap to check, where as many unknown
//     writes, each open to the end of the history, made porcupine's
//     search explode (TestSchedule, a leader paused mid-rebalance: 18 on
//     one key in 8 s, undecided in 5 minutes).
//   - A read that hits must return the value the linearization gives the
//     key at that point: no stale read, no value nobody wrote.
//   - A read that misses is allowed at any time (a cache evicts and
//     expires), but from then on the key is absent: a later hit on a value
//     written before the miss, and not written again, is a violation (a
//     copy that came back from the dead).
//   - A read that failed saw nothing and constrains nothing.
//
// Where nothing can be evicted or expired (a test's few keys, no TTLs),
// NoLossModel allows a miss only while the key is absent, so an
// acknowledged write that was lost is a violation too.
//
// With asynchronous replication a failover loses the writes inside the
// replication lag, and a read after it may return an older value. Losses
// gives the writes a caller names (those the failed node acknowledged
// around its failure) the latitude of a write of unknown outcome, checks
// the history with it, and counts the writes that needed it: the lost
// ones, which the caller bounds by the lag it measured.
package history

import (
	"fmt"
	"io"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Kind is an operation's kind.
type Kind uint8

// The operations the model knows.
const (
	Get Kind = iota
	Set
	Delete
)

func (k Kind) String() string {
	switch k {
	case Get:
		return "get"
	case Set:
		return "set"
	}
	return "delete"
}

// Input is what a client asked.
type Input struct {
	Kind  Kind
	Key   string
	Value string // Set's
}

// Outcome is how an operation ended.
type Outcome uint8

// Outcomes.
const (
	OK      Outcome = iota // acknowledged (a write) or answered (a read)
	Unknown                // no answer, or an error after the request left: a write may have taken effect
	Failed                 // refused before it could take effect (not sent, NOT_MY_VBUCKET): nothing happened
	// Ambiguous: a write the server applied without confirming its
	// replication (memcache.ErrSyncWriteAmbiguous): it took effect before
	// its answer, or never (a failover lost it).
	Ambiguous
)

// Output is what the client saw.
type Output struct {
	Outcome Outcome
	Hit     bool   // a Get that found the key
	Value   string // and its value
}

// Recorder collects the operations of concurrent clients. Its methods are
// safe for concurrent use.
type Recorder struct {
	start time.Time
	mu    sync.Mutex // protects ops
	ops   []porcupine.Operation
}

// NewRecorder starts a history.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Begin records that client invokes in now, and returns the function to
// call with what it saw when the operation completes.
func (r *Recorder) Begin(client int, in Input) (end func(Output)) {
	call := time.Since(r.start).Nanoseconds()
	return func(out Output) {
		ret := time.Since(r.start).Nanoseconds()
		if out.Outcome == Unknown && in.Kind != Get {
			ret = math.MaxInt64 // it may take effect at any later moment
		}
		r.mu.Lock()
		r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
		r.mu.Unlock()
	}
}

// Now is the history's clock: nanoseconds since it started, as the
// operations' times are.
func (r *Recorder) Now() int64 { return time.Since(r.start).Nanoseconds() }

// Len is how many operations completed.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

// Operations returns the history so far.
func (r *Recorder) Operations() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]porcupine.Operation(nil), r.ops...)
}

// state is a key's state in the model.
type state struct {
	present bool
	value   string
}

// Model is the cache model (see the package comment).
var Model = cacheModel(false)

// NoLossModel is Model for a test that neither evicts nor expires
// anything (few keys, no TTLs, well under -m): a read may miss only while
// the key is absent, so an acknowledged write that the cluster lost is a
// violation too.
var NoLossModel = cacheModel(true)

func cacheModel(noLoss bool) porcupine.NondeterministicModel {
	return porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			for _, op := range h {
				k := op.Input.(Input).Key
				byKey[k] = append(byKey[k], op)
			}
			keys := make([]string, 0, len(byKey))
			for k := range byKey {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			out := make([][]porcupine.Operation, 0, len(keys))
			for _, k := range keys {
				out = append(out, byKey[k])
			}
			return out
		},
		Init: func() []interface{} { return []interface{}{state{}} },
		Step: func(st, input, output interface{}) []interface{} {
			s, in, out := st.(state), input.(Input), output.(Output)
			if out.Outcome == Failed {
				return []interface{}{s}
			}
			var after state
			switch in.Kind {
			case Get:
				switch {
				case out.Outcome == Unknown:
					return []interface{}{s}
				case !out.Hit && noLoss && s.present:
					return nil
				case !out.Hit:
					return []interface{}{state{}}
				case s.present && s.value == out.Value:
					return []interface{}{s}
				}
				return nil
			case Set:
				after = state{present: true, value: in.Value}
			case Delete:
				after = state{}
			}
			if out.Outcome == Unknown || out.Outcome == Ambiguous {
				return []interface{}{s, after}
			}
			return []interface{}{after}
		},
		Equal: func(a, b interface{}) bool { return a.(state) == b.(state) },
		DescribeOperation: func(input, output interface{}) string {
			in, out := input.(Input), output.(Output)
			var res string
			switch {
			case out.Outcome == Unknown:
				res = "?"
			case out.Outcome == Ambiguous:
				res = "ambiguous"
			case out.Outcome == Failed:
				res = "failed"
			case in.Kind == Get && out.Hit:
				res = fmt.Sprintf("%q", out.Value)
			case in.Kind == Get:
				res = "miss"
			default:
				res = "ok"
			}
			if in.Kind == Set {
				return fmt.Sprintf("set(%s, %q) → %s", in.Key, in.Value, res)
			}
			return fmt.Sprintf("%s(%s) → %s", in.Kind, in.Key, res)
		},
		DescribeState: func(st interface{}) string {
			if s := st.(state); s.present {
				return fmt.Sprintf("%q", s.value)
			}
			return "absent"
		},
	}
}

// Result is a check's outcome.
type Result struct {
	Ops      int
	OK       bool // linearizable (false also when the check timed out)
	TimedOut bool // porcupine gave up: the history is too large or too concurrent
	info     porcupine.LinearizationInfo
	model    porcupine.Model
}

// Check checks ops against Model, for at most timeout.
func Check(ops []porcupine.Operation, timeout time.Duration) Result {
	return CheckModel(Model, ops, timeout)
}

// CheckModel checks ops against model (Model or NoLossModel).
func CheckModel(model porcupine.NondeterministicModel, ops []porcupine.Operation, timeout time.Duration) Result {
	m := model.ToModel()
	res, info := porcupine.CheckOperationsVerbose(m, ops, timeout)
	return Result{Ops: len(ops), OK: res == porcupine.Ok, TimedOut: res == porcupine.Unknown, info: info, model: m}
}

// Visualize writes porcupine's HTML visualisation of the checked history
// (a failing one shows where no linearization goes on).
func (r Result) Visualize(w io.Writer) error { return porcupine.Visualize(r.model, r.info, w) }

// Losses accounts for the acknowledged writes a failover may lose under
// asynchronous replication. Each write that candidate selects is treated
// as one of unknown outcome that took effect at its moment or never (its
// completion time stays), and ops is checked against model with that
// latitude. Key by key, candidates are then given back their
// acknowledgement one at a time, in the order of their invocation, and
// keep it when the key's history still checks: the ones that cannot are
// the writes that were lost. The count is minimal for the order tried,
// not necessarily the least possible.
func Losses(model porcupine.NondeterministicModel, ops []porcupine.Operation, candidate func(porcupine.Operation) bool, timeout time.Duration) (Result, []porcupine.Operation) {
	relaxed := make([]porcupine.Operation, len(ops))
	byKey := map[string][]int{} // the candidates' indexes, by key
	for i, o := range ops {
		relaxed[i] = o
		if in := o.Input.(Input); in.Kind != Get && o.Output.(Output).Outcome == OK && candidate(o) {
			relaxed[i].Output = Output{Outcome: Unknown}
			byKey[in.Key] = append(byKey[in.Key], i)
		}
	}
	res := CheckModel(model, relaxed, timeout)
	if !res.OK {
		return res, nil
	}
	var lost []porcupine.Operation
	for key, cands := range byKey {
		var mine []int // the key's operations, as indexes into relaxed
		for i, o := range relaxed {
			if o.Input.(Input).Key == key {
				mine = append(mine, i)
			}
		}
		keyOps := func() []porcupine.Operation {
			out := make([]porcupine.Operation, len(mine))
			for j, i := range mine {
				out[j] = relaxed[i]
			}
			return out
		}
		sort.Slice(cands, func(a, b int) bool { return ops[cands[a]].Call < ops[cands[b]].Call })
		for _, i := range cands {
			relaxed[i].Output = ops[i].Output
			if !CheckModel(model, keyOps(), timeout).OK {
				relaxed[i].Output = Output{Outcome: Unknown}
				lost = append(lost, ops[i])
			}
		}
	}
	return res, lost
}

// Violations checks each key on its own and returns the keys whose
// history is not linearizable under model, each with its operations in
// the order they were invoked: what a reader of a failed check wants
// first.
func Violations(model porcupine.NondeterministicModel, ops []porcupine.Operation, timeout time.Duration) map[string][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	for _, o := range ops {
		k := o.Input.(Input).Key
		byKey[k] = append(byKey[k], o)
	}
	out := map[string][]porcupine.Operation{}
	for k, h := range byKey {
		if !CheckModel(model, h, timeout).OK {
			sort.Slice(h, func(i, j int) bool { return h[i].Call < h[j].Call })
			out[k] = h
		}
	}
	return out
}

// FirstFailure returns the smallest n for which the first n operations
// of h, in order of invocation (as Violations sorts them), are not
// linearizable under model: the n-1th is where the history first goes
// wrong, to show a failure's neighbourhood rather than its key's whole
// history. It returns len(h) if only the whole history fails, and 0 if
// it passes. A read cut off from a write invoked after it (while it ran)
// may fail a prefix early: the neighbourhood includes that write.
func FirstFailure(model porcupine.NondeterministicModel, h []porcupine.Operation, timeout time.Duration) int {
	if CheckModel(model, h, timeout).OK {
		return 0
	}
	lo, hi := 0, len(h) // h[:lo] passes (or is empty), h[:hi] fails
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if CheckModel(model, h[:mid], timeout).OK {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// Describe is one operation as a line: its client, its times in seconds
// from the history's start (∞ for a write that may land at any time) and
// what it did.
func Describe(o porcupine.Operation) string {
	ret := "∞"
	if o.Return != math.MaxInt64 {
		ret = fmt.Sprintf("%.6f", float64(o.Return)/1e9)
	}
	return fmt.Sprintf("client %d [%.6f, %s] %s", o.ClientId, float64(o.Call)/1e9, ret, Model.DescribeOperation(o.Input, o.Output))
}
