// Package vbucket holds a cache node's vbucket state table (DESIGN.md §2,
// §3).
//
// A node in cluster mode owns a Table with one State per vbucket. The
// request path reads a vbucket's state with one atomic load (Get), so
// serving a key never takes a lock. Every change goes through Table.Set,
// the one transition function; it takes the table's mutex, which also
// guards the channel that wakes requests parked on a pending vbucket.
//
// # Pending
//
// A request for a pending vbucket is parked (Wait) until the state changes
// or the caller's context ends, whichever comes first. Wait runs on the
// caller's goroutine and starts none, so a timed-out request leaves nothing
// behind. Set closes and replaces the broadcast channel whenever a vbucket
// leaves Pending; parked waiters wake, re-read their own vbucket and either
// return or park again. Pending is rare (it lasts the end of a takeover), so
// one broadcast channel per table is simpler than one per vbucket and costs
// nothing on the hot path.
//
// # Fencing writes
//
// Handing a vbucket over to another node needs a moment after which this
// node changes none of its items. A request that may write enters the
// vbucket (Enter: count itself in, then read the state) and leaves it when
// done (Leave); SetFenced stores the new state and then waits until every
// request that entered while the vbucket was active has left. Both sides
// use sequentially consistent atomics in opposite order (count then state;
// state then count), so a request either sees the new state and is
// refused, or is counted and waited for: after SetFenced returns, no
// admitted write is still running. The cost on the request path is two
// atomic adds on the vbucket's counter.
//
// # Locks
//
// Table.mu protects wake. States are atomics, stored only under mu (so a
// waiter that re-checks under mu cannot miss a change) and loaded anywhere.
package vbucket

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// State is a vbucket's state. The values are the binary protocol's
// (SET_VBUCKET, GET_VBUCKET): active=1, replica=2, pending=3, dead=4.
type State uint8

const (
	// Unknown is the zero value, never stored by Set. A node treats it
	// as Dead.
	Unknown State = 0
	// Active: the node serves the vbucket's keys.
	Active State = 1
	// Replica: normal requests are refused with NOT_MY_VBUCKET; the items
	// are readable through GET_REPLICA and written by replication.
	Replica State = 2
	// Pending: requests are parked until the state changes (the end of a
	// takeover), then served or refused.
	Pending State = 3
	// Dead: the node does not hold the vbucket; requests are refused with
	// NOT_MY_VBUCKET. Every vbucket starts dead.
	Dead State = 4
)

// String returns the state's name as Couchbase spells it.
func (s State) String() string {
	switch s {
	case Active:
		return "active"
	case Replica:
		return "replica"
	case Pending:
		return "pending"
	case Dead:
		return "dead"
	}
	return fmt.Sprintf("unknown(%d)", uint8(s))
}

// Valid reports whether s is one of the four wire states.
func (s State) Valid() bool { return s >= Active && s <= Dead }

// Errors from Table.Set, for requests that came over the network.
var (
	ErrBadState   = errors.New("vbucket: invalid state")
	ErrBadVBucket = errors.New("vbucket: vbucket out of range")
)

// Table is the state of n vbuckets. Its methods are safe for concurrent
// use.
type Table struct {
	states   []atomic.Uint32 // State per vbucket; stored under mu
	inflight []atomic.Int32  // requests between Enter and Leave, per vbucket

	mu      sync.Mutex
	wake    chan struct{} // closed (and replaced) when a vbucket leaves Pending
	waiters int           // requests parked in Wait (tests use it to sequence)
}

// NewTable returns a table of n vbuckets, all Dead. n must be positive (a
// programmer error otherwise: the caller validates its configuration).
func NewTable(n int) *Table {
	if n <= 0 {
		panic(fmt.Sprintf("vbucket: NewTable(%d)", n))
	}
	t := &Table{states: make([]atomic.Uint32, n), inflight: make([]atomic.Int32, n), wake: make(chan struct{})}
	for i := range t.states {
		t.states[i].Store(uint32(Dead))
	}
	return t
}

// Len returns the number of vbuckets.
func (t *Table) Len() int { return len(t.states) }

// Get returns vb's state; a vbucket out of range is Unknown. It does not
// lock and does not allocate.
func (t *Table) Get(vb int) State {
	if vb < 0 || vb >= len(t.states) {
		return Unknown
	}
	return State(t.states[vb].Load())
}

// Set moves vb to state s and returns the previous state. It is the one
// transition function. As in Couchbase, any state may follow any other
// when the change is asked for over the network (SET_VBUCKET,
// DEL_VBUCKET), so the only errors are a vbucket out of range and a state
// that is not one of the four; both come from a request, and both are
// returned rather than panicking.
//
// When vb leaves Pending every parked Wait wakes.
func (t *Table) Set(vb int, s State) (State, error) {
	if !s.Valid() {
		return Unknown, fmt.Errorf("%w: %d", ErrBadState, uint8(s))
	}
	if vb < 0 || vb >= len(t.states) {
		return Unknown, fmt.Errorf("%w: %d of %d", ErrBadVBucket, vb, len(t.states))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := State(t.states[vb].Swap(uint32(s)))
	if old == Pending && s != Pending {
		close(t.wake)
		t.wake = make(chan struct{})
	}
	return old, nil
}

// Enter counts a request into vb and returns vb's state as the request
// must treat it. Unless that is Active the request is not counted (nothing
// to Leave). vb must be in range.
func (t *Table) Enter(vb int) State {
	t.inflight[vb].Add(1)
	s := State(t.states[vb].Load())
	if s != Active {
		t.inflight[vb].Add(-1)
	}
	return s
}

// Leave ends a request that Enter admitted.
func (t *Table) Leave(vb int) { t.inflight[vb].Add(-1) }

// SetFenced is Set, and then waits until no request admitted by Enter
// before the change is still running. Requests are short (a store
// operation; never a network wait), so it yields rather than parks.
func (t *Table) SetFenced(vb int, s State) (State, error) {
	old, err := t.Set(vb, s)
	if err != nil {
		return old, err
	}
	for i := 0; t.inflight[vb].Load() != 0; i++ {
		if i < 100 {
			runtime.Gosched()
		} else {
			time.Sleep(50 * time.Microsecond)
		}
	}
	return old, nil
}

// CompareAndSet moves vb from state old to state s, and reports whether
// it did (false when vb was not in state old).
func (t *Table) CompareAndSet(vb int, old, s State) bool {
	if !s.Valid() || vb < 0 || vb >= len(t.states) {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.states[vb].CompareAndSwap(uint32(old), uint32(s)) {
		return false
	}
	if old == Pending && s != Pending {
		close(t.wake)
		t.wake = make(chan struct{})
	}
	return true
}

// Wait returns vb's state once it is not Pending, or the state it has when
// ctx ends (then Pending, unless it changed at that moment). It blocks on
// the caller's goroutine and starts none.
func (t *Table) Wait(ctx context.Context, vb int) State {
	for {
		if s := t.Get(vb); s != Pending {
			return s
		}
		t.mu.Lock()
		wake := t.wake
		s := t.Get(vb) // re-check under mu: Set stores under mu
		if s != Pending {
			t.mu.Unlock()
			return s
		}
		t.waiters++
		t.mu.Unlock()
		var done bool
		select {
		case <-wake:
		case <-ctx.Done():
			done = true
		}
		t.mu.Lock()
		t.waiters--
		t.mu.Unlock()
		if done {
			return t.Get(vb)
		}
	}
}

// Parked returns how many requests are parked in Wait.
func (t *Table) Parked() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.waiters
}
