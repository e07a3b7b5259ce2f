package memcache

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbcache/vbcache/internal/vbmap"
)

// ClusterOptions tune NewCluster. The zero value (or a nil *ClusterOptions)
// means the defaults.
type ClusterOptions struct {
	// RefreshInterval is how often the background goroutine asks one node
	// (round robin over the map's servers) for a newer config. Zero means
	// DefaultRefreshInterval; a negative value turns the background
	// refresh off (NOT_MY_VBUCKET still updates the map).
	RefreshInterval time.Duration

	// MaxTries bounds the sends of one request that is answered
	// NOT_MY_VBUCKET or TMPFAIL (a send to a vbucket's forward owner
	// counts). Zero means DefaultMaxTries.
	MaxTries int

	// MinBackoff and MaxBackoff bound the wait before a retry when no
	// newer config was found: MinBackoff, doubled on each retry, capped
	// at MaxBackoff. Zero means DefaultMinBackoff and DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration

	// Timeout and DialContext are the Client fields of the same name,
	// set before the bootstrap so that it uses them. Keep Timeout above
	// the nodes' park timeout (vbcache's VBucketParkTimeout, 1s by
	// default, more than DefaultTimeout): a request parked on a pending
	// vbucket that outlasts Timeout fails its connection (an I/O error,
	// not retried) before the node can answer TMPFAIL.
	Timeout     time.Duration
	DialContext func(ctx context.Context, network, address string) (net.Conn, error)
}

// Defaults of ClusterOptions.
const (
	DefaultRefreshInterval = 10 * time.Second
	DefaultMaxTries        = 5
	DefaultMinBackoff      = 5 * time.Millisecond
	DefaultMaxBackoff      = 200 * time.Millisecond
)

// ErrNoClusterConfig is wrapped by NewCluster's error when no seed gave a
// config.
var ErrNoClusterConfig = errors.New("memcache: no cluster config from any seed")

// errNotCluster is RefreshConfig's error on a client NewCluster did not
// make.
var errNotCluster = errors.New("memcache: not a cluster client (see NewCluster)")

// cluster is a NewCluster client's state: the vbucket selector, the
// retry policy and the background refresh.
type cluster struct {
	c     *Client
	vb    *VBucket
	seeds []net.Addr

	maxTries           int
	minBackoff, maxBkf time.Duration
	next               atomic.Uint32 // rotates the node asked for a config

	// Counts, for tests: NOT_MY_VBUCKET and TMPFAIL answers met (a
	// GetMulti round counts once), configs applied from the bodies of
	// NOT_MY_VBUCKET and from fetches, and requests sent to a vbucket's
	// forward owner.
	refusals, tmpFails, dialFails, fromBody, fromFetch, forwards atomic.Int64

	// sleep waits d or until ctx ends; tests replace it.
	sleep func(ctx context.Context, d time.Duration) error

	cancel   context.CancelFunc // called at Close: ends the refresh goroutine's context
	done     chan struct{}      // closed when the refresh goroutine has exited
	stopOnce sync.Once
}

// NewCluster returns a Client for a vbcache (or Couchbase-style) cluster.
// It speaks the binary protocol, asks the seeds in order for the cluster
// config (GET_CLUSTER_CONFIG 0xb5) and builds a vbucket selector
// (NewVBucketFromJSON) from the first config it gets; seeds that cannot be
// reached or have no config are skipped. ctx bounds the bootstrap only.
//
// Each request goes to the active server of its key's vbucket
// (vBucketMap) and carries the vbucket id. A server that answers
// NOT_MY_VBUCKET gives no value: the client applies the config in the
// answer's body if it is newer by (revEpoch, rev); if it is not, and the
// map has a vBucketMapForward whose owner of the vbucket is another server,
// the request goes there once (the forward map is a hint of where the
// vbucket is moving, as in Couchbase's SDKs; routing still follows
// vBucketMap); otherwise the client asks the other servers (and the seeds)
// for a newer config. It then sends the request again to the vbucket's
// owner, at once when the map changed and after a backoff
// (ClusterOptions.MinBackoff, doubling, capped at MaxBackoff) when it did
// not, up to MaxTries sends in all; then it returns an error wrapping
// ErrNotMyVBucket. A TMPFAIL answer (ErrTemporaryFailure: the vbucket was
// pending on the server for longer than the server waits) is retried the
// same way, without the forward owner. GetMulti retries the refused keys
// the same way, and on TMPFAIL the keys that got no value, but does not
// use the forward map. A goroutine refreshes the config every
// RefreshInterval; Close stops it and waits for it.
//
// The Protocol field must stay Binary.
func NewCluster(ctx context.Context, seeds []string, opts *ClusterOptions) (*Client, error) {
	return newCluster(ctx, seeds, opts, nil)
}

// newCluster is NewCluster; a non-nil ticks replaces the refresh ticker
// (tests drive the refresh through it).
func newCluster(ctx context.Context, seeds []string, opts *ClusterOptions, ticks <-chan time.Time) (*Client, error) {
	if len(seeds) == 0 {
		return nil, ErrNoServers
	}
	var o ClusterOptions
	if opts != nil {
		o = *opts
	}
	if o.RefreshInterval == 0 {
		o.RefreshInterval = DefaultRefreshInterval
	}
	if o.MaxTries <= 0 {
		o.MaxTries = DefaultMaxTries
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = DefaultMinBackoff
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	o.MaxBackoff = max(o.MaxBackoff, o.MinBackoff)

	c := &Client{Protocol: Binary, Timeout: o.Timeout, DialContext: o.DialContext, pools: make(map[string]*pool)}
	cl := &cluster{c: c, maxTries: o.MaxTries, minBackoff: o.MinBackoff, maxBkf: o.MaxBackoff,
		sleep: sleepCtx, done: make(chan struct{})}
	for _, s := range seeds {
		cl.seeds = append(cl.seeds, NewAddr(s))
	}
	var lastErr error
	for _, a := range cl.seeds {
		body, err := c.fetchConfig(ctx, a, nil)
		if err == nil && len(body) == 0 {
			err = fmt.Errorf("%s has no cluster config", a)
		}
		if err == nil {
			cl.vb, err = NewVBucketFromJSON(body)
		}
		if err == nil {
			break
		}
		lastErr = fmt.Errorf("seed %s: %w", a, err)
		if ctx.Err() != nil {
			break
		}
	}
	if cl.vb == nil {
		c.Close()
		return nil, fmt.Errorf("%w: %w", ErrNoClusterConfig, lastErr)
	}
	c.selector, c.cl = cl.vb, cl
	// The refresher lives until Close, not as long as the bootstrap's
	// ctx: its context is its own, and cl.cancel ends it.
	rctx, cancel := context.WithCancel(context.Background())
	cl.cancel = cancel
	switch {
	case ticks != nil:
		go cl.refreshLoop(rctx, ticks, func() {})
	case o.RefreshInterval > 0:
		t := time.NewTicker(o.RefreshInterval)
		go cl.refreshLoop(rctx, t.C, t.Stop)
	default:
		close(cl.done)
	}
	return c, nil
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fetchConfig asks addr for its cluster config. With rev non-nil the node
// answers an empty body unless its config is newer than rev.
func (c *Client) fetchConfig(ctx context.Context, addr net.Addr, rev *[2]int64) ([]byte, error) {
	if c.Protocol != Binary {
		return nil, errors.New("memcache: cluster config needs the binary protocol")
	}
	o := getOp(opConfig)
	if rev != nil {
		o.haveRev, o.rev = true, *rev
	}
	if err := c.start(ctx, addr, o); err != nil {
		putOp(o)
		return nil, err
	}
	abandoned, err := c.wait(ctx, addr, o)
	if abandoned {
		return nil, err
	}
	body := o.body
	putOp(o)
	return body, err
}

// RefreshConfig asks the cluster's servers in turn for a config newer than
// the client's and applies the first one found. It reports whether the map
// changed. The background refresh does the same with one server per
// interval.
func (c *Client) RefreshConfig(ctx context.Context) (bool, error) {
	if c.cl == nil {
		return false, errNotCluster
	}
	return c.cl.refresh(ctx, nil, 0)
}

// ConfigRevision returns the (revEpoch, rev) of a NewCluster client's
// current map, zeros for other clients.
func (c *Client) ConfigRevision() (revEpoch, rev int64) {
	if c.cl == nil {
		return 0, 0
	}
	cfg := c.cl.vb.state.Load().cfg
	return cfg.RevEpoch, cfg.Rev
}

// refresh asks for a config newer than the current one: the map's servers
// from a rotating start, then the seeds, skipping avoid (the server that
// just refused a request) unless nothing else is left. It stops at the
// first newer config, after limit servers answered (0: no limit), or when
// every candidate was tried; it reports whether the map changed, and an
// error only when no server answered.
func (cl *cluster) refresh(ctx context.Context, avoid net.Addr, limit int) (bool, error) {
	st := cl.vb.state.Load()
	var cands []net.Addr
	seen := make(map[string]bool)
	add := func(a net.Addr) {
		if k := a.String(); !seen[k] {
			seen[k] = true
			cands = append(cands, a)
		}
	}
	n := len(st.addrs)
	start := int(cl.next.Add(1)) % n
	for i := range n {
		a := st.addrs[(start+i)%n]
		if avoid == nil || a.String() != avoid.String() {
			add(a)
		}
	}
	for _, a := range cl.seeds {
		if avoid == nil || a.String() != avoid.String() {
			add(a)
		}
	}
	if len(cands) == 0 && avoid != nil {
		cands = append(cands, avoid)
	}
	var lastErr error
	answered := 0
	for _, a := range cands {
		rev := [2]int64{st.cfg.RevEpoch, st.cfg.Rev}
		body, err := cl.c.fetchConfig(ctx, a, &rev)
		if err != nil {
			lastErr = err
			if ctx.Err() != nil {
				return false, err
			}
			continue
		}
		answered++
		if len(body) > 0 {
			if ok, _ := cl.vb.SetConfig(body); ok {
				cl.fromFetch.Add(1)
				return true, nil
			}
		}
		if limit > 0 && answered >= limit {
			break
		}
	}
	if answered == 0 && lastErr != nil {
		return false, lastErr
	}
	return false, nil
}

// learn updates the map after a NOT_MY_VBUCKET or TMPFAIL from addr, for a
// request sent with map sent, whose body was body: from the body if it is
// newer, else from the other servers. It reports whether the map changed
// since the request was sent (another request may have learned it
// meanwhile).
func (cl *cluster) learn(ctx context.Context, sent *vbState, body []byte, from net.Addr) bool {
	if cl.learnBody(sent, body) {
		return true
	}
	ok, _ := cl.refresh(ctx, from, 0)
	return ok
}

// learnBody is learn without the fetch: it reports whether the map changed
// since sent, applying body first if it is a newer config.
func (cl *cluster) learnBody(sent *vbState, body []byte) bool {
	if cl.vb.state.Load() != sent {
		return true
	}
	if len(body) > 0 {
		if ok, _ := cl.vb.SetConfig(body); ok {
			cl.fromBody.Add(1)
			return true
		}
	}
	return false
}

// forwardOwner returns the server that st's vBucketMapForward names for
// vb, or nil when there is no forward map or it names no server or the
// current owner.
func (st *vbState) forwardOwner(vb int) net.Addr {
	fwd := st.cfg.VBucketServerMap.VBucketMapForward
	if vb >= len(fwd) || len(fwd[vb]) == 0 {
		return nil
	}
	if i := fwd[vb][0]; i >= 0 && i != st.cfg.Active(vb) {
		return st.addrs[i]
	}
	return nil
}

// sendTo sends o, whose o.vb is set, to addr instead of the map's owner.
// Like roundTripOnce it returns o unless the call's context ended first;
// sent is false when addr could not be reached, and then o was not sent.
func (cl *cluster) sendTo(ctx context.Context, addr net.Addr, o *op) (_ *op, sent bool, _ error) {
	if err := cl.c.start(ctx, addr, o); err != nil {
		return o, false, err
	}
	if abandoned, err := cl.c.wait(ctx, addr, o); abandoned {
		return nil, true, err
	}
	return o, true, o.err
}

// backoff is the wait before retry number retry (0 for the first).
func (cl *cluster) backoff(retry int) time.Duration {
	d := cl.minBackoff
	for range retry {
		d *= 2
		if d >= cl.maxBkf {
			return cl.maxBkf
		}
	}
	return min(d, cl.maxBkf)
}

// roundTrip is Client.roundTrip for a cluster: roundTripOnce, and on
// NOT_MY_VBUCKET or TMPFAIL learn the map and send again, up to maxTries
// sends. A NOT_MY_VBUCKET or TMPFAIL answer carries no value, so nothing
// from a server that does not serve the vbucket reaches the caller.
func (cl *cluster) roundTrip(ctx context.Context, key string, o *op) (*op, error) {
	waits := 0
	var fwd net.Addr // the next send goes to this forward owner
	triedFwd := false
	for try := 1; ; try++ {
		st := cl.vb.state.Load()
		var addr net.Addr
		var err error
		sent := true
		if fwd != nil {
			addr, fwd = fwd, nil
			cl.forwards.Add(1)
			o, sent, err = cl.sendTo(ctx, addr, o)
		} else {
			addr, _ = cl.vb.PickServer(key)
			o, err = cl.c.roundTripOnce(ctx, key, o)
		}
		if o == nil {
			return nil, err
		}
		var body []byte
		switch {
		case !sent:
			// The forward owner is a hint, and it is down: go on as
			// after the refusal that sent us there.
			err = errNotMyVBucketAnswer
		case errors.Is(err, ErrNotMyVBucket):
			cl.refusals.Add(1)
			body = o.body
		case errors.Is(err, ErrTemporaryFailure):
			cl.tmpFails.Add(1)
		case isDialError(err):
			// The request never left: the owner in our map is not
			// there (a failover may be under way). Learn the map and
			// send again.
			cl.dialFails.Add(1)
		default:
			if isNetError(err) {
				// Sent, so not safe to send again; but the map may
				// have moved on: learn it for the next request.
				cl.refresh(ctx, addr, 0)
			}
			return o, err
		}
		if try >= cl.maxTries {
			putOp(o)
			vb := cl.vb.VBucketOf(key)
			if errors.Is(err, ErrNotMyVBucket) {
				return nil, fmt.Errorf("%w: key %q (vbucket %d) refused %d times", ErrNotMyVBucket, key, vb, try)
			}
			return nil, fmt.Errorf("%w: key %q (vbucket %d) failed %d times", err, key, vb, try)
		}
		changed := cl.learnBody(st, body)
		if !changed && sent && errors.Is(err, ErrNotMyVBucket) && !triedFwd {
			// The server that refused is the map's owner: if the
			// forward map names another, try it before asking around.
			fwd = st.forwardOwner(cl.vb.VBucketOf(key))
			triedFwd = fwd != nil
			changed = fwd != nil
		}
		if !changed {
			changed, _ = cl.refresh(ctx, addr, 0)
		}
		if !changed {
			if err := cl.sleep(ctx, cl.backoff(waits)); err != nil {
				putOp(o)
				return nil, err
			}
			waits++
		}
		o.resetForRetry()
	}
}

// isDialError reports whether err is a failure to connect (nothing was
// sent).
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// isNetError reports whether err is a network failure rather than a
// server's answer.
func isNetError(err error) bool {
	var ne net.Error
	return errors.As(err, &ne)
}

// getMulti is GetMulti for a cluster: keys refused with NOT_MY_VBUCKET are
// sent again after the map is learned, as roundTrip does. A TMPFAIL for
// some key (the first error of a round) sends again every key that got no
// value, since the round's answers do not say which keys failed; misses
// among them are asked again, which is harmless for a get.
func (cl *cluster) getMulti(ctx context.Context, keys []string) (map[string]*Item, error) {
	var m map[string]*Item
	waits := 0
	for try := 1; ; try++ {
		st := cl.vb.state.Load()
		var refused []string
		var body []byte
		var err error
		m, refused, body, err = cl.c.getMultiOnce(ctx, keys, m)
		tmpFail := errors.Is(err, ErrTemporaryFailure)
		if (err != nil && !tmpFail) || (err == nil && len(refused) == 0) {
			return m, err
		}
		if tmpFail {
			cl.tmpFails.Add(1)
			refused = refused[:0]
			for _, k := range keys {
				if m[k] == nil {
					refused = append(refused, k)
				}
			}
		} else {
			cl.refusals.Add(1)
		}
		if try >= cl.maxTries {
			if tmpFail {
				return m, fmt.Errorf("%w: %d keys without an answer after %d tries", err, len(refused), try)
			}
			return m, fmt.Errorf("%w: %d keys refused %d times", ErrNotMyVBucket, len(refused), try)
		}
		// The refusals may come from several servers: ask them all.
		if !cl.learn(ctx, st, body, nil) {
			if err := cl.sleep(ctx, cl.backoff(waits)); err != nil {
				return m, err
			}
			waits++
		}
		keys = refused
	}
}

// refreshLoop polls for a newer config on every tick until ctx ends
// (Close cancels it).
func (cl *cluster) refreshLoop(ctx context.Context, ticks <-chan time.Time, stopTicks func()) {
	defer close(cl.done)
	defer stopTicks()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
			cl.refresh(ctx, nil, 1)
		}
	}
}

// stop ends the refresh goroutine and waits for it.
func (cl *cluster) stop() {
	cl.stopOnce.Do(func() {
		cl.cancel()
		<-cl.done
	})
}

// config returns the current map.
func (cl *cluster) config() *vbmap.Config { return cl.vb.state.Load().cfg }
