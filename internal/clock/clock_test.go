package clock

import (
	"testing"
	"time"
)

// TestFakeAfter: After fires once Advance reaches its time, not before;
// d <= 0 fires at once; Waiters counts the ones still waiting.
func TestFakeAfter(t *testing.T) {
	f := NewFake(time.Unix(100, 0))
	now := f.After(0)
	select {
	case got := <-now:
		if !got.Equal(time.Unix(100, 0)) {
			t.Fatalf("After(0) = %v", got)
		}
	default:
		t.Fatal("After(0) did not fire at once")
	}
	a, b := f.After(time.Second), f.After(3*time.Second)
	if n := f.Waiters(); n != 2 {
		t.Fatalf("Waiters = %d, want 2", n)
	}
	f.Advance(999 * time.Millisecond)
	select {
	case <-a:
		t.Fatal("After(1s) fired 999ms in")
	default:
	}
	f.Advance(time.Millisecond)
	select {
	case got := <-a:
		if !got.Equal(time.Unix(101, 0)) {
			t.Fatalf("After(1s) fired with %v", got)
		}
	default:
		t.Fatal("After(1s) did not fire at 1s")
	}
	if n := f.Waiters(); n != 1 {
		t.Fatalf("Waiters = %d, want 1", n)
	}
	f.Advance(5 * time.Second)
	select {
	case <-b:
	default:
		t.Fatal("After(3s) did not fire at 6s")
	}
	if n := f.Waiters(); n != 0 {
		t.Fatalf("Waiters = %d, want 0", n)
	}
}
