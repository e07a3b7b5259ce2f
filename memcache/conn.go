package memcache

import (
	"context"
	"errors"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vbcache/vbcache/internal/rawio"
)

// A conn is one connection to one server, shared by every goroutine that
// picks it: requests are pipelined. The sending goroutine encodes its
// request into wbuf and queues its op under mu; whoever finds no write in
// progress writes wbuf out (taking along what others appended meanwhile),
// so concurrent requests leave in one write. When other requests are
// already in flight it yields once before writing, so that runnable
// goroutines can add theirs even when they share one P. One reader goroutine per conn
// parses responses in order and completes the op at the head of the
// queue.
//
// Deadlines: every op must be answered within timeout of its send, as
// gomemcache's per-request deadline has it, however the server trickles
// its bytes. The read deadline armed while ops are queued is never later
// than the oldest op's (the queue's front) send time plus timeout; it is
// armed lazily: when the queue becomes non-empty, and again when it
// passes while a later front's time is still to come (spuriousTimeout),
// so a busy conn moves its timer about once per timeout, not once per
// response. A conn whose front op's time passes, or whose read or write
// fails, or whose stream stops parsing, is failed: every queued op gets
// the error and the pool drops it. Answers (miss, NOT_STORED,
// SERVER_ERROR) never fail a conn.
//
// Closing: only the reader goroutine closes the socket, as it exits and
// outside any lock. Whoever fails the conn (a sender whose write failed,
// Close, the reader itself) sets the error under mu and sets a deadline
// in the past, which wakes the reader from its wait and the writer from
// a full socket; neither SetDeadline nor anything the failing side does
// waits for them. net.Conn.Close, by contrast, waits until no read is in
// progress on the descriptor: called under mu it deadlocked with a reader
// inside its RawRead callback that wanted mu, and called by the reader
// from inside that callback, with itself.
type conn struct {
	nc      net.Conn
	addr    net.Addr
	proto   Protocol
	timeout time.Duration

	inflight atomic.Int32 // ops queued and not completed
	failed   atomic.Bool  // err is set

	flushers []Flusher // the reader's: Completions to flush after a parse

	// mu protects the fields below. Nothing that waits for the socket's
	// reader or writer is done under it: no Close, Read or Write of nc
	// (SetDeadline, which is done under it, waits for neither), no
	// channel send, no Completion.
	mu      sync.Mutex
	wbuf    []byte  // encoded requests not yet written
	spare   []byte  // the buffer being written, for reuse
	writing bool    // a goroutine is in nc.Write
	q       opQueue // ops sent, awaiting responses, in order
	dead    []*op   // asynchronous ops failLocked failed, for unlock to complete
	err     error   // first failure; conn unusable once set
	closeNC bool    // failLocked could not wake the reader: unlock closes nc
	parsing *op     // the op the reader is parsing outside mu, if any

	// raw is nc's socket when nc is a plain one (rawio.Conn), else nil.
	raw syscall.RawConn
	// The writer's (the goroutine with writing set) state for writeStep.
	writeFn func(fd uintptr) bool
	wbufOut []byte
	werr    error

	rbuf       []byte        // reader goroutine only: read buffer, unparsed bytes rbuf[r:w]
	r, w       int           // reader goroutine only
	rerr       error         // reader goroutine only: why readStep left the poller's loop
	readerDone chan struct{} // closed when the reader goroutine exits, after it closed nc

	// readHook, when set (by a test, through Client.testReadHook), runs in
	// the reader after each read that brought bytes, before they are
	// parsed: on a plain socket, inside the RawRead callback.
	readHook func(*conn)
}

const (
	readBufSize = 16 << 10
	maxLine     = 2048 // longest response line a reply may have
)

func newConn(nc net.Conn, addr net.Addr, proto Protocol, timeout time.Duration, readHook func(*conn)) *conn {
	cn := &conn{nc: nc, addr: addr, proto: proto, timeout: timeout, readHook: readHook,
		rbuf: make([]byte, readBufSize), readerDone: make(chan struct{}), raw: rawio.Conn(nc)}
	cn.writeFn = cn.writeStep
	go cn.readLoop()
	return cn
}

// send encodes o's request, queues o and writes. Errors go to o (and to
// every other queued op) through fail; send itself reports only whether o
// was queued.
func (cn *conn) send(o *op) error {
	cn.mu.Lock()
	if cn.err != nil {
		err := cn.err
		cn.mu.Unlock()
		return err
	}
	cn.wbuf = o.appendRequest(cn.wbuf, cn.proto)
	o.sent = time.Now()
	if cn.q.len() == 0 {
		cn.armLocked(o.sent.Add(cn.timeout))
	}
	cn.q.push(o)
	cn.inflight.Add(1)
	if cn.writing {
		cn.mu.Unlock() // the writer will take our bytes along
		return nil
	}
	cn.writing = true
	if cn.q.len() > 1 {
		// Other requests are in flight, so more are likely on their way
		// from runnable goroutines: let them run first and append to wbuf,
		// so that one write carries them all. Without this, with few Ps
		// (GOMAXPROCS=1) every request would leave in its own write,
		// since no other goroutine runs while this one writes. A lone
		// request (a serial caller) is written at once.
		cn.mu.Unlock()
		runtime.Gosched()
		cn.mu.Lock()
	}
	for len(cn.wbuf) > 0 && cn.err == nil {
		buf := cn.wbuf
		cn.wbuf = cn.spare[:0]
		cn.mu.Unlock()
		cn.nc.SetWriteDeadline(time.Now().Add(cn.timeout))
		err := cn.write(buf)
		cn.mu.Lock()
		if cap(buf) <= 1<<20 {
			cn.spare = buf[:0]
		} else {
			cn.spare = nil // do not keep a huge value's buffer
		}
		if err != nil {
			cn.failLocked(err)
		}
	}
	cn.writing = false
	cn.unlock()
	return nil
}

// write writes buf, on a plain socket with rawio.Write (no scheduler
// bookkeeping, which would also wake the runtime's sysmon thread from its
// sleep on every write of a lightly loaded client) from inside the
// poller's write loop, which waits for the socket when it is full and
// applies the write deadline. The caller is the conn's one writer.
func (cn *conn) write(buf []byte) error {
	if cn.raw == nil {
		_, err := cn.nc.Write(buf)
		return err
	}
	cn.wbufOut, cn.werr = buf, nil
	err := cn.raw.Write(cn.writeFn)
	cn.wbufOut = nil
	if err != nil {
		return err
	}
	return cn.werr
}

// writeStep is write's callback: false waits until the socket takes more.
func (cn *conn) writeStep(fd uintptr) bool {
	n, err := rawio.Write(fd, cn.wbufOut)
	cn.wbufOut = cn.wbufOut[n:]
	if err == syscall.EAGAIN {
		return false
	}
	cn.werr = err
	return true
}

// armLocked sets the read deadline to t (zero: none). It is under mu so
// that a sender's arming and the reader's re-arming (spuriousTimeout) do
// not undo each other.
func (cn *conn) armLocked(t time.Time) {
	cn.nc.SetReadDeadline(t)
}

// aLongTimeAgo is a deadline that has passed: setting it wakes a blocked
// read or write at once.
var aLongTimeAgo = time.Unix(1, 0)

// failLocked marks the conn failed with err, wakes its reader and writer
// (the reader then closes the socket) and fails every queued op.
func (cn *conn) failLocked(err error) {
	if cn.err != nil {
		return
	}
	cn.err = err
	cn.failed.Store(true)
	if cn.nc.SetDeadline(aLongTimeAgo) != nil {
		// A conn that takes no deadline (a DialContext's own type) is
		// closed instead, after mu is released.
		cn.closeNC = true
	}
	for cn.q.len() > 0 {
		o := cn.q.pop()
		cn.inflight.Add(-1)
		if o == cn.parsing {
			continue // the reader completes it (parseBuffered)
		}
		o.err = err
		if o.cb != nil {
			cn.dead = append(cn.dead, o) // for unlock: not under mu
			continue
		}
		// A waiter (never a Flusher): its done channel has room for the
		// one send an op gets per use, so this send does not block.
		o.complete()
	}
}

// unlock releases mu, then completes the asynchronous ops a failure left
// in dead: a Completion does not run under mu.
func (cn *conn) unlock() {
	dead := cn.dead
	cn.dead = nil
	closeNC := cn.closeNC
	cn.closeNC = false
	cn.mu.Unlock()
	if closeNC {
		cn.nc.Close()
	}
	for _, o := range dead {
		if f := o.complete(); f != nil {
			f.Flush()
		}
	}
}

func (cn *conn) fail(err error) {
	cn.mu.Lock()
	cn.failLocked(err)
	cn.unlock()
}

// close shuts the conn down and waits for its reader, which closes the
// socket.
func (cn *conn) close() {
	cn.fail(errClosed)
	<-cn.readerDone
}

// readLoop parses responses for the queued ops until the conn fails, then
// closes the socket: the conn's one place that does, outside any lock and
// outside the poller's read callback.
func (cn *conn) readLoop() {
	defer close(cn.readerDone)
	defer cn.nc.Close()
	if cn.raw != nil {
		cn.readLoopRaw()
		return
	}
	for {
		if !cn.parseBuffered() {
			return
		}
		cn.makeRoom()
		n, err := cn.nc.Read(cn.rbuf[cn.w:])
		cn.w += n
		if n > 0 && cn.readHook != nil {
			cn.readHook(cn)
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && cn.spuriousTimeout() {
				continue
			}
			cn.fail(err)
			return
		}
	}
}

// readLoopRaw is readLoop for plain sockets: it runs inside the runtime
// poller's read loop (see internal/rawio), where readStep reads, parses
// and waits whenever its read came back short, so a conn waiting for its
// next responses costs no read(2) that finds nothing. One case escapes
// it: a server that closes the connection right after an answer, its FIN
// in the same readiness event, is noticed only when the conn is next used
// (the write draws a reset, which fails the conn and its ops). Servers
// close on their own when they shut down or time a connection out, and
// then no answer travels with the FIN.
func (cn *conn) readLoopRaw() {
	step := cn.readStep
	for {
		cn.rerr = nil
		if err := cn.raw.Read(step); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && cn.spuriousTimeout() {
				continue
			}
			cn.fail(err)
			return
		}
		if cn.rerr != errStopped {
			cn.fail(cn.rerr)
		}
		return
	}
}

// errStopped ends readStep when parseBuffered has stopped the conn.
var errStopped = errors.New("memcache: reader stopped")

// readStep is readLoopRaw's callback: true leaves the poller's loop, with
// the reason in cn.rerr.
func (cn *conn) readStep(fd uintptr) bool {
	for {
		cn.makeRoom()
		buf := cn.rbuf[cn.w:]
		n, wait, err := rawio.Fill(fd, buf)
		if wait {
			return false
		}
		if err != nil {
			cn.rerr = err
			return true
		}
		cn.w += n
		if cn.readHook != nil {
			cn.readHook(cn)
		}
		if !cn.parseBuffered() {
			cn.rerr = errStopped
			return true
		}
		if n < len(buf) {
			return false
		}
	}
}

// parseBuffered completes the queued ops whose responses are buffered. It
// returns false when the conn has failed (it may have failed it itself).
//
// The front op is parsed outside mu, marked as cn.parsing: a failLocked
// that runs meanwhile takes it off the queue but leaves it to the reader,
// which completes it with its answer (if the parse finished it) or with
// the conn's error, so that no op is completed twice or parsed into after
// its waiter has it back.
func (cn *conn) parseBuffered() bool {
	defer cn.flush() // the Flushers completed here, however it returns
	for cn.r < cn.w {
		cn.mu.Lock()
		if cn.err != nil {
			cn.mu.Unlock()
			return false
		}
		if cn.q.len() == 0 {
			cn.failLocked(errors.New("memcache: unexpected data from server"))
			cn.unlock()
			return false
		}
		o := cn.q.front()
		cn.parsing = o
		cn.mu.Unlock()
		n, done, err := o.parse(cn.rbuf[cn.r:cn.w], cn.proto)
		cn.mu.Lock()
		cn.parsing = nil
		if cn.err != nil {
			// The conn failed during the parse, and left o to us.
			if !done {
				o.err = cn.err
			}
			cn.mu.Unlock()
			cn.completed(o)
			return false
		}
		if err != nil {
			cn.failLocked(err)
			cn.unlock()
			return false
		}
		cn.r += n
		if !done {
			cn.mu.Unlock()
			break
		}
		cn.q.pop()
		cn.inflight.Add(-1)
		cn.mu.Unlock()
		cn.completed(o)
	}
	return true
}

// completed completes o, an op the reader parsed, keeping its Flusher for
// flush.
func (cn *conn) completed(o *op) {
	if f := o.complete(); f != nil {
		cn.flushers = append(cn.flushers, f)
	}
}

// flush calls Flush on the Flushers completed since the last flush (the
// reader's own list).
func (cn *conn) flush() {
	for i, f := range cn.flushers {
		f.Flush()
		cn.flushers[i] = nil
	}
	cn.flushers = cn.flushers[:0]
}

// makeRoom moves the partial response to the front of the read buffer,
// and grows the buffer when one response needs more than it holds.
func (cn *conn) makeRoom() {
	if cn.r == cn.w {
		cn.r, cn.w = 0, 0
	} else if cn.r > 0 && (cn.w == len(cn.rbuf) || cn.r > len(cn.rbuf)/2) {
		cn.w = copy(cn.rbuf, cn.rbuf[cn.r:cn.w])
		cn.r = 0
	}
	if cn.w == len(cn.rbuf) {
		nb := make([]byte, 2*len(cn.rbuf))
		copy(nb, cn.rbuf[cn.r:cn.w])
		cn.rbuf, cn.w, cn.r = nb, cn.w-cn.r, 0
	}
	if len(cn.rbuf) > readBufSize && cn.r == cn.w {
		cn.rbuf = make([]byte, readBufSize) // a big value passed; shrink back
	}
}

// spuriousTimeout decides what a read deadline that passed means. With no
// op queued it is an idle conn: clear the deadline and keep reading. If
// the oldest queued op was sent less than timeout ago (the op the
// deadline was armed for has been answered), arm the deadline for that op
// and keep reading. Otherwise the server is late: the caller fails the
// conn.
func (cn *conn) spuriousTimeout() bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.err != nil {
		return false
	}
	if cn.q.len() == 0 {
		cn.armLocked(time.Time{})
		return true
	}
	if due := cn.q.front().sent.Add(cn.timeout); time.Now().Before(due) {
		cn.armLocked(due)
		return true
	}
	return false
}

// opQueue is a FIFO ring of ops.
type opQueue struct {
	buf        []*op
	head, size int
}

func (q *opQueue) len() int { return q.size }

func (q *opQueue) push(o *op) {
	if q.size == len(q.buf) {
		n := make([]*op, max(8, 2*len(q.buf)))
		for i := 0; i < q.size; i++ {
			n[i] = q.buf[(q.head+i)%len(q.buf)]
		}
		q.buf, q.head = n, 0
	}
	q.buf[(q.head+q.size)%len(q.buf)] = o
	q.size++
}

func (q *opQueue) front() *op { return q.buf[q.head] }

func (q *opQueue) pop() *op {
	o := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) % len(q.buf)
	q.size--
	return o
}

// pool holds the conns to one server: at most max, opened on demand.
type pool struct {
	addr  net.Addr
	conns atomic.Pointer[[]*conn] // snapshot, replaced under mu
	// mu serialises changes to conns, and dials; protects dropped and
	// closed. A dial under it is bounded by the client's timeout, and
	// nothing that holds it waits for a conn's reader (closeAll waits
	// after releasing it), so a reader's Completion that starts a request
	// (and so may want mu) waits at most one dial.
	mu sync.Mutex
	// dropped are failed conns whose reader may still be exiting.
	dropped []*conn
	closed  bool // closeAll ran: the pool opens no conn
}

// pipelineDepth is how many requests may wait on every open conn before
// the pool opens another (up to max). Pipelining on a busy conn is cheaper
// than a new conn: one write and one read carry many requests.
const pipelineDepth = 8

// get returns a conn for a request: the least busy open conn, unless every
// one has pipelineDepth requests waiting and fewer than max are open, in
// which case it opens one.
func (p *pool) get(ctx context.Context, c *Client) (*conn, error) {
	if cn := p.pick(c.maxConns()); cn != nil {
		return cn, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errClosed
	}
	p.pruneLocked()
	var live []*conn
	if s := p.conns.Load(); s != nil {
		for _, cn := range *s {
			// A failed conn is dropped: failing closed its socket, so its
			// reader goroutine is returning on its own; closeAll still
			// waits for it.
			if !cn.failed.Load() {
				live = append(live, cn)
			} else {
				p.dropped = append(p.dropped, cn)
			}
		}
	}
	if cn := leastBusy(live); cn != nil && (cn.inflight.Load() < pipelineDepth || len(live) >= c.maxConns()) {
		p.conns.Store(&live)
		return cn, nil
	}
	if len(live) < c.maxConns() {
		nc, err := c.dial(ctx, p.addr)
		if err != nil {
			p.conns.Store(&live)
			return nil, err
		}
		cn := newConn(nc, p.addr, c.Protocol, c.netTimeout(), c.testReadHook)
		live = append(live, cn)
		p.conns.Store(&live)
		return cn, nil
	}
	p.conns.Store(&live)
	return leastBusy(live), nil
}

// leastBusy returns the conn with the fewest requests waiting (nil for
// none), starting the scan at a rotating index so that ties spread.
func leastBusy(conns []*conn) *conn {
	if len(conns) == 0 {
		return nil
	}
	best := conns[0]
	for _, cn := range conns[1:] {
		if cn.inflight.Load() < best.inflight.Load() {
			best = cn
		}
	}
	return best
}

// pick is get's lock-free fast path; nil means "take the slow path".
func (p *pool) pick(max int) *conn {
	s := p.conns.Load()
	if s == nil {
		return nil
	}
	conns := *s
	var best *conn
	bestN := int32(1 << 30)
	for _, cn := range conns {
		if cn.failed.Load() {
			return nil
		}
		if n := cn.inflight.Load(); n < bestN {
			best, bestN = cn, n
		}
	}
	if best == nil || (bestN >= pipelineDepth && len(conns) < max) {
		return nil
	}
	return best
}

// closeAll closes every conn and waits for their readers. The waits come
// after mu is released: a reader's Completion may want mu (it may start a
// request), and a reader that cannot finish cannot close its socket.
func (p *pool) closeAll() {
	p.mu.Lock()
	p.closed = true
	var conns []*conn
	if s := p.conns.Load(); s != nil {
		conns = append(conns, *s...) // a copy: pick may still read the snapshot
	}
	p.conns.Store(nil)
	conns = append(conns, p.dropped...)
	p.dropped = nil
	p.mu.Unlock()
	for _, cn := range conns {
		cn.close()
	}
}

// pruneLocked forgets dropped conns whose reader has exited.
func (p *pool) pruneLocked() {
	keep := p.dropped[:0]
	for _, cn := range p.dropped {
		select {
		case <-cn.readerDone:
		default:
			keep = append(keep, cn)
		}
	}
	clear(p.dropped[len(keep):])
	p.dropped = keep
}

func (c *Client) dial(ctx context.Context, addr net.Addr) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.netTimeout())
	defer cancel()
	dial := c.DialContext
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	nc, err := dial(ctx, addr.Network(), addr.String())
	if err == nil {
		if tc, ok := nc.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
		}
		return nc, nil
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil, &ConnectTimeoutError{addr}
	}
	return nil, err
}
