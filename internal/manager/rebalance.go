package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
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
	m.launchRebalance(m.leaderContext())
	return nil
}

// leaderContext is the context of the current leadership (set by lead).
func (m *Manager) leaderContext() context.Context {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.leadCtx == nil {
		return context.Background()
	}
	return m.leadCtx
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
		s := m.State()
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
		// The next vbucket to move: not equal to its forward row, not
		// being moved, not given up on.
		next := -1
		m.mu.Lock()
		for vb := range s.Map {
			if s.unfinished(vb) && !m.moving[vb] && failures[vb] < 3 {
				next = vb
				break
			}
		}
		if next >= 0 {
			m.moving[next] = true
		}
		m.mu.Unlock()
		if next < 0 {
			// Nothing to start: wait for the moves in flight, then
			// look again (one may have failed and be retried).
			wg.Wait()
			s = m.State()
			left := 0
			for vb := range s.Map {
				if s.unfinished(vb) {
					left++
				}
			}
			if left == 0 {
				break
			}
			gaveUp := true
			for vb := range s.Map {
				if s.unfinished(vb) && failures[vb] < 3 {
					gaveUp = false
				}
			}
			if gaveUp {
				errMu.Lock()
				if firstErr == nil {
					firstErr = fmt.Errorf("%d vbuckets could not be moved", left)
				}
				errMu.Unlock()
				break
			}
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
			err := m.moveVBucket(ctx, vb)
			m.mu.Lock()
			delete(m.moving, vb)
			m.mu.Unlock()
			if err != nil && ctx.Err() == nil {
				m.cfg.Logf("manager: moving vbucket %d: %v", vb, err)
				errMu.Lock()
				failures[vb]++
				if failures[vb] >= 3 && firstErr == nil {
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
		m.cfg.Logf("manager: rebalance finished (%d of %d vbuckets moved; error: %v); time in takeovers %v, replica catch-up %v, commits %v, pushes %v",
			s.Rebalance.Done, s.Rebalance.Total, err, time.Duration(m.prof.takeover.Swap(0)).Round(time.Millisecond),
			time.Duration(m.prof.catchup.Swap(0)).Round(time.Millisecond), time.Duration(m.prof.commit.Swap(0)).Round(time.Millisecond),
			time.Duration(m.prof.push.Swap(0)).Round(time.Millisecond))
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

// moveVBucket brings vbucket vb from its current row to its forward row:
// the active first (a takeover, or a plain activation for a vbucket nobody
// holds), then the replicas. Each step is idempotent, so a new leader can
// redo a move its predecessor left half done.
func (m *Manager) moveVBucket(ctx context.Context, vb int) error {
	s := m.State()
	if s.Forward == nil || s.Rebalance == nil {
		return nil
	}
	cur, fw := s.Map[vb], s.Forward[vb]
	from, to := s.server(cur[0]), s.server(fw[0])
	var bytes uint64
	if old, ok := s.Rebalance.Moving[vb]; ok && !slices.Contains(fw, slices.Index(s.Servers, old)) {
		// A previous leader committed the new active and may have died
		// before deleting the old copy. (An old copy that the forward
		// row keeps as a replica is not deleted: it may already be
		// following the new active.)
		if err := m.conn(ctx, old, func(c *admin.Conn) error { return c.DelVBucket(vb) }); err != nil {
			m.cfg.Logf("manager: deleting vbucket %d on %s after its move: %v", vb, old, err)
		}
	}
	if to != "" && to != from {
		st, err := m.stateOn(ctx, to, vb)
		if err != nil {
			return err
		}
		switch {
		case st == vbucket.Active:
			// Already there (a previous leader's move completed).
		case from == "":
			if err := m.conn(ctx, to, func(c *admin.Conn) error { return c.SetVBucket(vb, vbucket.Active) }); err != nil {
				return err
			}
		default:
			bytes = m.vbBytes(ctx, from, vb)
			t0 := time.Now()
			err := m.takeover(ctx, vb, from, to)
			m.prof.takeover.Add(int64(time.Since(t0)))
			if err != nil {
				return err
			}
		}
		// Commit the active, drop the new active from the replicas.
		m.opMu.Lock()
		ns, err := m.update(ctx, func(s *State) error {
			row := s.Map[vb]
			ti := slices.Index(s.Servers, to)
			nr := []int{ti}
			for _, x := range row[1:] {
				if x != ti && x != row[0] {
					nr = append(nr, x)
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
		m.opMu.Unlock()
		if err != nil {
			return err
		}
		m.publish(ctx, ns)
		// Only now, with the new map published, the old copy goes.
		if from != "" {
			if err := m.conn(ctx, from, func(c *admin.Conn) error { return c.DelVBucket(vb) }); err != nil {
				m.cfg.Logf("manager: deleting vbucket %d on %s after its move: %v", vb, from, err)
			}
		}
		s = ns
	}
	// Replicas: every forward replica follows its source (the active for
	// star replication, the previous replica for a chain), caught up
	// before the row is committed.
	row := s.Map[vb]
	fw = s.Forward[vb]
	active := s.server(fw[0])
	for j := 1; j < len(fw); j++ {
		r := s.server(fw[j])
		if r == "" {
			continue
		}
		src := active
		if s.Chain && j > 1 && fw[j-1] >= 0 {
			src = s.server(fw[j-1])
		}
		if err := m.conn(ctx, r, func(c *admin.Conn) error { return c.Replicate(vb, src) }); err != nil {
			return fmt.Errorf("replica %s of vbucket %d: %w", r, vb, err)
		}
	}
	for j := 1; j < len(fw); j++ {
		if r := s.server(fw[j]); r != "" && !slices.Contains(row[1:], fw[j]) {
			t0 := time.Now()
			err := m.waitCaughtUp(ctx, vb, active, r)
			m.prof.catchup.Add(int64(time.Since(t0)))
			if err != nil {
				return err
			}
		}
	}
	m.opMu.Lock()
	ns, err := m.update(ctx, func(s *State) error {
		s.Map[vb] = append([]int(nil), s.Forward[vb]...)
		s.Rev++
		if s.Rebalance != nil {
			s.Rebalance.Done++
			s.Rebalance.Bytes += bytes
			delete(s.Rebalance.Moving, vb)
		}
		return nil
	})
	m.opMu.Unlock()
	if err != nil {
		return err
	}
	m.publish(ctx, ns)
	// Old replicas that the forward row drops.
	for _, x := range row[1:] {
		if x >= 0 && !slices.Contains(fw, x) {
			a := s.server(x)
			m.conn(ctx, a, func(c *admin.Conn) error {
				c.StopReplication(vb)
				return c.DelVBucket(vb)
			})
		}
	}
	return nil
}

// takeover moves vb's active copy from one node to another (TAKEOVER on
// the target). On failure it checks where the vbucket ended: active on the
// target counts as done; otherwise the source must be active again (it
// reverts by itself when the handover had not reached the target), and the
// move is retried later.
func (m *Manager) takeover(ctx context.Context, vb int, from, to string) error {
	c, err := admin.Dial(ctx, to)
	if err != nil {
		return err
	}
	defer c.Close()
	terr := c.Takeover(vb, from)
	if terr == nil {
		return nil
	}
	if st, err := m.stateOn(ctx, to, vb); err == nil && st == vbucket.Active {
		return nil
	}
	return fmt.Errorf("takeover %s -> %s: %w", from, to, terr)
}

func (m *Manager) stateOn(ctx context.Context, addr string, vb int) (vbucket.State, error) {
	var st vbucket.State
	err := m.conn(ctx, addr, func(c *admin.Conn) error {
		var err error
		st, err = c.GetVBucket(vb)
		return err
	})
	return st, err
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

// waitCaughtUp waits until replica r's stream of vb from the active has
// reached the active's last sequence number as it was when the wait began.
func (m *Manager) waitCaughtUp(ctx context.Context, vb int, active, r string) error {
	high, err := m.vbStat(ctx, active, vb, "high_seqno")
	if err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Minute)
	suffix := ":vb_" + strconv.Itoa(vb) + ":seqno"
	for {
		var got uint64
		found := false
		err := m.conn(ctx, r, func(c *admin.Conn) error {
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
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %s of vbucket %d did not catch up (at %d of %d)", r, vb, got, high)
		}
		sleep(ctx, 5*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}
