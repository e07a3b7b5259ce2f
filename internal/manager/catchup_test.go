package manager

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/server"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// TestReplicaCatchesUpOnlyWithTheSourcesHistory: a replica counts as
// caught up (waitCaughtUp, before a move drops the copy it replaces)
// only with a source that holds the vbucket's history. A
// source killed and started again holds no copy: its high seqno reads 0,
// and the new replica's stream position, 0 too, counted as caught up.
// The async fault schedule (seed 1796689867723274303, restart-node-mid-rb)
// lost a vbucket that way: a rebalance moved its replica from a node
// holding every item to one fed by the restarted active, dropped the full
// copy 6 ms later, and the failover promoted the empty one.
func TestReplicaCatchesUpOnlyWithTheSourcesHistory(t *testing.T) {
	cli := startTestEtcd(t)
	src, rep := startNode(t, ""), startNode(t, "")
	m, err := New(Config{Etcd: cli, Advertise: "http://catchup-test", NumVBuckets: testVBuckets, Replicas: 1,
		Logf: func(format string, args ...any) { t.Log("manager: " + fmt.Sprintf(format, args...)) }})
	if err != nil {
		t.Fatal(err)
	}
	const vb = 3
	ctx := context.Background()
	a := testDial(t, src.addr)
	if err := a.SetVBucket(vb, vbucket.Active); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		k := "k" + strconv.Itoa(i)
		if _, err := a.Do(protocol.OpSet, vb, make([]byte, 8), []byte(k), []byte("v-"+k)); err != nil {
			t.Fatal(err)
		}
	}
	// The control: a replica of a source that holds the vbucket catches up.
	if err := testDial(t, rep.addr).Replicate(vb, src.addr); err != nil {
		t.Fatal(err)
	}
	if err := m.waitCaughtUp(ctx, vb, src.addr, rep.addr); err != nil {
		t.Fatalf("a replica of a live source: %v", err)
	}

	// The source is killed and started again: it holds nothing.
	src.stop()
	_, port, _ := net.SplitHostPort(src.addr)
	startNodeWith(t, "", func(c *server.Config) { c.Port, _ = strconv.Atoi(port) })
	fresh := startNode(t, "")
	if err := testDial(t, fresh.addr).Replicate(vb, src.addr); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := m.waitCaughtUp(wctx, vb, src.addr, fresh.addr); err == nil {
		t.Fatalf("a replica fed by a restarted source, which holds no copy of vbucket %d, counted as caught up", vb)
	} else {
		t.Logf("not caught up, as it must not be: %v", err)
	}
}
