package manager

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/server"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// TestReactivateNeedsTheSourcesHistory: a failover of a move's target
// makes the move's source active again (reactivate) when its copy is dead
// or pending, the handover done or under way. That copy holds every write
// it acknowledged only if it is the process that began the handover: a
// source killed and started again at the same time (two faults together)
// has a dead copy with no lineage, and made active it would serve the
// vbucket empty while its replica holds the items. It is left dead, for
// the restart rule to fail the node over and promote the replica. A
// source that has the history is made active again, as before.
func TestReactivateNeedsTheSourcesHistory(t *testing.T) {
	cli := startTestEtcd(t)
	src, rep := startNode(t, ""), startNode(t, "")
	m, err := New(Config{Etcd: cli, Advertise: "http://reactivate-test", NumVBuckets: testVBuckets, Replicas: 1,
		Logf: func(format string, args ...any) { t.Log("manager: " + fmt.Sprintf(format, args...)) }})
	if err != nil {
		t.Fatal(err)
	}
	const lost, kept = 3, 5 // lost: on the restarted source; kept: on a source with its history
	ctx := context.Background()
	fill := func(addr string, vb int) {
		t.Helper()
		a := testDial(t, addr)
		if err := a.SetVBucket(vb, vbucket.Active); err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			k := "k" + strconv.Itoa(i)
			if _, err := a.Do(protocol.OpSet, uint16(vb), make([]byte, 8), []byte(k), []byte("v-"+k)); err != nil {
				t.Fatal(err)
			}
		}
		if err := testDial(t, rep.addr).Replicate(vb, addr); err != nil {
			t.Fatal(err)
		}
		if err := m.waitCaughtUp(ctx, vb, addr, rep.addr); err != nil {
			t.Fatal(err)
		}
	}
	fill(src.addr, lost)
	src.stop()
	_, port, _ := net.SplitHostPort(src.addr)
	startNodeWith(t, "", func(c *server.Config) { c.Port, _ = strconv.Atoi(port) })
	fill(src.addr, kept)
	// The handover of kept was done: the source's copy is dead.
	if err := testDial(t, src.addr).SetVBucket(kept, vbucket.Dead); err != nil {
		t.Fatal(err)
	}

	target := "127.0.0.1:1" // the failed-over move target; never asked
	ns := &State{Servers: []string{src.addr, rep.addr, target}, Map: make([][]int, testVBuckets)}
	for vb := range ns.Map {
		ns.Map[vb] = []int{-1, -1}
	}
	ns.Map[lost], ns.Map[kept] = []int{0, 1}, []int{0, 1}
	n := m.reactivate(ctx, target, ns, []int{lost, kept})

	c := testDial(t, src.addr)
	if st, err := c.GetVBucket(kept); err != nil || st != vbucket.Active {
		t.Errorf("vbucket %d, whose source has its history: %v (%v), want active again", kept, st, err)
	}
	if st, err := c.GetVBucket(lost); err != nil || st == vbucket.Active {
		t.Errorf("vbucket %d on a restarted source, which holds none of it: %v (%v), made active (empty) while its replica holds 20 items", lost, st, err)
	}
	if n != 1 {
		t.Errorf("reactivate reported %d, want 1", n)
	}
}
