package manager

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// TestDeposedLeaderIsFenced is issue 43's fifth hole: a leader's control
// requests carry its term, the creation revision of its election key,
// which grows from one leadership to the next. After a successor has
// led (and its grants reached the nodes), a request of the first
// leader's term (one it sent after a pause past its etcd session, say)
// is refused: it cannot set active a vbucket that is a replica now.
func TestDeposedLeaderIsFenced(t *testing.T) {
	cli := startTestEtcd(t)
	nodes := []*testNode{startNode(t, ""), startNode(t, ""), startNode(t, "")}
	first := newTestManager(t, cli, "first")
	first.start(t)
	ctx := context.Background()
	s := first.joinAll(t, nodes)
	old := first.m.term.Load()
	if old == 0 {
		t.Fatal("the leader has no term")
	}
	first.kill()

	second := newTestManager(t, cli, "second")
	second.start(t)
	now := second.m.term.Load()
	if now <= old {
		t.Fatalf("the successor's term %d is not above its predecessor's %d", now, old)
	}
	waitFor(t, 10*time.Second, "the successor's grants to every node", func() bool {
		second.m.mu.Lock()
		defer second.m.mu.Unlock()
		for _, n := range nodes {
			if r := second.m.leases[n.addr]; r == nil || r.ackedSeq < 1 {
				return false
			}
		}
		return true
	})
	vb, replica := -1, ""
	for v, row := range s.Map {
		if row[1] >= 0 {
			vb, replica = v, s.server(row[1])
			break
		}
	}
	if vb < 0 {
		t.Fatalf("no vbucket with a replica: %v", s.Map)
	}
	deposed, err := admin.DialWith(ctx, replica, &admin.Credentials{Term: old})
	if err != nil {
		t.Fatal(err)
	}
	defer deposed.Close()
	if err := deposed.SetVBucket(vb, vbucket.Active); err == nil {
		t.Fatalf("the deposed leader (term %d, the successor's %d) set vbucket %d active on %s", old, now, vb, replica)
	} else {
		t.Logf("the deposed leader's SET_VBUCKET: %v", err)
	}
	rc := testDial(t, replica)
	if st, err := rc.GetVBucket(vb); err != nil || st != vbucket.Replica {
		t.Fatalf("vbucket %d on %s: %s, %v; want replica", vb, replica, st, err)
	}
	lines, err := rc.Stats("vbucket")
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range lines {
		if kv[0] == "term" && kv[1] != strconv.FormatUint(now, 10) {
			t.Errorf("%s's newest term %s, want the successor's %d", replica, kv[1], now)
		}
	}
}
