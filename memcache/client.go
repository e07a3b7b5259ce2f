package memcache

import (
	"context"
	"fmt"
	"net"
)

// pool returns the pool for addr, creating it on first use.
func (c *Client) pool(addr net.Addr) *pool {
	key := addr.String()
	c.mu.RLock()
	p := c.pools[key]
	c.mu.RUnlock()
	if p != nil {
		return p
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pools == nil {
		c.pools = make(map[string]*pool)
	}
	if p = c.pools[key]; p == nil {
		p = &pool{addr: addr}
		c.pools[key] = p
	}
	return p
}

// start sends o to addr. On error o was not sent and the caller still owns
// it.
func (c *Client) start(ctx context.Context, addr net.Addr, o *op) error {
	cn, err := c.pool(addr).get(ctx, c)
	if err != nil {
		c.report(addr, err)
		return err
	}
	return cn.send(o)
}

// wait waits for o (sent to addr) and returns its error. Unless it returns
// ctx's error, o is complete and the caller must putOp it; if ctx ended
// first, o is abandoned to the reader, which recycles it.
func (c *Client) wait(ctx context.Context, addr net.Addr, o *op) (abandoned bool, err error) {
	select {
	case <-o.done:
	case <-ctx.Done():
		if o.state.CompareAndSwap(opWaiting, opAbandoned) {
			return true, ctx.Err()
		}
		<-o.done
	}
	c.report(addr, o.err)
	return false, o.err
}

// ReportServer tells the client's selector how a request to addr ended,
// as the client's own requests do: err nil (or an answer such as a miss)
// counts as the server working, anything else (a failed connection, a
// timeout) as a failure, which may eject the server (Options.AutoEject).
// It is for a caller that talks to the client's servers over connections
// of its own (a proxy's event loop) and routes with PickServer.
func (c *Client) ReportServer(addr net.Addr, err error) { c.report(addr, err) }

// report tells a selector that cares how a request to addr ended.
func (c *Client) report(addr net.Addr, err error) {
	if c.health == nil {
		return
	}
	if resumable(err) {
		c.health.serverOK(addr)
	} else {
		c.health.serverFailed(addr)
	}
}

// pick returns the server for key, and fills o.vb for a vbucket selector.
func (c *Client) pick(key string, o *op) (net.Addr, error) {
	if !LegalKey(key) {
		return nil, ErrMalformedKey
	}
	if vs, ok := c.selector.(*VBucket); ok && o != nil {
		o.vb = uint16(vs.VBucketOf(key))
	}
	return c.selector.PickServer(key)
}

// roundTrip sends o for key and waits: through the cluster's retry loop
// for a NewCluster client, else once (roundTripOnce). o is consumed unless
// the returned op is non-nil, in which case the caller reads it and putOps
// it.
func (c *Client) roundTrip(ctx context.Context, key string, o *op) (*op, error) {
	if c.cl != nil {
		return c.cl.roundTrip(ctx, key, o)
	}
	return c.roundTripOnce(ctx, key, o)
}

// roundTripOnce picks key's server, sends o there and waits. A server that
// cannot be reached is reported to the selector and, if that moves the key
// (Modulo with Rehash, Ketama with AutoEject), the request goes to the new
// server, as Cache::Memcached's get_sock does. o is consumed unless the
// returned op is non-nil, in which case the caller reads it and putOps it.
func (c *Client) roundTripOnce(ctx context.Context, key string, o *op) (*op, error) {
	var last net.Addr
	var lastErr error
	for try := 0; try < maxRehashTries; try++ {
		addr, err := c.pick(key, o)
		if err != nil {
			putOp(o)
			if lastErr != nil {
				return nil, lastErr
			}
			return nil, err
		}
		if last != nil && addr.String() == last.String() {
			break // the selector does not move the key
		}
		last = addr
		if err = c.start(ctx, addr, o); err != nil {
			lastErr = err
			if c.health != nil && ctx.Err() == nil {
				continue
			}
			break
		}
		abandoned, err := c.wait(ctx, addr, o)
		if abandoned {
			return nil, err
		}
		return o, err
	}
	putOp(o)
	return nil, lastErr
}

// Get gets the item for the given key. ErrCacheMiss is returned for a
// memcache cache miss. The key must be at most 250 bytes in length.
func (c *Client) Get(key string) (*Item, error) {
	return c.GetContext(context.Background(), key)
}

// GetContext is Get with a context.
func (c *Client) GetContext(ctx context.Context, key string) (*Item, error) {
	o := getOp(opGet)
	o.key = key
	o, err := c.roundTrip(ctx, key, o)
	if o == nil {
		return nil, err
	}
	it := o.item
	putOp(o)
	if err != nil {
		return nil, err
	}
	return it, nil
}

// GetAndTouch gets the item for key and sets its expiration. ErrCacheMiss
// is returned if the item didn't already exist in the cache.
func (c *Client) GetAndTouch(key string, expiration int32) (*Item, error) {
	return c.GetAndTouchContext(context.Background(), key, expiration)
}

// GetAndTouchContext is GetAndTouch with a context.
func (c *Client) GetAndTouchContext(ctx context.Context, key string, expiration int32) (*Item, error) {
	o := getOp(opGat)
	o.key = key
	o.delta = uint64(uint32(expiration))
	o, err := c.roundTrip(ctx, key, o)
	if o == nil {
		return nil, err
	}
	it := o.item
	putOp(o)
	if err != nil {
		return nil, err
	}
	return it, nil
}

// Touch updates the expiry for the given key. The seconds parameter is
// either a Unix timestamp or, if seconds is less than 1 month, the number
// of seconds into the future at which time the item will expire.
// ErrCacheMiss is returned if the key is not in the cache.
func (c *Client) Touch(key string, seconds int32) error {
	return c.TouchContext(context.Background(), key, seconds)
}

// TouchItemContext is TouchContext, also returning the item's flags and
// CAS: over the binary protocol, whose answer carries them; over text
// both are 0.
func (c *Client) TouchItemContext(ctx context.Context, key string, seconds int32) (flags uint32, cas uint64, err error) {
	o := getOp(opTouch)
	o.key = key
	o.delta = uint64(uint32(seconds))
	o, err = c.roundTrip(ctx, key, o)
	if o == nil {
		return 0, 0, err
	}
	flags, cas = uint32(o.n), o.stored
	putOp(o)
	return flags, cas, err
}

// TouchContext is Touch with a context.
func (c *Client) TouchContext(ctx context.Context, key string, seconds int32) error {
	_, _, err := c.TouchItemContext(ctx, key, seconds)
	return err
}

// simple runs a single-key op whose only result is its error.
func (c *Client) simple(ctx context.Context, key string, o *op) error {
	o, err := c.roundTrip(ctx, key, o)
	if o != nil {
		putOp(o)
	}
	return err
}

// Delete deletes the item with the provided key. The error ErrCacheMiss is
// returned if the item didn't already exist in the cache.
func (c *Client) Delete(key string) error {
	return c.DeleteContext(context.Background(), key)
}

// DeleteContext is Delete with a context.
func (c *Client) DeleteContext(ctx context.Context, key string) error {
	o := getOp(opDelete)
	o.key = key
	return c.simple(ctx, key, o)
}

// Set writes the given item, unconditionally.
func (c *Client) Set(item *Item) error { return c.store(context.Background(), verbSet, item) }

// SetContext is Set with a context.
func (c *Client) SetContext(ctx context.Context, item *Item) error {
	return c.store(ctx, verbSet, item)
}

// Add writes the given item, if no value already exists for its key.
// ErrNotStored is returned if that condition is not met.
func (c *Client) Add(item *Item) error { return c.store(context.Background(), verbAdd, item) }

// AddContext is Add with a context.
func (c *Client) AddContext(ctx context.Context, item *Item) error {
	return c.store(ctx, verbAdd, item)
}

// Replace writes the given item, but only if the server *does* already
// hold data for this key. ErrNotStored is returned otherwise.
func (c *Client) Replace(item *Item) error { return c.store(context.Background(), verbReplace, item) }

// ReplaceContext is Replace with a context.
func (c *Client) ReplaceContext(ctx context.Context, item *Item) error {
	return c.store(ctx, verbReplace, item)
}

// Append appends the given item to the existing item, if a value already
// exists for its key. ErrNotStored is returned if that condition is not
// met.
func (c *Client) Append(item *Item) error { return c.store(context.Background(), verbAppend, item) }

// AppendContext is Append with a context.
func (c *Client) AppendContext(ctx context.Context, item *Item) error {
	return c.store(ctx, verbAppend, item)
}

// Prepend prepends the given item to the existing item, if a value already
// exists for its key. ErrNotStored is returned if that condition is not
// met.
func (c *Client) Prepend(item *Item) error { return c.store(context.Background(), verbPrepend, item) }

// PrependContext is Prepend with a context.
func (c *Client) PrependContext(ctx context.Context, item *Item) error {
	return c.store(ctx, verbPrepend, item)
}

// CompareAndSwap writes the given item that was previously returned by Get,
// if the value was neither modified nor evicted between the Get and the
// CompareAndSwap calls. The item's Key should not change between calls but
// all other item fields may differ. ErrCASConflict is returned if the
// value was modified in between the calls. ErrCacheMiss is returned if the
// value was evicted in between the calls (the server's NOT_FOUND, as
// gomemcache returns it).
func (c *Client) CompareAndSwap(item *Item) error {
	return c.store(context.Background(), verbCAS, item)
}

// CompareAndSwapContext is CompareAndSwap with a context.
func (c *Client) CompareAndSwapContext(ctx context.Context, item *Item) error {
	return c.store(ctx, verbCAS, item)
}

// store runs a storage command. The item is encoded before the call
// returns; the caller may reuse it (and its Value) afterwards.
func (c *Client) store(ctx context.Context, verb storeVerb, item *Item) error {
	_, err := c.storeCAS(ctx, verb, item)
	return err
}

// storeCAS is store, also returning the new CAS a binary answer carries.
func (c *Client) storeCAS(ctx context.Context, verb storeVerb, item *Item) (uint64, error) {
	o := getOp(opStore)
	o.verb = verb
	o.item = item
	o, err := c.roundTrip(ctx, item.Key, o)
	var cas uint64
	if o != nil {
		if err == nil {
			cas = o.stored
		}
		putOp(o)
	}
	return cas, err
}

// StoreContext stores item with verb ("set", "add", "replace", "append",
// "prepend" or "cas", as Set, Add, … CompareAndSwap do) and also returns
// the stored item's new CAS: over the binary protocol, whose answer
// carries it; over text it is 0 (the answer has none). item is not
// changed, as with the other store methods.
func (c *Client) StoreContext(ctx context.Context, verb string, item *Item) (cas uint64, err error) {
	v, ok := storeVerbOf(verb)
	if !ok {
		return 0, fmt.Errorf("memcache: unknown store verb %q", verb)
	}
	return c.storeCAS(ctx, v, item)
}

// storeVerbOf maps a storage command's name to its verb.
func storeVerbOf(verb string) (storeVerb, bool) {
	for i, v := range storeVerbs {
		if v == verb {
			return storeVerb(i), true
		}
	}
	return 0, false
}

// Increment atomically increments key by delta. The return value is the
// new value after being incremented or an error. If the value didn't exist
// in memcached the error is ErrCacheMiss. The value in memcached must be
// an decimal number, or an error will be returned. On 64-bit overflow, the
// new value wraps around.
func (c *Client) Increment(key string, delta uint64) (uint64, error) {
	return c.IncrementContext(context.Background(), key, delta)
}

// IncrementContext is Increment with a context.
func (c *Client) IncrementContext(ctx context.Context, key string, delta uint64) (uint64, error) {
	n, _, err := c.incrDecr(ctx, opIncr, key, delta)
	return n, err
}

// Decrement atomically decrements key by delta. The return value is the
// new value after being decremented or an error. If the value didn't exist
// in memcached the error is ErrCacheMiss. The value in memcached must be
// an decimal number, or an error will be returned. On underflow, the new
// value is capped at zero and does not wrap around.
func (c *Client) Decrement(key string, delta uint64) (uint64, error) {
	return c.DecrementContext(context.Background(), key, delta)
}

// DecrementContext is Decrement with a context.
func (c *Client) DecrementContext(ctx context.Context, key string, delta uint64) (uint64, error) {
	n, _, err := c.incrDecr(ctx, opDecr, key, delta)
	return n, err
}

// IncrDecrContext is IncrementContext (incr) or DecrementContext, also
// returning the item's new CAS: over the binary protocol, whose answer
// carries it; over text it is 0.
func (c *Client) IncrDecrContext(ctx context.Context, key string, incr bool, delta uint64) (value, cas uint64, err error) {
	kind := opDecr
	if incr {
		kind = opIncr
	}
	return c.incrDecr(ctx, kind, key, delta)
}

func (c *Client) incrDecr(ctx context.Context, kind opKind, key string, delta uint64) (n, cas uint64, err error) {
	o := getOp(kind)
	o.key = key
	o.delta = delta
	o, err = c.roundTrip(ctx, key, o)
	if o == nil {
		return 0, 0, err
	}
	n, cas = o.n, o.stored
	putOp(o)
	return n, cas, err
}

// GetMulti is a batch version of Get. The returned map from keys to items
// may have fewer elements than the input slice, due to memcache cache
// misses. Each key must be at most 250 bytes in length. If no error is
// returned, the returned map will also be non-nil.
//
// The keys are grouped by server and every server's share is sent before
// any answer is awaited, so the servers work in parallel; no goroutine is
// started. If a server fails, the items of the others are still returned,
// with the first error.
func (c *Client) GetMulti(keys []string) (map[string]*Item, error) {
	return c.GetMultiContext(context.Background(), keys)
}

// GetMultiContext is GetMulti with a context.
func (c *Client) GetMultiContext(ctx context.Context, keys []string) (map[string]*Item, error) {
	if c.cl != nil {
		return c.cl.getMulti(ctx, keys)
	}
	m, refused, _, err := c.getMultiOnce(ctx, keys, nil)
	if err == nil && len(refused) > 0 {
		err = errNotMyVBucketAnswer
	}
	return m, err
}

// GetMultiFunc is GetMulti without the map: it calls f once for each hit,
// with i the index in keys of the key it answers (a key listed twice is
// answered twice). f runs on the calling goroutine after every server has
// answered, in no particular order. it, and its Value, are lent: they are
// valid only until f returns, and the client reuses their memory, so a
// steady stream of GetMultiFunc calls allocates next to nothing. keys may
// not be modified during the call.
//
// Errors are reported as by GetMultiContext: if a server fails, f still
// sees the other servers' hits, and the first error is returned.
func (c *Client) GetMultiFunc(ctx context.Context, keys []string, f func(i int, it *Item)) error {
	if c.cl != nil {
		m, err := c.cl.getMulti(ctx, keys)
		for i, k := range keys {
			if it, ok := m[k]; ok {
				f(i, it)
			}
		}
		return err
	}
	var opsBuf [8]*op
	ops, _, err := c.multiRound(ctx, keys, opsBuf[:0], true)
	for _, o := range ops {
		// Hits come in the order of o.keys (servers answer in request
		// order), so a cursor finds each one's key in one step.
		j := 0
		for h := range o.items {
			it := &o.items[h]
			for n := 0; n < len(o.keys) && o.keys[j] != it.Key; n++ {
				j = (j + 1) % len(o.keys)
			}
			f(int(o.idx[j]), it)
			j = (j + 1) % len(o.keys)
		}
		if len(o.refused) > 0 && err == nil {
			err = errNotMyVBucketAnswer
		}
		putOp(o)
	}
	return err
}

// getMultiOnce is one GetMulti round: it adds the hits to m (made if nil)
// and returns the keys a server answered NOT_MY_VBUCKET for, with the first
// such answer's body.
func (c *Client) getMultiOnce(ctx context.Context, keys []string, m map[string]*Item) (_ map[string]*Item, refused []string, body []byte, _ error) {
	var opsBuf [8]*op
	ops, picked, firstErr := c.multiRound(ctx, keys, opsBuf[:0], false)
	if !picked {
		return m, nil, nil, firstErr
	}
	hits := 0
	for _, o := range ops {
		hits += len(o.items)
	}
	if m == nil {
		m = make(map[string]*Item, hits)
	}
	for _, o := range ops {
		for i := range o.items {
			m[o.items[i].Key] = &o.items[i]
		}
		for _, i := range o.refused {
			refused = append(refused, o.keys[i])
		}
		if body == nil {
			body = o.body
		}
		putOp(o)
	}
	return m, refused, body, firstErr
}

// multiRound sends the keys, grouped by server, every server's share
// before any answer is awaited, and waits for them all. It appends the
// completed ops to ops, for the caller to read and putOp; the ops of
// servers that could not be reached, or whose wait was abandoned, are not
// among them. picked is false when a key could not be placed (nothing was
// sent). err is the first error. scratch marks the ops' results as lent.
func (c *Client) multiRound(ctx context.Context, keys []string, ops []*op, scratch bool) (_ []*op, picked bool, err error) {
	base := len(ops)
	var addrBuf [8]net.Addr
	addrs := addrBuf[:0]
	for i, k := range keys {
		a, err := c.pick(k, nil)
		if err != nil {
			for _, o := range ops[base:] {
				putOp(o)
			}
			return ops[:base], false, err
		}
		g := -1
		for j := range addrs {
			if addrs[j] == a || addrs[j].String() == a.String() {
				g = j
				break
			}
		}
		if g < 0 {
			g = len(addrs)
			addrs = append(addrs, a)
			o := getOp(opMulti)
			o.scratch = scratch
			ops = append(ops, o)
		}
		o := ops[base+g]
		o.keys = append(o.keys, k)
		o.idx = append(o.idx, int32(i))
	}
	mine := ops[base:]
	if vs, ok := c.selector.(*VBucket); ok && c.Protocol == Binary {
		// Each binary GETKQ carries its key's vbucket.
		for _, o := range mine {
			o.vbs = make([]uint16, len(o.keys))
			for i, k := range o.keys {
				o.vbs[i] = uint16(vs.VBucketOf(k))
			}
		}
	}

	var firstErr error
	for g, o := range mine {
		if err := c.start(ctx, addrs[g], o); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			putOp(o)
			mine[g] = nil
		}
	}
	for g, o := range mine {
		if o == nil {
			continue
		}
		abandoned, err := c.wait(ctx, addrs[g], o)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if abandoned {
			mine[g] = nil
		}
	}
	n := base
	for _, o := range mine {
		if o != nil {
			ops[n] = o
			n++
		}
	}
	clear(ops[n:])
	return ops[:n], true, firstErr
}

// eachServer runs a keyless op on every server, all sent before any is
// awaited, and returns the first error.
func (c *Client) eachServer(ctx context.Context, kind opKind) error {
	var addrs []net.Addr
	if err := c.selector.Each(func(a net.Addr) error {
		addrs = append(addrs, a)
		return nil
	}); err != nil {
		return err
	}
	ops := make([]*op, len(addrs))
	var firstErr error
	for i, a := range addrs {
		o := getOp(kind)
		if err := c.start(ctx, a, o); err != nil {
			putOp(o)
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		ops[i] = o
	}
	for i, o := range ops {
		if o == nil {
			continue
		}
		abandoned, err := c.wait(ctx, addrs[i], o)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if !abandoned {
			putOp(o)
		}
	}
	return firstErr
}

// FlushAll removes all the items in the cache on every server.
func (c *Client) FlushAll() error { return c.eachServer(context.Background(), opFlush) }

// FlushAllContext is FlushAll with a context.
func (c *Client) FlushAllContext(ctx context.Context) error { return c.eachServer(ctx, opFlush) }

// DeleteAll deletes all items in the cache: FlushAll under gomemcache's
// other name.
func (c *Client) DeleteAll() error { return c.FlushAll() }

// Ping checks all instances if they are alive. Returns error if any
// of them is down.
func (c *Client) Ping() error { return c.eachServer(context.Background(), opVersion) }

// PingContext is Ping with a context.
func (c *Client) PingContext(ctx context.Context) error { return c.eachServer(ctx, opVersion) }

// Close closes every connection and waits for their reader goroutines to
// exit; requests in flight fail. A NewCluster client's background config
// refresh is stopped and waited for first, and does not restart. After
// Close, the Client may still be used: it opens new connections.
func (c *Client) Close() error {
	if c.cl != nil {
		c.cl.stop()
	}
	c.mu.Lock()
	pools := c.pools
	c.pools = make(map[string]*pool)
	c.mu.Unlock()
	for _, p := range pools {
		p.closeAll()
	}
	return nil
}
