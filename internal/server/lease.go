package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// Leases: a node serves its active vbuckets only while it holds a lease
// from the cluster (DESIGN.md §3). Failover is the one step where the old
// owner cannot be asked to stop, so the manager waits until the node's
// lease must have run out before it promotes a replica
// (internal/manager, fencing.go), and the node refuses to serve once it
// has.
//
// # Where a lease comes from
//
//   - The manager's leader grants one with every probe (LEASE, 0xe8;
//     see grantLease). Grants are numbered within a leadership, and each
//     names the latest one whose answer the manager had when it sent it;
//     the node's lease runs for the duration from when it handled that
//     earlier grant, on its monotonic clock. The manager counts from when
//     that grant's answer reached it, which is later, so the node's lease
//     ends first without any clock being shared (only their rates are
//     assumed to agree within the manager's margin), and a grant delayed
//     in the network or in a paused node's socket buffer extends nothing.
//   - Its peers, when no manager can be heard at all. Once the manager's
//     lease has less than half its duration left, the node asks every
//     other member of the quorum set (LEASE_QUERY, 0xe9) whether it holds
//     a manager's lease, and which map revision it has. A peer's lease
//     counts as held while more than a quarter of the peer's own duration
//     is left (its answer says the duration: leaders may grant different
//     ones). When a majority of the quorum set (this node included)
//     answers that it holds none, the lease is extended from the moment
//     the question was sent. If any
//     answer names a newer map, that map is fetched and taken first (see
//     below), and the lease is extended only once that worked.
//
// The rule this enforces: a manager fails a node over only while it has
// been in unbroken contact with a majority of that node's quorum set for
// a whole lease duration (internal/manager), and a node extends its lease
// only on the word of a majority that is in no manager's contact. Two
// majorities of one set share a node, which cannot be both, so a node
// whose manager lost sight of it stops serving before it can be failed
// over, whichever way it was cut off (paused, partitioned from the
// manager, partitioned from everyone); and when every manager is down and
// the nodes still see each other, they keep serving on each other's word,
// which is safe because without a manager no failover can happen. Redis
// Cluster's rule (a master that cannot reach a majority of masters for
// node_timeout stops taking writes) is the same idea with the masters as
// the only voters; here the manager is the only one who can fail a node
// over, so it is the manager's contact that the majority speaks about.
//
// # What a grant's answer says
//
// A node answers a grant it accepts (a stale one too) with OK and a
// 12-byte value: its incarnation, a random nonzero 64-bit number chosen
// when its cluster state was made (at process start), then the number of
// vbuckets it holds as active, replica or pending (32 bits), both
// big-endian (leaseAnswer). A node that restarted answers at the same
// address with a new incarnation, and, having lost everything, holds
// nothing while the manager's map still names it active: the manager
// fails it over then (internal/manager, restart.go). The count is
// taken when answering, a load per vbucket, once per grant (grants come
// each probe, not per request). An older node answered with no value;
// the manager then knows nothing of its restarts.
//
// A node never granted a lease (one driven by hand with `vbcache ctl`,
// or a test's) serves as before: lease mode starts with the first grant
// and lasts for the process's life.
//
// # What a node without a lease answers
//
// A key request for an active vbucket gets TMPFAIL (binary, with the
// node's config as body) or "SERVER_ERROR temporary failure" (text): the
// node cannot tell whether it still owns the vbucket. Once it learns a
// newer map (pushed by a manager, from a peer, or fetched because a
// client's GET_CLUSTER_CONFIG extras named a newer revision) it takes
// that map's view: every active vbucket the newer map gives to another
// node (as active and as the forward map's active) turns dead here, and
// requests for it get NOT_MY_VBUCKET with that map. So does a node that
// serves on its peers' word. A node that holds a manager's lease is in
// its manager's contact, so it takes its vbucket states from the
// manager's SET_VBUCKET and keeps them until told otherwise, or until
// that lease ends: then it takes the view of the map it has, whenever
// that map came (askPeers), so a map stored while it was leased is not
// ignored for good.
//
// The check costs an atomic load before lease mode is on, and after it
// one read of the monotonic clock per batch of requests a connection
// handles from one read (processInput), taken after they arrived. A
// request read before a pause and answered after it is the one window
// left: the check and the store operation are microseconds apart (a
// batch's last request, its batch's time), and the pause must fall
// between them.
//
// # A build without fencing
//
// The build tag vbcache_nofence makes fencing (lease_fence.go,
// lease_nofence.go) a false constant: such a node serves its active
// vbuckets with or without a lease (never TMPFAIL for want of one) and
// never turns them dead on its own from a newer map it learned from a peer
// or a client; it still asks its peers and stores the maps it fetches, and
// a manager's SET_VBUCKET still changes its states. The tag exists only to
// prove that the fault tests can fail (test/faults, broken_test.go: a node
// cut off from the manager keeps answering after its failover, and the
// history checker must find the history not linearizable). In the normal
// build the constant is true and the checks compile to what they were.
// The build tag vbcache_unsafe_leaseterms, likewise for tests only, turns
// off the two rules above that came with issue 43: peers judged by their
// own duration, and the view taken when the manager's lease ends.

// leaseBase is the origin of monoNow.
var leaseBase = time.Now()

// monoNow is the monotonic clock in nanoseconds since leaseBase.
func monoNow() int64 { return int64(time.Since(leaseBase)) }

// vouchFraction: a peer whose manager lease has less than 1/vouchFraction
// of its duration left counts as holding none.
const vouchFraction = 4

// Bounds on a LEASE request.
const (
	maxLeaseMillis = 10 * 60 * 1000
	maxLeaseQuorum = 1 << 16 // bytes of the quorum set
)

// leaseRing is how many recent grants a node remembers the handling time
// of (a grant names an earlier one, normally the one before it).
const leaseRing = 16

// handledGrant is when a grant was handled.
type handledGrant struct {
	seq uint64
	at  int64 // monoNow
}

// nodeLease is a node's lease state, in the cluster struct.
type nodeLease struct {
	on       atomic.Bool   // a manager has granted a lease: from now on serving needs one
	until    atomic.Int64  // monoNow before which active vbuckets are served (either kind of lease)
	mgrUntil atomic.Int64  // the manager's lease's end
	dur      atomic.Int64  // the duration of the last grant (ns)
	peer     atomic.Bool   // the lease was last extended by the peers
	refused  atomic.Uint64 // key requests answered TMPFAIL for want of a lease
	fetch    atomic.Bool   // a newer map than ours was seen: fetch it from a peer

	mu      sync.Mutex // protects the fields below; held for no call
	self    string     // this node's address as the manager names it
	quorum  []string   // the quorum set of the last grant
	epoch   uint64     // the granting leadership's
	maxSeq  uint64     // the newest grant handled in epoch
	handled [leaseRing]handledGrant

	kick chan struct{} // (capacity 1) wakes the lease loop; sent without blocking
}

// serving reports whether active vbuckets may be served at now (always,
// in a vbcache_nofence build).
func (l *nodeLease) serving(now int64) bool {
	if !fencing {
		return true
	}
	return !l.on.Load() || now < l.until.Load()
}

// managerLeased reports whether the node holds a manager's lease at now
// (or was never granted one): only then does it keep active vbuckets
// that a newer map gives to others (takeView). A vbcache_nofence build
// always keeps them.
func (l *nodeLease) managerLeased(now int64) bool {
	if !fencing {
		return true
	}
	return !l.on.Load() || now < l.mgrUntil.Load()
}

// extend moves the lease's end to t if that is later.
func (l *nodeLease) extend(t int64) {
	for {
		u := l.until.Load()
		if t <= u || l.until.CompareAndSwap(u, t) {
			return
		}
	}
}

func (l *nodeLease) wake() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

func (l *nodeLease) members() (string, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.self, l.quorum
}

// leaseClock returns the clock reading this connection's lease checks
// use: read once per processInput call (and again after a park), so a
// pipeline of requests costs one clock read, not one each.
func (c *conn) leaseClock() int64 {
	if !c.leaseRead {
		c.leaseNow, c.leaseRead = monoNow(), true
	}
	return c.leaseNow
}

// noLease refuses a key request for an active vbucket that the node has
// no lease to serve.
func (c *conn) noLease() admission {
	c.s.cl.lease.refused.Add(1)
	return admitNoLease
}

// grantLease handles LEASE from a manager: extras {duration ms (4),
// epoch (8), seq (8), acked (8)}, key this node's address, value the
// quorum set. It answers OK with leaseAnswer's value, or Invalid
// arguments for a malformed grant.
//
// The lease runs from when this node handled grant number acked of the
// same epoch (the latest grant whose answer the manager had when it sent
// this one), not from now: a grant that sat in a socket buffer while the
// node was paused, or was answered too late for the manager to count it,
// then extends nothing the manager does not know of. The manager counts
// the lease from when that grant's answer reached it, which was later.
func (c *conn) grantLease(extras, key, value []byte) {
	l := &c.s.cl.lease
	if len(extras) != 28 || len(key) == 0 {
		c.binError(protocol.StatusInvalid)
		return
	}
	ms := binary.BigEndian.Uint32(extras)
	epoch := binary.BigEndian.Uint64(extras[4:])
	seq := binary.BigEndian.Uint64(extras[12:])
	acked := binary.BigEndian.Uint64(extras[20:])
	if ms == 0 || ms > maxLeaseMillis || seq == 0 || acked >= seq {
		c.binError(protocol.StatusInvalid)
		return
	}
	if !c.s.cl.acceptTerm(epoch) { // the epoch is the leader's term (terms.go)
		c.refuseTerm(epoch)
		return
	}
	var quorum []string
	for a := range bytes.SplitSeq(value, []byte(",")) {
		if len(a) > 0 {
			quorum = append(quorum, string(a))
		}
	}
	d := int64(ms) * int64(time.Millisecond)
	now := monoNow()
	l.mu.Lock()
	if epoch != l.epoch {
		l.epoch, l.maxSeq, l.handled = epoch, 0, [leaseRing]handledGrant{}
	}
	var from int64 = -1
	if acked > 0 {
		if h := l.handled[acked%leaseRing]; h.seq == acked {
			from = h.at
		}
	}
	fresh := seq > l.maxSeq
	if fresh {
		l.maxSeq = seq
		l.handled[seq%leaseRing] = handledGrant{seq: seq, at: now}
		l.self, l.quorum = string(key), quorum
	}
	l.mu.Unlock()
	if fresh && from >= 0 {
		l.dur.Store(d)
		if from+d > l.mgrUntil.Load() {
			l.mgrUntil.Store(from + d)
		}
		l.extend(from + d)
		if from+d > now {
			l.peer.Store(false)
		}
	}
	if !l.on.Swap(true) {
		l.dur.Store(d)
		l.wake() // the loop starts watching
	}
	var v [leaseAnswerLen]byte
	c.binOK(0, nil, nil, c.s.cl.leaseAnswer(v[:0]))
}

// leaseAnswerLen is the length of LEASE's answer.
const leaseAnswerLen = 16

// leaseAnswer appends LEASE's answer to dst:
//
//	byte  0                               8               12              16
//	      +-------------------------------+---------------+---------------+
//	      | incarnation (8, big-endian)   | held (4, b-e) | active (4)    |
//	      +-------------------------------+---------------+---------------+
//
// incarnation is the node's (cluster.incarnation); held counts the
// vbuckets in a state other than dead (active, replica, pending), active
// those active. The manager's restart rule (internal/manager, restart.go)
// counts the actives: a restarted node soon holds replicas again, which
// do not serve the vbuckets it has lost.
func (cl *cluster) leaseAnswer(dst []byte) []byte {
	held, active := 0, 0
	for vb := range cl.vbs.Len() {
		switch cl.vbs.Get(vb) {
		case vbucket.Active:
			active++
			held++
		case vbucket.Replica, vbucket.Pending:
			held++
		}
	}
	dst = binary.BigEndian.AppendUint64(dst, cl.incarnation)
	dst = binary.BigEndian.AppendUint32(dst, uint32(held))
	return binary.BigEndian.AppendUint32(dst, uint32(active))
}

// queryLease answers LEASE_QUERY from a peer: the milliseconds left on
// this node's manager lease (0: none) and its map's (revEpoch, rev). The
// asker counts a lease with less than a quarter of its duration left as
// none (vouchFraction): the manager counts on a node's word only while
// more than that is left, so that the nodes' leases, all running out
// together when the manager stops, are extended before they end.
//
// The answer's value:
//
//	byte  0            4                  12                 20           24
//	      +------------+------------------+------------------+------------+
//	      | ms left (4)| map revEpoch (8) | map rev (8)      | lease ms(4)|
//	      +------------+------------------+------------------+------------+
//
// big-endian; the last field is the duration of this node's manager
// lease, by which the asker judges it: a quarter of the peer's own
// duration, not of the asker's, since leaders may grant different
// durations (a node granted 20 s by one leader judging peers on a
// successor's 5 s leases by its own would find none of them in the
// manager's contact, and serve on their word without end). An older
// node's answer has 20 bytes and is judged by the asker's duration.
//
// A node granted no lease since its start (a new process at a member's
// address, restarted) vouches for no one: its lease duration is 0, and an
// asker counts it neither way (it still learns the map revision). Its "I
// hear no manager" would otherwise count towards the majority of a peer
// that the manager may be failing over (issue 43).
func (c *conn) queryLease() {
	cl := c.s.cl
	var v [queryAnswerLen]byte
	if left := cl.lease.mgrUntil.Load() - monoNow(); cl.lease.on.Load() && left > 0 {
		binary.BigEndian.PutUint32(v[0:4], uint32(max(left/int64(time.Millisecond), 1)))
	}
	if cc := cl.config.Load(); cc != nil {
		binary.BigEndian.PutUint64(v[4:12], uint64(cc.revEpoch))
		binary.BigEndian.PutUint64(v[12:20], uint64(cc.rev))
	}
	if cl.lease.on.Load() { // 0: granted nothing since its start
		binary.BigEndian.PutUint32(v[20:24], uint32(max(cl.lease.dur.Load()/int64(time.Millisecond), 1)))
	}
	c.binOK(0, nil, nil, v[:])
}

// queryAnswerLen is the length of LEASE_QUERY's answer (20 from a node
// that does not send its lease's duration).
const queryAnswerLen = 24

// leaseLoop keeps the lease when the manager's runs low, asking the
// peers, and fetches newer maps that clients name. It runs on a goroutine
// of Serve's until the server's lifetime context (parkCtx) ends.
func (s *Server) leaseLoop() {
	defer s.wg.Done()
	l := &s.cl.lease
	stop := s.cl.parkCtx.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-l.kick:
		case <-t.C:
		}
		if !l.on.Load() {
			t.Reset(time.Hour) // a grant wakes the loop
			continue
		}
		d := l.dur.Load()
		next := d / 8
		if left := l.mgrUntil.Load() - monoNow(); left > d/2 && !l.fetch.Load() {
			t.Reset(time.Duration(min(left-d/2, next)))
			continue
		}
		s.askPeers(d)
		t.Reset(time.Duration(next))
	}
}

// peerAnswer is one peer's answer to LEASE_QUERY.
type peerAnswer struct {
	addr      string
	held      bool // it holds a manager's lease
	abstain   bool // it was granted nothing since its start: it vouches for no one
	epoch, rv int64
}

// askPeers asks every other member of the quorum set whether it holds a
// manager's lease (and which map it has), takes a newer map if one is
// named, and extends the lease when a majority holds none.
func (s *Server) askPeers(d int64) {
	cl := s.cl
	l := &cl.lease
	self, quorum := l.members()
	sent := monoNow()
	ctx, cancel := context.WithTimeout(cl.parkCtx, time.Duration(min(d/8, int64(time.Second))))
	defer cancel()
	answers := make(chan peerAnswer, len(quorum))
	var wg sync.WaitGroup
	for _, a := range quorum {
		if a == self {
			continue
		}
		wg.Add(1)
		go func() { // owned by askPeers, which waits for it
			defer wg.Done()
			c, err := s.dialPeer(ctx, a)
			if err != nil {
				return
			}
			defer c.Close()
			v, err := c.Do(protocol.OpLeaseQuery, 0, nil, nil, nil)
			if err != nil || (len(v) != 20 && len(v) != queryAnswerLen) {
				return
			}
			left := int64(binary.BigEndian.Uint32(v[0:4])) * int64(time.Millisecond)
			judge := d // an older peer's lease, judged by this node's duration
			abstain := false
			if len(v) == queryAnswerLen && leaseTerms {
				judge = int64(binary.BigEndian.Uint32(v[20:24])) * int64(time.Millisecond)
				abstain = judge == 0 && incarnations // granted nothing since its start
			}
			answers <- peerAnswer{addr: a, held: left > 0 && left >= judge/vouchFraction, abstain: abstain,
				epoch: int64(binary.BigEndian.Uint64(v[4:12])), rv: int64(binary.BigEndian.Uint64(v[12:20]))}
		}()
	}
	wg.Wait()
	close(answers)
	notHeard := 0
	if slices.Contains(quorum, self) {
		notHeard = 1 // asking: its own manager lease is running out
	}
	var newest *peerAnswer
	for a := range answers {
		if !a.held && !a.abstain {
			notHeard++
		}
		if cl.config.Load().olderThan(a.epoch, a.rv) && (newest == nil || a.epoch > newest.epoch || a.epoch == newest.epoch && a.rv > newest.rv) {
			newest = &a
		}
	}
	if newest != nil {
		if err := s.fetchConfig(ctx, newest.addr); err != nil {
			s.log.Printf("lease: fetching the newer map (rev %d) from %s: %v", newest.rv, newest.addr, err)
			return // no extension on an old view
		}
	}
	// Once its manager's lease has ended the node takes its map's view,
	// whenever that map came: one stored while it held the lease (the
	// manager set its states then) was not applied when it arrived.
	if leaseTerms && !l.managerLeased(monoNow()) {
		if cc := cl.config.Load(); cc != nil && cc.parsed != nil {
			cl.takeView(cc.parsed, s.log.Printf)
		}
	}
	l.fetch.Store(false)
	if len(quorum) > 0 && notHeard >= len(quorum)/2+1 && l.mgrUntil.Load() <= monoNow()+d/2 {
		l.extend(sent + d)
		if !l.peer.Swap(true) {
			s.log.Printf("lease: no manager heard by %d of %d members: serving on the peers' word", notHeard, len(quorum))
		}
	}
}

// dialPeer opens a control connection to another node, logged in with
// the node's --cluster-auth credentials, over TLS when the node has -Z.
func (s *Server) dialPeer(ctx context.Context, addr string) (*admin.Conn, error) {
	c, err := admin.DialWith(ctx, addr, s.peerCredentials())
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.Timeout = max(time.Until(dl), time.Millisecond)
	}
	return c, nil
}

// fetchConfig gets addr's cluster config and stores it when newer.
func (s *Server) fetchConfig(ctx context.Context, addr string) error {
	c, err := s.dialPeer(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	raw, err := c.Do(protocol.OpGetClusterConfig, 0, nil, nil, nil)
	if err != nil {
		return err
	}
	if len(raw) == 0 {
		return errors.New("no config")
	}
	if _, err := s.cl.storeConfig(raw, nil, s.log.Printf); err != nil && !errors.Is(err, errNotNewer) {
		return err
	}
	return nil
}

// takeView turns dead every active vbucket that cfg gives to another
// node, as active and as the forward map's active (so a move's target
// keeps what it took over). It is used only when the node holds no
// lease: a node in the manager's contact takes its states from it.
func (cl *cluster) takeView(cfg *vbmap.Config, logf func(string, ...any)) {
	self, _ := cl.lease.members()
	if self == "" {
		return
	}
	me := slices.Index(cfg.VBucketServerMap.ServerList, self)
	vm, fwd := cfg.VBucketServerMap.VBucketMap, cfg.VBucketServerMap.VBucketMapForward
	n := 0
	for vb := 0; vb < cl.vbs.Len(); vb++ {
		if cl.vbs.Get(vb) != vbucket.Active {
			continue
		}
		if me >= 0 && vb < len(vm) && len(vm[vb]) > 0 && vm[vb][0] == me {
			continue
		}
		if me >= 0 && vb < len(fwd) && len(fwd[vb]) > 0 && fwd[vb][0] == me {
			continue
		}
		cl.streams.AbortTakeover(vb)
		if cl.vbs.CompareAndSet(vb, vbucket.Active, vbucket.Dead) {
			n++
		}
	}
	if n > 0 {
		logf("lease: the map of rev %d gives %d of this node's active vbuckets to others: they are dead here", cfg.Rev, n)
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// peerCredentials is how the node reaches its peers: as --cluster-auth's
// administrator, inside TLS with Config.PeerTLS. Nil (plain TCP, no
// login) when it has neither.
func (s *Server) peerCredentials() *admin.Credentials {
	cr := s.adminLogin()
	if s.cfg.PeerTLS == nil {
		return cr
	}
	var c admin.Credentials
	if cr != nil {
		c = *cr
	}
	c.TLS = s.cfg.PeerTLS
	return &c
}
