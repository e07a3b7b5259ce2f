package memcache

import (
	"context"
	"net"
)

// A Completion receives the outcome of a request started without waiting
// (GetAsync, StoreAsync).
//
// Complete is called exactly once per started request, with the item of
// a get's hit (nil otherwise: a miss comes as ErrCacheMiss) and the error,
// as GetContext and the store methods would return them. The item and its
// Value are the client's, reused once Complete returns: copy what is
// kept. It runs on the goroutine that reads the server's connection, in
// the order the server answers, so it must not block: the next answers of
// that connection wait for it. It may start other requests (no lock of
// the client is held).
type Completion interface {
	Complete(it *Item, err error)
}

// A Flusher is a Completion that may defer part of its work (a proxy's
// write of the replies to its client) until Flush. The reader calls Flush
// after the Complete calls of everything one read brought, so that the
// answers to one client's pipelined requests leave in one write; it
// calls Flush at once after a Complete that reports a failed connection.
// Flush runs on the reader's goroutine, like Complete, and may be called
// more than once for the same work.
type Flusher interface {
	Completion
	Flush()
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
// h.Complete. verb is "set", "add" or "replace"; other verbs report false.
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
	if cn.send(o) != nil {
		putOp(o) // not queued: the conn had failed before o got in
		return false
	}
	return true
}

// finishAsync ends an asynchronous op: the selector hears how it went,
// its Completion gets the outcome, and o goes back to the pool.
func (o *op) finishAsync() Flusher {
	h, c, addr, err := o.cb, o.client, o.addr, o.err
	var it *Item
	if o.kind == opGet && err == nil {
		it = o.item // o's own (setItem): o goes back to the pool after Complete
	}
	c.report(addr, err)
	h.Complete(it, err)
	putOp(o)
	f, _ := h.(Flusher)
	return f
}

// asyncFields are an op's fields for asynchronous requests (embedded in
// op): cb receives the outcome instead of a waiter; client and addr are
// for the health report.
type asyncFields struct {
	cb     Completion
	client *Client
	addr   net.Addr
	own    Item // a get's hit, lent to Complete (setItem)
}
