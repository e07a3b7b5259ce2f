package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/stream"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// TestReplicaRollsBackInPlace is issue 43's rollback: R1 ran past the
// point where R2, promoted, branched off from A's history. It must not
// be rebuilt from nothing (a full backfill, as before), but rolled back
// to the branch point: what it logged after it is dropped, the keys
// fetched again as the new active holds them, and the stream resumes
// there. On the old branch R1 also rewrote and deleted keys written
// before the branch point, whose older values only a fetch can bring
// back. Afterwards R1 equals R2 key by key.
func TestReplicaRollsBackInPlace(t *testing.T) {
	_, addrA := startCluster(t, nil)
	_, addrR1 := startCluster(t, nil)
	_, addrR2 := startCluster(t, nil)
	a, r1, r2 := dialBin(t, addrA), dialBin(t, addrR1), dialBin(t, addrR2)
	const vb = 9
	a.setState(vb, vbucket.Active)
	keys := keysFor(vb, 300)
	for _, k := range keys[:100] {
		a.set(vb, k, "first")
	}
	for _, c := range []*binClient{r1, r2} {
		if h, body := c.do(stream.OpReplicate, vb, nil, []byte(addrA), nil); h.Status != protocol.StatusOK {
			t.Fatalf("REPLICATE: %#x %q", h.Status, body)
		}
	}
	consumerAt := func(c *binClient, src string) string {
		return c.stat("streams "+fmt.Sprint(vb), "consumer:"+src+":vb_"+fmt.Sprint(vb)+":seqno")
	}
	waitFor(t, "both replicas to hold the first 100", func() bool { return consumerAt(r1, addrA) == "100" && consumerAt(r2, addrA) == "100" })
	if h, body := r2.do(stream.OpStopReplication, vb, nil, nil, nil); h.Status != protocol.StatusOK {
		t.Fatalf("STOP_REPLICATION: %#x %q", h.Status, body)
	}
	// The old branch, which only R1 follows: 20 keys rewritten, 10
	// deleted, 100 new ones.
	for _, k := range keys[:20] {
		a.set(vb, k, "old-branch")
	}
	for _, k := range keys[20:30] {
		if h, _ := a.do(protocol.OpDelete, vb, nil, []byte(k), nil); h.Status != protocol.StatusOK {
			t.Fatalf("delete %s: %#x", k, h.Status)
		}
	}
	for _, k := range keys[100:200] {
		a.set(vb, k, "old-branch")
	}
	waitFor(t, "R1 to hold A's 230", func() bool { return consumerAt(r1, addrA) == "230" })
	if h, body := r1.do(stream.OpStopReplication, vb, nil, nil, nil); h.Status != protocol.StatusOK {
		t.Fatalf("STOP_REPLICATION: %#x %q", h.Status, body)
	}
	a.setState(vb, vbucket.Dead)
	r2.setState(vb, vbucket.Active)
	// The new branch: some of the old branch's keys written again, and
	// new ones.
	for _, k := range keys[150:300] {
		r2.set(vb, k, "new-branch")
	}
	if h, body := r1.do(stream.OpReplicate, vb, nil, []byte(addrR2), nil); h.Status != protocol.StatusOK {
		t.Fatalf("REPLICATE from R2: %#x %q", h.Status, body)
	}
	high := r2.stat("vbucket "+fmt.Sprint(vb), "vb_"+fmt.Sprint(vb)+":high_seqno")
	deadline := time.Now().Add(10 * time.Second)
	for consumerAt(r1, addrR2) != high {
		if time.Now().After(deadline) {
			t.Fatalf("R1 at %q from R2, whose high seqno is %s", consumerAt(r1, addrR2), high)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition
	}
	differ := 0
	var sample string
	for _, k := range keys {
		h1, b1 := r1.do(protocol.OpGetReplica, vb, nil, []byte(k), nil)
		h2, b2 := r2.do(protocol.OpGet, vb, nil, []byte(k), nil)
		v1, v2 := "", ""
		if h1.Status == protocol.StatusOK {
			v1 = string(b1[h1.ExtLen:])
		}
		if h2.Status == protocol.StatusOK {
			v2 = string(b2[h2.ExtLen:])
		}
		if v1 != v2 {
			differ++
			if sample == "" {
				sample = fmt.Sprintf("%s: %q on R1, %q on R2", k, v1, v2)
			}
		}
	}
	if differ > 0 {
		t.Errorf("%d of %d keys differ between R1 and the promoted R2 (e.g. %s)", differ, len(keys), sample)
	}
	rb, items := r1.stat("streams", "rollbacks"), r1.stat("streams", "rollback_items")
	rebuilt := r2.stat("streams", "branch_rebuilds")
	t.Logf("R1: rollbacks %s, keys dropped and fetched again %s; R2: branch rebuilds %s", rb, items, rebuilt)
	if rb != "1" || items != "130" || rebuilt != "0" {
		t.Errorf("R1 rolled back %s times (%s keys), R2 rebuilt %s copies; want 1 rollback of the 130 keys logged past the branch point, no rebuild", rb, items, rebuilt)
	}
}
