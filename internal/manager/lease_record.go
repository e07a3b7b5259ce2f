package manager

import (
	"context"
	"time"
)

// The lease record: leaders may run with different --lease (a rolling
// change of the flag), and a node keeps the lease of the last grant it
// handled, from whichever leader: a node granted 20 s by one leader and
// cut off holds it for 20 s, whatever its successor's --lease. So a
// failover must wait by the longest lease any leader may have granted,
// not by its own (issue 43). etcd holds it, State.LeaseMs:
//
//   - a leader raises it to its own --lease before it grants anything
//     (recordLease, at the start of lead); a leader that cannot write it
//     grants nothing;
//   - every failover waits by max(State.LeaseMs as this leadership began,
//     its own --lease) (leaseCeiling): for the managers' lease, and for
//     the peer leases, which a node extends by its last grant's duration;
//   - a leader lowers it to its own --lease (lowerLeaseRecord) once no
//     node can hold a longer one: it has led for the recorded lease and
//     its margin (every earlier leader's grants were sent before this
//     leadership began, its predecessor's session having expired), and
//     every node of the quorum set has answered two of its grants (the
//     second runs from the first, so the node's duration is now this
//     leader's, and so is any lease its peers give it).
//
// With the vbcache_unsafe_leaserecord build tag failovers wait by their
// own --lease only (leaseRecording false), so that tests show they catch
// it.

// recordLease makes State.LeaseMs at least this leader's --lease and sets
// the leadership's ceiling.
func (m *Manager) recordLease(ctx context.Context) error {
	own := m.cfg.Lease
	rec := time.Duration(m.State().LeaseMs) * time.Millisecond
	if rec < own {
		ns, err := m.update(ctx, func(s *State) error {
			s.LeaseMs = max(s.LeaseMs, own.Milliseconds())
			return nil
		})
		if err != nil {
			return err
		}
		rec = time.Duration(ns.LeaseMs) * time.Millisecond
	}
	if rec > own {
		m.cfg.Logf("manager: a leader before this one granted leases of %v: failovers wait by that until every node holds this leader's %v", rec, own)
	}
	m.mu.Lock()
	m.ceiling = max(rec, own)
	m.mu.Unlock()
	return nil
}

// leaseCeiling is the lease a failover waits by.
func (m *Manager) leaseCeiling() time.Duration {
	if !leaseRecording {
		return m.cfg.Lease
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return max(m.ceiling, m.cfg.Lease)
}

// lowerLeaseRecord lowers State.LeaseMs to this leader's --lease once no
// node can hold a longer lease (see above); the probe loop calls it each
// round while the ceiling is above the leader's own lease.
func (m *Manager) lowerLeaseRecord(ctx context.Context, quorum []string) {
	own := m.cfg.Lease
	m.mu.Lock()
	ceiling, since := m.ceiling, m.leadSince
	ready := ceiling > own && !m.cfg.Clock.Now().Before(since.Add(newLeaseParams(ceiling).wait()))
	for _, a := range quorum {
		if r := m.leases[a]; r == nil || r.ackedSeq < 2 {
			ready = false
		}
	}
	m.mu.Unlock()
	if !ready {
		return
	}
	if _, err := m.update(ctx, func(s *State) error {
		s.LeaseMs = own.Milliseconds()
		return nil
	}); err != nil {
		m.cfg.Logf("manager: lowering the recorded lease to %v: %v", own, err)
		return
	}
	m.mu.Lock()
	m.ceiling = own
	m.mu.Unlock()
	m.cfg.Logf("manager: every node holds this leader's lease of %v and none can hold the %v of an earlier one: failovers wait by %v", own, ceiling, own)
}
