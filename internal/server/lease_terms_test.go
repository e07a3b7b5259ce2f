package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// startThree starts three cluster nodes with vbucket 5 active on each
// (each a different test's stand-in for "the node that owns it").
func startThree(t *testing.T) ([]string, []*binClient) {
	var addrs []string
	var cs []*binClient
	for range 3 {
		_, a := startCluster(t, nil)
		addrs = append(addrs, a)
		c := dialBin(t, a)
		c.setState(5, vbucket.Active)
		cs = append(cs, c)
	}
	return addrs, cs
}

// grantEvery grants nodes which a lease of d from leadership epoch every
// d/4 (a manager in their contact) until the test ends.
func grantEvery(t *testing.T, d time.Duration, epoch uint64, addrs []string, which ...int) {
	var gcs []*admin.Conn
	for _, i := range which {
		c, err := admin.Dial(context.Background(), addrs[i])
		if err != nil {
			t.Fatal(err)
		}
		gcs = append(gcs, c)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // owned by the test: its cleanup ends it
		defer close(done)
		for seq := uint64(1); ; seq++ {
			for j, c := range gcs {
				if _, err := c.Lease(d, epoch, seq, seq-1, addrs[which[j]], addrs); err != nil {
					t.Errorf("LEASE to %s: %v", addrs[which[j]], err)
					return
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(d / 4):
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
		for _, c := range gcs {
			c.Close()
		}
	})
}

// TestLeaseJudgesPeersByTheirOwnLease is issue 43's third hole at a
// node: node 0 was granted a long lease (1.6 s) by one leader; a
// successor grants its peers short ones (200 ms) and node 0 none (it is
// cut off from it). When node 0's lease runs low it asks its peers; they
// hold a manager's lease, but with at most 200 ms left, less than a
// quarter of node 0's duration. Judged by node 0's duration, no peer
// hears a manager, and node 0 served on their word without end: two
// actives once the successor fails it over. Judged by each peer's own
// duration, they hear one, and node 0 stops when its lease ends.
func TestLeaseJudgesPeersByTheirOwnLease(t *testing.T) {
	addrs, cs := startThree(t)
	const long, short = 1600 * time.Millisecond, 200 * time.Millisecond
	for _, seq := range []uint64{1, 2} {
		cs[0].grant(long, 1, seq, seq-1, addrs[0], addrs...)
	}
	grantEvery(t, short, 2, addrs, 1, 2)
	key := keyFor(t, 5)
	granted := time.Now()
	cs[0].waitStatus(5, key, protocol.StatusTmpFail, 3*long)
	t.Logf("node 0 stopped serving %v after its last grant (lease %v)", time.Since(granted).Round(time.Millisecond), long)
	if s := cs[0].leaseStats(); s["lease_from_peers"] == "1" {
		t.Errorf("node 0 took a lease from peers that hear a manager: %v", s)
	}
}

// TestLeaseTakesViewWhenItsLeaseEnds: a node stores a newer map while it
// holds a manager's lease, so it keeps its states then (the manager sets
// them); that map gives vbucket 5 to node 1. Then every manager stops:
// the nodes serve on each other's word, and node 0 must take the stored
// map's view then, answering NOT_MY_VBUCKET for vbucket 5, not serve it
// beside node 1.
func TestLeaseTakesViewWhenItsLeaseEnds(t *testing.T) {
	addrs, cs := startThree(t)
	const L = 400 * time.Millisecond
	for _, seq := range []uint64{1, 2} {
		for i, c := range cs {
			c.grant(L, 1, seq, seq-1, addrs[i], addrs...)
		}
	}
	// vbucket 5 goes to node 1 in rev 2 (terseConfig's rows name server
	// 0 of the list given: node 1 here).
	if h, _ := cs[0].do(protocol.OpSetClusterConfig, 0, revExtras(0, 2), []byte("default"), terseConfig(t, []string{addrs[1], addrs[0], addrs[2]}, 2)); h.Status != protocol.StatusOK {
		t.Fatalf("SET_CLUSTER_CONFIG: %#x", h.Status)
	}
	key := keyFor(t, 5)
	if st := cs[0].getStatus(5, key); st != protocol.StatusKeyNotFound {
		t.Fatalf("leased, after a map giving vbucket 5 away: status %#x, want served", st)
	}
	cs[0].waitStatus(5, key, protocol.StatusNotMyVBucket, 3*L+time.Second)
	if st := cs[1].getStatus(5, key); st != protocol.StatusKeyNotFound {
		t.Fatalf("node 1, which the map names: status %#x, want served on its peers' word", st)
	}
}

// TestStaleTermsAreRefused: a node keeps the newest leader's term it has
// seen (in a control request's CAS field, or a lease grant's epoch) and
// refuses requests of an older one, changing nothing; term 0 (an
// operator's request) is always served.
func TestStaleTermsAreRefused(t *testing.T) {
	_, addr := startCluster(t, nil)
	c, err := admin.Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := dialBin(t, addr)
	c.Term = 7
	if err := c.SetVBucket(3, vbucket.Replica); err != nil {
		t.Fatalf("SET_VBUCKET of term 7: %v", err)
	}
	c.Term = 5 // a deposed leader
	for what, err := range map[string]error{
		"SET_VBUCKET":        c.SetVBucket(3, vbucket.Active),
		"DEL_VBUCKET":        c.DelVBucket(3),
		"REPLICATE":          c.Replicate(3, "127.0.0.1:1"),
		"STOP_REPLICATION":   c.StopReplication(3),
		"SET_CLUSTER_CONFIG": c.SetClusterConfig(terseConfig(t, []string{addr}, 9), 0, 9),
	} {
		if !admin.IsStatus(err, protocol.StatusKeyExists) || !strings.Contains(err.Error(), "stale term 5") {
			t.Errorf("%s of term 5 after 7: %v, want KEY_EEXISTS (stale term)", what, err)
		}
	}
	if _, err := c.Lease(time.Second, 5, 1, 0, addr, []string{addr}); !admin.IsStatus(err, protocol.StatusKeyExists) {
		t.Errorf("a lease grant of term 5 after 7: %v, want KEY_EEXISTS", err)
	}
	if st := b.state(3); st != vbucket.Replica {
		t.Fatalf("vbucket 3 is %s after the stale requests, want replica", st)
	}
	c.Term = 0 // an operator
	if err := c.SetVBucket(3, vbucket.Active); err != nil {
		t.Fatalf("SET_VBUCKET of no term: %v", err)
	}
	c.Term = 8 // a newer leader
	if err := c.SetVBucket(3, vbucket.Dead); err != nil {
		t.Fatalf("SET_VBUCKET of term 8: %v", err)
	}
	if got := b.stat("vbucket", "term"); got != "8" {
		t.Errorf("stats vbucket term %q, want 8", got)
	}
	if got := b.stat("vbucket", "term_refused"); got != "6" {
		t.Errorf("stats vbucket term_refused %q, want 6", got)
	}
}

// TestRestartedPeerDoesNotVouch is issue 43's fourth hole at a node:
// node 0 is cut off from the manager; node 1 hears it; node 2 is a new
// process at a member's address (restarted: never granted a lease since
// its start). Node 2's "I hold no manager's lease" used to count towards
// node 0's majority (node 0 and node 2 of three), and node 0 served on
// its peers' word while the manager could fail it over. A node granted
// nothing since its start vouches for no one: it abstains, node 0 has no
// majority, and it stops when its lease ends.
func TestRestartedPeerDoesNotVouch(t *testing.T) {
	addrs, cs := startThree(t)
	const L = 400 * time.Millisecond
	for _, seq := range []uint64{1, 2} {
		for _, i := range []int{0, 1} {
			cs[i].grant(L, 1, seq, seq-1, addrs[i], addrs...)
		}
	}
	grantEvery(t, L, 2, addrs, 1) // the manager hears node 1 only
	cs[0].waitStatus(5, keyFor(t, 5), protocol.StatusTmpFail, 3*L+time.Second)
	if s := cs[0].leaseStats(); s["lease_from_peers"] == "1" {
		t.Errorf("node 0 took a lease on the word of a peer granted nothing since its start: %v", s)
	}
}
