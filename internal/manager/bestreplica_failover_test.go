package manager

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/vbmap"
)

// TestFailoverPromotesTheBestReplica is issue 43's first hole, in process:
// vbucket vb has the row [a, r1, r2]; 50 writes reach both replicas; r1's
// link to a is cut (STOP_REPLICATION: it keeps its copy, fed no more), 300
// more writes reach a and r2; a is failed over. The replica that holds the
// most of a's history (r2, all 350) must be promoted, not the first in row
// order (r1, 50): promoting r1 loses 300 acknowledged writes that a
// surviving replica held. Afterwards r1 follows the new active and holds
// every key it holds, key by key. The failover's log names the replica it
// chose and why.
func TestFailoverPromotesTheBestReplica(t *testing.T) {
	cli := startTestEtcd(t)
	nodes := []*testNode{startNode(t, ""), startNode(t, ""), startNode(t, "")}
	var logMu sync.Mutex
	var logs []string
	m, err := New(Config{Etcd: cli, Advertise: "http://best-replica-test", NumVBuckets: testVBuckets, Replicas: 2,
		SessionTTL: 1, ProbeInterval: 50 * time.Millisecond,
		Logf: func(format string, args ...any) {
			line := fmt.Sprintf(format, args...)
			logMu.Lock()
			logs = append(logs, line)
			logMu.Unlock()
			t.Log("manager: " + line)
		}})
	if err != nil {
		t.Fatal(err)
	}
	tm := &testManager{m: m, ran: make(chan struct{})}
	tm.start(t)
	ctx := context.Background()
	for _, n := range nodes {
		if err := m.AddNode(ctx, n.addr); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.StartRebalance(ctx); err != nil {
		t.Fatal(err)
	}
	s := waitRebalanced(t, m)
	a := nodes[0].addr
	vb := slices.IndexFunc(s.Map, func(row []int) bool {
		return s.server(row[0]) == a && len(row) == 3 && row[1] >= 0 && row[2] >= 0
	})
	if vb < 0 {
		t.Fatalf("no vbucket active on %s with two replicas: %v", a, s.Map)
	}
	r1, r2 := s.server(s.Map[vb][1]), s.server(s.Map[vb][2])
	t.Logf("vbucket %d: [%s %s %s]", vb, a, r1, r2)

	var keys []string
	for i := 0; len(keys) < 350; i++ {
		if k := "best-" + strconv.Itoa(i); vbmap.VBucketString(k, testVBuckets) == vb {
			keys = append(keys, k)
		}
	}
	ac := testDial(t, a)
	write := func(ks []string) {
		for _, k := range ks {
			if _, err := ac.Do(protocol.OpSet, uint16(vb), make([]byte, 8), []byte(k), []byte("v-"+k)); err != nil {
				t.Fatalf("set %s on %s: %v", k, a, err)
			}
		}
	}
	write(keys[:50])
	waitConsumerAt(t, r1, a, vb, highSeqno(t, ac, vb))
	waitConsumerAt(t, r2, a, vb, highSeqno(t, ac, vb))
	if err := testDial(t, r1).StopReplication(vb); err != nil {
		t.Fatal(err)
	}
	write(keys[50:])
	high := highSeqno(t, ac, vb)
	waitConsumerAt(t, r2, a, vb, high)
	if h1 := highSeqno(t, testDial(t, r1), vb); h1 >= high {
		t.Fatalf("%s is at seqno %d after its link was cut, %s at %d: the scenario needs it behind", r1, h1, a, high)
	}

	rep, err := m.failover(ctx, a, false /* force */)
	if err != nil {
		t.Fatalf("failover: %v", err)
	}
	t.Logf("%+v", rep)
	ns := m.State()
	to := ns.server(ns.Map[vb][0])
	if to != r2 {
		t.Errorf("vbucket %d: %s promoted (at seqno %d of %d); want %s, which held all %d writes",
			vb, to, highSeqno(t, testDial(t, r1), vb), high, r2, len(keys))
	}
	nc := testDial(t, to)
	lost := 0
	for _, k := range keys {
		if v, err := nc.Do(protocol.OpGet, uint16(vb), nil, []byte(k), nil); err != nil || string(v) != "v-"+k {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("vbucket %d: %d of %d acknowledged writes lost on its new active %s, though %s held them all", vb, lost, len(keys), to, r2)
	}
	logMu.Lock()
	want := fmt.Sprintf("vbucket %d: promoting %s", vb, r2)
	if !slices.ContainsFunc(logs, func(l string) bool { return strings.Contains(l, want) }) {
		t.Errorf("no log line with %q", want)
	}
	logMu.Unlock()

	// The other survivor follows the new active and ends equal to it.
	other := r1
	if to == r1 {
		other = r2
	}
	waitConsumerAt(t, other, to, vb, highSeqno(t, nc, vb))
	oc := testDial(t, other)
	for _, k := range keys {
		want, werr := nc.Do(protocol.OpGet, uint16(vb), nil, []byte(k), nil)
		got, gerr := oc.Do(protocol.OpGetReplica, uint16(vb), nil, []byte(k), nil)
		if string(got) != string(want) || (werr == nil) != (gerr == nil) {
			t.Errorf("vbucket %d, key %s: %q (%v) on the replica %s, %q (%v) on the active %s", vb, k, got, gerr, other, want, werr, to)
		}
	}
}

// highSeqno is vb's high_seqno in c's "stats vbucket".
func highSeqno(t *testing.T, c *admin.Conn, vb int) int {
	t.Helper()
	lines, err := c.Stats("vbucket " + strconv.Itoa(vb))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range lines {
		if kv[0] == "vb_"+strconv.Itoa(vb)+":high_seqno" {
			n, _ := strconv.Atoi(kv[1])
			return n
		}
	}
	return 0
}

// waitConsumerAt waits until the replica at addr has applied vb's stream
// from src up to seqno.
func waitConsumerAt(t *testing.T, addr, src string, vb, seqno int) {
	t.Helper()
	c := testDial(t, addr)
	q := "consumer:" + src + ":vb_" + strconv.Itoa(vb) + ":seqno"
	waitFor(t, 15*time.Second, fmt.Sprintf("vbucket %d on %s to reach seqno %d from %s", vb, addr, seqno, src), func() bool {
		lines, err := c.Stats("streams " + strconv.Itoa(vb))
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range lines {
			if kv[0] == q {
				n, _ := strconv.Atoi(kv[1])
				return n >= seqno
			}
		}
		return false
	})
}
