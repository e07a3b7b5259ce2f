package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbcache/vbcache/internal/manager/mgrclient"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/memcache"
)

// upstream is one generation of the proxy's upstream: a memcache.Client
// built from one Config. A reload builds a new upstream, swaps it in, and
// retires the old one, which closes its Client once the requests that
// hold it (refs) have finished.
type upstream struct {
	cfg     *Config
	mc      *memcache.Client
	sel     memcache.ServerSelector // pool: the client's selector
	cluster bool
	timeout time.Duration
	retry   time.Duration // cluster: how long a failing request is retried
	st      *serverStats  // shared by every generation of a Proxy

	// mirror is a cluster's map as this proxy last saw it, for stats
	// (which server a key goes to); the client routes by its own copy.
	mirror    atomic.Pointer[memcache.VBucket]
	mirrorRev atomic.Pointer[[2]int64]

	// byAddr are the counters of a pool upstream's servers, by the
	// addresses its selector returns (set once, read-only after).
	byAddr map[net.Addr]*srvStat

	mu      sync.Mutex // protects refs and retired; drained is closed after it, and retire waits after it
	refs    int
	retired bool
	drained chan struct{} // closed when retired and refs reach zero

	cancel context.CancelFunc // ends the follower goroutine
	done   chan struct{}      // closed when the follower has exited
}

// newUpstream builds and connects an upstream for cfg. ctx bounds the
// bootstrap of a cluster.
func newUpstream(ctx context.Context, cfg *Config, st *serverStats) (*upstream, error) {
	u := &upstream{cfg: cfg, timeout: cfg.timeout(), st: st, drained: make(chan struct{}), done: make(chan struct{})}
	fctx, cancel := context.WithCancel(context.Background())
	u.cancel = cancel
	if cfg.Cluster == nil {
		servers, err := cfg.servers()
		if err != nil {
			return nil, err
		}
		name, err := cfg.selectorName()
		if err != nil {
			return nil, err
		}
		opts := &memcache.Options{AutoEject: cfg.AutoEjectHosts, FailureLimit: cfg.ServerFailureLimit,
			RetryTimeout: ms(cfg.ServerRetryTimeout, 0)}
		sel, err := memcache.NewSelector(name, servers, opts)
		if err != nil {
			return nil, err
		}
		u.sel = sel
		u.byAddr = make(map[net.Addr]*srvStat)
		sel.Each(func(a net.Addr) error {
			u.byAddr[a] = st.get(a.String())
			return nil
		})
		u.mc = memcache.NewFromSelector(sel)
		u.mc.Timeout = u.timeout
		u.mc.MaxConns = cfg.conns()
		u.mc.DialContext = st.dialer(u.timeout)
		close(u.done)
		return u, nil
	}
	u.cluster = true
	u.retry = ms(cfg.Cluster.RetryTimeout, DefaultClusterRetry)
	seeds := cfg.Cluster.Nodes
	var body []byte
	if m := cfg.Cluster.Manager; m != "" {
		b, err := managerConfig(ctx, m)
		if err != nil {
			cancel()
			return nil, err
		}
		c, err := vbmap.Parse(b)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("proxy: manager %s: %w", m, err)
		}
		body = b
		seeds = c.VBucketServerMap.ServerList
	}
	mc, err := memcache.NewCluster(ctx, seeds, &memcache.ClusterOptions{
		RefreshInterval: ms(cfg.Cluster.RefreshInterval, DefaultClusterRefresh),
		MaxTries:        10, MinBackoff: 2 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		Timeout: u.timeout, DialContext: st.dialer(u.timeout)})
	if err != nil {
		cancel()
		return nil, err
	}
	mc.MaxConns = cfg.conns()
	u.mc = mc
	if body == nil {
		body, _ = fetchClusterConfig(ctx, seeds, u.timeout)
	}
	if body != nil {
		u.setMirror(body)
	}
	if cfg.Cluster.Manager != "" {
		go u.followManager(fctx, cfg.Cluster.Manager)
	} else {
		go u.followNodes(fctx)
	}
	return u, nil
}

// setMirror applies a config to the stats mirror when it is newer.
func (u *upstream) setMirror(body []byte) (newer bool) {
	c, err := vbmap.Parse(body)
	if err != nil {
		return false
	}
	rev := [2]int64{c.RevEpoch, c.Rev}
	if old := u.mirrorRev.Load(); old != nil && (rev[0] < old[0] || (rev[0] == old[0] && rev[1] <= old[1])) {
		return false
	}
	vb, err := memcache.NewVBucketFromJSON(body)
	if err != nil {
		return false
	}
	u.mirror.Store(vb)
	u.mirrorRev.Store(&rev)
	return true
}

// followManager reads the manager's streaming map (each config JSON
// followed by "\n\n\n\n") until ctx ends, reconnecting after a failure. A
// config newer than the client's makes the client refresh at once from
// the nodes (the client has no hook to take a config from elsewhere),
// instead of at its next NOT_MY_VBUCKET or poll.
func (u *upstream) followManager(ctx context.Context, base string) {
	defer close(u.done)
	mc := &mgrclient.Client{Base: base}
	for ctx.Err() == nil {
		if s, err := mc.StreamConfigs(ctx); err == nil {
			for {
				body, err := s.Next()
				if err != nil {
					break
				}
				u.managerSent(ctx, body)
			}
			s.Close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// managerSent takes a config the manager streamed: into the stats
// mirror, and, when it is newer than the client's, the client refreshes.
func (u *upstream) managerSent(ctx context.Context, body []byte) {
	u.setMirror(body)
	c, err := vbmap.Parse(body)
	if err != nil {
		return
	}
	e, r := u.mc.ConfigRevision()
	if c.RevEpoch > e || (c.RevEpoch == e && c.Rev > r) {
		rctx, cancel := context.WithTimeout(ctx, u.timeout)
		u.mc.RefreshConfig(rctx)
		cancel()
	}
}

// followNodes keeps the stats mirror in step with the client's map: when
// the client's revision moves past the mirror's, fetch the config over
// 0xb5 from the map's servers.
func (u *upstream) followNodes(ctx context.Context) {
	defer close(u.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e, r := u.mc.ConfigRevision()
		if old := u.mirrorRev.Load(); old != nil && old[0] == e && old[1] == r {
			continue
		}
		var seeds []string
		if vb := u.mirror.Load(); vb != nil {
			vb.Each(func(a net.Addr) error { seeds = append(seeds, a.String()); return nil })
		}
		seeds = append(seeds, u.cfg.Cluster.Nodes...)
		if body, err := fetchClusterConfig(ctx, seeds, u.timeout); err == nil {
			u.setMirror(body)
		}
	}
}

// fetchClusterConfig asks the servers in turn for their cluster config
// with a bare binary GET_CLUSTER_CONFIG (0xb5).
func fetchClusterConfig(ctx context.Context, servers []string, timeout time.Duration) ([]byte, error) {
	var lastErr error = memcache.ErrNoServers
	for _, s := range servers {
		d := net.Dialer{Timeout: timeout}
		nc, err := d.DialContext(ctx, "tcp", s)
		if err != nil {
			lastErr = err
			continue
		}
		nc.SetDeadline(time.Now().Add(timeout))
		req := protocol.AppendRequest(nil, &protocol.Request{Header: protocol.Header{Opcode: 0xb5}})
		var hdr [protocol.HeaderLen]byte
		var h protocol.Header
		_, err = nc.Write(req)
		if err == nil {
			_, err = io.ReadFull(nc, hdr[:])
		}
		if err == nil {
			protocol.ParseHeader(hdr[:], &h)
			if h.BodyLen > 64<<20 {
				err = errors.New("config too large")
			}
		}
		var body []byte
		if err == nil {
			body = make([]byte, h.BodyLen)
			_, err = io.ReadFull(nc, body)
		}
		nc.Close()
		if err == nil && h.Status == protocol.StatusOK {
			return body[int(h.ExtLen)+int(h.KeyLen):], nil
		}
		if err == nil {
			err = fmt.Errorf("%s: status 0x%x", s, h.Status)
		}
		lastErr = err
	}
	return nil, lastErr
}

// managerConfig fetches the cluster config from the manager at base,
// within 10 s. Its errors say "proxy: manager BASE: " and why.
func managerConfig(ctx context.Context, base string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := (&mgrclient.Client{Base: base}).Config(ctx)
	var se *mgrclient.StatusError
	var ue *url.Error
	switch {
	case err == nil:
		return b, nil
	case errors.As(err, &se):
		return nil, fmt.Errorf("proxy: manager %s: GET %s: %s", base, se.URL, se.Status)
	case errors.As(err, &ue): // no answer: mgrclient's text names the manager
		return nil, fmt.Errorf("proxy: %w", err)
	}
	return nil, fmt.Errorf("proxy: manager %s: %w", base, err)
}

// acquire takes a reference for one request; false if u is retired.
func (u *upstream) acquire() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.retired {
		return false
	}
	u.refs++
	return true
}

func (u *upstream) release() {
	u.mu.Lock()
	u.refs--
	last := u.retired && u.refs == 0
	u.mu.Unlock()
	if last {
		close(u.drained)
	}
}

// retire stops new requests from taking u and, once the requests holding
// it have finished (or after limit), closes its client and follower.
func (u *upstream) retire(limit time.Duration) {
	u.mu.Lock()
	u.retired = true
	idle := u.refs == 0
	u.mu.Unlock()
	if idle {
		close(u.drained)
	}
	select {
	case <-u.drained:
	case <-time.After(limit):
	}
	u.cancel()
	<-u.done
	u.mc.Close()
}

// addrOf names the server a key is routed to, for stats.
func (u *upstream) addrOf(key string) string {
	if u.cluster {
		if vb := u.mirror.Load(); vb != nil {
			if a, err := vb.PickServer(key); err == nil {
				return a.String()
			}
		}
		return "cluster"
	}
	if a, err := u.sel.PickServer(key); err == nil {
		return a.String()
	}
	return "none"
}

// servers lists the upstream's servers, for flush_all and stats.
func (u *upstream) servers() []string {
	var out []string
	var s memcache.ServerSelector = u.sel
	if u.cluster {
		if vb := u.mirror.Load(); vb != nil {
			s = vb
		}
	}
	if s != nil {
		s.Each(func(a net.Addr) error { out = append(out, a.String()); return nil })
	}
	return out
}

// call runs one upstream request for key (the stats attribution) under
// rc's deadline. In cluster mode a failure (not an answer) is retried,
// after a map refresh and a backoff, until the cluster retry timeout: a
// node being failed over looks to the client like added latency.
func (u *upstream) call(rc *reqCtx, key string, fn func(ctx context.Context) error) error {
	s := [1]*srvStat{u.statOf(key)}
	return u.run(rc, s[:], false, fn)
}

// callOnce is call for a request that must not be sent twice: every
// write. incr, decr, append and prepend applied twice corrupt the value;
// add and cas sent again after they took effect answer NOT_STORED or
// EXISTS for a write that happened; and a set or delete sent again after
// a timeout can land after other clients' later writes and undo them
// (issue 21's schedule caught the proxy doing that: porcupine saw a set's
// value come back over two newer acknowledged ones). A failure after the
// request may have reached a node (a timeout, a connection lost
// mid-request) could have been applied by that node before it died, so
// such a request is retried only after failures that guarantee it was not
// (notApplied); the others are answered as a failure (SERVER_ERROR), as a
// client talking to the node directly would see them.
func (u *upstream) callOnce(rc *reqCtx, key string, fn func(ctx context.Context) error) error {
	s := [1]*srvStat{u.statOf(key)}
	return u.run(rc, s[:], true, fn)
}

// notApplied reports whether a failed request certainly was not applied:
// the node refused it (NOT_MY_VBUCKET, TMPFAIL, also after the client's
// own retries ran out), no connection could be made, or no server owns
// the key.
func notApplied(err error) bool {
	var op *net.OpError
	return errors.Is(err, memcache.ErrNotMyVBucket) || errors.Is(err, memcache.ErrTemporaryFailure) ||
		errors.Is(err, memcache.ErrNoServers) || (errors.As(err, &op) && op.Op == "dial")
}

// retryable reports whether run may send a request again after err.
func retryable(err error, once bool) bool {
	return !answer(err) && (!once || notApplied(err))
}

// callMulti is call for a multi-key request: each server the keys go to
// counts one request. stats is scratch space, reused by the caller.
func (u *upstream) callMulti(rc *reqCtx, keys []string, stats *[]*srvStat, fn func(ctx context.Context) error) error {
	ss := (*stats)[:0]
next:
	for _, k := range keys {
		s := u.statOf(k)
		for _, t := range ss {
			if t == s {
				continue next
			}
		}
		ss = append(ss, s)
		if !u.cluster && len(ss) == len(u.byAddr) {
			break // every server is in: hash no more keys
		}
	}
	*stats = ss
	return u.run(rc, ss, false, fn)
}

// statOf returns the counters of the server key is routed to, without
// allocating for a pool upstream (a cluster's map can change; its names
// are looked up).
func (u *upstream) statOf(key string) *srvStat {
	if !u.cluster && key != "" {
		if a, err := u.sel.PickServer(key); err == nil {
			if s := u.byAddr[a]; s != nil {
				return s
			}
		}
	}
	return u.st.get(u.addrOf(key))
}

// A reqCtx is a client connection's request context: one deadline is
// shared by that connection's requests until it is an eighth of the
// timeout older than a fresh one would be, so that a request is not
// charged a context and a timer of its own. Each request therefore gets
// between 7/8 of the timeout and the whole timeout (the memcache client's
// own per-connection deadline, at the full timeout, still applies).
// Only its connection's goroutine uses it.
type reqCtx struct {
	ctx      context.Context
	cancel   context.CancelFunc
	deadline time.Time
}

// get returns a context whose deadline is within (timeout*7/8, timeout]
// of now.
func (rc *reqCtx) get(now time.Time, timeout time.Duration) context.Context {
	want := now.Add(timeout)
	if d := want.Sub(rc.deadline); rc.ctx == nil || d > timeout/8 || d < 0 {
		rc.stop()
		rc.ctx, rc.cancel = context.WithDeadline(context.Background(), want)
		rc.deadline = want
	}
	return rc.ctx
}

// stop releases the context's timer.
func (rc *reqCtx) stop() {
	if rc.cancel != nil {
		rc.cancel()
		rc.ctx, rc.cancel = nil, nil
	}
}

func (u *upstream) run(rc *reqCtx, stats []*srvStat, once bool, fn func(ctx context.Context) error) error {
	start := time.Now()
	err := fn(rc.get(start, u.timeout))
	if u.cluster && retryable(err, once) {
		back := 10 * time.Millisecond
		for time.Since(start)+back <= u.retry {
			time.Sleep(back)
			back = min(2*back, 200*time.Millisecond)
			rctx, cancel := context.WithTimeout(context.Background(), u.timeout)
			u.mc.RefreshConfig(rctx)
			cancel()
			ctx, cancel := context.WithTimeout(context.Background(), u.timeout)
			err = fn(ctx)
			cancel()
			if !retryable(err, once) {
				break
			}
		}
	}
	d := time.Since(start)
	for _, s := range stats {
		s.record(d, !answer(err))
	}
	return err
}

// answer reports whether err is the server's answer (a miss, NOT_STORED,
// an error line: the client gets it as it is) rather than a failure to
// get one (I/O, timeout, refusals exhausted: SERVER_ERROR from the proxy).
func answer(err error) bool {
	switch {
	case err == nil, errors.Is(err, memcache.ErrCacheMiss), errors.Is(err, memcache.ErrNotStored),
		errors.Is(err, memcache.ErrCASConflict), errors.Is(err, memcache.ErrMalformedKey):
		return true
	case errors.Is(err, memcache.ErrTemporaryFailure), errors.Is(err, memcache.ErrNotMyVBucket):
		return false
	}
	m := err.Error()
	for _, p := range []string{"memcache: client error: ", "memcache: server error: ", "memcache: status 0x", "memcache: server replied ERROR"} {
		if strings.HasPrefix(m, p) {
			return true
		}
	}
	return false
}

// serverStats holds per-server counters for "stats", shared by every
// upstream generation of a Proxy (a reload keeps the counts).
type serverStats struct {
	mu sync.Mutex // protects m (a map lookup; nothing else under it)
	m  map[string]*srvStat
}

// srvStat is one server's counters.
type srvStat struct {
	requests, errors, latencyUs, conns, totalConns atomic.Int64
	consecFail                                     atomic.Int64
	lastFail                                       atomic.Int64 // unix nanoseconds

	lmu sync.Mutex // protects lat and li (a copy; nothing else under it)
	lat [256]int64 // the last latencies in µs, for p99
	li  int
}

func newServerStats() *serverStats { return &serverStats{m: make(map[string]*srvStat)} }

func (st *serverStats) get(addr string) *srvStat {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.m[addr]
	if s == nil {
		s = new(srvStat)
		st.m[addr] = s
	}
	return s
}

func (s *srvStat) record(d time.Duration, failed bool) {
	s.requests.Add(1)
	us := d.Microseconds()
	s.latencyUs.Add(us)
	if failed {
		s.errors.Add(1)
		s.consecFail.Add(1)
		s.lastFail.Store(time.Now().UnixNano())
	} else {
		s.consecFail.Store(0)
	}
	s.lmu.Lock()
	s.lat[s.li%len(s.lat)] = us
	s.li++
	s.lmu.Unlock()
}

func (s *srvStat) p99() int64 {
	s.lmu.Lock()
	n := min(s.li, len(s.lat))
	v := append([]int64(nil), s.lat[:n]...)
	s.lmu.Unlock()
	if n == 0 {
		return 0
	}
	for i := 1; i < n; i++ { // insertion sort: at most 256 values
		for j := i; j > 0 && v[j] < v[j-1]; j-- {
			v[j], v[j-1] = v[j-1], v[j]
		}
	}
	return v[(n*99)/100]
}

// dialer counts connections per server.
func (st *serverStats) dialer(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: timeout}
		nc, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		s := st.get(addr)
		s.conns.Add(1)
		s.totalConns.Add(1)
		return &countedConn{Conn: nc, s: s}, nil
	}
}

type countedConn struct {
	net.Conn
	s    *srvStat
	once sync.Once
}

// TransparentConn lets the upstream client serve the socket directly
// (rawio.Conn): counting closes does not touch the bytes.
func (c *countedConn) TransparentConn() net.Conn { return c.Conn }

func (c *countedConn) Close() error {
	c.once.Do(func() { c.s.conns.Add(-1) })
	return c.Conn.Close()
}
