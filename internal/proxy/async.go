package proxy

import (
	"errors"
	"time"
	"unsafe"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/memcache"
)

// Asynchronous requests: the fast path for single-key text gets and sets
// over a pool.
//
// A request served the plain way costs two goroutine switches beyond the
// ones it cannot avoid: the client's goroutine parks until the upstream
// connection's reader goroutine has the answer and wakes it to write the
// reply. On the fast path the client's goroutine sends the request
// (memcache.Client.GetAsync / StoreAsync) and goes back to reading its
// socket; the reader goroutine formats the reply and writes it to the
// client's socket itself (conn.Complete), as twemproxy's single thread
// does. The rules that keep a connection's replies in order:
//
//   - A request goes asynchronously only when the connection's earlier
//     replies are all written (c.out is flushed first, or the request
//     takes the plain path), and at most one is in flight per connection.
//   - While one is in flight the client's goroutine starts nothing else:
//     processInput waits for its completion (settle) before the next
//     request, and serve waits before closing the socket.
//   - Complete writes what the socket takes at once; the rest (a client
//     that is not reading) is left in out, and settle moves it to the
//     front of c.out, for the client's goroutine to write.
//
// Complete writes through the socket's RawConn, so a socket closed under
// it (Proxy.Close) fails the write instead of writing to a reused
// descriptor. Everything else falls back to the plain path: cluster
// upstreams (their requests may be retried after a new map), binary and
// meta clients, multi-key gets, gat, cas, append, prepend, and a server
// the client cannot connect to (the plain path tries the next one).
type asyncReq struct {
	inflight bool          // client goroutine: a request is in flight
	done     chan struct{} // Complete's signal to settle (capacity 1)

	// Set by the client goroutine before the request leaves, read by
	// Complete (the upstream connection's lock orders the two).
	u       *upstream
	st      *srvStat
	start   time.Time
	store   bool   // a storage command (else a get)
	withCAS bool   // gets
	noreply bool   // storage: no reply
	key     string // the request's key: a view of keyBuf, which stays put until Complete
	keyBuf  []byte
	item    memcache.Item

	out     []byte             // Complete's reply; after it, what the socket did not take
	writeFn func(uintptr) bool // c.writeAsync, bound once
}

// startGetAsync tries the fast path for "get key" / "gets key". It
// reports false when the plain path must serve the request.
func (c *conn) startGetAsync(key []byte, withCAS bool) bool {
	if len(key) > protocol.KeyMaxLength || !c.asyncReady() {
		return false
	}
	a := &c.async
	u := c.poolUpstream()
	if u == nil {
		return false
	}
	a.store, a.withCAS, a.noreply = false, withCAS, false
	a.setKey(key)
	a.u, a.st, a.start = u, u.statOf(a.key), time.Now()
	a.inflight = true
	if !u.mc.GetAsync(a.key, c) {
		c.unlaunch()
		return false
	}
	return true
}

// setKey makes a.key a copy of key without allocating: keyBuf is written
// only here, while no request is in flight, so the view stays valid for
// as long as the client holds it (its op is recycled after Complete).
func (a *asyncReq) setKey(key []byte) {
	a.keyBuf = append(a.keyBuf[:0], key...)
	a.key = unsafe.String(unsafe.SliceData(a.keyBuf), len(a.keyBuf))
}

// startStoreAsync tries the fast path for set, add and replace of key
// with value, which the client encodes before StoreAsync returns.
func (c *conn) startStoreAsync(verb string, key, value []byte, flags uint32, exp int32) bool {
	if !c.asyncReady() {
		return false
	}
	a := &c.async
	u := c.poolUpstream()
	if u == nil {
		return false
	}
	a.store, a.withCAS, a.noreply = true, false, c.noreply
	a.setKey(key)
	a.item = memcache.Item{Key: a.key, Value: value, Flags: flags, Expiration: exp}
	a.u, a.st, a.start = u, u.statOf(a.key), time.Now()
	a.inflight = true
	if !u.mc.StoreAsync(verb, &a.item, c) {
		a.item = memcache.Item{}
		c.unlaunch()
		return false
	}
	return true
}

// poolUpstream returns the current upstream, with a reference held, when
// it is a pool (nil for a cluster, whose requests the fast path leaves).
func (c *conn) poolUpstream() *upstream {
	u := c.p.acquire()
	if u.cluster {
		u.release()
		return nil
	}
	return u
}

// unlaunch undoes a start whose request was not sent.
func (c *conn) unlaunch() {
	a := &c.async
	a.inflight = false
	a.u.release()
	a.u, a.st = nil, nil
}

// asyncReady says whether a request may take the fast path now: a raw
// client socket (rawStep is serving it) and every earlier reply written.
func (c *conn) asyncReady() bool {
	if c.rawFD < 0 {
		return false
	}
	if len(c.out) > 0 {
		var err error
		if c.out, err = c.writeNow(uintptr(c.rawFD), c.out); err != nil || len(c.out) > 0 {
			return false
		}
	}
	return true
}

// Complete is the memcache.Completion of the connection's asynchronous
// request; it runs on the upstream connection's reader goroutine.
func (c *conn) Complete(it *memcache.Item, err error) {
	a := &c.async
	u := a.u
	c.p.ctr.fastPath.Add(1)
	a.st.record(time.Since(a.start), !answer(err))
	out := a.out[:0]
	switch {
	case a.store:
		switch {
		case a.noreply:
		case err == nil:
			out = append(out, "STORED\r\n"...)
		default:
			out = append(out, errReply(u, a.item.Key, err)...)
			out = append(out, '\r', '\n')
		}
		a.item = memcache.Item{}
	default:
		c.p.ctr.cmdGet.Add(1)
		switch {
		case it != nil:
			c.p.ctr.getHits.Add(1)
			out = appendValue(out, a.key, it.Flags, it.Value, it.CasID, a.withCAS)
			out = append(out, "END\r\n"...)
		case err == nil, errors.Is(err, memcache.ErrCacheMiss), errors.Is(err, memcache.ErrMalformedKey):
			c.p.ctr.getMisses.Add(1)
			out = append(out, "END\r\n"...)
		default:
			c.p.ctr.getMisses.Add(1)
			out = append(out, errReply(u, a.key, err)...)
			out = append(out, '\r', '\n')
		}
	}
	a.out = out
	if len(out) > 0 {
		c.raw.Write(a.writeFn) // a closed socket: the reply is dropped with it
	}
	a.u, a.st, a.key = nil, nil, ""
	u.release()
	a.done <- struct{}{}
}

// writeAsync is Complete's write: what the socket takes now, no waiting.
func (c *conn) writeAsync(fd uintptr) bool {
	a := &c.async
	a.out, _ = c.writeNow(fd, a.out)
	return true
}

// settle waits for the request in flight and puts what Complete could not
// write in front of the next replies.
func (c *conn) settle() {
	a := &c.async
	if !a.inflight {
		return
	}
	<-a.done
	a.inflight = false
	if len(a.out) > 0 {
		c.out = append(c.out, a.out...)
		a.out = a.out[:0]
	}
	if cap(a.out) > 1<<20 {
		a.out = nil // do not keep a huge value's buffer
	}
}

// appendValue appends a text get's VALUE block for one hit.
func appendValue(out []byte, key string, flags uint32, val []byte, cas uint64, withCAS bool) []byte {
	out = append(out, "VALUE "...)
	out = append(out, key...)
	out = append(out, ' ')
	out = protocol.AppendUint(out, uint64(flags))
	out = append(out, ' ')
	out = protocol.AppendUint(out, uint64(len(val)))
	if withCAS {
		out = append(out, ' ')
		out = protocol.AppendUint(out, cas)
	}
	out = append(out, '\r', '\n')
	out = append(out, val...)
	return append(out, '\r', '\n')
}
