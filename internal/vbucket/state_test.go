package vbucket

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
)

func TestStateString(t *testing.T) {
	cases := []struct {
		s    State
		want string
		wire uint8
	}{
		{Active, "active", 1},
		{Replica, "replica", 2},
		{Pending, "pending", 3},
		{Dead, "dead", 4},
		{Unknown, "unknown(0)", 0},
		{State(9), "unknown(9)", 9},
	}
	for _, c := range cases {
		if got := c.s.String(); got != c.want {
			t.Errorf("State(%d).String() = %q, want %q", uint8(c.s), got, c.want)
		}
		if uint8(c.s) != c.wire {
			t.Errorf("%v has value %d, want wire value %d", c.s, uint8(c.s), c.wire)
		}
	}
}

func TestTableStartsDeadAndSetAnyToAny(t *testing.T) {
	tb := NewTable(4)
	if tb.Len() != 4 {
		t.Fatalf("Len = %d", tb.Len())
	}
	for vb := range 4 {
		if s := tb.Get(vb); s != Dead {
			t.Fatalf("vb %d starts %v, want dead", vb, s)
		}
	}
	if s := tb.Get(4); s != Unknown {
		t.Fatalf("out of range: %v", s)
	}
	if s := tb.Get(-1); s != Unknown {
		t.Fatalf("negative: %v", s)
	}
	all := []State{Active, Replica, Pending, Dead}
	for _, from := range all {
		for _, to := range all {
			if _, err := tb.Set(1, from); err != nil {
				t.Fatal(err)
			}
			old, err := tb.Set(1, to)
			if err != nil || old != from || tb.Get(1) != to {
				t.Fatalf("%v -> %v: old %v err %v now %v", from, to, old, err, tb.Get(1))
			}
		}
	}
}

func TestSetErrors(t *testing.T) {
	tb := NewTable(2)
	if _, err := tb.Set(0, Unknown); !errors.Is(err, ErrBadState) {
		t.Errorf("Set(0, unknown) = %v", err)
	}
	if _, err := tb.Set(0, State(5)); !errors.Is(err, ErrBadState) {
		t.Errorf("Set(0, 5) = %v", err)
	}
	if _, err := tb.Set(2, Active); !errors.Is(err, ErrBadVBucket) {
		t.Errorf("Set(2, active) = %v", err)
	}
	if s := tb.Get(0); s != Dead {
		t.Errorf("failed Set changed the state to %v", s)
	}
}

func TestNewTablePanicsOnBadSize(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("NewTable(0) did not panic")
		}
	}()
	NewTable(0)
}

func TestWaitNotPendingReturnsAtOnce(t *testing.T) {
	tb := NewTable(2)
	tb.Set(0, Active)
	if s := tb.Wait(context.Background(), 0); s != Active {
		t.Errorf("Wait = %v", s)
	}
	if s := tb.Wait(context.Background(), 1); s != Dead {
		t.Errorf("Wait = %v", s)
	}
}

// waitParked spins (without sleeping) until n waiters are parked.
func waitParked(tb *Table, n int) {
	for tb.Parked() != n {
		runtime.Gosched()
	}
}

func TestWaitReleasedByChange(t *testing.T) {
	for _, to := range []State{Active, Dead, Replica} {
		t.Run(to.String(), func(t *testing.T) {
			tb := NewTable(8)
			tb.Set(3, Pending)
			tb.Set(5, Pending)
			got := make(chan State, 2)
			for range 2 {
				go func() { got <- tb.Wait(context.Background(), 3) }()
			}
			other := make(chan State, 1)
			go func() { other <- tb.Wait(context.Background(), 5) }()
			waitParked(tb, 3)
			tb.Set(3, to)
			for range 2 {
				if s := <-got; s != to {
					t.Errorf("Wait = %v, want %v", s, to)
				}
			}
			// The waiter on vb 5 woke too, saw it still pending and parked again.
			waitParked(tb, 1)
			select {
			case s := <-other:
				t.Fatalf("vb 5 waiter returned %v while still pending", s)
			default:
			}
			tb.Set(5, Active)
			if s := <-other; s != Active {
				t.Errorf("vb 5 Wait = %v", s)
			}
			waitParked(tb, 0)
		})
	}
}

func TestWaitContextEnds(t *testing.T) {
	tb := NewTable(2)
	tb.Set(1, Pending)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan State, 1)
	go func() { got <- tb.Wait(ctx, 1) }()
	waitParked(tb, 1)
	cancel()
	if s := <-got; s != Pending {
		t.Errorf("Wait after cancel = %v, want pending", s)
	}
	if n := tb.Parked(); n != 0 {
		t.Errorf("%d waiters left parked", n)
	}
}

func TestConcurrentSetAndWait(t *testing.T) {
	tb := NewTable(16)
	var wg sync.WaitGroup
	for vb := range 16 {
		tb.Set(vb, Pending)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if s := tb.Wait(context.Background(), vb); s != Active {
				t.Errorf("vb %d: %v", vb, s)
			}
		}()
	}
	for vb := range 16 {
		tb.Set(vb, Active)
	}
	wg.Wait()
}
