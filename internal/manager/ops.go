package manager

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// Errors of the operations, for the HTTP API's answers.
var (
	ErrRebalancing = errors.New("a rebalance is running")
	ErrUnknownNode = errors.New("not a member")
	ErrKnownNode   = errors.New("already a member")
)

// AddNode makes addr a member. It holds no vbucket until a rebalance.
// The node must answer and be in cluster mode with the cluster's number of
// vbuckets.
func (m *Manager) AddNode(ctx context.Context, addr string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("node address %q: %w", addr, err)
	}
	m.opMu.Lock()
	defer m.opMu.Unlock()
	s := m.State()
	if slices.Contains(s.Nodes, addr) {
		return fmt.Errorf("%s: %w", addr, ErrKnownNode)
	}
	if err := m.checkNode(ctx, addr, s.NumVBuckets); err != nil {
		return err
	}
	if slices.Contains(s.FailedOver, addr) {
		// Failed over before: this leadership grants it nothing since
		// (stopGrants), and it may be one that was paused through its
		// failover and not told yet, still holding its old actives, which
		// a manager's lease would let it serve again beside their new
		// owners. So every vbucket turns dead there first; its grants
		// resume below. The probes' tells stop first (told), and one in
		// flight is waited for: a tell that turned its vbuckets dead
		// after the rebalance gave it some would leave them without an
		// active.
		m.mu.Lock()
		wasTold := m.told[addr]
		m.told[addr] = true
		telling := m.telling[addr]
		m.mu.Unlock()
		if telling != nil {
			select {
			case <-telling:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := m.turnDead(ctx, addr, s.NumVBuckets); err != nil {
			m.mu.Lock()
			m.told[addr] = wasTold
			m.mu.Unlock()
			return fmt.Errorf("node %s, failed over before: turning its vbuckets dead: %w", addr, err)
		}
	}
	// What the probes learned of an earlier membership (down since, a
	// restart's empty answers) is not this one's: the first grant of its
	// granter (probeLoop) records its health afresh. The probe loop may
	// look at the health before that grant's answer comes.
	m.mu.Lock()
	delete(m.health, addr)
	m.mu.Unlock()
	// A first grant puts the node in lease mode before it can be given a
	// vbucket: from then on it serves only while it holds a lease
	// (fencing.go). It runs from no earlier grant, so it gives none yet;
	// the probes do. (A node added back may be named one answered before
	// its failover, whose lease may not be over yet; it serves nothing
	// with it, its vbuckets being dead.)
	q := quorumSet(s)
	q = append(q, addr)
	slices.Sort(q)
	// A node failed over earlier in this leadership got no more grants
	// (stopGrants); joining again it gets them, numbered on from its
	// last (opMu excludes a failover of it meanwhile).
	m.resumeGrants(addr)
	if _, err := m.grant(ctx, addr, q); err != nil {
		return fmt.Errorf("node %s: lease grant: %w", addr, err)
	}
	s, err := m.update(ctx, func(s *State) error {
		s.Nodes = append(s.Nodes, addr)
		s.FailedOver = slices.DeleteFunc(s.FailedOver, func(a string) bool { return a == addr })
		return nil
	})
	if err != nil {
		return err
	}
	// Every member learns the grown quorum set at once: a failover can be
	// sure of a node only on the sets it may hold (fencing.go), and one
	// that has not answered a grant naming the newest could still be its
	// own majority.
	q = quorumSet(s)
	var wg sync.WaitGroup
	for _, a := range q {
		wg.Add(1)
		go func() { // owned by AddNode, which waits for it
			defer wg.Done()
			m.grant(ctx, a, q)
		}()
	}
	wg.Wait()
	m.publish(ctx, s)
	return nil
}

// checkNode asks a node for its last vbucket's state: a standalone node
// answers "unknown command", one with fewer vbuckets NOT_MY_VBUCKET.
func (m *Manager) checkNode(ctx context.Context, addr string, n int) error {
	c, err := admin.DialWith(ctx, addr, m.credentials())
	if err != nil {
		return fmt.Errorf("node %s: %w", addr, err)
	}
	defer c.Close()
	if _, err := c.GetVBucket(n - 1); err != nil {
		if admin.IsStatus(err, protocol.StatusUnknown) {
			return fmt.Errorf("node %s is not in cluster mode (start it with --vbuckets %d)", addr, n)
		}
		if admin.IsStatus(err, protocol.StatusNotMyVBucket) {
			return fmt.Errorf("node %s has fewer vbuckets than the cluster's %d (start it with --vbuckets %d)", addr, n, n)
		}
		return fmt.Errorf("node %s: %w", addr, err)
	}
	if _, err := c.GetVBucket(n); err == nil {
		return fmt.Errorf("node %s has more vbuckets than the cluster's %d (start it with --vbuckets %d)", addr, n, n)
	}
	return nil
}

// RemoveNode takes addr out of the members; the next rebalance moves its
// vbuckets away.
func (m *Manager) RemoveNode(ctx context.Context, addr string) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	if !slices.Contains(m.State().Nodes, addr) {
		return fmt.Errorf("%s: %w", addr, ErrUnknownNode)
	}
	_, err := m.update(ctx, func(s *State) error {
		if s.Rebalance != nil && s.Rebalance.Running {
			return ErrRebalancing
		}
		s.Nodes = slices.DeleteFunc(s.Nodes, func(a string) bool { return a == addr })
		return nil
	})
	return err
}

// probeLoop probes every member each ProbeInterval, with a lease grant
// (grant), and fails over nodes that stay down, or that restarted and
// lost their data (restart.go), until ctx ends.
//
// Each member has a granter goroutine of its own (grantLoop), started and
// stopped here as the members change, so that one paused node (whose
// grant waits for its timeout) or one busy control connection delays no
// other node's lease. Automatic failovers run on a goroutine of their own,
// one at a time: a failover waits for the node's lease to run out, and
// the grants must go on meanwhile.
//
// Failed-over nodes that are not members again are tried too, on a
// goroutine of their own (one that is paused holds each try for its
// timeout, which must not delay the others' probes): see tellFailedOver.
func (m *Manager) probeLoop(ctx context.Context) {
	t := time.NewTicker(m.cfg.ProbeInterval)
	defer t.Stop()
	var workers sync.WaitGroup // tellers, failovers and granters; all end with ctx
	defer workers.Wait()
	granters := map[string]context.CancelFunc{}
	defer func() {
		for _, stop := range granters {
			stop()
		}
	}()
	telling := make(chan struct{}, 1) // a token: one round of tells at a time
	telling <- struct{}{}
	failing := make(chan struct{}, 1) // a token: one automatic failover at a time
	failing <- struct{}{}
	for {
		s := m.State()
		quorum := quorumSet(s)
		for _, a := range quorum {
			if granters[a] == nil {
				gctx, stop := context.WithCancel(ctx)
				granters[a] = stop
				workers.Add(1)
				go func() { // owned by probeLoop, which waits for it
					defer workers.Done()
					m.grantLoop(gctx, a)
				}()
			}
		}
		for a, stop := range granters {
			if !slices.Contains(quorum, a) {
				stop()
				delete(granters, a)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s = m.State()
		m.lowerLeaseRecord(ctx, quorumSet(s))
		if len(s.FailedOver) > 0 {
			select {
			case <-telling:
				workers.Add(1)
				go func() { // owned by probeLoop, which waits for it
					defer workers.Done()
					defer func() { telling <- struct{}{} }()
					for _, a := range s.FailedOver {
						if !slices.Contains(s.Servers, a) && !slices.Contains(s.Nodes, a) {
							m.tellFailedOver(ctx, s, a)
							m.finishPromotion(ctx, a)
						}
					}
				}()
			default: // the last round is still trying
			}
		}
		now := time.Now()
		auto := m.cfg.FailoverAfter > 0 && s.Replicas > 0
		for _, a := range quorumSet(s) {
			m.mu.Lock()
			h := m.health[a]
			down := h != nil && !h.OK && !h.DownSince.IsZero() && now.Sub(h.DownSince) >= m.cfg.FailoverAfter
			lost := h != nil && h.OK && h.restart.lostDuring(rebalancing(s))
			holds := 0
			if lost {
				holds = h.restart.actives
			}
			m.mu.Unlock()
			actives := 0
			if lost {
				actives = activesOf(s, a)
				lost = actives > 0
			}
			if lost && !auto {
				m.mu.Lock()
				warn := !h.restart.warned
				h.restart.warned = true
				m.mu.Unlock()
				if warn {
					off := "automatic failover is off"
					if s.Replicas == 0 {
						off = "the cluster has no replicas"
					}
					m.cfg.Logf("manager: %s restarted (it holds %d of the %d actives the map gives it): not failing it over (%s); its vbuckets answer NOT_MY_VBUCKET until it is failed over by hand (vbcache ctl failover)", a, holds, actives, off)
				}
			}
			if !(down || lost) || !auto || !holdsVBuckets(s, a) || ctx.Err() != nil {
				continue
			}
			select {
			case <-failing:
			default:
				continue // one at a time; the next probe tries again
			}
			why := fmt.Sprintf("%s down since %v", a, m.healthOf(a).DownSince.Format(time.RFC3339))
			if lost {
				why = fmt.Sprintf("%s restarted (it holds %d of the %d actives the map gives it)", a, holds, actives)
			}
			workers.Add(1)
			go func() { // owned by probeLoop, which waits for it
				defer workers.Done()
				defer func() { failing <- struct{}{} }()
				m.cfg.Logf("manager: %s: failing it over", why)
				if err := m.Failover(ctx, a, FailoverOptions{Rebuild: true, auto: true}); err != nil {
					m.cfg.Logf("manager: automatic failover of %s: %v", a, err)
				}
			}()
		}
	}
}

// grantLoop grants addr a lease each ProbeInterval, naming the current
// quorum set, and records the outcome as its health, and what the answer
// says of a restart (restart.go), until ctx ends.
func (m *Manager) grantLoop(ctx context.Context, addr string) {
	t := time.NewTicker(m.cfg.ProbeInterval)
	defer t.Stop()
	for {
		now := time.Now()
		f0 := m.restartFacts("")
		ans, err := m.grant(ctx, addr, quorumSet(m.State()))
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, errNoGrant) {
			var f restartFacts
			if err == nil {
				count := addr
				if !ans.Known {
					count = "" // the rule needs no count
				}
				f = m.restartFacts(count)
				f.busy = f.busy || f0.busy || f.rev != f0.rev || f.epoch != f0.epoch
				f.rebalance = f.rebalance || f0.rebalance
			}
			var seen restartSeen
			m.mu.Lock()
			h := m.health[addr]
			if h == nil {
				h = &nodeHealth{}
				m.health[addr] = h
			}
			if err == nil {
				h.OK, h.LastOK, h.DownSince, h.Err = true, now, time.Time{}, ""
				seen = h.restart.answered(ans, f.actives, f.busy, f.rebalance)
			} else {
				if h.OK || h.DownSince.IsZero() {
					h.DownSince = now
				}
				h.OK, h.Err = false, err.Error()
			}
			m.mu.Unlock()
			if seen.Was != 0 {
				m.cfg.Logf("manager: %s restarted (incarnation %016x, was %016x): it holds %d vbuckets (%d active), the map gives it %d actives", addr, ans.Incarnation, seen.Was, ans.Held, ans.Actives, activesOf(m.State(), addr))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// quorumSet is the members a grant names, in order: every node the map or
// the membership holds, but a failed-over node that is not a member again.
func quorumSet(s *State) []string {
	q := append(append([]string{}, s.Servers...), s.Nodes...)
	slices.Sort(q)
	q = slices.Compact(q)
	return slices.DeleteFunc(q, func(a string) bool {
		return slices.Contains(s.FailedOver, a) && !slices.Contains(s.Nodes, a)
	})
}

// errNoGrant: the node is being failed over; it gets no grant.
var errNoGrant = errors.New("no grant: being failed over")

// grant sends addr a lease grant naming quorum, within a second, records
// the answer (fencing.go) and returns what it says of the node
// (restart.go).
func (m *Manager) grant(ctx context.Context, addr string, quorum []string) (admin.LeaseAnswer, error) {
	lp := newLeaseParams(m.cfg.Lease)
	m.mu.Lock()
	r := m.leases[addr]
	if r == nil {
		r = &leaseRec{}
		m.leases[addr] = r
	}
	if r.stopped {
		m.mu.Unlock()
		return admin.LeaseAnswer{}, errNoGrant
	}
	epoch := m.epoch
	seq, acked := r.sending(quorum)
	ackedSent := r.ackedSent
	m.mu.Unlock()
	gctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var ans admin.LeaseAnswer
	err := m.connIn(m.grantConns, gctx, addr, func(c *admin.Conn) error {
		c.Timeout = time.Second
		sent := m.cfg.Clock.Now()
		var err error
		if ans, err = c.Lease(lp.L, epoch, seq, acked, addr, quorum); err != nil {
			return err
		}
		at := m.cfg.Clock.Now()
		// Recorded under the grant connection's mu, so that stopGrants,
		// which waits for it, sees every answer.
		m.mu.Lock()
		if m.leases[addr] == r && m.epoch == epoch {
			r.answeredBy(lp, ans.Known, ans.Incarnation, seq, sent, at, acked, ackedSent)
		}
		m.mu.Unlock()
		return nil
	})
	return ans, err
}

func (m *Manager) healthOf(a string) nodeHealth {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h := m.health[a]; h != nil {
		return *h
	}
	return nodeHealth{}
}

// healthy reports whether a's last probe answered (true when never probed).
func (m *Manager) healthy(a string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.health[a]
	return h == nil || h.OK
}

func holdsVBuckets(s *State, a string) bool {
	i := slices.Index(s.Servers, a)
	if i < 0 {
		return false
	}
	for _, row := range s.Map {
		if slices.Contains(row, i) {
			return true
		}
	}
	return false
}

// tellFailedOver tells addr, a node failed over and not a member again,
// that it is out, once it answers: every vbucket turns dead there and it
// gets s's map, so that it answers NOT_MY_VBUCKET, with a config that
// sends clients to the new owners, to a client that still has an old
// map. A node paused or cut off when it was failed over would otherwise
// go on serving its old vbuckets for as long as it runs, since it is
// never probed or sent a map again. It is told once per leader (a
// restarted node holds nothing, and rejoins through AddNode). The window
// between such a node's return and the next probe is not closed here.
//
// s is the probe's state; the current one must still have addr failed
// over and not a member, and the tell is registered in telling, under
// mu, so that AddNode, which marks addr told, either stops it here or
// waits for it to end.
func (m *Manager) tellFailedOver(ctx context.Context, s *State, addr string) {
	m.mu.Lock()
	out := m.st != nil && slices.Contains(m.st.FailedOver, addr) && !slices.Contains(m.st.Nodes, addr)
	if m.told[addr] || !out || m.telling[addr] != nil || len(s.Servers) == 0 {
		m.mu.Unlock()
		return
	}
	done := make(chan struct{})
	m.telling[addr] = done
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.telling, addr)
		m.mu.Unlock()
		close(done)
	}()
	data := m.configJSON(s)
	if m.turnDead(ctx, addr, s.NumVBuckets) != nil {
		return // not reachable: the next probe tries again
	}
	tctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	err := m.conn(tctx, addr, func(c *admin.Conn) error {
		c.Timeout = time.Second
		defer func() { c.Timeout = 5 * time.Second }()
		if err := c.SetClusterConfig(data, s.RevEpoch, s.Rev); err != nil && !admin.IsStatus(err, protocol.StatusKeyExists) {
			return err
		}
		return nil
	})
	if err != nil {
		return
	}
	m.mu.Lock()
	m.told[addr] = true
	m.mu.Unlock()
	m.cfg.Logf("manager: %s, failed over, answered again: told it is out (its %d vbuckets dead, map rev %d)", addr, s.NumVBuckets, s.Rev)
}

// turnDead turns every one of the n vbuckets dead on addr, each request
// within a second, on a connection of its own: the pooled one (conn) may
// still be the one to a process that has since been restarted, which
// fails once before it is dropped.
func (m *Manager) turnDead(ctx context.Context, addr string, n int) error {
	tctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := admin.DialWith(tctx, addr, m.credentials())
	if err != nil {
		return err
	}
	defer c.Close()
	c.Timeout = time.Second
	for vb := range n {
		if err := c.SetVBucket(vb, vbucket.Dead); err != nil {
			return err
		}
	}
	return nil
}
