package proxy

import (
	"encoding/binary"
	"errors"
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/memcache"
)

// Asynchronous requests: the fast path for single-key text gets and sets,
// and binary gets, over a pool.
//
// A request served the plain way costs two goroutine switches beyond the
// ones it cannot avoid: the client's goroutine parks until the upstream
// connection's reader goroutine has the answer and wakes it to write the
// reply. On the fast path the client's goroutine sends the request
// (memcache.Client.GetAsync / StoreAsync) and goes back to reading its
// socket; the reader goroutine formats the reply and writes it to the
// client's socket itself (asyncReq.Complete), as twemproxy's single
// thread does.
//
// A client that pipelines its gets has them all in flight at once (up to
// maxAsyncReads), over every server they live on, as twemproxy does;
// anything else waits for what is in flight first. The rules that keep a
// connection's replies in order:
//
//   - Over a pool with one connection per server (upstream.ordered, the
//     default), every request reaches its server in the order the client
//     sent it, so up to maxAsyncReads gets, sets, adds and replaces are
//     in flight together, and a pipelined "set k … / get k" sees its own
//     write. With more connections per server, what is in flight is
//     either one storage command or up to maxAsyncReads gets: reads
//     commute, and a write is answered before the next request leaves.
//     A reload settles first (the new upstream's connections are others).
//   - A request goes asynchronously only when the connection's earlier
//     replies are all written (c.out is flushed first, or the request
//     takes the plain path). Before any other request, dispatch waits for
//     what is in flight (settle), and serve waits before closing the
//     socket.
//   - Requests take slots of a ring in order. A completion moves the
//     replies of the oldest slots that are complete to c.pend, under
//     c.amu: a reply that arrives early waits in its slot for the earlier
//     ones. Flush, which the upstream reader calls after the completions
//     of one read (memcache.Flusher), writes pend in one write, as much
//     as the socket takes at once; the rest (a client that is not
//     reading) stays in pend, and settle moves it to the front of c.out,
//     for the client's goroutine to write.
//
// Flush writes through the socket's RawConn, so a socket closed under it
// (Proxy.Close) fails the write instead of writing to a reused
// descriptor. Everything else falls back to the plain path: cluster
// upstreams (their requests may be retried after a new map), meta
// commands, binary requests other than gets, multi-key text gets, gat,
// cas, append, prepend, and a server the client cannot connect to (the
// plain path tries the next one).
type asyncReq struct {
	c *conn

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

	// A binary get's: its opcode (as sent: quiet or not, with the key or
	// not) and opaque.
	bin    bool
	opcode protocol.Opcode
	opaque uint32

	out  []byte // Complete's reply, until it is written
	done bool   // under c.amu: the reply is in out, waiting for earlier ones
}

// maxAsyncReads is how many pipelined requests of one connection may be
// in flight at once.
const maxAsyncReads = 16

// asyncState is a connection's part of the fast path.
type asyncState struct {
	// Owned by the client goroutine.
	ring   [maxAsyncReads]*asyncReq // slots, made when first needed (written under amu)
	next   int                      // the slot the next request takes
	nsent  int                      // requests started since the last settle
	writes bool                     // a storage command is in flight
	batchU *upstream                // the upstream of what is in flight

	settled chan struct{}      // Complete's signal to settle (capacity 1)
	writeFn func(uintptr) bool // c.writeAsync, bound once

	// amu protects what follows. Two waits happen under it, and neither
	// can close a cycle. Flush writes to the client's socket under it
	// (RawConn.Write, which takes the socket's write lock; the callback
	// never waits): the only other writer, the client goroutine's
	// net.Conn.Write (flush), runs only with nothing in flight (c.out is
	// written without waiting, outWritten, before a request leaves, and
	// whatever writes to c.out settles first), so no Flush with replies to
	// write can meet it; and a Close (Proxy.Close, serve's exit) fails the
	// write at once. Complete sends on settled under it: at most one token
	// is ever owed (settle sets waiting, the one Complete that clears it
	// sends once, settle receives once), so the send never blocks. The
	// client goroutine holds amu only for moments, never while it waits
	// (settle lets go before it receives). The upstream client calls
	// Complete and Flush without its own locks held.
	amu     sync.Mutex
	head    int    // the slot of the oldest request not answered
	pending int    // requests not answered
	waiting bool   // settle waits for pending to reach 0
	pend    []byte // replies the socket did not take, in order
	wout    []byte // what writeFn writes: pend, during Flush
	stalled bool   // Flush left pend to the client's goroutine and woke it
}

// pipelined reports whether a text command may join what is in flight
// without waiting for it: a single-key get or gets while only gets are
// in flight, or, over an ordered upstream (one connection per server),
// also set, add and replace, and gets behind them. dispatch settles
// before every other command; a pipelined one that ends up answered
// synchronously (an error, the plain path) settles before its reply.
func (c *conn) pipelined(r *protocol.TextRequest) bool {
	a := &c.async
	if a.nsent == 0 {
		return true // nothing to wait for
	}
	if r.Rest != nil || r.N < 3 {
		return false
	}
	ordered := a.batchU != nil && a.batchU.ordered
	switch r.Cmd {
	case protocol.CmdGet, protocol.CmdGets:
		return r.N == 3 && len(r.T[1]) <= protocol.KeyMaxLength && (!a.writes || ordered)
	case protocol.CmdSet, protocol.CmdAdd, protocol.CmdReplace:
		return ordered
	}
	return false
}

// slotsFull reports whether every slot is taken. Slots are answered in
// ring order, so the next one is free once fewer than maxAsyncReads are
// pending.
func (c *conn) slotsFull() bool {
	a := &c.async
	a.amu.Lock()
	defer a.amu.Unlock()
	return a.pending == maxAsyncReads
}

// slot returns the slot the next request takes; claim has made sure it
// is free.
func (c *conn) slot() *asyncReq {
	a := &c.async
	r := a.ring[a.next]
	if r == nil {
		r = &asyncReq{c: c}
		a.amu.Lock() // Complete reads the ring under amu
		a.ring[a.next] = r
		a.amu.Unlock()
	}
	return r
}

// launch counts r's request as in flight, before it leaves.
func (c *conn) launch(r *asyncReq) {
	a := &c.async
	a.amu.Lock()
	a.pending++
	a.amu.Unlock()
	a.next = (a.next + 1) % maxAsyncReads
	a.nsent++
	a.writes = a.writes || r.store
	a.batchU = r.u
}

// unlaunch undoes a launch whose request was not sent (no Complete will
// come for it).
func (c *conn) unlaunch(r *asyncReq) {
	a := &c.async
	a.amu.Lock()
	a.pending--
	a.amu.Unlock()
	a.next = (a.next + maxAsyncReads - 1) % maxAsyncReads
	a.nsent--
	if a.nsent == 0 {
		a.writes, a.batchU = false, nil
	}
	r.item = memcache.Item{}
	r.u.release()
	r.u, r.st = nil, nil
}

// startGetAsync tries the fast path for "get key" / "gets key". It
// reports false when the plain path must serve the request, after what
// was in flight has been answered.
func (c *conn) startGetAsync(key []byte, withCAS bool) bool {
	if len(key) > protocol.KeyMaxLength {
		c.settle()
		return false
	}
	r, u := c.claim(key, false)
	if r == nil {
		return false
	}
	r.store, r.withCAS, r.noreply, r.bin = false, withCAS, false, false
	c.launch(r)
	return c.sent(r, u.mc.GetAsync(r.key, r))
}

// claim takes the slot for a request on key (a write when write), with
// the current upstream, or returns nil when the fast path cannot serve it
// (not a raw socket, earlier replies the socket will not take, a cluster
// upstream), having waited for what is in flight. It also waits when the
// request may not join what is in flight: another upstream (a reload), a
// write over more than one connection per server, or every slot taken.
// Waiting moves replies to c.out, so c.out is written (outWritten) only
// after it: a reply queued there must not be overtaken by this request's.
func (c *conn) claim(key []byte, write bool) (*asyncReq, *upstream) {
	if c.rawFD < 0 {
		c.settle()
		return nil, nil
	}
	u := c.poolUpstream()
	if u == nil {
		c.settle()
		return nil, nil
	}
	if a := &c.async; a.nsent > 0 && (u != a.batchU || (write && !u.ordered) || c.slotsFull()) {
		c.settle()
	}
	if !c.outWritten() {
		u.release()
		return nil, nil
	}
	r := c.slot()
	r.setKey(key)
	r.u, r.st, r.start = u, u.statOf(r.key), time.Now()
	return r, u
}

// sent ends a start: ok reports whether the request left; when it did
// not, the launch is undone and what was in flight answered, for the
// plain path.
func (c *conn) sent(r *asyncReq, ok bool) bool {
	if !ok {
		c.unlaunch(r)
		c.settle()
	}
	return ok
}

// binPipelined reports whether the binary request at the front of data
// may join what is in flight without waiting for it: a well-formed get
// (GET, GETQ, GETK, GETKQ: a key of 1 to 250 bytes, no extras, no value),
// which binaryPacket starts with startBinGetAsync. processInput settles
// before every other request.
func (c *conn) binPipelined(data []byte) bool {
	if c.async.nsent == 0 {
		return true
	}
	if len(data) < protocol.HeaderLen || data[0] != protocol.MagicRequest {
		return false
	}
	switch protocol.Opcode(data[1]) {
	case protocol.OpGet, protocol.OpGetQ, protocol.OpGetK, protocol.OpGetKQ:
	default:
		return false
	}
	keyLen := int(binary.BigEndian.Uint16(data[2:]))
	extLen := int(data[4])
	bodyLen := int(binary.BigEndian.Uint32(data[8:]))
	return extLen == 0 && keyLen > 0 && keyLen <= protocol.KeyMaxLength && bodyLen == keyLen
}

// startBinGetAsync tries the fast path for a binary get (opcode as sent)
// of key. Like startGetAsync, it reports false when the plain path must
// serve the request, after what was in flight has been answered.
func (c *conn) startBinGetAsync(opcode protocol.Opcode, opaque uint32, key []byte) bool {
	r, u := c.claim(key, false)
	if r == nil {
		return false
	}
	r.store, r.withCAS, r.noreply = false, true, false
	r.bin, r.opcode, r.opaque = true, opcode, opaque
	c.launch(r)
	return c.sent(r, u.mc.GetAsync(r.key, r))
}

// setKey makes r.key a copy of key without allocating: keyBuf is written
// only here, while the slot is free, so the view stays valid for as long
// as the client holds it (its op is recycled after Complete).
func (r *asyncReq) setKey(key []byte) {
	r.keyBuf = append(r.keyBuf[:0], key...)
	r.key = unsafe.String(unsafe.SliceData(r.keyBuf), len(r.keyBuf))
}

// startStoreAsync tries the fast path for set, add and replace of key
// with value, which the client encodes before StoreAsync returns. Unless
// the upstream is ordered, dispatch has settled what was in flight.
func (c *conn) startStoreAsync(verb string, key, value []byte, flags uint32, exp int32) bool {
	r, u := c.claim(key, true)
	if r == nil {
		return false
	}
	r.store, r.withCAS, r.noreply, r.bin = true, false, c.noreply, false
	r.item = memcache.Item{Key: r.key, Value: value, Flags: flags, Expiration: exp}
	c.launch(r)
	return c.sent(r, u.mc.StoreAsync(verb, &r.item, r))
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

// outWritten writes what c.out holds, as much as the socket takes now,
// and reports whether all of it is written: a request may take the fast
// path only when every earlier reply is. While requests are in flight
// c.out is empty: whatever writes to it settles first.
func (c *conn) outWritten() bool {
	if len(c.out) > 0 {
		var err error
		if c.out, err = c.writeNow(uintptr(c.rawFD), c.out); err != nil || len(c.out) > 0 {
			return false
		}
	}
	return true
}

// Complete is the memcache.Completion of a slot's request; it runs on
// the upstream connection's reader goroutine. It formats the reply and
// queues every reply that is due, in request order, for Flush.
func (r *asyncReq) Complete(it *memcache.Item, err error) {
	c := r.c
	u := r.u
	c.p.ctr.fastPath.Add(1)
	r.st.record(time.Since(r.start), !answer(err))
	out := r.out[:0]
	switch {
	case r.bin:
		out = r.appendBinGet(out, it, err)
	case r.store:
		switch {
		case r.noreply:
		case err == nil:
			out = append(out, "STORED\r\n"...)
		default:
			out = append(out, errReply(u, r.item.Key, err)...)
			out = append(out, '\r', '\n')
		}
		r.item = memcache.Item{}
	default:
		c.p.ctr.cmdGet.Add(1)
		switch {
		case it != nil:
			c.p.ctr.getHits.Add(1)
			out = appendValue(out, r.key, it.Flags, it.Value, it.CasID, r.withCAS)
			out = append(out, "END\r\n"...)
		case err == nil, errors.Is(err, memcache.ErrCacheMiss), errors.Is(err, memcache.ErrMalformedKey):
			c.p.ctr.getMisses.Add(1)
			out = append(out, "END\r\n"...)
		default:
			c.p.ctr.getMisses.Add(1)
			out = append(out, errReply(u, r.key, err)...)
			out = append(out, '\r', '\n')
		}
	}
	r.out = out
	r.u, r.st, r.key = nil, nil, ""
	u.release()

	a := &c.async
	a.amu.Lock()
	r.done = true
	for {
		h := a.ring[a.head]
		if h == nil || !h.done {
			break
		}
		h.done = false
		a.pend = append(a.pend, h.out...) // Flush writes it
		if cap(h.out) > 1<<20 {
			h.out = nil // do not keep a huge value's buffer
		} else {
			h.out = h.out[:0]
		}
		a.head = (a.head + 1) % maxAsyncReads
		a.pending--
	}
	if a.pending == 0 && a.waiting {
		a.waiting = false
		a.settled <- struct{}{} // under amu, never blocks: see amu
	}
	a.amu.Unlock()
}

// Flush writes the replies that are due, as much as the socket takes
// now; the upstream reader calls it after the Completes of one read, so
// the replies to a client's pipelined gets leave together. What the
// socket does not take waits in pend for the next Flush or settle.
func (r *asyncReq) Flush() {
	c := r.c
	a := &c.async
	a.amu.Lock()
	if len(a.pend) > 0 && !a.stalled {
		a.wout = a.pend
		c.raw.Write(a.writeFn) // under amu (see amu); a closed socket: the replies are dropped with it
		a.pend, a.wout = a.wout, nil
		if len(a.pend) > 0 {
			// The client is not reading. Its goroutine may be waiting for
			// a request that will not come before these replies are
			// read: wake it (serveRaw) to wait for the socket and write.
			a.stalled = true
			c.nc.SetReadDeadline(stallWake)
		}
	}
	a.amu.Unlock()
}

// stallWake is the read deadline, in the past, with which Flush wakes a
// client's goroutine to write the replies its socket did not take.
var stallWake = time.Unix(1, 0)

// stallWoken handles serveRaw's wait ended by err: true when Flush woke
// it (the deadline is cleared, and the replies written, waiting for the
// socket as long as it takes), false for any other error.
func (c *conn) stallWoken(err error) bool {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	c.nc.SetReadDeadline(time.Time{})
	c.settle()
	return c.flush() == nil
}

// appendBinGet appends a binary get's response, as binaryPacket's plain
// path gives it: a hit with its flags and CAS (and the key for GETK); a
// miss as Key not found ("Not found", or the key for GETK), nothing for
// the quiet variants; an upstream failure as an internal error.
func (r *asyncReq) appendBinGet(out []byte, it *memcache.Item, err error) []byte {
	c := r.c
	c.p.ctr.cmdGet.Add(1)
	loud, quiet := r.opcode.Loud()
	var key []byte
	if loud == protocol.OpGetK {
		key = r.keyBuf
	}
	switch {
	case it != nil:
		c.p.ctr.getHits.Add(1)
		var ext [4]byte
		binary.BigEndian.PutUint32(ext[:], it.Flags)
		return protocol.AppendResponse(out, r.opcode, protocol.StatusOK, r.opaque, it.CasID, ext[:], key, it.Value)
	case err == nil, errors.Is(err, memcache.ErrCacheMiss):
		c.p.ctr.getMisses.Add(1)
		switch {
		case quiet:
			return out
		case key != nil:
			return protocol.AppendResponse(out, r.opcode, protocol.StatusKeyNotFound, r.opaque, 0, nil, key, nil)
		}
		return protocol.AppendResponse(out, r.opcode, protocol.StatusKeyNotFound, r.opaque, 0, nil, nil, notFound)
	}
	c.p.ctr.getMisses.Add(1)
	status, msg := binError(r.u, loud, r.key, err)
	if msg == "" {
		msg = status.Text()
	}
	return protocol.AppendResponse(out, r.opcode, status, r.opaque, 0, nil, nil, []byte(msg))
}

var notFound = []byte("Not found")

// writeAsync is Flush's write: what the socket takes now, no waiting.
// It leaves the rest at the front of a.wout.
func (c *conn) writeAsync(fd uintptr) bool {
	a := &c.async
	a.wout, _ = c.writeNow(fd, a.wout)
	return true
}

// settle waits until every request in flight is answered and puts what
// Complete could not write in front of the next replies.
func (c *conn) settle() {
	a := &c.async
	if a.nsent == 0 {
		return
	}
	a.amu.Lock()
	if a.pending > 0 {
		a.waiting = true
		a.amu.Unlock()
		<-a.settled
		a.amu.Lock()
	}
	if len(a.pend) > 0 {
		c.out = append(c.out, a.pend...)
		a.pend = a.pend[:0]
	}
	if cap(a.pend) > 1<<20 {
		a.pend = nil
	}
	a.stalled = false
	a.amu.Unlock()
	a.nsent, a.writes, a.batchU = 0, false, nil
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
