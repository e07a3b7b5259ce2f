package manager

import (
	"testing"
	"time"
)

// TestRestartedNodeHoldsNothing is issue 43's fourth hole at the manager:
// a node answered grants and surely held a lease worth vouching for; then
// a new process answers at its address (another incarnation). The leader
// used to go on counting what the old process held, so the new one,
// which holds no lease and may vouch for a cut-off peer, counted towards
// "sure". Now its record holds nothing until a grant of the new process's
// own runs from one it handled.
func TestRestartedNodeHoldsNothing(t *testing.T) {
	p := newLeaseParams(4 * time.Second)
	t0 := time.Unix(1_000_000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	r := &leaseRec{}
	r.sending(nil)
	if r.answeredBy(p, true, 0xaaaa, 1, ms(0), ms(1), 0, time.Time{}) {
		t.Fatal("the first answer counted as a restart")
	}
	r.sending(nil)
	r.answeredBy(p, true, 0xaaaa, 2, ms(1000), ms(1001), 1, ms(0))
	if r.heldUntil.IsZero() {
		t.Fatalf("two answers of one process: no held window: %+v", r)
	}
	r.sending(nil)
	if !r.answeredBy(p, true, 0xbbbb, 3, ms(2000), ms(2001), 2, ms(1000)) {
		t.Fatal("an answer of another incarnation did not count as a restart")
	}
	if !r.heldFrom.IsZero() || !r.heldUntil.IsZero() {
		t.Fatalf("after a restart the record still holds %v-%v", r.heldFrom, r.heldUntil)
	}
	if r.ackedSeq != 3 {
		t.Fatalf("after a restart the newest answered grant is %d, want 3 (the next grant runs from it)", r.ackedSeq)
	}
	r.sending(nil)
	r.answeredBy(p, true, 0xbbbb, 4, ms(3000), ms(3001), 3, ms(2000))
	if r.heldUntil.IsZero() || r.heldFrom.Before(ms(3001)) {
		t.Fatalf("a grant of the new process's own: held %v-%v, want from %v", r.heldFrom, r.heldUntil, ms(3001))
	}
	// An older node's answer says nothing of incarnations.
	r.sending(nil)
	if r.answeredBy(p, false, 0, 5, ms(4000), ms(4001), 4, ms(3000)) {
		t.Fatal("an answer without an incarnation counted as a restart")
	}
}
