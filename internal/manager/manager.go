package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/sasl"
)

// Config configures a manager.
type Config struct {
	Etcd   *clientv3.Client // the cluster state's store
	Prefix string           // etcd key prefix (default "/vbcache/default")

	// Advertise is the URL other managers and clients reach this one at
	// (http://host:port); it is the value this manager campaigns with.
	Advertise string
	// MgmtPort is the port advertised as services.mgmt in configs (the
	// manager's HTTP port; Couchbase's SDKs insist on one).
	MgmtPort int
	// MgmtTLS: the API is HTTPS (--api-tls-cert), so configs advertise
	// MgmtPort as services.mgmtSSL.
	MgmtTLS bool

	// Credentials log the manager's control connections to nodes in as
	// the cluster administrator (--cluster-auth); nil: none, for nodes
	// run with --insecure-cluster.
	Credentials *admin.Credentials
	// Readers, when not empty, are the API's read-only logins
	// (--api-readers): every read then needs one of them or the
	// administrator's, and a reader's change is refused with 403.
	// SetLogins replaces both (SIGHUP).
	Readers *sasl.Passwords
	// LeaderTransport carries a follower's requests to the leader's API
	// (the changes it passes on); nil: http.DefaultTransport. With the
	// API on HTTPS it trusts the cluster's CA.
	LeaderTransport http.RoundTripper

	NumVBuckets int  // for a new cluster (default 1024)
	Replicas    int  // for a new cluster (0-3)
	Chain       bool // for a new cluster: chained replication

	// FailoverAfter is how long a node holding vbuckets may stop
	// answering before it is failed over automatically (0: never; only
	// when the cluster has replicas). A node that answers but restarted
	// and lost its data is failed over without waiting for it, when it
	// is not 0 (restart.go).
	FailoverAfter time.Duration
	ProbeInterval time.Duration // health probes, each a lease grant (default 1 s)
	// Lease is the duration of the lease each probe grants a node: a node
	// the leader stops hearing from stops serving within it, and a
	// failover waits for it (fencing.go). Default 5 s; at least
	// 4*ProbeInterval.
	Lease time.Duration
	// JanitorInterval is how often the leader's janitor compares the map
	// with what the nodes hold and repairs what no other duty will
	// (janitor.go); default DefaultJanitorInterval, negative: never.
	JanitorInterval time.Duration
	MaxMoves        int // vbucket moves at once in a rebalance (default 4)
	SessionTTL      int // seconds; the leader's lease (default 5)

	// Clock is the time of leases and of the failover's waits for them
	// (fencing.go): real time when nil; tests drive a fake (clock.Fake).
	// Probes keep real time: they are the manager's pace, not its
	// accounting.
	Clock Clock

	Logf func(format string, args ...any)
}

// Clock is what the manager needs of a clock.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

func (c *Config) setDefaults() {
	if c.Prefix == "" {
		c.Prefix = "/vbcache/default"
	}
	if c.NumVBuckets == 0 {
		c.NumVBuckets = 1024
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = time.Second
	}
	if c.JanitorInterval == 0 {
		c.JanitorInterval = DefaultJanitorInterval
	}
	if c.MaxMoves == 0 {
		c.MaxMoves = 4
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = 5
	}
	if c.Lease == 0 {
		c.Lease = 5 * time.Second
	}
	// A lease runs from the grant before the newest, and is vouched for
	// while more than a quarter of it is left: below four probes, a
	// healthy node's vouched-for stretches would not overlap.
	c.Lease = max(c.Lease, 4*c.ProbeInterval)
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}
}

// Manager is one cluster manager process's state. Run drives it.
type Manager struct {
	cfg Config
	cli *clientv3.Client

	// logins are Config.Credentials and Config.Readers as of now, replaced
	// whole by SetLogins; every dial and every API request reads it once.
	logins atomic.Pointer[logins]
	// term is the current leadership's term (0 when not leading): the
	// creation revision of its election key; credentials gives it to
	// every connection, and conn and connIn to pooled ones.
	term atomic.Uint64

	// opMu serialises the leader's state-changing operations (add and
	// remove node, failover, rebalance start and each move's commit). It
	// is held across their network calls (to nodes, to etcd) on purpose;
	// what those wait for (a node's answer, a push, the rebalance
	// goroutine) never takes it, and failover lets go of it before it
	// waits for the rebalance to stop. Lock order: opMu, commitMu,
	// nodeConn.mu or connPool.mu, mu (see nodeConn, connPool and doc.go).
	opMu sync.Mutex

	// commitMu serialises update: its read of the state, the etcd
	// transaction that writes the new one, and storing that here. It is
	// held across the transaction; nothing else takes it.
	commitMu sync.Mutex

	// Moves' commits are batched (commitMove): batchMu protects batchQ,
	// the commits waiting, and batchRunning, set while a mover commits
	// them. A leaf: held only to queue or take the queue.
	batchMu      sync.Mutex
	batchQ       []*batchReq
	batchRunning bool

	// mu protects everything below. Nothing that waits is done under it:
	// no etcd call (the watch's setState and the election's observer
	// take it, as does every HTTP request), no node connection, and the
	// config streams are poked without blocking.
	mu      sync.Mutex
	st      *State // the latest state seen (leader: written; follower: watched)
	stRev   int64  // etcd mod revision of st
	leading bool
	elect   *concurrency.Election
	leader  string // the leader's URL, as far as this manager knows
	health  map[string]*nodeHealth
	subs    map[chan struct{}]struct{} // config stream listeners
	rebDone chan struct{}
	// told holds the failed-over nodes this leader has told they are out
	// (tellFailedOver), or that AddNode takes back; a failover of a node
	// clears its entry. telling has a channel per tell in flight, closed
	// when it ends.
	told    map[string]bool
	telling map[string]chan struct{}
	// unpromoted holds, per failed node, the promotions a failover left
	// undone when it committed its map and could not be sure the node
	// had stopped serving (failover); finishPromotion does them once the
	// node is told it is out.
	unpromoted map[string]*promotion
	moving     map[int]bool // vbuckets being moved now
	// consoles counts the clients of GET /ui/events; while there are
	// any, sampleLoop fills samples (samples.go) over its own pool of
	// connections, sampleConns.
	consoles    int
	samples     map[string]*nodeSample
	sampleConns map[string]*nodeConn
	// While a leadership runs, inLeadership hands work to the goroutine
	// lead starts for it on leadWork; leadEnd is the leadership's
	// context's Done. Both nil when following.
	leadWork chan<- func(context.Context)
	leadEnd  <-chan struct{}
	// failovers counts the failovers running (failover): while one
	// runs, its new actives may not be active yet, which the restart
	// check must not take for a restart (restart.go).
	failovers int
	// failing counts the failovers running per node (failingOver).
	failing map[string]int
	// janitorSaid is, per vbucket, the last reason the janitor gave for
	// not repairing it: said once, not every round (janitor.go).
	janitorSaid map[int]string
	// The current leadership's leases (fencing.go): the grants' epoch,
	// when the leadership began, what each node was granted. Reset when
	// a leadership begins.
	epoch     uint64 // the leadership's term (term), as the grants' epoch
	leadSince time.Time
	leases    map[string]*leaseRec
	// ceiling is the longest lease a node may hold from any leader
	// (State.LeaseMs as this leadership found or recorded it, at least
	// this leader's own): failovers wait by it (lease_record.go).
	ceiling time.Duration
	// pool holds the control connections of conn: every request to a
	// node but the grants and the console's samples.
	pool connPool

	// grantConns are the connections the grants use, one per node, apart
	// from conns: a move's long request on a node's control connection
	// must not hold up the grant that keeps the node serving.
	grantConns map[string]*nodeConn

	// Publishing (publish): pushes coalesce, so concurrent moves share
	// them. pubMu protects pubWant, pubDone and pubBusy; pubCond waits on
	// pubMu.
	// cfgMu protects cfgKey and cfgJSON: the config JSON of the last
	// state encoded (configJSON).
	cfgMu   sync.Mutex
	cfgKey  configKey
	cfgJSON []byte

	pubMu   sync.Mutex // released while pushConfig runs: it waits for nodes
	pubCond *sync.Cond
	pubWant *State // the newest state asked to be published
	pubDone int64  // the newest rev pushed to every node
	pubBusy bool   // a push is running
	// detached counts the config pushes to nodes being failed over,
	// which no publish waits for (pushConfigAcks); Run waits for them
	// before it returns. Each ends with its connection's timeout or its
	// leadership's context.
	detached sync.WaitGroup

	prof struct { // time spent per step of moves, summed over moves, for the rebalance's log line
		look, build, move, catchup, commit, push atomic.Int64
		// move.Move's own steps (move.Result's timings)
		preflight, takeover, publish, delete atomic.Int64
	}

	// obs are the metrics observed as things happen (metrics.go): safe
	// for concurrent use, set in New.
	obs observed

	// hook, if set (by tests, before Run), is called at the steps of a
	// move named in rebalance.go (runHook), with no lock held.
	hook func(step string, vb int)
}

// nodeHealth is what the probes learned about a node.
type nodeHealth struct {
	OK        bool      `json:"ok"`
	LastOK    time.Time `json:"lastOK,omitzero"`
	DownSince time.Time `json:"downSince,omitzero"`
	Err       string    `json:"error,omitempty"`

	restart restartWatch // what the grants' answers say (restart.go)
}

// nodeConn is a control connection to a node, used by one goroutine at a
// time (mu). TAKEOVER uses a connection of its own.
type nodeConn struct {
	// mu protects c and is held across the dial and the request (fn in
	// conn): the connection carries one request at a time. No fn takes
	// another nodeConn's mu; only a grant's fn takes m.mu, to record the
	// answer (so the order is nodeConn.mu, then mu, and nothing holds mu
	// while it waits for a nodeConn), and what a node waits for before it
	// answers (a takeover, a stream) never needs this connection (a
	// takeover dials its own), so a holder waits at most for the dial's
	// and the request's deadlines (admin.Conn sets one on every request).
	mu sync.Mutex
	c  *admin.Conn
}

// New returns a manager; Run starts it.
func New(cfg Config) (*Manager, error) {
	cfg.setDefaults()
	if cfg.Etcd == nil {
		return nil, errors.New("manager: no etcd client")
	}
	if cfg.NumVBuckets < 1 || cfg.NumVBuckets > 65536 || cfg.NumVBuckets&(cfg.NumVBuckets-1) != 0 {
		return nil, fmt.Errorf("manager: %d vbuckets: want a power of two from 1 to 65536", cfg.NumVBuckets)
	}
	if cfg.Lease > 10*time.Minute {
		return nil, fmt.Errorf("manager: a lease of %v: at most 10m (nodes refuse longer grants)", cfg.Lease)
	}
	if cfg.Replicas < 0 || cfg.Replicas > 3 {
		return nil, fmt.Errorf("manager: %d replicas: want 0 to 3", cfg.Replicas)
	}
	m := &Manager{cfg: cfg, cli: cfg.Etcd, health: map[string]*nodeHealth{}, subs: map[chan struct{}]struct{}{},
		pool: connPool{idle: map[string][]*admin.Conn{}}, moving: map[int]bool{}, told: map[string]bool{}, telling: map[string]chan struct{}{},
		unpromoted: map[string]*promotion{}, samples: map[string]*nodeSample{}, sampleConns: map[string]*nodeConn{},
		leases: map[string]*leaseRec{}, grantConns: map[string]*nodeConn{}, failing: map[string]int{},
		janitorSaid: map[int]string{}}
	m.pubCond = sync.NewCond(&m.pubMu)
	m.obs = newObserved()
	m.logins.Store(&logins{admin: cfg.Credentials, readers: cfg.Readers})
	return m, nil
}

// logins are who the manager logs in to nodes as, and who may use its API.
type logins struct {
	admin   *admin.Credentials // nil: none (--insecure-cluster nodes)
	readers *sasl.Passwords    // nil: reads are open
}

// credentials are the administrator's login the manager dials nodes with.
func (m *Manager) credentials() *admin.Credentials {
	cr := m.logins.Load().admin
	t := m.term.Load()
	if t == 0 {
		return cr
	}
	var c admin.Credentials
	if cr != nil {
		c = *cr
	}
	c.Term = t // every connection dialed with it carries the term
	return &c
}

// ErrLoginsChanged is SetLogins refusing to turn logins on or off, which
// changes who may use the API; only a restart may.
var ErrLoginsChanged = errors.New("manager: a reload cannot add or remove --cluster-auth or --api-readers")

// SetLogins replaces the administrator's user and password (keeping the
// TLS configuration the manager started with) and the API's readers with
// those just re-read from the manager's files (SIGHUP). New node
// connections and API requests use them; open node connections stay
// logged in, as a node never logs anyone out.
func (m *Manager) SetLogins(adm *admin.Credentials, readers *sasl.Passwords) error {
	old := m.logins.Load()
	hasUser := func(c *admin.Credentials) bool { return c != nil && c.User != "" }
	if hasUser(adm) != hasUser(old.admin) || (readers == nil) != (old.readers == nil) {
		return ErrLoginsChanged
	}
	if old.admin != nil {
		c := *old.admin
		if adm != nil {
			c.User, c.Password, c.Previous = adm.User, adm.Password, adm.Previous
		}
		adm = &c
	}
	m.logins.Store(&logins{admin: adm, readers: readers})
	return nil
}

func (m *Manager) stateKey() string  { return m.cfg.Prefix + "/state" }
func (m *Manager) leaderKey() string { return m.cfg.Prefix + "/leader" }

// Run loads and watches the state and campaigns for leadership until ctx
// ends. While it leads it probes nodes, fails them over and runs
// rebalances. It returns when ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	if err := m.load(ctx); err != nil {
		return err
	}
	defer m.detached.Wait() // after the leadership's work has ended (below)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		m.watch(ctx)
	}()
	go func() { // the console's samples (samples.go)
		defer wg.Done()
		m.sampleLoop(ctx)
	}()
	defer wg.Wait()
	for ctx.Err() == nil {
		if err := m.campaign(ctx); err != nil && ctx.Err() == nil {
			m.cfg.Logf("manager: %v; campaigning again", err)
			sleep(ctx, time.Second)
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// load reads the state, creating a new cluster's when there is none.
func (m *Manager) load(ctx context.Context) error {
	for {
		resp, err := m.cli.Get(ctx, m.stateKey())
		if err != nil {
			return fmt.Errorf("manager: reading state: %w", err)
		}
		if len(resp.Kvs) > 0 {
			var s State
			if err := json.Unmarshal(resp.Kvs[0].Value, &s); err != nil {
				return fmt.Errorf("manager: state in etcd: %w", err)
			}
			m.setState(&s, resp.Kvs[0].ModRevision)
			return nil
		}
		s := newState(m.cfg.NumVBuckets, m.cfg.Replicas, m.cfg.Chain, fmt.Sprintf("%016x", rand.Uint64()))
		data, _ := json.Marshal(s)
		tr, err := m.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(m.stateKey()), "=", 0)).
			Then(clientv3.OpPut(m.stateKey(), string(data))).Commit()
		if err != nil {
			return fmt.Errorf("manager: creating state: %w", err)
		}
		if tr.Succeeded {
			m.setState(s, tr.Header.Revision)
			return nil
		}
	}
}

func (m *Manager) setState(s *State, rev int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rev < m.stRev {
		return
	}
	m.st, m.stRev = s, rev
	for ch := range m.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// State returns a copy of the current state.
func (m *Manager) State() *State {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.st == nil { // not loaded yet (the HTTP API starts first)
		return &State{}
	}
	return m.st.clone()
}

// view returns the current state itself, not a copy, for readers on hot
// paths (a move's steps, its catch-up polls, the map stream), which would
// otherwise copy the whole map many times a second during a rebalance.
// The caller must not modify it: m.st is never changed in place, only
// replaced (setState, updateAll), so a view stays what it was.
func (m *Manager) view() *State {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.st == nil {
		return &State{}
	}
	return m.st
}

// watch follows the state key, so followers serve the current map.
func (m *Manager) watch(ctx context.Context) {
	for ctx.Err() == nil {
		m.mu.Lock()
		rev := m.stRev
		m.mu.Unlock()
		wc := m.cli.Watch(clientv3.WithRequireLeader(ctx), m.stateKey(), clientv3.WithRev(rev+1))
		for resp := range wc {
			for _, ev := range resp.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				// The leader's own commits come back here: updateAll has
				// set them already, so they are not decoded again.
				m.mu.Lock()
				known := m.stRev
				m.mu.Unlock()
				if ev.Kv.ModRevision <= known {
					continue
				}
				var s State
				if json.Unmarshal(ev.Kv.Value, &s) == nil {
					m.setState(&s, ev.Kv.ModRevision)
				}
			}
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

// ErrNotLeader is returned by state changes on a manager that does not
// lead (or lost the leadership during the change).
var ErrNotLeader = errors.New("manager: not the leader")

// update applies fn to a copy of the state and writes it, if this manager
// still leads and nobody wrote meanwhile.
func (m *Manager) update(ctx context.Context, fn func(s *State) error) (*State, error) {
	s, errs, err := m.updateAll(ctx, []func(s *State) error{fn})
	if err == nil {
		err = errs[0]
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// updateAll is update for several changes in one transaction: each fn
// applies to the state the ones before it made, and one that returns an
// error changes nothing (its error is in errs). err is the transaction's:
// then nothing was written. Nothing is written when every fn failed.
func (m *Manager) updateAll(ctx context.Context, fns []func(s *State) error) (_ *State, errs []error, err error) {
	t0 := time.Now()
	defer func() { m.prof.commit.Add(int64(time.Since(t0))) }()
	m.commitMu.Lock()
	defer m.commitMu.Unlock()
	// The transaction runs without mu (see mu): it writes only if the
	// state is still the one read here and this manager still leads.
	m.mu.Lock()
	if !m.leading || m.elect == nil {
		m.mu.Unlock()
		return nil, nil, ErrNotLeader
	}
	elect, s, rev := m.elect, m.st.clone(), m.stRev
	m.mu.Unlock()
	errs = make([]error, len(fns))
	changed := false
	for i, fn := range fns {
		t := s
		if len(fns) > 1 {
			t = s.clone() // a failing fn may have changed its copy
		}
		if errs[i] = fn(t); errs[i] == nil {
			s, changed = t, true
		}
	}
	if !changed {
		return nil, errs, nil
	}
	data, err := json.Marshal(s)
	if err != nil {
		return nil, nil, err
	}
	tr, err := m.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(elect.Key()), "=", elect.Rev()),
		clientv3.Compare(clientv3.ModRevision(m.stateKey()), "=", rev),
	).Then(clientv3.OpPut(m.stateKey(), string(data))).Commit()
	if err != nil {
		return nil, nil, err
	}
	if !tr.Succeeded {
		return nil, nil, ErrNotLeader
	}
	m.mu.Lock()
	// The watch may have brought this write already, or a later one.
	if tr.Header.Revision >= m.stRev {
		m.st, m.stRev = s, tr.Header.Revision
	}
	for ch := range m.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	m.mu.Unlock()
	return s.clone(), errs, nil
}

// A batchReq is a move's commit waiting in commitMove's queue.
type batchReq struct {
	fn   func(s *State) error
	s    *State
	err  error
	done chan struct{} // closed once s and err are set
}

// commitMove commits fn, a move's change to the map, under opMu, as
// update does, with the changes other moves asked for meanwhile: the
// first to ask commits the queue, again until it is empty, in one etcd
// transaction each time, and the others wait for their answers. With
// moves in flight this turns one transaction (and one push) per commit
// into one per batch. The state returned may hold the batch's other
// changes too.
func (m *Manager) commitMove(ctx context.Context, fn func(s *State) error) (*State, error) {
	r := &batchReq{fn: fn, done: make(chan struct{})}
	m.batchMu.Lock()
	m.batchQ = append(m.batchQ, r)
	commits := !m.batchRunning
	m.batchRunning = true
	m.batchMu.Unlock()
	if !commits {
		<-r.done // bounded by the committer's transaction
		return r.s, r.err
	}
	for {
		m.batchMu.Lock()
		q := m.batchQ
		m.batchQ = nil
		if len(q) == 0 {
			m.batchRunning = false
			m.batchMu.Unlock()
			break
		}
		m.batchMu.Unlock()
		fns := make([]func(s *State) error, len(q))
		for i, x := range q {
			fns[i] = x.fn
		}
		m.opMu.Lock()
		s, errs, err := m.updateAll(ctx, fns)
		m.opMu.Unlock()
		for i, x := range q {
			x.s, x.err = s, err
			if err == nil {
				x.err = errs[i]
			}
			if x.err != nil {
				x.s = nil
			} else if i > 0 {
				x.s = s.clone() // each its own copy, as update gives
			}
			close(x.done)
		}
	}
	return r.s, r.err
}

// campaign waits to lead, then leads until the session or ctx ends.
func (m *Manager) campaign(ctx context.Context) error {
	sess, err := concurrency.NewSession(m.cli, concurrency.WithTTL(m.cfg.SessionTTL), concurrency.WithContext(ctx))
	if err != nil {
		return err
	}
	defer sess.Close()
	e := concurrency.NewElection(sess, m.leaderKey())
	obsCtx, obsStop := context.WithCancel(ctx)
	defer obsStop()
	go func() { // owned by campaign: ends with obsCtx
		for resp := range e.Observe(obsCtx) {
			if len(resp.Kvs) > 0 {
				m.mu.Lock()
				m.leader = string(resp.Kvs[0].Value)
				m.mu.Unlock()
			}
		}
	}()
	if err := e.Campaign(ctx, m.cfg.Advertise); err != nil {
		return err
	}
	// The term: the creation revision of the election key this manager
	// holds, which grows from one leadership to the next (etcd's
	// revisions only grow). Every control request and lease grant of
	// this leadership carries it (internal/server, terms.go).
	m.term.Store(uint64(e.Rev()))
	defer m.term.Store(0)
	// Re-read the state: the old leader may have written after our watch
	// last saw it.
	if err := m.load(ctx); err != nil {
		return err
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m.mu.Lock()
	m.leading, m.elect, m.leader = true, e, m.cfg.Advertise
	m.mu.Unlock()
	m.cfg.Logf("manager: leading (%s)", m.cfg.Advertise)
	defer func() {
		m.mu.Lock()
		m.leading, m.elect = false, nil
		m.mu.Unlock()
	}()
	done := make(chan struct{})
	go func() { // owned by campaign: the leader's duties
		defer close(done)
		m.lead(lctx)
	}()
	select {
	case <-sess.Done():
		m.cfg.Logf("manager: lost the leadership (session ended)")
	case <-ctx.Done():
	}
	cancel()
	<-done
	if ctx.Err() == nil {
		return errors.New("leadership lost")
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
	e.Resign(rctx)
	rcancel()
	return nil
}

// lead runs the leader's duties until ctx ends: bring every node in line
// with the map, resume a rebalance, probe and fail over.
func (m *Manager) lead(ctx context.Context) {
	work := make(chan func(context.Context))
	served := make(chan struct{})
	go func() { // owned by lead, which waits for it: inLeadership's work
		defer close(served)
		for {
			select {
			case <-ctx.Done():
				return
			case fn := <-work:
				fn(ctx)
			}
		}
	}()
	defer func() { <-served }()
	m.mu.Lock()
	m.leadWork, m.leadEnd = work, ctx.Done()
	m.epoch, m.leadSince, m.leases = m.term.Load(), m.cfg.Clock.Now(), map[string]*leaseRec{}
	for _, h := range m.health {
		// The restart rule counts this leadership's answers (restart.go).
		h.restart.empty, h.restart.warned = 0, false
	}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.leadWork, m.leadEnd = nil, nil
		m.mu.Unlock()
	}()
	// Before any grant: etcd records the longest lease a leader may
	// have granted, so that a successor with a shorter --lease waits
	// for it (lease_record.go).
	for err := m.recordLease(ctx); err != nil; err = m.recordLease(ctx) {
		m.cfg.Logf("manager: recording this leader's lease in etcd: %v; no grants until it is", err)
		select {
		case <-ctx.Done():
			return
		case <-m.cfg.Clock.After(time.Second):
		}
	}
	s := m.State()
	m.pushConfig(ctx, s)
	// Failovers a previous leader committed and did not finish
	// (intent.go), and the janitor (janitor.go), beside the leader's
	// other duties.
	var aside sync.WaitGroup
	defer aside.Wait()
	if len(s.Intents) > 0 {
		aside.Add(1)
		go func() { // owned by lead, which waits for it
			defer aside.Done()
			m.finishIntents(ctx)
		}()
	}
	if s.Rebalance != nil && s.Rebalance.Running {
		m.cfg.Logf("manager: resuming the rebalance (%d of %d done)", s.Rebalance.Done, s.Rebalance.Total)
		m.launchRebalance(ctx)
	}
	aside.Add(1)
	go func() { // owned by lead, which waits for it
		defer aside.Done()
		m.janitorLoop(ctx)
	}()
	m.probeLoop(ctx)
	m.mu.Lock()
	done := m.rebDone
	m.mu.Unlock()
	if done != nil {
		<-done
	}
}

// inLeadership runs fn with the current leadership's context, for work
// that another goroutine starts for the leader (StartRebalance's
// rebalance goroutine, a failover asked for over HTTP): fn runs on the
// goroutine lead keeps for this (so it must not block: it starts its
// work and returns), and what it starts ends with the leadership, the
// moment lead's context does. inLeadership returns when fn has. When the
// leadership has ended but lead has not returned yet, fn gets a context
// that has ended; when this manager does not lead, it gets
// context.Background().
func (m *Manager) inLeadership(fn func(ctx context.Context)) {
	m.mu.Lock()
	work, end := m.leadWork, m.leadEnd
	m.mu.Unlock()
	if work == nil {
		fn(context.Background())
		return
	}
	done := make(chan struct{})
	select {
	case work <- func(ctx context.Context) { defer close(done); fn(ctx) }:
		<-done
	case <-end:
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		fn(ended)
	}
}

// connPool keeps the idle control connections conn may reuse, up to
// maxIdleConns per node. A request takes one, or dials one if none is
// idle, so requests to one node from concurrent moves do not wait for
// each other (nor for each other's dials: a dial logs in with SCRAM).
//
// A node that restarts leaves every idle connection to it closed at its
// end, and a leader that lost and regained the leadership may hold some
// from long ago: conn looks at a connection before it reuses it
// (admin.Conn.Idle, a non-blocking peek) and closes the ones the node
// closed, and a request that fails on the wire closes every idle
// connection to that node with it. Without that, each of up to
// maxIdleConns requests after a node's restart failed in turn, config
// pushes among them: a failover then found the node without the new map
// (test/faults, TestSchedule, kill-node).
type connPool struct {
	mu   sync.Mutex // protects idle; a leaf, never held across a dial or a request
	idle map[string][]*admin.Conn
}

// maxIdleConns is how many idle connections per node the pool keeps:
// about the moves in flight (local's --max-moves).
const maxIdleConns = 8

// conn runs fn on a control connection to addr, an idle one of the pool
// or a new one, and gives it back to the pool unless fn's error was not a
// node's answer (the connection is then closed).
func (m *Manager) conn(ctx context.Context, addr string, fn func(c *admin.Conn) error) error {
	p := &m.pool
	c := p.take(addr)
	if c == nil {
		var err error
		if c, err = admin.DialWith(ctx, addr, m.credentials()); err != nil {
			return err
		}
		c.Timeout = 5 * time.Second
	}
	c.Term = m.term.Load()
	// A request in flight gives up when ctx ends (admin.Conn's requests
	// heed only their timeout): the connection is closed, and dropped.
	// The func gets its own copy of c, which is set to nil below once
	// pooled: stop may return false when the func has begun but not yet
	// run (it ran nil's Close, and a leader's process died of it).
	inFlight := c
	stop := context.AfterFunc(ctx, func() { inFlight.Close() })
	err := fn(c)
	closed := !stop()
	if closed && err == nil {
		err = ctx.Err()
	}
	var se *admin.StatusError
	if closed || err != nil && !errors.As(err, &se) {
		c.Close()
		p.drop(addr)
		return err
	}
	p.mu.Lock()
	if len(p.idle[addr]) < maxIdleConns {
		p.idle[addr] = append(p.idle[addr], c)
		c = nil
	}
	p.mu.Unlock()
	if c != nil {
		c.Close()
	}
	return err
}

// take returns an idle connection to addr that the node has not closed,
// or nil; it closes the ones it finds closed.
func (p *connPool) take(addr string) *admin.Conn {
	for {
		var c *admin.Conn
		p.mu.Lock()
		if l := p.idle[addr]; len(l) > 0 {
			c = l[len(l)-1]
			p.idle[addr] = l[:len(l)-1]
		}
		p.mu.Unlock()
		if c == nil || c.Idle() {
			return c
		}
		c.Close()
	}
}

// drop closes every idle connection to addr.
func (p *connPool) drop(addr string) {
	p.mu.Lock()
	l := p.idle[addr]
	delete(p.idle, addr)
	p.mu.Unlock()
	for _, c := range l {
		c.Close()
	}
}

// connIn is conn on a pool of one connection per node (grantConns,
// sampleConns), which m.mu protects.
func (m *Manager) connIn(pool map[string]*nodeConn, ctx context.Context, addr string, fn func(c *admin.Conn) error) error {
	m.mu.Lock()
	nc := pool[addr]
	if nc == nil {
		nc = &nodeConn{}
		pool[addr] = nc
	}
	m.mu.Unlock()
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if nc.c != nil && !nc.c.Idle() {
		nc.c.Close() // the node closed it (it restarted): dial again
		nc.c = nil
	}
	if nc.c == nil {
		c, err := admin.DialWith(ctx, addr, m.credentials())
		if err != nil {
			return err
		}
		c.Timeout = 5 * time.Second
		nc.c = c
	}
	nc.c.Term = m.term.Load()
	err := fn(nc.c)
	var se *admin.StatusError
	if err != nil && !errors.As(err, &se) {
		nc.c.Close()
		nc.c = nil
	}
	return err
}

// publish returns once a config at least as new as s has been pushed to
// every node. Callers that arrive while a push runs wait for it and, if it
// was older than theirs, one of them pushes the newest state asked for: a
// burst of commits costs a few pushes, not one each.
func (m *Manager) publish(ctx context.Context, s *State) {
	m.pubMu.Lock()
	defer m.pubMu.Unlock()
	if m.pubWant == nil || s.Rev > m.pubWant.Rev {
		m.pubWant = s
	}
	for m.pubDone < s.Rev {
		if m.pubBusy {
			m.pubCond.Wait()
			continue
		}
		m.pubBusy = true
		w := m.pubWant
		m.pubMu.Unlock()
		m.pushConfig(ctx, w)
		m.pubMu.Lock()
		m.pubBusy = false
		m.pubDone = max(m.pubDone, w.Rev)
		m.pubCond.Broadcast()
		if ctx.Err() != nil {
			return
		}
	}
}

// pushConfig sends the state's config to every node it names and every
// member. A node holding a newer config refuses it, which is fine.
func (m *Manager) pushConfig(ctx context.Context, s *State) {
	m.pushConfigAcks(ctx, s)
}

// pushConfigAcks is pushConfig, returning when each node's answer came
// (a node that holds the config or a newer one counts) and when the push
// ended.
func (m *Manager) pushConfigAcks(ctx context.Context, s *State) (map[string]time.Time, time.Time) {
	t0 := time.Now()
	defer func() { m.prof.push.Add(int64(time.Since(t0))) }()
	acks := map[string]time.Time{}
	if len(s.Servers) == 0 {
		return acks, m.cfg.Clock.Now() // no node holds anything yet: no config to give
	}
	data := m.configJSON(s)
	targets := append(append([]string{}, s.Servers...), s.Nodes...)
	slices.Sort(targets)
	targets = slices.Compact(targets)
	var wg sync.WaitGroup
	var mu sync.Mutex // protects acks
	// A node being failed over is pushed to, but not waited for: it is
	// stopped, paused or cut off, and each push to it would wait out the
	// connection's timeout, holding up every publish behind it (a
	// rebalance's commits, which the failover waits for) and the
	// failover's own push. Its answer counts for nothing (the failover
	// fences it by other means), so it is not recorded. A push already
	// waiting for a node when its failover begins is cancelled
	// (cancelFailing).
	cancels := map[string]context.CancelFunc{}
	for _, a := range targets {
		detached := !targetWait && m.failingOver(a)
		actx := ctx
		if detached {
			m.detached.Add(1)
		} else {
			wg.Add(1)
			if !targetWait {
				actx, cancels[a] = context.WithCancel(ctx)
			}
		}
		go func() {
			if detached {
				defer m.detached.Done()
			} else {
				defer wg.Done()
			}
			err := m.conn(actx, a, func(c *admin.Conn) error {
				return c.SetClusterConfig(data, s.RevEpoch, s.Rev)
			})
			if err != nil && !admin.IsStatus(err, protocol.StatusKeyExists) {
				m.cfg.Logf("manager: pushing config rev %d to %s: %v", s.Rev, a, err)
				return
			}
			if detached {
				return
			}
			mu.Lock()
			acks[a] = m.cfg.Clock.Now()
			mu.Unlock()
		}()
	}
	pushed := make(chan struct{})
	watched := make(chan struct{})
	go func() { // owned by pushConfigAcks, which waits for it
		defer close(watched)
		m.cancelFailing(pushed, cancels)
	}()
	wg.Wait()
	close(pushed)
	<-watched
	for _, cancel := range cancels {
		cancel()
	}
	return acks, m.cfg.Clock.Now()
}

// cancelFailing calls the cancel func of each node (cancels: node → func)
// once a failover of that node has begun, looking every 50 ms until done
// is closed.
func (m *Manager) cancelFailing(done <-chan struct{}, cancels map[string]context.CancelFunc) {
	if len(cancels) == 0 {
		return
	}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		for a, cancel := range cancels {
			if m.failingOver(a) {
				cancel()
			}
		}
	}
}

// publishedAt notes that s was pushed to every node outside publish.
func (m *Manager) publishedAt(s *State) {
	m.pubMu.Lock()
	m.pubDone = max(m.pubDone, s.Rev)
	m.pubMu.Unlock()
}

// ConfigJSON returns the current config JSON (what /pools/default/b/default serves).
func (m *Manager) ConfigJSON() []byte {
	return m.configJSON(m.State())
}

// configKey names a config: its revision and what the services entries
// say (a revision is one map: nodes compare configs by it).
type configKey struct {
	epoch, rev int64
	sv         Services
}

// configJSON returns s's config encoded, the same bytes for every push and
// map stream of one revision: a rebalance's commit is pushed to every node
// and streamed to every proxy, and encoding a map of 1024 vbuckets with
// encoding/json took a tenth of the manager's CPU in a 3→4 rebalance when
// each of them did it. The bytes must not be modified.
func (m *Manager) configJSON(s *State) []byte {
	k := configKey{s.RevEpoch, s.Rev, m.services()}
	m.cfgMu.Lock()
	if m.cfgJSON != nil && m.cfgKey == k {
		b := m.cfgJSON
		m.cfgMu.Unlock()
		return b
	}
	m.cfgMu.Unlock()
	b, _ := json.Marshal(s.Config(k.sv))
	m.cfgMu.Lock()
	if k.epoch > m.cfgKey.epoch || k.epoch == m.cfgKey.epoch && k.rev >= m.cfgKey.rev || m.cfgJSON == nil {
		m.cfgKey, m.cfgJSON = k, b
	}
	m.cfgMu.Unlock()
	return b
}

// Leader returns whether this manager leads and the leader's URL.
func (m *Manager) Leader() (bool, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leading, m.leader
}

func splitHostPort(a string) (string, int) {
	h, p, err := net.SplitHostPort(a)
	if err != nil {
		return a, 0
	}
	n, _ := strconv.Atoi(p)
	return h, n
}

// services is how configs advertise every node's ports: kvSSL when the
// manager reaches nodes over TLS (they run with -Z and serve nothing
// else), kv otherwise; the API's port as mgmtSSL or mgmt.
func (m *Manager) services() Services {
	return Services{Mgmt: m.cfg.MgmtPort, MgmtTLS: m.cfg.MgmtTLS,
		KVTLS: m.cfg.Credentials != nil && m.cfg.Credentials.TLS != nil}
}
