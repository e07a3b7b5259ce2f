package memcache

import (
	"context"
	"net"
	"sync"
)

// A Completion receives the outcome of a request started without waiting
// (GetAsync, StoreAsync).
//
// Complete is called exactly once per started request, with the item of
// a get's hit (nil otherwise: a miss comes as ErrCacheMiss) and the error,
// as GetContext and the store methods would return them. The item and its
// Value are the client's, reused once Complete returns: copy what is kept. It runs on the
// goroutine that reads the server's connection, in the order the server
// answers, so it must not block: the next answers of that connection wait
// for it. It may start other requests (no lock of the client is held).
type Completion interface {
	Complete(it *Item, err error)
}

// GetAsync starts a get of key and returns without waiting for the
// answer, which h receives. It reports false, and h is not called, when
// it sent nothing: for a cluster client (whose requests may need retries
// after a new map), an illegal key, no server, or a server it could not
// connect to. The caller then uses GetContext, which also moves the key to
// another server where the selector says so.
//
// Asynchronous requests spare the caller a goroutine switch per request:
// a proxy answers its client from Complete, on the reader's goroutine,
// instead of waking the goroutine that read the client's request.
func (c *Client) GetAsync(key string, h Completion) bool {
	o := getOp(opGet)
	o.key = key
	return c.startAsync(key, o, h)
}

// StoreAsync starts a set (or add or replace) of item and returns without
// waiting; see GetAsync. item's Key and Value are encoded before
// StoreAsync returns, but item itself must stay unchanged until
// h.Complete. verb is "set", "add" or "replace";
// other verbs report false.
func (c *Client) StoreAsync(verb string, item *Item, h Completion) bool {
	v, ok := storeVerbOf(verb)
	if !ok || (v != verbSet && v != verbAdd && v != verbReplace) {
		return false
	}
	o := getOp(opStore)
	o.verb = v
	o.item = item
	return c.startAsync(item.Key, o, h)
}

// startAsync sends o, whose outcome goes to h, or recycles it and reports
// false when it could not.
func (c *Client) startAsync(key string, o *op, h Completion) bool {
	if c.cl != nil {
		putOp(o)
		return false
	}
	addr, err := c.pick(key, o)
	if err != nil {
		putOp(o)
		return false
	}
	cn, err := c.pool(addr).get(context.Background(), c)
	if err != nil {
		putOp(o)
		return false
	}
	o.cb, o.client, o.addr = h, c, addr
	if err := cn.send(o); err != nil {
		// Not queued: the conn had failed before o got in.
		o.err = err
		o.finishAsync()
	}
	return true
}

// finishAsync ends an asynchronous op: the selector hears how it went, o
// goes back to the pool, and its Completion gets the outcome.
func (o *op) finishAsync() {
	if o.gather != nil {
		o.client.report(o.addr, o.err)
		o.gather.part(o)
		return
	}
	h, c, addr, err := o.cb, o.client, o.addr, o.err
	var it *Item
	if o.kind == opGet && err == nil {
		it = o.item // o's own (setItem): o goes back to the pool after Complete
	}
	c.report(addr, err)
	h.Complete(it, err)
	putOp(o)
}

// asyncFields are an op's fields for asynchronous requests (embedded in
// op): cb receives the outcome instead of a waiter; client and addr are
// for the health report.
type asyncFields struct {
	cb     Completion
	gather *gather // a GetMultiAsync's part (instead of cb)
	client *Client
	addr   net.Addr
	own    Item // a get's hit, lent to Complete (setItem)
}

// A MultiCompletion receives the outcome of GetMultiAsync: Hit once per
// hit, with i the key's index in the request (the item is the client's,
// reused once Hit returns: copy what is kept), then Done once, after the
// last server's answer, with the first error. The calls of one request
// never overlap, though they may come from the readers of different
// servers; like Complete, they must not block.
type MultiCompletion interface {
	Hit(i int, it *Item)
	Done(err error)
}

// GetMultiAsync starts a multi-key get of keys, split by server as
// GetMultiFunc does, and returns without waiting; h receives the outcome.
// It reports false, and h is not called, when it sent nothing: a cluster
// client, no keys, a key that cannot be placed, or a server it could not
// connect to (the caller then uses GetMultiFunc). keys must stay
// unchanged until h.Done.
func (c *Client) GetMultiAsync(keys []string, h MultiCompletion) bool {
	if c.cl != nil || len(keys) == 0 {
		return false
	}
	var opsBuf [8]*op
	var addrBuf [8]net.Addr
	var connBuf [8]*conn
	ops, addrs, conns := opsBuf[:0], addrBuf[:0], connBuf[:0]
	for i, k := range keys {
		a, err := c.pick(k, nil)
		if err != nil {
			putOps(ops)
			return false
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
			o.scratch = true // items and arena are only lent to Hit
			ops = append(ops, o)
		}
		ops[g].keys = append(ops[g].keys, k)
		ops[g].idx = append(ops[g].idx, int32(i))
	}
	if vs, ok := c.selector.(*VBucket); ok && c.Protocol == Binary {
		for _, o := range ops { // each binary GETKQ carries its key's vbucket
			o.vbs = make([]uint16, len(o.keys))
			for i, k := range o.keys {
				o.vbs[i] = uint16(vs.VBucketOf(k))
			}
		}
	}
	for _, a := range addrs {
		cn, err := c.pool(a).get(context.Background(), c)
		if err != nil {
			putOps(ops)
			return false
		}
		conns = append(conns, cn)
	}
	gt := gatherPool.Get().(*gather)
	gt.h, gt.left = h, len(ops)
	for g, o := range ops {
		o.gather, o.client, o.addr = gt, c, addrs[g]
		if err := conns[g].send(o); err != nil {
			o.err = err
			o.finishAsync()
		}
	}
	return true
}

func putOps(ops []*op) {
	for _, o := range ops {
		putOp(o)
	}
}

// gather collects the parts of a GetMultiAsync, one op per server.
type gather struct {
	mu   sync.Mutex // protects left and err, and serializes the calls to h
	h    MultiCompletion
	left int // parts not yet in
	err  error
}

var gatherPool = sync.Pool{New: func() any { return new(gather) }}

// part takes in one server's op: its hits go to Hit, in the order of its
// keys (servers answer in request order); the last part calls Done.
func (g *gather) part(o *op) {
	g.mu.Lock()
	j := 0
	for h := range o.items {
		it := &o.items[h]
		for n := 0; n < len(o.keys) && o.keys[j] != it.Key; n++ {
			j = (j + 1) % len(o.keys)
		}
		g.h.Hit(int(o.idx[j]), it)
		j = (j + 1) % len(o.keys)
	}
	if o.err != nil && g.err == nil {
		g.err = o.err
	}
	g.left--
	last := g.left == 0
	g.mu.Unlock()
	putOp(o)
	if last {
		h, err := g.h, g.err
		*g = gather{}
		gatherPool.Put(g)
		h.Done(err)
	}
}
