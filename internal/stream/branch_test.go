//go:build !vbcache_unsafe_branch

package stream

import (
	"slices"
	"testing"

	"github.com/vbcache/vbcache/internal/store"
)

// TestFailoverLogResume walks one vbucket's history through a promotion
// and pins Log.Resume's answers: positions on the old branch up to the
// branch point resume, positions past it ran past, unknown lineages start
// over, and the newest branch resumes up to the last sequence number.
func TestFailoverLogResume(t *testing.T) {
	l := newTestLog(t, 0)
	next := uint64(100)
	newUUID := func() uint64 { next++; return next }
	mutate := func(n int) {
		for range n {
			l.Mutated(1, store.MutStore, []byte("k"), 10, 0)
		}
	}
	mutate(5)
	old, high, _ := l.Open(1, newUUID) // lineage 101 from seqno 5
	if old != 101 || high != 5 {
		t.Fatalf("Open = %d %d", old, high)
	}
	mutate(45)              // the old active's writes up to 50
	l.NewBranch(1, newUUID) // promoted at 50: lineage 102
	mutate(30)              // its own writes, 51-80
	want := []Branch{{102, 50}, {101, 5}}
	if got := l.FailoverLog(1); !slices.Equal(got, want) {
		t.Fatalf("failover log %v, want %v", got, want)
	}
	for _, tc := range []struct {
		uuid, seqno     uint64
		resume, ranPast bool
	}{
		{101, 0, true, false},   // a prefix of the old branch
		{101, 50, true, false},  // exactly the branch point
		{101, 51, false, true},  // one past it: a write this copy never had
		{101, 200, false, true}, //
		{102, 80, true, false},  // the newest branch, up to its end
		{102, 81, false, true},  // past the end of this copy
		{999, 10, false, false}, // an unknown lineage
		{0, 0, false, false},    // no lineage: a consumer that holds nothing
	} {
		resume, ranPast := l.Resume(1, tc.uuid, tc.seqno)
		if resume != tc.resume || ranPast != tc.ranPast {
			t.Errorf("Resume(%d, %d) = %v, %v; want %v, %v", tc.uuid, tc.seqno, resume, ranPast, tc.resume, tc.ranPast)
		}
	}

	// Forget drops the history: no lineage resumes, and the next Open
	// starts a log of one branch.
	l.Forget(1)
	if got := l.FailoverLog(1); len(got) != 0 {
		t.Fatalf("failover log after Forget: %v", got)
	}
	if ok, past := l.Resume(1, 102, 10); ok || past {
		t.Fatalf("Resume after Forget = %v, %v", ok, past)
	}
	u, h, _ := l.Open(1, newUUID)
	if got := l.FailoverLog(1); !slices.Equal(got, []Branch{{u, h}}) {
		t.Fatalf("failover log after Forget and Open: %v, want [{%d %d}]", got, u, h)
	}
	// NewBranch before any lineage does nothing: Open gives one.
	l.NewBranch(2, newUUID)
	if got := l.FailoverLog(2); len(got) != 0 {
		t.Fatalf("NewBranch without a lineage made %v", got)
	}
}

// TestFailoverLogAdopt: a consumer takes its producer's failover log
// (SetFailoverLog); a marker whose lineage differs (its producer was
// promoted while streaming) pushes a branch at what the consumer had; a
// reset from a producer that sent no log starts a log of one branch; the
// log keeps maxBranches.
func TestFailoverLogAdopt(t *testing.T) {
	l := newTestLog(t, 0)
	l.SetFailoverLog(1, []Branch{{7, 20}, {6, 0}})
	l.Adopt(1, 7, true)
	for range 30 {
		l.Mutated(1, store.MutStore, []byte("k"), 10, 0)
	}
	l.Adopt(1, 8, false) // the producer's lineage changed while it streamed
	if got, want := l.FailoverLog(1), []Branch{{8, 30}, {7, 20}, {6, 0}}; !slices.Equal(got, want) {
		t.Fatalf("after a lineage change: %v, want %v", got, want)
	}
	l.Adopt(2, 9, true)
	if got, want := l.FailoverLog(2), []Branch{{9, 0}}; !slices.Equal(got, want) {
		t.Fatalf("after a reset without a log: %v, want %v", got, want)
	}
	for i := range 2 * maxBranches {
		l.Adopt(3, uint64(1000+i), false)
	}
	if got := l.FailoverLog(3); len(got) != maxBranches || got[0].UUID != 1000+2*maxBranches-1 {
		t.Fatalf("a log of %d branches, newest %v; want %d", len(got), got[0], maxBranches)
	}
}

// TestFailoverLogWire pins the STREAM_REQ answer's value: 16 bytes a
// branch, uuid then seqno, big-endian, newest first.
func TestFailoverLogWire(t *testing.T) {
	flog := []Branch{{0x0102030405060708, 0x32}, {0x1112131415161718, 0}}
	b := appendFailoverLog(nil, flog)
	want := []byte{
		0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // uuid of the newest branch
		0, 0, 0, 0, 0, 0, 0, 0x32, // the seqno it began after
		0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, // uuid of the one before
		0, 0, 0, 0, 0, 0, 0, 0, // from the start
	}
	if !slices.Equal(b, want) {
		t.Fatalf("appendFailoverLog = % x", b)
	}
	got, err := parseFailoverLog(b)
	if err != nil || !slices.Equal(got, flog) {
		t.Fatalf("parseFailoverLog = %v, %v", got, err)
	}
	if got, err := parseFailoverLog(nil); err != nil || len(got) != 0 {
		t.Fatalf("an empty value (a producer that sends no log) = %v, %v", got, err)
	}
	if _, err := parseFailoverLog(b[:20]); err == nil {
		t.Fatal("a 20-byte failover log was accepted")
	}
}
