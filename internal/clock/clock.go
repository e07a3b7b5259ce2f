// Package clock gives the rest of vbcache its notion of "now".
//
// Everything that depends on time (item expiry, flush_all delays, idle
// timeouts) reads a Clock instead of calling time.Now directly, so that tests
// can move time forward with a Fake instead of sleeping.
package clock

import (
	"sync"
	"time"
)

// Clock tells the current time.
type Clock interface {
	Now() time.Time
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Fake is a manually driven clock for tests. Its zero value starts at the
// Unix epoch plus one day (so that relative times never go below zero) and
// is ready to use.
type Fake struct {
	mu      sync.Mutex // protects t and waiters
	t       time.Time
	waiters []fakeWaiter
}

// fakeWaiter is an After channel waiting for the fake time to reach at.
type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

var fakeStart = time.Unix(86400, 0)

// NewFake returns a Fake clock set to t.
func NewFake(t time.Time) *Fake { return &Fake{t: t} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.t.IsZero() {
		f.t = fakeStart
	}
	return f.t
}

// Advance moves the fake time forward by d, and fires every After whose
// time has come.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.t.IsZero() {
		f.t = fakeStart
	}
	f.t = f.t.Add(d)
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if w.at.After(f.t) {
			kept = append(kept, w)
			continue
		}
		w.ch <- f.t // buffered: never blocks
	}
	f.waiters = kept
}

// After returns a channel that receives the fake time once Advance has
// moved it d past now (at once when d <= 0), as time.After does.
func (f *Fake) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.t.IsZero() {
		f.t = fakeStart
	}
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- f.t
		return ch
	}
	f.waiters = append(f.waiters, fakeWaiter{at: f.t.Add(d), ch: ch})
	return ch
}

// Waiters returns how many After channels wait for the time to advance
// (tests use it to know a goroutine is waiting).
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}
