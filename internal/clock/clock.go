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
	mu sync.Mutex // protects t
	t  time.Time
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

// Advance moves the fake time forward by d.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.t.IsZero() {
		f.t = fakeStart
	}
	f.t = f.t.Add(d)
}
