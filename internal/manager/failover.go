package manager

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// FailoverReport says what a failover did.
type FailoverReport struct {
	Node     string `json:"node"`
	Promoted int    `json:"promoted"` // vbuckets whose replica became active
	Lost     int    `json:"lost"`     // vbuckets with no replica: active again, empty, elsewhere
	Replicas int    `json:"replicas"` // replica copies dropped from the map
}

// Failover takes addr out of the cluster at once: for each vbucket it was
// active for, the first replica that answers is promoted (it holds every
// write it had acknowledged; writes inside the replication lag are lost);
// a vbucket without a live replica becomes active, empty, on the least
// loaded live member, so the cluster keeps serving (a cache loses data,
// never availability). The map is published at once. With rebuild, a
// rebalance then restores the replicas on the remaining members.
func (m *Manager) Failover(ctx context.Context, addr string, rebuild bool) (err error) {
	rep, err := m.failover(ctx, addr)
	if err != nil {
		return err
	}
	m.cfg.Logf("manager: failed over %s: %d vbuckets promoted, %d lost, %d replicas dropped", addr, rep.Promoted, rep.Lost, rep.Replicas)
	if rebuild && m.State().Replicas > 0 {
		if err := m.StartRebalance(ctx); err != nil && err != ErrRebalancing {
			return fmt.Errorf("failover done; rebuilding replicas: %w", err)
		}
	}
	return nil
}

// fence turns every vbucket the failed node holds dead on it, if it
// answers within a second.
func (m *Manager) fence(ctx context.Context, addr string, s *State, idx int) {
	fctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := admin.Dial(fctx, addr)
	if err != nil {
		return
	}
	defer c.Close()
	c.Timeout = time.Second
	n := 0
	for vb, row := range s.Map {
		if !slices.Contains(row, idx) {
			continue
		}
		if err := c.SetVBucket(vb, vbucket.Dead); err != nil {
			m.cfg.Logf("manager: fencing %s before its failover: %v", addr, err)
			return
		}
		n++
	}
	m.cfg.Logf("manager: %s still answered: its %d vbuckets are dead there before the failover", addr, n)
}

func (m *Manager) failover(ctx context.Context, addr string) (FailoverReport, error) {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	rep := FailoverReport{Node: addr}
	s := m.State()
	idx := slices.Index(s.Servers, addr)
	if idx < 0 && !slices.Contains(s.Nodes, addr) {
		return rep, fmt.Errorf("%s: %w", addr, ErrUnknownNode)
	}
	// A running rebalance stops: its plan includes the failed node.
	if s.Rebalance != nil && s.Rebalance.Running {
		if _, err := m.update(ctx, func(s *State) error {
			s.Rebalance.Stopping = true
			return nil
		}); err != nil {
			return rep, err
		}
		m.opMu.Unlock()
		m.mu.Lock()
		done := m.rebDone
		m.mu.Unlock()
		if done != nil {
			<-done
		}
		m.opMu.Lock()
		s = m.State()
		idx = slices.Index(s.Servers, addr)
	}
	// A node failed over by hand may still be running: it must stop
	// serving before any of its vbuckets is promoted elsewhere, or a
	// client with an old map could write to it and be acknowledged. One
	// short attempt; a node that does not answer is not serving anyone
	// we can reach either.
	if idx >= 0 {
		m.fence(ctx, addr, s, idx)
	}
	live := func(i int) bool { return i >= 0 && i != idx && m.healthy(s.Servers[i]) }
	load := map[int]int{}
	for _, row := range s.Map {
		if row[0] >= 0 {
			load[row[0]]++
		}
	}
	newMap := make([][]int, len(s.Map))
	for vb, row := range s.Map {
		nr := append([]int(nil), row...)
		newMap[vb] = nr
		if idx < 0 || !slices.Contains(row, idx) {
			continue
		}
		if row[0] == idx {
			promoted := -1
			for _, r := range row[1:] {
				if live(r) {
					promoted = r
					break
				}
			}
			if promoted >= 0 {
				if err := m.conn(ctx, s.Servers[promoted], func(c *admin.Conn) error { return c.SetVBucket(vb, vbucket.Active) }); err != nil {
					promoted = -1
				}
			}
			if promoted < 0 {
				// No replica: an empty active on the least loaded member.
				best := -1
				for _, a := range s.Nodes {
					i := slices.Index(s.Servers, a)
					if a == addr || !m.healthy(a) {
						continue
					}
					if i < 0 {
						i = len(s.Servers) // indexed below
					}
					if best < 0 || load[i] < load[best] {
						best = i
					}
				}
				if best < 0 {
					return rep, fmt.Errorf("no live member to take vbucket %d", vb)
				}
				if best == len(s.Servers) {
					return rep, fmt.Errorf("no member in the map to take vbucket %d", vb)
				}
				if err := m.conn(ctx, s.Servers[best], func(c *admin.Conn) error {
					c.DelVBucket(vb)
					return c.SetVBucket(vb, vbucket.Active)
				}); err != nil {
					return rep, fmt.Errorf("activating vbucket %d on %s: %w", vb, s.Servers[best], err)
				}
				load[best]++
				rep.Lost++
				nr = []int{best}
			} else {
				rep.Promoted++
				nr = []int{promoted}
			}
			for _, r := range row[1:] {
				if r != promoted && r >= 0 && r != idx {
					nr = append(nr, r)
				}
			}
		} else {
			rep.Replicas++
			nr = []int{row[0]}
			for _, r := range row[1:] {
				if r != idx && r >= 0 {
					nr = append(nr, r)
				}
			}
		}
		for len(nr) < len(row) {
			nr = append(nr, -1)
		}
		newMap[vb] = nr
	}
	ns, err := m.update(ctx, func(s *State) error {
		s.Map = newMap
		s.Forward = nil
		if s.Rebalance != nil {
			s.Rebalance.Running, s.Rebalance.Stopping = false, false
		}
		s.Nodes = slices.DeleteFunc(s.Nodes, func(a string) bool { return a == addr })
		if !slices.Contains(s.FailedOver, addr) {
			s.FailedOver = append(s.FailedOver, addr)
		}
		s.compact()
		s.Rev++
		return nil
	})
	if err != nil {
		return rep, err
	}
	m.mu.Lock()
	delete(m.told, addr) // it is to be told again that it is out
	m.mu.Unlock()
	m.publish(ctx, ns)
	// Surviving replicas follow the new actives.
	for vb, row := range ns.Map {
		for j := 1; j < len(row); j++ {
			if row[j] < 0 {
				continue
			}
			src := ns.server(row[0])
			if ns.Chain && j > 1 && row[j-1] >= 0 {
				src = ns.server(row[j-1])
			}
			m.conn(ctx, ns.server(row[j]), func(c *admin.Conn) error { return c.Replicate(vb, src) })
		}
	}
	return rep, nil
}
