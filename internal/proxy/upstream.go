package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/manager/mgrclient"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/memcache"
)

// upstream is one generation of the proxy's upstream, built from one
// Config: a pool's selector, or a cluster's map and the goroutines that
// keep it fresh. A reload builds a new upstream and swaps it in; the
// loops move to it at once, and the old one is retired (its followers
// stop); the loops' connections to its servers close once they have
// answered what they hold.
type upstream struct {
	cfg     *Config
	sel     memcache.ServerSelector // pool: where keys go
	mc      *memcache.Client        // pool: reports to sel how its servers fare (auto_eject_hosts); it sends nothing
	cluster bool
	timeout time.Duration
	retry   time.Duration // cluster: how long a failing request is retried
	st      *serverStats  // shared by every generation of a Proxy

	// route is a cluster's map as this proxy last saw it, newest by
	// (revEpoch, rev): the event loops route by it (loop_route.go), stats
	// name servers by it. It is learned from the manager's stream, the
	// nodes' configs (refresh) and the bodies of NOT_MY_VBUCKET answers.
	route atomic.Pointer[vbmap.Config]
	kick  chan struct{} // cap 1: a loop met a refusal; refresh fetches the nodes' configs now

	// byAddr are the counters of a pool upstream's servers, by the
	// addresses its selector returns (set once, read-only after).
	byAddr map[net.Addr]*srvStat

	cancel context.CancelFunc // ends the follower goroutines
	follow sync.WaitGroup     // the follower goroutines (followManager, refresh), owned by u: retire waits
}

// newUpstream builds and connects an upstream for cfg. ctx bounds the
// bootstrap of a cluster.
func newUpstream(ctx context.Context, cfg *Config, st *serverStats) (*upstream, error) {
	u := &upstream{cfg: cfg, timeout: cfg.timeout(), st: st, kick: make(chan struct{}, 1)}
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
		return u, nil
	}
	u.cluster = true
	u.retry = ms(cfg.Cluster.RetryTimeout, DefaultClusterRetry)
	seeds := cfg.Cluster.Nodes
	var body []byte
	if m := cfg.Cluster.Manager; m != "" {
		b, err := managerConfig(ctx, u.managerClient(m))
		if err != nil {
			cancel()
			return nil, err
		}
		body = b
	} else {
		b, err := fetchClusterConfig(ctx, seeds, u.timeout, cfg.Upstream)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("proxy: cluster %s: no node gave a config: %w", strings.Join(seeds, ","), err)
		}
		body = b
	}
	c, err := vbmap.Parse(body)
	if err != nil {
		cancel()
		from := "cluster " + strings.Join(seeds, ",")
		if m := cfg.Cluster.Manager; m != "" {
			from = "manager " + m
		}
		return nil, fmt.Errorf("proxy: %s: %w", from, err)
	}
	u.route.Store(c)
	if cfg.Cluster.Manager != "" {
		u.follow.Add(1)
		go u.followManager(fctx, cfg.Cluster.Manager)
	}
	u.follow.Add(1)
	go u.refresh(fctx, ms(cfg.Cluster.RefreshInterval, DefaultClusterRefresh))
	return u, nil
}

// setRoute takes a config into route when it is newer by (revEpoch,
// rev) and keeps the number of vbuckets. It reports whether it did.
func (u *upstream) setRoute(body []byte) (newer bool) {
	c, err := vbmap.Parse(body)
	if err != nil {
		return false
	}
	for {
		old := u.route.Load()
		if old != nil && (!c.Newer(old) || c.NumVBuckets() != old.NumVBuckets()) {
			return false
		}
		if u.route.CompareAndSwap(old, c) {
			return true
		}
	}
}

// wantMap asks refresh to fetch the nodes' configs now (a loop met a
// NOT_MY_VBUCKET, a TMPFAIL or a dead node). It never blocks.
func (u *upstream) wantMap() {
	select {
	case u.kick <- struct{}{}:
	default:
	}
}

// followManager reads the manager's streaming map (each config JSON
// followed by "\n\n\n\n") until ctx ends, reconnecting after a failure. A
// config newer than the client's makes the client refresh at once from
// the nodes (the client has no hook to take a config from elsewhere),
// instead of at its next NOT_MY_VBUCKET or poll.
func (u *upstream) followManager(ctx context.Context, base string) {
	defer u.follow.Done()
	mc := u.managerClient(base)
	for ctx.Err() == nil {
		if s, err := mc.StreamConfigs(ctx); err == nil {
			for {
				body, err := s.Next()
				if err != nil {
					break
				}
				u.managerSent(body)
			}
			s.Close()
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// managerSent takes a config the manager streamed into route.
func (u *upstream) managerSent(body []byte) {
	u.setRoute(body)
}

// refresh keeps route in step with the nodes: every interval, and at
// once (at most every refreshGap) when a loop asks (wantMap), it fetches
// the config of every server of the map and of the seeds over 0xb5, at
// the same time, and keeps the newest.
func (u *upstream) refresh(ctx context.Context, interval time.Duration) {
	defer u.follow.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-u.kick:
		}
		u.fetchRoute(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(refreshGap):
		}
	}
}

// refreshGap is the least time between two fetches of the nodes' configs.
const refreshGap = 20 * time.Millisecond

// fetchRoute asks each server of route and each seed for its config, at
// once, and takes the newest into route.
func (u *upstream) fetchRoute(ctx context.Context) {
	seen := make(map[string]bool)
	var servers []string
	if rt := u.route.Load(); rt != nil {
		servers = append(servers, rt.VBucketServerMap.ServerList...)
	}
	servers = append(servers, u.cfg.Cluster.Nodes...)
	var wg sync.WaitGroup
	for _, s := range servers {
		if seen[s] {
			continue
		}
		seen[s] = true
		wg.Go(func() {
			if body, err := fetchClusterConfig(ctx, []string{s}, u.timeout, u.cfg.Upstream); err == nil {
				u.setRoute(body)
			}
		})
	}
	wg.Wait()
}

// fetchClusterConfig asks the servers in turn for their cluster config
// with a bare binary GET_CLUSTER_CONFIG (0xb5), over TLS and logged in
// as cr says (nil: plain TCP).
func fetchClusterConfig(ctx context.Context, servers []string, timeout time.Duration, cr *admin.Credentials) ([]byte, error) {
	var lastErr error = memcache.ErrNoServers
	for _, s := range servers {
		nc, err := cr.DialNet(ctx, s, timeout)
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

// managerClient is a client of the manager at base, trusting
// cfg.Upstream's CA when the proxy reaches its nodes over TLS.
func (u *upstream) managerClient(base string) *mgrclient.Client {
	mc := &mgrclient.Client{Base: base}
	if l := u.cfg.ManagerLogin; l != nil {
		mc.User, mc.Password = l.User, l.Password
	}
	if cr := u.cfg.Upstream; cr != nil && cr.TLS != nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = cr.TLS
		mc.HTTP = &http.Client{Transport: tr}
	}
	return mc
}

// managerConfig fetches the cluster config from the manager mc names,
// within 10 s. Its errors say "proxy: manager BASE: " and why.
func managerConfig(ctx context.Context, mc *mgrclient.Client) ([]byte, error) {
	base := mc.Base
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := mc.Config(ctx)
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

// report tells a pool's selector how a request to addr ended (err nil:
// answered), for auto_eject_hosts.
func (u *upstream) report(addr net.Addr, err error) {
	if u.mc != nil {
		u.mc.ReportServer(addr, err)
	}
}

// retire ends u once a reload or Close has replaced it: its followers
// stop. The loops' connections to its servers close as they finish the
// requests they hold.
func (u *upstream) retire() {
	u.cancel()
	u.follow.Wait()
	if u.mc != nil {
		u.mc.Close()
	}
}

// addrOf names the server a key is routed to, for stats.
func (u *upstream) addrOf(key string) string {
	if u.cluster {
		if rt := u.route.Load(); rt != nil {
			if i := rt.Active(vbmap.VBucketString(key, rt.NumVBuckets())); i >= 0 && i < len(rt.VBucketServerMap.ServerList) {
				return rt.VBucketServerMap.ServerList[i]
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
	if u.cluster {
		if rt := u.route.Load(); rt != nil {
			return slices.Clone(rt.VBucketServerMap.ServerList)
		}
		return nil
	}
	var out []string
	u.sel.Each(func(a net.Addr) error { out = append(out, a.String()); return nil })
	return out
}

// notApplied reports whether a failed request certainly was not applied:
// the node refused it (NOT_MY_VBUCKET, TMPFAIL), no connection could be
// made, or no server owns the key. Only then is a cluster's write sent
// again (loop_route.go): applied twice, incr, decr, append and prepend
// corrupt the value, add and cas answer as if they had failed, and a set
// or delete sent again can land after other clients' newer writes and
// undo them (issue 21's schedule caught the proxy doing that).
func notApplied(err error) bool {
	var op *net.OpError
	return errors.Is(err, memcache.ErrNotMyVBucket) || errors.Is(err, memcache.ErrTemporaryFailure) ||
		errors.Is(err, memcache.ErrNoServers) || (errors.As(err, &op) && op.Op == "dial")
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

	// hist counts requests by latency: hist[i] those within
	// latencyBucketsUs[i] (and above the bucket before), the last those
	// above every bucket.
	hist [len(latencyBucketsUs) + 1]atomic.Uint64

	lmu sync.Mutex // protects lat and li (a copy; nothing else under it)
	lat [256]int64 // the last latencies in µs, for p99
	li  int
}

// latencyBucketsUs are the upper bounds, in µs, of the latency histogram's
// buckets: from a loopback round trip to a timeout.
var latencyBucketsUs = [...]int64{25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000}

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
	i := 0
	for i < len(latencyBucketsUs) && us > latencyBucketsUs[i] {
		i++
	}
	s.hist[i].Add(1)
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
