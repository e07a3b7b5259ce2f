package cluster

import (
	"context"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/vbucket"
	"github.com/vbcache/vbcache/test/nodeproc"
)

// TestPausedMoveTargetIsFailedOverInTime pauses (SIGSTOP) a joining node
// while the rebalance moves vbuckets into it (issue 43, item 2): every
// vbucket must have an active again within the lease plus
// --failover-after plus a second of the pause. A paused process's
// kernel still accepts connections, so every request the manager sends
// it waits out its timeout; none of them may hold the failover up (they
// did: the rebalance's config pushes to the paused target, each waiting
// two seconds, one after another, and the failover waits for the
// rebalance to stop: 8-12 s).
func TestPausedMoveTargetIsFailedOverInTime(t *testing.T) {
	const lease, failoverAfter = 2 * time.Second, time.Second
	nodes := startNodes(t, 3, vb256...)
	m := mgr{t: t, url: startManager(t, append(vb256, "--replicas", "1", "--failover-after", failoverAfter.String(),
		"--lease", lease.String(), "--probe-interval", "500ms", "--max-moves", "2")...).URL()}
	m.waitLeader()
	m.addNode(nodes[0].Addr)
	m.addNode(nodes[1].Addr)
	m.rebalance(60 * time.Second)

	target := nodes[2]
	m.addNode(target.Addr)
	m.startRebalance()
	waitFor(t, 30*time.Second, "the rebalance to move a vbucket into "+target.Addr, func() bool {
		r := m.status().Rebalance
		return r != nil && r.Running && r.Done >= 1
	})
	if err := target.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	resumed := false
	defer func() {
		if !resumed {
			target.Signal(syscall.SIGCONT)
		}
	}()
	waitFor(t, 60*time.Second, "the failover of the paused "+target.Addr, func() bool {
		return slices.Contains(m.status().FailedOver, target.Addr)
	})
	failedOver := time.Since(paused)
	// Every vbucket active where the map says, on a node that answers.
	conns := map[string]interface {
		GetVBucket(int) (vbucket.State, error)
	}{}
	for _, n := range nodes[:2] {
		c, err := nodeproc.DialAdmin(context.Background(), n.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[n.Addr] = c
	}
	waitFor(t, 60*time.Second, "every vbucket active on the node the map names", func() bool {
		v := m.getMap()
		for vb := range smallVBuckets {
			c := conns[v.activeOn(vb)]
			if c == nil {
				return false
			}
			if st, err := c.GetVBucket(vb); err != nil || st != vbucket.Active {
				return false
			}
		}
		return true
	})
	served := time.Since(paused)
	t.Logf("the paused target was failed over %v after the pause; every vbucket active again %v after it", failedOver.Round(time.Millisecond), served.Round(time.Millisecond))
	if limit := lease + failoverAfter + time.Second; served > limit {
		t.Errorf("every vbucket active again %v after the pause, more than the lease + --failover-after + 1 s (%v)", served.Round(time.Millisecond), limit)
	}
	target.Signal(syscall.SIGCONT)
	resumed = true
}
