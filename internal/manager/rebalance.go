package manager

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/move"
	"github.com/vbcache/vbcache/internal/planner"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// StartRebalance plans the map for the current members and starts moving
// vbuckets to it. It returns once the plan is stored; Progress follows it.
func (m *Manager) StartRebalance(ctx context.Context) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	s := m.State()
	if s.Rebalance != nil && s.Rebalance.Running {
		return ErrRebalancing
	}
	if len(s.Nodes) == 0 {
		return errors.New("no members: add a node first")
	}
	for _, a := range s.Nodes {
		if !m.healthy(a) {
			return fmt.Errorf("member %s is down: fail it over or remove it first", a)
		}
	}
	cur := planner.Map{Servers: s.Servers, VBuckets: s.Map}
	target, err := planner.Plan(cur, s.Nodes, s.Replicas)
	if err != nil {
		return err
	}
	_, err = m.update(ctx, func(s *State) error {
		fw := make([][]int, len(target.VBuckets))
		total := 0
		for vb, row := range target.VBuckets {
			fw[vb] = make([]int, len(row))
			for j, i := range row {
				fw[vb][j] = -1
				if i >= 0 {
					fw[vb][j] = s.serverIndex(target.Servers[i])
				}
			}
			if !slices.Equal(fw[vb], s.Map[vb]) {
				total++
			}
		}
		s.Forward = fw
		s.Rev++
		s.Rebalance = &Rebalance{Running: true, Target: append([]string(nil), s.Nodes...), Total: total, Started: time.Now()}
		return nil
	})
	if err != nil {
		return err
	}
	m.inLeadership(m.launchRebalance)
	return nil
}

// StopRebalance asks the running rebalance to stop after the moves in
// flight; the map stays valid (every vbucket has its owner).
func (m *Manager) StopRebalance(ctx context.Context) error {
	m.opMu.Lock()
	defer m.opMu.Unlock()
	_, err := m.update(ctx, func(s *State) error {
		if s.Rebalance == nil || !s.Rebalance.Running {
			return errors.New("no rebalance is running")
		}
		s.Rebalance.Stopping = true
		return nil
	})
	return err
}

// launchRebalance starts the rebalance goroutine, owned by the leadership
// (lead waits for it).
func (m *Manager) launchRebalance(ctx context.Context) {
	m.mu.Lock()
	if m.rebDone != nil {
		select {
		case <-m.rebDone:
		default:
			m.mu.Unlock()
			return // already running
		}
	}
	done := make(chan struct{})
	m.rebDone = done
	m.mu.Unlock()
	go func() {
		defer close(done)
		m.runRebalance(ctx)
	}()
}

// runRebalance moves every vbucket whose row differs from the forward map,
// at most MaxMoves at once, committing each vbucket's new row (rev+1) and
// pushing it to every node as soon as it is moved.
func (m *Manager) runRebalance(ctx context.Context) {
	if err := m.populate(ctx); err != nil {
		m.cfg.Logf("manager: placing unowned vbuckets: %v", err)
	}
	sem := make(chan struct{}, m.cfg.MaxMoves)
	var wg sync.WaitGroup
	var errMu sync.Mutex
	var firstErr error
	failures := map[int]int{}
	for ctx.Err() == nil {
		s := m.view() // read only: pickNext reads it
		if s.Rebalance == nil || !s.Rebalance.Running || s.Forward == nil {
			break
		}
		if s.Rebalance.Stopping {
			break
		}
		errMu.Lock()
		stop := firstErr != nil
		errMu.Unlock()
		if stop {
			break
		}
		// The next vbucket to move (pickNext, decide.go).
		errMu.Lock()
		fails := maps.Clone(failures)
		errMu.Unlock()
		m.mu.Lock()
		p := pickNext(s, m.moving, fails)
		if p.Verdict == pickStart {
			m.moving[p.VB] = true
		}
		m.mu.Unlock()
		next := p.VB
		if p.Verdict == pickDone {
			break
		}
		if p.Verdict == pickGaveUp {
			errMu.Lock()
			if firstErr == nil {
				firstErr = fmt.Errorf("%d vbuckets could not be moved", p.Left)
			}
			errMu.Unlock()
			break
		}
		if p.Verdict == pickWait {
			// Everything left is being moved: wait for the moves in
			// flight, then look again (one may have failed and be
			// retried).
			wg.Wait()
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			m.mu.Lock()
			delete(m.moving, next)
			m.mu.Unlock()
			break
		}
		wg.Add(1)
		go func(vb int) {
			defer wg.Done()
			defer func() { <-sem }()
			t0 := time.Now()
			err := m.moveVBucket(ctx, vb)
			m.obs.moved(time.Since(t0), err)
			m.mu.Lock()
			delete(m.moving, vb)
			m.mu.Unlock()
			if err != nil && ctx.Err() == nil {
				m.cfg.Logf("manager: moving vbucket %d: %v", vb, err)
				errMu.Lock()
				failures[vb]++
				if failures[vb] >= maxFailures && firstErr == nil {
					firstErr = fmt.Errorf("vbucket %d: %w", vb, err)
				}
				errMu.Unlock()
			}
		}(next)
	}
	wg.Wait()
	if ctx.Err() != nil {
		return // a new leader resumes
	}
	errMu.Lock()
	err := firstErr
	errMu.Unlock()
	m.opMu.Lock()
	s, uerr := m.update(context.Background(), func(s *State) error {
		if s.Rebalance == nil {
			return nil
		}
		s.Rebalance.Running, s.Rebalance.Stopping = false, false
		s.Rebalance.Finished = time.Now()
		if err != nil {
			s.Rebalance.Err = err.Error()
		}
		s.Forward = nil
		s.compact()
		s.Rev++
		return nil
	})
	m.opMu.Unlock()
	if uerr == nil {
		m.publish(ctx, s)
		d := func(x *atomic.Int64) time.Duration { return time.Duration(x.Swap(0)).Round(time.Millisecond) }
		m.cfg.Logf("manager: rebalance finished (%d of %d vbuckets moved; error: %v); time summed over the moves: looks %v, replica builds %v, "+
			"moves %v (preflight %v, takeover %v, publish %v, delete %v), replica catch-up %v; commits %v, pushes %v",
			s.Rebalance.Done, s.Rebalance.Total, err, d(&m.prof.look), d(&m.prof.build), d(&m.prof.move), d(&m.prof.preflight), d(&m.prof.takeover),
			d(&m.prof.publish), d(&m.prof.delete), d(&m.prof.catchup), d(&m.prof.commit), d(&m.prof.push))
	}
}

// populate places, in one step, every vbucket that nobody holds (a new
// cluster, or vbuckets lost without replica): there is no data to move, so
// each node is told to activate its vbuckets and to replicate its replicas
// in one batch of requests, and one commit publishes all of them.
func (m *Manager) populate(ctx context.Context) error {
	s := m.State()
	if s.Forward == nil {
		return nil
	}
	type job struct {
		vb  int
		src string // "" to activate
	}
	jobs := map[string][]job{}
	var vbs []int
	for vb, row := range s.Map {
		if row[0] >= 0 || s.Forward[vb][0] < 0 || slices.ContainsFunc(row[1:], func(x int) bool { return x >= 0 }) {
			continue
		}
		fw := s.Forward[vb]
		vbs = append(vbs, vb)
		jobs[s.server(fw[0])] = append(jobs[s.server(fw[0])], job{vb, ""})
		for j := 1; j < len(fw); j++ {
			if fw[j] < 0 {
				continue
			}
			src := s.server(fw[0])
			if s.Chain && j > 1 && fw[j-1] >= 0 {
				src = s.server(fw[j-1])
			}
			jobs[s.server(fw[j])] = append(jobs[s.server(fw[j])], job{vb, src})
		}
	}
	if len(vbs) == 0 {
		return nil
	}
	// Actives first on every node, then replicas (a replica's source
	// must be active or a replica already).
	for _, wantActive := range []bool{true, false} {
		var wg sync.WaitGroup
		errs := make(chan error, len(jobs))
		for addr, js := range jobs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- m.conn(ctx, addr, func(c *admin.Conn) error {
					for _, j := range js {
						if (j.src == "") != wantActive {
							continue
						}
						var err error
						if j.src == "" {
							err = c.SetVBucket(j.vb, vbucket.Active)
						} else {
							err = c.Replicate(j.vb, j.src)
						}
						if err != nil {
							return fmt.Errorf("vbucket %d on %s: %w", j.vb, addr, err)
						}
					}
					return nil
				})
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				return err
			}
		}
	}
	m.opMu.Lock()
	ns, err := m.update(ctx, func(s *State) error {
		for _, vb := range vbs {
			s.Map[vb] = append([]int(nil), s.Forward[vb]...)
		}
		s.Rev++
		if s.Rebalance != nil {
			s.Rebalance.Done += len(vbs)
		}
		return nil
	})
	m.opMu.Unlock()
	if err != nil {
		return err
	}
	m.publish(ctx, ns)
	return nil
}

// unfinished reports whether vb's move is still to do: its row differs
// from the forward row, or its move committed the new active and was not
// finished (Rebalance.Moving).
func (s *State) unfinished(vb int) bool {
	if s.Forward == nil {
		return false
	}
	if s.Rebalance != nil {
		if _, ok := s.Rebalance.Moving[vb]; ok {
			return true
		}
	}
	return !slices.Equal(s.Map[vb], s.Forward[vb])
}

// maxVBSteps bounds the looks moveVBucket takes at one vbucket: each
// active step (an activation, a commit, a move, a recovery) either
// changes the state in etcd or on a node, or fails.
const maxVBSteps = 8

// moveSettle is Options.Settle for the manager's moves: how long a
// recovery waits for a handover in flight (a previous leader's takeover
// may be backfilling a large vbucket).
const moveSettle = 30 * time.Second

// moveVBucket brings vbucket vb from its current row to its forward row.
// It looks at the state in etcd and at the nodes (look), asks planVB
// (decide.go) what to do, and does it: while the active differs, one step
// (activate, move.Move, move.Recover) and then it looks again; once the
// new active is committed, the rest of the plan (finishVB). Each step is
// decided from what is there, so a new leader finishes a move its
// predecessor left half done.
func (m *Manager) moveVBucket(ctx context.Context, vb int) error {
	// A failover of the node the vbucket moves into, its source being
	// no failover's, ends the move at once: its steps would otherwise
	// wait out the node's timeouts (dials, logins, requests), holding
	// the failover up, and the failover settles the vbucket itself
	// (failover.go, reactivate). A move out of a failing node goes on:
	// its target may be active, and only the move publishes that.
	ctx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { // owned by moveVBucket, which ends it and waits for it
		defer close(watched)
		if takeoverWatch {
			m.cancelOnTargetFailover(ctx, vb, cancel)
		}
	}()
	defer func() {
		cancel()
		<-watched
	}()
	oldDeleted := false
	var bytes, replBytes uint64
	for range maxVBSteps {
		if err := ctx.Err(); err != nil {
			return err
		}
		s := m.view() // read only: look copies what it keeps
		if s.Forward == nil || s.Rebalance == nil {
			return nil
		}
		t0 := time.Now()
		f := m.look(ctx, s, vb, oldDeleted)
		m.prof.look.Add(int64(time.Since(t0)))
		plan := planVB(f)
		st := plan[0]
		switch st.Kind {
		case stepDone:
			return nil
		case stepStuck:
			return fmt.Errorf("vbucket %d: %s", vb, st.Why)
		case stepActivate:
			if err := m.conn(ctx, st.Node, func(c *admin.Conn) error { return c.SetVBucket(vb, vbucket.Active) }); err != nil {
				return fmt.Errorf("activating vbucket %d on %s: %w", vb, st.Node, err)
			}
			continue
		case stepCommitActive:
			if _, err := m.commitActive(ctx, vb, "", st.Node); err != nil {
				return err
			}
			continue
		case stepMove, stepRecover:
			opt := m.moveOptions(ctx, st.Src)
			// A failover of either end abandons the move's TAKEOVER and
			// its recovery's waits: the failover settles the vbucket
			// (failover.go, reactivate), and waits for the rebalance.
			src, dst := st.Src, st.Node
			opt.Abandon = func() bool { return m.failingOver(src) || m.failingOver(dst) }
			// A failover of the target alone ends the recovery's looks
			// at once, even one waiting for the target's answer: the
			// failover fences the target and makes the source active
			// again.
			opt.TargetLost = func() bool { return m.failingOver(dst) && !m.failingOver(src) }
			var res move.Result
			var err error
			t0 := time.Now()
			if st.Kind == stepMove {
				if len(st.Build) > 0 {
					replBytes += m.vbBytes(ctx, st.Src, vb) * uint64(len(st.Build))
				}
				err := m.buildReplicas(ctx, vb, st.Src, st.Build)
				m.prof.build.Add(int64(time.Since(t0)))
				t0 = time.Now()
				if err != nil {
					m.dropBuilt(ctx, vb, st.Build)
					return err
				}
				built := st.Build
				if st.Keep {
					built = append(slices.Clone(built), st.Src)
				}
				opt.Publish = func(_ context.Context, vb int, to string) (int64, error) {
					return m.commitActive(ctx, vb, st.Src, to, built...)
				}
				opt.KeepOld = st.Keep
				bytes = m.vbBytes(ctx, st.Src, vb)
				m.runHook("move", vb)
				res, err = move.Move(ctx, vb, st.Src, st.Node, opt)
				if res.Takeover > 0 {
					m.obs.takeoverSecs.Observe(res.Takeover.Seconds())
				}
				for _, x := range []struct {
					sum *atomic.Int64
					d   time.Duration
				}{{&m.prof.preflight, res.Preflight}, {&m.prof.takeover, res.Takeover}, {&m.prof.publish, res.Publish}, {&m.prof.delete, res.Delete}} {
					x.sum.Add(int64(x.d))
				}
				if err != nil && (res.Outcome == move.Aborted || res.Outcome == move.NotStarted) {
					// The vbucket stays on the source: what was built
					// for the new row is in no row (the next try
					// builds it again).
					m.dropBuilt(ctx, vb, st.Build)
				}
			} else {
				m.cfg.Logf("manager: vbucket %d: %s", vb, st)
				res, err = move.Recover(vb, st.Src, st.Node, opt)
				if res.Rule != "" {
					m.cfg.Logf("manager: vbucket %d: %s: %s", vb, res.String(), res.Detail)
				}
			}
			m.prof.move.Add(int64(time.Since(t0)))
			oldDeleted = oldDeleted || res.OldCopyDeleted
			if err != nil {
				return fmt.Errorf("vbucket %d: %s: %w", vb, res.String(), err)
			}
			continue
		}
		return m.finishVB(ctx, vb, plan, bytes, replBytes)
	}
	return fmt.Errorf("vbucket %d: not moved after %d steps", vb, maxVBSteps)
}

// look gathers planVB's facts for vb: its rows in s, and a look at the
// row's active and the forward row's active when they differ.
func (m *Manager) look(ctx context.Context, s *State, vb int, oldDeleted bool) vbFacts {
	f := vbFacts{Row: s.rowServers(s.Map[vb]), Forward: s.rowServers(s.Forward[vb]), Chain: s.Chain, OldDeleted: oldDeleted}
	if s.Rebalance != nil {
		f.MovedFrom = s.Rebalance.Moving[vb]
	}
	cur, to := at(f.Row, 0), at(f.Forward, 0)
	if to == "" || to == cur {
		return f
	}
	opt := move.Options{RequestTimeout: 5 * time.Second, Credentials: m.credentials(), Conn: m.conn}
	if cur != "" {
		f.From = move.Observe(ctx, vb, cur, "", opt)
	}
	f.To = move.Observe(ctx, vb, to, cur, opt)
	return f
}

// cancelOnTargetFailover calls cancel, and returns, once a failover of
// the node vb moves into (the forward row's active) has begun while none
// of the map row's active has; it looks every 50 ms until ctx ends.
func (m *Manager) cancelOnTargetFailover(ctx context.Context, vb int, cancel context.CancelFunc) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s := m.view()
		if s.Forward == nil || vb >= len(s.Forward) || len(s.Forward[vb]) == 0 || s.Forward[vb][0] < 0 {
			continue
		}
		to, from := s.server(s.Forward[vb][0]), s.server(s.Map[vb][0])
		if to != from && m.failingOver(to) && !m.failingOver(from) {
			m.cfg.Logf("manager: vbucket %d: its move into %s ends: %s is being failed over", vb, to, to)
			cancel()
			return
		}
	}
}

// moveOptions are the options of the manager's moves of a vbucket whose
// active is from: the manager publishes (commitActive: its commit in
// etcd, then its push), and a move halts once this leadership (ctx) has
// ended, for the next leader to finish.
func (m *Manager) moveOptions(ctx context.Context, from string) move.Options {
	return move.Options{
		Settle:         moveSettle,
		RequestTimeout: 5 * time.Second,
		Credentials:    m.credentials(),
		Conn:           m.conn,
		Publish: func(_ context.Context, vb int, to string) (int64, error) {
			return m.commitActive(ctx, vb, from, to)
		},
		Halt: func() error {
			if ctx.Err() != nil {
				return ErrNotLeader
			}
			return nil
		},
	}
}

// buildReplicas makes each of nodes a replica of vb fed from src, the
// active, and waits until each has caught up: stepMove's Build, before
// the takeover.
func (m *Manager) buildReplicas(ctx context.Context, vb int, src string, nodes []string) error {
	for _, r := range nodes {
		if err := m.connUnlessFailing(ctx, r, func(c *admin.Conn) error { return c.Replicate(vb, src) }); err != nil {
			return fmt.Errorf("building replica %s of vbucket %d before its move: %w", r, vb, err)
		}
	}
	for _, r := range nodes {
		if err := m.waitCaughtUp(ctx, vb, src, r); err != nil {
			return fmt.Errorf("building replica %s of vbucket %d before its move: %w", r, vb, err)
		}
	}
	return nil
}

// connUnlessFailing is conn, ended at once (or not begun) when a failover
// of addr begins: a move's step on a replica or an old copy there would
// otherwise wait out a paused or cut-off node's timeouts, and the
// failover waits for the rebalance to stop (issue 43: a vbucket unserved
// no longer than the lease plus --failover-after plus a second).
func (m *Manager) connUnlessFailing(ctx context.Context, addr string, fn func(c *admin.Conn) error) error {
	if targetWait {
		return m.conn(ctx, addr, fn)
	}
	if m.failingOver(addr) {
		return fmt.Errorf("%s is being failed over", addr)
	}
	fctx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { // owned by connUnlessFailing, which ends it and waits for it
		defer close(watched)
		m.cancelFailing(fctx.Done(), map[string]context.CancelFunc{addr: cancel})
	}()
	err := m.conn(fctx, addr, fn)
	cancel()
	<-watched
	return err
}

// dropBuilt deletes the replicas buildReplicas made for a move that did
// not happen: in no row, they would be fed (and, under
// --sync-replication, waited for) for ever.
func (m *Manager) dropBuilt(ctx context.Context, vb int, nodes []string) {
	for _, r := range nodes {
		if err := m.connUnlessFailing(ctx, r, func(c *admin.Conn) error { return c.DelVBucket(vb) }); err != nil {
			m.cfg.Logf("manager: dropping replica %s of vbucket %d, built for a move that did not happen: %v", r, vb, err)
		}
	}
}

// commitActive commits to as vb's active (rev+1; to leaves the replicas,
// and so does the old active, which Rebalance.Moving names until the move
// is finished; the replica slots this leaves empty take built, in order:
// replicas the move built and caught up first, and the old active itself
// when its copy is kept as a replica, a swap) and pushes the map to every
// node.
// It is the publish step of the manager's moves: the old copy is deleted
// only after it returned.
func (m *Manager) commitActive(ctx context.Context, vb int, from, to string, built ...string) (int64, error) {
	m.runHook("commit-active", vb)
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	ns, err := m.commitMove(ctx, func(s *State) error {
		row := s.Map[vb]
		if cur := s.server(row[0]); cur != from && cur != to {
			return fmt.Errorf("vbucket %d: the map's active is %q, not %q (the move's source) or %q", vb, cur, from, to)
		}
		ti := s.serverIndex(to)
		nr := []int{ti}
		for _, x := range row[1:] {
			if x >= 0 && x != ti && x != row[0] {
				nr = append(nr, x)
			}
		}
		for _, b := range built {
			if bi := s.serverIndex(b); len(nr) < len(row) && !slices.Contains(nr, bi) {
				nr = append(nr, bi)
			}
		}
		for len(nr) < len(row) {
			nr = append(nr, -1)
		}
		s.Map[vb] = nr
		s.Rev++
		if s.Rebalance != nil && from != "" {
			if s.Rebalance.Moving == nil {
				s.Rebalance.Moving = map[int]string{}
			}
			s.Rebalance.Moving[vb] = from
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	m.publish(ctx, ns)
	m.runHook("published", vb)
	return ns.Rev, nil
}

// finishVB runs the rest of a move whose new active is committed: plan's
// steps (planVB), in order.
//
// bytes and replBytes are what the move streamed before (the active's
// bytes, the replicas built first); the catch-ups add theirs.
func (m *Manager) finishVB(ctx context.Context, vb int, plan []step, bytes, replBytes uint64) error {
	for _, st := range plan {
		switch st.Kind {
		case stepDeleteOld:
			// A previous leader (or this one's move, halted) committed the
			// new active and did not delete the old copy.
			if err := m.connUnlessFailing(ctx, st.Node, func(c *admin.Conn) error { return c.DelVBucket(vb) }); err != nil {
				m.cfg.Logf("manager: deleting vbucket %d on %s after its move: %v", vb, st.Node, err)
			}
		case stepReplicate:
			if err := m.connUnlessFailing(ctx, st.Node, func(c *admin.Conn) error { return c.Replicate(vb, st.Src) }); err != nil {
				return fmt.Errorf("replica %s of vbucket %d: %w", st.Node, vb, err)
			}
		case stepCatchUp:
			replBytes += m.vbBytes(ctx, st.Src, vb)
			t0 := time.Now()
			err := m.waitCaughtUp(ctx, vb, st.Src, st.Node)
			m.prof.catchup.Add(int64(time.Since(t0)))
			if err != nil {
				return err
			}
		case stepCommitRow:
			ns, err := m.commitMove(ctx, func(s *State) error {
				s.Map[vb] = append([]int(nil), s.Forward[vb]...)
				s.Rev++
				if s.Rebalance != nil {
					s.Rebalance.Done++
					s.Rebalance.Bytes += bytes
					s.Rebalance.ReplicaBytes += replBytes
					delete(s.Rebalance.Moving, vb)
				}
				return nil
			})
			if err != nil {
				return err
			}
			m.publish(ctx, ns)
		case stepDropReplica:
			m.connUnlessFailing(ctx, st.Node, func(c *admin.Conn) error {
				c.StopReplication(vb)
				return c.DelVBucket(vb)
			})
		default:
			return fmt.Errorf("vbucket %d: step %s after the active's commit", vb, st)
		}
	}
	return nil
}

// runHook calls the test hook, if any, at a step of a move.
func (m *Manager) runHook(step string, vb int) {
	if m.hook != nil {
		m.hook(step, vb)
	}
}

// readCopy reads addr's copy of vb.
func (m *Manager) readCopy(ctx context.Context, addr string, vb int) (copyPos, error) {
	var v copyPos
	err := m.connUnlessFailing(ctx, addr, func(c *admin.Conn) error {
		var err error
		v, err = askCopy(c, vb)
		return err
	})
	return v, err
}

// askCopy asks c's node for its copy of vb ("stats vbucket N").
func askCopy(c *admin.Conn, vb int) (copyPos, error) {
	lines, err := c.Stats("vbucket " + strconv.Itoa(vb))
	if err != nil {
		return copyPos{}, err
	}
	return parsePositions(lines)[vb], nil
}

// hasHistory reports whether src holds vb with a history a replica can
// follow: active (or a replica feeding a chain) with a lineage. A process
// started again holds none: its copy reads dead, lineage 0, high seqno 0.
func (m *Manager) hasHistory(ctx context.Context, vb int, src string) (copyPos, bool, error) {
	s, err := m.readCopy(ctx, src, vb)
	if err != nil {
		return s, false, err
	}
	return s, s.UUID != 0 && (s.State == "active" || s.State == "replica"), nil
}

// vbStat reads one field of vb's line in addr's "stats vbucket N" (0 when
// absent).
func (m *Manager) vbStat(ctx context.Context, addr string, vb int, field string) (uint64, error) {
	var n uint64
	err := m.conn(ctx, addr, func(c *admin.Conn) error {
		st, err := c.Stats("vbucket " + strconv.Itoa(vb))
		if err != nil {
			return err
		}
		key := "vb_" + strconv.Itoa(vb) + ":" + field
		for _, kv := range st {
			if kv[0] == key {
				n, _ = strconv.ParseUint(kv[1], 10, 64)
			}
		}
		return nil
	})
	return n, err
}

// vbBytes is the size of vb's items on addr, for progress.
func (m *Manager) vbBytes(ctx context.Context, addr string, vb int) uint64 {
	n, _ := m.vbStat(ctx, addr, vb, "bytes")
	return n
}

// errRebalanceStopping: a wait of a move gave up because the rebalance is
// being stopped (by hand, or by a failover, which waits for it).
var errRebalanceStopping = errors.New("the rebalance is stopping")

// waitCaughtUp waits until replica r's stream of vb from the active has
// reached the active's last sequence number as it was when the wait began,
// or the rebalance is stopping: a failover of r (or of the active) stops
// the rebalance and waits for it, and must not wait out this deadline.
//
// Caught up also means the active has a history to be caught up with: it
// holds the vbucket (active, or a replica for a chain) with a lineage
// (hasHistory). A source killed and started again holds no copy, its high
// seqno reads 0, and so did the new replica's position: a rebalance then
// dropped the replica that held every item for one that held none, and a
// failover promoted it (issue 43; the vbcache_unsafe_catchup build tag
// turns the check off). A wait longer than 10 s is logged once, with what
// each end shows.
func (m *Manager) waitCaughtUp(ctx context.Context, vb int, active, r string) error {
	high, err := m.vbStat(ctx, active, vb, "high_seqno")
	if err != nil {
		return err
	}
	start := time.Now()
	deadline := start.Add(2 * time.Minute)
	suffix := ":vb_" + strconv.Itoa(vb) + ":seqno"
	var src copyPos // the active's copy, once read
	told := false
	for {
		var got uint64
		found := false
		err := m.connUnlessFailing(ctx, r, func(c *admin.Conn) error {
			st, err := c.Stats("streams " + strconv.Itoa(vb))
			if err != nil {
				return err
			}
			for _, kv := range st {
				if strings.HasPrefix(kv[0], "consumer:") && strings.HasSuffix(kv[0], suffix) {
					got, _ = strconv.ParseUint(kv[1], 10, 64)
					found = true
				}
			}
			return nil
		})
		if err == nil && found && got >= high {
			if !catchupLineage {
				return nil
			}
			var ok bool
			if src, ok, err = m.hasHistory(ctx, vb, active); err == nil && ok {
				return nil
			}
		}
		if !told && time.Since(start) > 10*time.Second {
			told = true
			m.cfg.Logf("manager: replica %s of vbucket %d not caught up after %v: its stream from %s at %d of %d (found %v); %s holds it %s, lineage %016x, seqno %d; %v",
				r, vb, time.Since(start).Round(time.Second), active, got, high, found, active, src.State, src.UUID, src.Seqno, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %s of vbucket %d did not catch up (at %d of %d)", r, vb, got, high)
		}
		if s := m.view(); s.Rebalance != nil && s.Rebalance.Stopping {
			return fmt.Errorf("replica %s of vbucket %d, at %d of %d: %w", r, vb, got, high, errRebalanceStopping)
		}
		sleep(ctx, 5*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}
