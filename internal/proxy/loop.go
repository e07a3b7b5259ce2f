package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/rawio"
	"github.com/vbcache/vbcache/memcache"
)

// # Event loops
//
// Over a pool, text clients are served by event loops, the way twemproxy's
// one thread serves everything: a loop owns an epoll set that holds both
// its client sockets and connections of its own to the pool's servers.
// One round of a loop reads every client that is ready and turns each
// complete get, gets, set, add or replace into a request on the server's
// connection (a multi-key get is split by server, as twemproxy fragments
// it); reads every server connection that is ready and matches its
// answers to the requests in order; then writes each server connection
// once, with every request the round gave it, and each client once, with
// every reply that is due, in request order. A request costs no goroutine
// switch: on the goroutine paths (proxy.go, async.go) a request and its
// answer each woke a goroutine, and the scheduler's park, netpoll and
// wake-up were the proxy's largest cost after the system calls
// (docs/PERFORMANCE.md). The answers to gets and storage commands are
// forwarded as the server sent them, so the client sees what memcached
// said, byte for byte. A get's answer is read with internal/protocol's
// reply grammar, the one the Go client reads it with, to find where it
// ends and which key a value is for.
//
// A server connection that has requests in flight holds new ones back
// until the server's next answer arrives, and then writes all of them in
// one write (Nagle's rule, applied to requests; up to holdMax bytes). On
// loopback a write costs its sender the receiver's TCP processing and
// wake-up, about 7 µs here, more than anything else a proxy does per
// request; at pipeline 1 requests trickle in one per round, and without
// the hold each one left in a write of its own (docs/PERFORMANCE.md).
// The delay is bounded by the answer already on its way; a connection
// with nothing in flight writes at once, so a lone client waits for
// nothing.
//
// Everything else leaves the loop: the first request the loop does not
// serve (any other command, a binary or malformed request, a key with
// control characters, a cluster upstream) waits until the connection's
// requests on the loop are answered, and the connection is then handed to
// a goroutine of its own (detach) with its unread input and unwritten
// replies, to be served as before the loops existed. It does not come
// back.
//
// Sockets are edge-triggered (EPOLLET). A client is read until a read comes
// back short, which proves its queue was empty (any later byte raises a
// fresh event), except after an event that reported the peer's shutdown
// (EPOLLRDHUP), when it is read until the end: a FIN that came with the
// last requests raises no event of its own. A client is read at most
// loopReadsPerTurn full buffers per round, so one that pipelines without
// pause takes turns with the others. EPOLLOUT is registered from the
// start, so a socket that would not take all the replies (or requests)
// reports when it drains without an epoll_ctl per request, which
// twemproxy pays to switch its interest.
//
// Each server connection serves the requests of the clients whose index
// modulo Config.ServerConnections picks it, so one client's requests to a
// server travel in order over one connection: a pipelined "set k" then
// "get k" reads its write. A reload switches the loop to the new
// upstream's servers at once (Reload wakes the loops); a client with
// requests in flight on the old one waits for their answers first, and
// the old connections close once they have answered. A server
// connection that fails (connect refused, reset, a timeout: no answer
// within Config.Timeout of the request or of its previous answer, or an
// answer the reply grammar refuses) fails every request in flight on it
// with memcached's SERVER_ERROR, as twemproxy does, and is reported to
// the selector (auto_eject_hosts).
//
// An idle loop parks in the runtime poller, which watches its epoll set
// as one more descriptor (as the node's loops do, internal/server), with
// a deadline while requests are in flight, for the timeouts.
//
// # Ownership
//
// A Proxy's first Serve starts one loop per P (GOMAXPROCS); each loop's
// goroutine is owned by the Proxy (Close stops it and waits). Only that
// goroutine touches the loop's clients, server connections and requests;
// the accept goroutine hands new clients over through adds, under mu,
// and a wake-up pipe.
//
// Config.NoEventLoops turns the loops off, for comparisons and tests.

const (
	maxLoopEvents    = 256
	loopReadsPerTurn = 4
	loopMaxQueued    = 1024    // a client's requests in flight before its input waits
	loopMaxOut       = 4 << 20 // a client's unwritten replies before its input waits
	loopMaxRead      = 256 << 10
	holdMax          = 16 << 10 // requests held for a server's answer (see writeUp) up to this many bytes
	holdReqs         = 8        // and this many requests
)

// Why a client's input is not being served.
const (
	waitNone   uint8 = iota
	waitDrain        // requests on an earlier upstream: wait for their answers
	waitRoom         // too many requests in flight or replies unwritten
	waitDetach       // a request the loop does not serve: detach once answered
	waitClose        // quit or end of input: close once answered
)

// loopEntry is what a descriptor of a loop's epoll set is.
type loopEntry struct {
	c  *conn
	up *lup
}

// ploop is one event loop.
type ploop struct {
	p  *Proxy
	pl *rawio.Poller // accept, Reload and Close wake it

	// mu protects adds and stopped. Under it add may close a duplicated
	// descriptor no poller holds (a plain close(2), which waits for
	// nothing); the wake-ups (a non-blocking pipe write) come after it.
	// Lock order: mu, then p.mu (add clears c.nc under both); nothing
	// takes mu while holding p.mu.
	mu      sync.Mutex
	adds    []*conn
	stopped bool

	// The loop goroutine's alone.
	tab      []loopEntry // by descriptor
	gen      *upstream   // the upstream ups serve
	ups      map[net.Addr][]*lup
	all      []*lup // every server connection, of every generation
	rq, rq2  []*conn
	wq       []*lup
	cq       []*conn
	dq       []*conn
	free     []*lreq
	nconn    int
	inflight int // requests in flight on all server connections
	now      time.Time
}

// loopConn is the loop's state of a client connection (conn) while a loop
// serves it: lp is nil off a loop, when nc is set. Only the loop's
// goroutine uses these.
type loopConn struct {
	lp                       *ploop
	lfd                      int
	lconnIx                  int
	lgen                     *upstream // the upstream of the requests in lq
	lq                       []*lreq   // requests in order, from lqh
	lqh                      int
	lwait                    uint8
	lhup, lunread, lwblocked bool
	linRQ, linCQ, linDQ      bool
}

// lup is one connection from a loop to one server.
type lup struct {
	u          *upstream // the generation it serves
	addr       net.Addr
	st         *srvStat
	fd         int // -1: not connected
	connecting bool
	hup        bool
	failed     bool // a failure was reported to the selector
	inWQ       bool
	wblocked   bool   // the socket is full: wait for EPOLLOUT
	unanswered int    // requests written and not answered yet
	wbuf       []byte // requests not yet written
	rbuf       []byte // answers read, unparsed rbuf[r:w]
	r, w       int
	q          []lfrag // requests sent or queued, in order, from qh
	qh         int
	deadline   time.Time
}

// lfrag is one request on a server connection: a store, or the part of
// a get whose keys live on that server.
type lfrag struct {
	r      *lreq
	lo, hi int32 // r.order[lo:hi]: the key indices asked for (multi-server gets)
	start  time.Time
}

// lreq is one client request on a loop.
type lreq struct {
	c       *conn
	store   bool
	noreply bool
	done    bool
	frags   int  // fragments not yet answered
	split   bool // a get over several servers: values gathered per key
	nkeys   int
	hits    int
	failed  bool   // out holds a failure line: later answers are dropped
	out     []byte // the reply
	// A split get's keys (back to back in kb), the server order of
	// their indices, and each key's VALUE block in vals (off -1: none).
	kb    []byte
	kend  []int32
	order []int32
	blk   []span
	vals  []byte
	srv   []*lup
}

type span struct{ off, n int32 }

// startLoops creates and starts the loops (Serve, once), unless
// Config.NoEventLoops. A loop that cannot be created is left out.
func (p *Proxy) startLoops() {
	if p.noLoops {
		return
	}
	var loops []*ploop
	defer func() { p.loops.Store(&loops) }()
	n := p.Loops
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	for range n {
		l, err := newPloop(p)
		if err != nil {
			if p.Logf != nil {
				p.Logf("vbcache proxy: event loop: %v; serving with goroutines", err)
			}
			break
		}
		loops = append(loops, l)
		p.wg.Add(1)
		go l.run()
	}
}

func newPloop(p *Proxy) (*ploop, error) {
	pl, err := rawio.NewPoller(maxLoopEvents)
	if err != nil {
		return nil, err
	}
	return &ploop{p: p, pl: pl, ups: make(map[net.Addr][]*lup)}, nil
}

// pickLoop chooses the loop for a new client on nc (round robin), or nil:
// no loops, not a plain socket, or a cluster upstream.
func (p *Proxy) pickLoop(nc net.Conn) *ploop {
	loops := p.loopList()
	if len(loops) == 0 || p.cur.Load().cluster {
		return nil
	}
	switch nc.(type) {
	case *net.TCPConn, *net.UnixConn:
	default:
		return nil
	}
	return loops[p.nextLoop.Add(1)%uint64(len(loops))]
}

// loopList is the Proxy's event loops (none before Serve).
func (p *Proxy) loopList() []*ploop {
	if l := p.loops.Load(); l != nil {
		return *l
	}
	return nil
}

// add hands c, accepted on nc, to the loop: the loop gets a duplicate of
// the descriptor and nc is closed (which takes the original out of the
// runtime poller). It returns false, nc untouched, when that fails.
func (l *ploop) add(c *conn, nc net.Conn) bool {
	fd, ok := rawio.Dup(nc)
	if !ok {
		return false
	}
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		syscall.Close(fd)
		return false
	}
	// c.nc is read under p.mu (Proxy.close), so it is cleared under
	// p.mu; the loop, which takes c from adds, does not read it.
	l.p.mu.Lock()
	c.nc = nil
	l.p.mu.Unlock()
	c.raw, c.lp, c.lfd = nil, l, fd
	l.adds = append(l.adds, c)
	l.mu.Unlock()
	nc.Close()
	l.pl.Wake()
	return true
}

// stop makes the loop close everything and end (Close).
func (l *ploop) stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
	l.pl.Wake()
}

// run is the loop's goroutine.
func (l *ploop) run() {
	defer l.p.wg.Done()
	for {
		n, ok := l.wait(len(l.rq)+len(l.wq)+len(l.cq)+len(l.dq) == 0)
		l.now = time.Now()
		if !ok {
			l.shutdown()
			return
		}
		for _, ev := range l.pl.Events[:n] {
			fd := int(ev.Fd)
			if fd == l.pl.WakeFD() {
				if l.wakeUp() {
					l.shutdown()
					return
				}
				continue
			}
			if fd >= len(l.tab) {
				continue
			}
			switch e := l.tab[fd]; {
			case e.c != nil:
				l.clientEvent(e.c, ev.Events)
			case e.up != nil:
				l.upEvent(e.up, ev.Events)
			}
		}
		if len(l.rq) > 0 {
			rq := l.rq
			l.rq = l.rq2[:0]
			for _, c := range rq {
				c.linRQ = false
				if c.lp == l {
					l.serveClient(c)
				}
			}
			clear(rq)
			l.rq2 = rq[:0]
		}
		// The servers' writes first: a failure there (a refused connect)
		// answers requests, and those replies go out in this round.
		for _, up := range l.wq {
			up.inWQ = false
			l.writeUp(up)
		}
		clear(l.wq)
		l.wq = l.wq[:0]
		if l.inflight > 0 {
			l.expire()
		}
		for _, c := range l.cq {
			c.linCQ = false
			if c.lp == l {
				l.writeClient(c)
			}
		}
		clear(l.cq)
		l.cq = l.cq[:0]
		for _, c := range l.dq {
			c.linDQ = false
			if c.lp == l {
				l.finishClient(c)
			}
		}
		clear(l.dq)
		l.dq = l.dq[:0]
	}
}

// wait returns the next ready events; with none and block set it parks
// (rawio.Poller.Park) until there are some, or until the earliest request
// deadline.
func (l *ploop) wait(block bool) (n int, ok bool) {
	if !block {
		return l.pl.Poll(), true
	}
	// A deadline armed for a request answered since only wakes the loop
	// early, to find nothing late: it is replaced only by an earlier one.
	var d time.Time
	if l.inflight > 0 {
		if e := l.earliest(); !e.IsZero() && (l.pl.Armed().IsZero() || e.Before(l.pl.Armed())) {
			d = e
		}
	}
	return l.pl.Park(d)
}

// wakeUp drains the wake-up pipe and takes what it announced: new
// clients, a new upstream, or the end (true).
func (l *ploop) wakeUp() (stop bool) {
	l.pl.DrainWake()
	l.mu.Lock()
	adds, stop := l.adds, l.stopped
	l.adds = nil
	l.mu.Unlock()
	if stop {
		l.adds = adds // shutdown closes them
		return true
	}
	for _, c := range adds {
		l.register(c)
	}
	if u := l.p.cur.Load(); l.gen != nil && l.gen != u {
		l.switchGen(u)
	}
	return false
}

// register adds a new client's descriptor to the epoll set.
func (l *ploop) register(c *conn) {
	fd := c.lfd
	for fd >= len(l.tab) {
		l.tab = append(l.tab, loopEntry{})
	}
	l.tab[fd] = loopEntry{c: c}
	c.lconnIx = l.nconn
	l.nconn++
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLOUT | syscall.EPOLLRDHUP | (syscall.EPOLLET & 0xffffffff), Fd: int32(fd)}
	if err := syscall.EpollCtl(l.pl.FD, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		l.closeClient(c)
	}
}

// shutdown closes every client and server connection of the loop and
// its descriptors (Close).
func (l *ploop) shutdown() {
	for _, c := range l.adds {
		l.closeClient(c)
	}
	l.adds = nil
	for _, e := range l.tab {
		if e.c != nil {
			l.closeClient(e.c)
		}
	}
	for _, up := range append([]*lup(nil), l.all...) {
		l.closeUp(up)
	}
	l.pl.Close()
}

// ---- clients ----

func (l *ploop) clientEvent(c *conn, ev uint32) {
	if ev&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
		c.lhup = true
	}
	if ev&syscall.EPOLLOUT != 0 && c.lwblocked {
		c.lwblocked = false
		l.toCQ(c)
	}
	if ev&(syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
		c.lunread = true
		l.serveClient(c)
	}
}

// serveClient serves c's buffered input, then reads and serves until its
// socket is drained, its turn is up or its input must wait.
func (l *ploop) serveClient(c *conn) {
	need := l.input(c)
	for reads := 0; c.lunread && c.lwait == waitNone && c.lp == l; reads++ {
		if reads == loopReadsPerTurn {
			l.toRQ(c)
			return
		}
		c.makeRoom(need)
		buf := c.rbuf[c.w:]
		if len(buf) > loopMaxRead {
			buf = buf[:loopMaxRead]
		}
		n, err := rawio.Read(uintptr(c.lfd), buf)
		if err == syscall.EAGAIN {
			c.lunread = false
			return
		}
		if err != nil {
			l.closeClient(c)
			return
		}
		if n == 0 {
			c.lunread = false
			c.lwait = waitClose
			l.settled(c)
			return
		}
		c.w += n
		l.p.ctr.bytesRead.Add(int64(n))
		if n < len(buf) && !c.lhup {
			c.lunread = false
		}
		need = l.input(c)
	}
}

// input serves the complete requests buffered from c while its input
// may go on. It returns how many bytes from c.r the next request needs,
// when that is known.
func (l *ploop) input(c *conn) (need int) {
	for c.r < c.w && c.lwait == waitNone {
		if len(c.lq)-c.lqh >= loopMaxQueued || len(c.out) >= loopMaxOut {
			c.lwait = waitRoom
			return 0
		}
		data := c.rbuf[c.r:c.w]
		if c.mode == 0 {
			c.mode = 1
			if data[0] == protocol.MagicRequest {
				c.mode = 2
			}
		}
		if c.mode != 1 {
			l.wantDetach(c)
			return 0
		}
		nl := bytes.IndexByte(data, '\n')
		if nl < 0 {
			if len(data) > protocol.LineMaxNoNewline {
				l.wantDetach(c) // the goroutine path knows memcached's rules for long lines
			}
			return 0
		}
		r := &c.req
		protocol.ParseTextRequest(protocol.TrimLine(data[:nl]), r)
		used, more := l.command(c, r, data[nl+1:])
		switch {
		case more > 0:
			return nl + 1 + more
		case used < 0:
			return 0 // waiting, or detaching: the command is served later
		}
		c.r += nl + 1 + used
	}
	return 0
}

// command starts r, the request on c's next line, rest being the bytes
// after the line. It returns the bytes of rest used, more > 0 when the
// request needs that many bytes of rest first, or used -1 when the
// request is not started (c's input waits). A request that did not parse
// is the goroutine path's to answer: it parses the line again.
func (l *ploop) command(c *conn, r *protocol.TextRequest, rest []byte) (used, more int) {
	t := &r.Tokens
	if r.Err != "" || t.Rest != nil {
		l.wantDetach(c)
		return -1, 0
	}
	switch r.Cmd {
	case protocol.CmdGet, protocol.CmdGets:
		for i := 1; i < t.N-1; i++ {
			if !memcache.LegalKey(t.T[i]) {
				l.wantDetach(c)
				return -1, 0
			}
		}
		if !l.mayStart(c) {
			return -1, 0
		}
		l.startGet(c, t, r.Cmd == protocol.CmdGets)
		return 0, 0
	case protocol.CmdSet, protocol.CmdAdd, protocol.CmdReplace:
		n := r.Bytes
		if !memcache.LegalKey(r.Key) || n > maxBody {
			break
		}
		if len(rest) < n {
			return 0, n
		}
		if rest[n-2] != '\r' || rest[n-1] != '\n' {
			break
		}
		if !l.mayStart(c) {
			return -1, 0
		}
		l.startStore(c, t, rest[:n])
		return n, 0
	case protocol.CmdQuit:
		if t.N == 2 {
			c.lwait = waitClose
			l.settled(c)
			return 0, 0
		}
	}
	l.wantDetach(c)
	return -1, 0
}

// mayStart makes sure a request of c may start now: the upstream is a pool
// (else c detaches), and c has nothing in flight on an earlier one (else
// c waits for it).
func (l *ploop) mayStart(c *conn) bool {
	u := l.p.cur.Load()
	if u.cluster {
		l.wantDetach(c)
		return false
	}
	if u != l.gen {
		l.switchGen(u)
	}
	if c.lgen != u {
		if c.lqh < len(c.lq) {
			c.lwait = waitDrain
			return false
		}
		c.lgen = u
	}
	return true
}

// wantDetach stops c's input at the request the loop does not serve; c
// leaves the loop once its requests on it are answered.
func (l *ploop) wantDetach(c *conn) {
	c.lwait = waitDetach
	l.settled(c)
}

// settled is called when c's requests, replies or input state changed:
// it lets waiting input go on, or queues c to leave the loop.
func (l *ploop) settled(c *conn) {
	empty := c.lqh == len(c.lq)
	switch c.lwait {
	case waitDetach:
		if empty {
			l.toDQ(c)
		}
	case waitClose:
		if empty && len(c.out) == 0 {
			l.toDQ(c)
		}
	case waitDrain:
		if empty {
			c.lwait = waitNone
			l.toRQ(c)
		}
	case waitRoom:
		if len(c.lq)-c.lqh <= loopMaxQueued/2 && len(c.out) <= loopMaxOut/2 {
			c.lwait = waitNone
			l.toRQ(c)
		}
	}
}

func (l *ploop) toRQ(c *conn) {
	if !c.linRQ {
		c.linRQ = true
		l.rq = append(l.rq, c)
	}
}

func (l *ploop) toCQ(c *conn) {
	if !c.linCQ {
		c.linCQ = true
		l.cq = append(l.cq, c)
	}
}

func (l *ploop) toDQ(c *conn) {
	if !c.linDQ {
		c.linDQ = true
		l.dq = append(l.dq, c)
	}
}

// writeClient writes c's replies, as much as the socket takes.
func (l *ploop) writeClient(c *conn) {
	if c.lwblocked || len(c.out) == 0 {
		return
	}
	n, err := rawio.Write(uintptr(c.lfd), c.out)
	l.p.ctr.bytesWritten.Add(int64(n))
	switch {
	case err == syscall.EAGAIN:
		c.out = c.out[:copy(c.out, c.out[n:])]
		c.lwblocked = true
	case err != nil:
		l.closeClient(c)
		return
	default:
		c.resetOut()
	}
	l.settled(c)
}

// finishClient ends a client that is done with the loop: closed after
// quit or the end of its input, else detached.
func (l *ploop) finishClient(c *conn) {
	switch {
	case c.lqh != len(c.lq):
		return // queued when empty; nothing starts after that, but be safe
	case c.lwait == waitClose:
		l.closeClient(c)
	case c.lwait == waitDetach:
		l.detach(c)
	}
}

// closeClient closes a client of the loop. Its requests in flight are
// answered to no one.
func (l *ploop) closeClient(c *conn) {
	if c.lfd >= 0 {
		syscall.Close(c.lfd)
		if c.lfd < len(l.tab) {
			l.tab[c.lfd] = loopEntry{}
		}
	}
	for _, r := range c.lq[c.lqh:] {
		r.c = nil
		if r.frags == 0 {
			l.freeReq(r)
		}
	}
	clear(c.lq)
	c.lq, c.lqh = c.lq[:0], 0
	c.lp, c.lfd = nil, -1
	p := c.p
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	p.ctr.currConns.Add(-1)
}

// detach hands c to a goroutine of its own (see the file comment).
func (l *ploop) detach(c *conn) {
	fd := c.lfd
	syscall.EpollCtl(l.pl.FD, syscall.EPOLL_CTL_DEL, fd, nil)
	l.tab[fd] = loopEntry{}
	c.lp, c.lfd = nil, -1
	c.lq, c.lqh = nil, 0
	f := os.NewFile(uintptr(fd), "")
	nc, err := net.FileConn(f)
	f.Close()
	p := c.p
	p.mu.Lock()
	if err != nil {
		delete(p.conns, c)
		p.mu.Unlock()
		p.ctr.currConns.Add(-1)
		return
	}
	c.nc, c.raw = nc, rawio.Conn(nc)
	if p.closed {
		nc.Close() // under p.mu: nobody reads nc yet, so its Close waits for nothing
	}
	p.wg.Add(1)
	p.mu.Unlock()
	go c.serve()
}

// ---- requests ----

func (l *ploop) newReq(c *conn) *lreq {
	var r *lreq
	if n := len(l.free); n > 0 {
		r = l.free[n-1]
		l.free = l.free[:n-1]
	} else {
		r = new(lreq)
	}
	r.c = c
	c.lq = append(c.lq, r)
	l.p.ctr.fastPath.Add(1)
	return r
}

func (l *ploop) freeReq(r *lreq) {
	*r = lreq{out: r.out[:0], kb: r.kb[:0], kend: r.kend[:0], order: r.order[:0], blk: r.blk[:0], vals: r.vals[:0], srv: r.srv[:0]}
	if cap(r.out) > 1<<20 {
		r.out = nil
	}
	if cap(r.vals) > 1<<20 {
		r.vals = nil
	}
	l.free = append(l.free, r)
}

// pick returns the loop's connection to key's server, or the error.
func (l *ploop) pick(c *conn, key []byte) (*lup, error) {
	addr, err := l.gen.sel.PickServer(unsafe.String(unsafe.SliceData(key), len(key)))
	if err != nil {
		return nil, err
	}
	ups := l.ups[addr]
	if ups == nil {
		ups = make([]*lup, l.gen.cfg.conns())
		l.ups[addr] = ups
	}
	i := c.lconnIx % len(ups)
	up := ups[i]
	if up == nil {
		up = &lup{u: l.gen, addr: addr, st: l.gen.byAddr[addr], fd: -1}
		if up.st == nil {
			up.st = l.gen.st.get(addr.String())
		}
		ups[i] = up
		l.all = append(l.all, up)
	}
	return up, nil
}

// startGet starts a get or gets of t's keys.
func (l *ploop) startGet(c *conn, t *protocol.Tokens, gets bool) {
	r := l.newReq(c)
	r.nkeys = t.N - 2
	verb := "get "
	if gets {
		verb = "gets "
	}
	if r.nkeys == 1 {
		up, err := l.pick(c, t.T[1])
		if err != nil {
			l.failEarly(r, t.T[1], err)
			return
		}
		up.wbuf = append(up.wbuf, verb...)
		up.wbuf = append(up.wbuf, t.T[1]...)
		up.wbuf = append(up.wbuf, '\r', '\n')
		l.push(up, r, 0, 0)
		return
	}
	// Several keys: find each one's server.
	for i := 1; i < t.N-1; i++ {
		up, err := l.pick(c, t.T[i])
		if err != nil {
			l.failEarly(r, t.T[i], err)
			return
		}
		r.srv = append(r.srv, up)
		r.kb = append(r.kb, t.T[i]...)
		r.kend = append(r.kend, int32(len(r.kb)))
	}
	first := r.srv[0]
	r.split = false
	for _, up := range r.srv[1:] {
		if up != first {
			r.split = true
			break
		}
	}
	if !r.split {
		first.wbuf = append(first.wbuf, verb[:len(verb)-1]...)
		for i := 1; i < t.N-1; i++ {
			first.wbuf = append(first.wbuf, ' ')
			first.wbuf = append(first.wbuf, t.T[i]...)
		}
		first.wbuf = append(first.wbuf, '\r', '\n')
		l.push(first, r, 0, 0)
		return
	}
	for range r.nkeys {
		r.blk = append(r.blk, span{off: -1})
	}
	for i, up := range r.srv {
		if up == nil {
			continue // taken by an earlier server's fragment
		}
		lo := int32(len(r.order))
		up.wbuf = append(up.wbuf, verb[:len(verb)-1]...)
		for j := i; j < len(r.srv); j++ {
			if r.srv[j] != up {
				continue
			}
			r.srv[j] = nil
			r.order = append(r.order, int32(j))
			up.wbuf = append(up.wbuf, ' ')
			up.wbuf = append(up.wbuf, r.key(j)...)
		}
		up.wbuf = append(up.wbuf, '\r', '\n')
		l.push(up, r, lo, int32(len(r.order)))
	}
}

// key is a split get's key i.
func (r *lreq) key(i int) []byte {
	from := int32(0)
	if i > 0 {
		from = r.kend[i-1]
	}
	return r.kb[from:r.kend[i]]
}

// startStore starts a set, add or replace; data is the value with its
// "\r\n".
func (l *ploop) startStore(c *conn, t *protocol.Tokens, data []byte) {
	r := l.newReq(c)
	r.store = true
	r.noreply = string(t.T[t.N-2]) == "noreply"
	l.p.ctr.cmdSet.Add(1)
	up, err := l.pick(c, t.T[1])
	if err != nil {
		l.failEarly(r, t.T[1], err)
		return
	}
	for i := 0; i < 5; i++ {
		up.wbuf = append(up.wbuf, t.T[i]...)
		if i < 4 {
			up.wbuf = append(up.wbuf, ' ')
		}
	}
	up.wbuf = append(up.wbuf, '\r', '\n')
	up.wbuf = append(up.wbuf, data...)
	l.push(up, r, 0, 0)
}

// push queues a request fragment on up, to be written this round.
func (l *ploop) push(up *lup, r *lreq, lo, hi int32) {
	if up.qh == len(up.q) {
		up.deadline = l.now.Add(up.u.timeout)
	}
	up.q = append(up.q, lfrag{r: r, lo: lo, hi: hi, start: l.now})
	r.frags++
	l.inflight++
	if !up.inWQ {
		up.inWQ = true
		l.wq = append(l.wq, up)
	}
}

// failEarly answers a request that could not be sent (no server).
func (l *ploop) failEarly(r *lreq, key []byte, err error) {
	r.fail(failReply(l.gen, string(key), err)) // allocates: rare
	l.finish(r)
}

// fail makes r's reply the failure line s (the first failure wins).
func (r *lreq) fail(s string) {
	if r.failed {
		return
	}
	r.failed = true
	r.out = append(r.out[:0], s...)
	r.out = append(r.out, '\r', '\n')
}

// fragDone ends one fragment of r; the last one finishes r.
func (l *ploop) fragDone(r *lreq) {
	r.frags--
	l.inflight--
	if r.frags == 0 {
		l.finish(r)
	}
}

// finish completes r: its reply, and those after it that are complete,
// go to the client in order.
func (l *ploop) finish(r *lreq) {
	c := r.c
	if !r.store {
		l.p.ctr.cmdGet.Add(int64(r.nkeys))
		l.p.ctr.getHits.Add(int64(r.hits))
		l.p.ctr.getMisses.Add(int64(r.nkeys - r.hits))
		if !r.failed {
			if r.split {
				for _, b := range r.blk {
					if b.off >= 0 {
						r.out = append(r.out, r.vals[b.off:b.off+b.n]...)
					}
				}
			}
			r.out = append(r.out, "END\r\n"...)
		}
	} else if r.noreply {
		r.out = r.out[:0]
	}
	if c == nil {
		l.freeReq(r)
		return
	}
	r.done = true
	for c.lqh < len(c.lq) && c.lq[c.lqh].done {
		h := c.lq[c.lqh]
		c.lq[c.lqh] = nil
		c.lqh++
		c.out = append(c.out, h.out...)
		l.freeReq(h)
	}
	if c.lqh == len(c.lq) {
		c.lq, c.lqh = c.lq[:0], 0
	}
	if len(c.out) > 0 {
		l.toCQ(c)
	}
	l.settled(c)
}

// ---- server connections ----

func (l *ploop) upEvent(up *lup, ev uint32) {
	if up.connecting {
		if ev&(syscall.EPOLLOUT|syscall.EPOLLERR|syscall.EPOLLHUP) != 0 {
			l.connected(up)
		}
		return
	}
	if ev&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
		up.hup = true
	}
	if ev&syscall.EPOLLOUT != 0 && up.wblocked {
		up.wblocked = false
		l.toWQ(up)
	}
	if ev&(syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
		l.readUp(up)
	}
}

func (l *ploop) toWQ(up *lup) {
	if !up.inWQ {
		up.inWQ = true
		l.wq = append(l.wq, up)
	}
}

// writeUp writes up's queued requests, connecting first if need be.
func (l *ploop) writeUp(up *lup) {
	if up.fd < 0 {
		if up.qh == len(up.q) {
			return
		}
		if err := l.connect(up); err != nil {
			l.failUp(up, err)
		}
		return
	}
	if up.connecting || up.wblocked || len(up.wbuf) == 0 {
		return
	}
	if up.unanswered > 0 && len(up.q)-up.qh-up.unanswered < holdReqs && len(up.wbuf) < holdMax && !l.p.noHold {
		return // readUp writes them when the next answer comes
	}
	up.unanswered = len(up.q) - up.qh
	n, err := rawio.Write(uintptr(up.fd), up.wbuf)
	switch {
	case err == syscall.EAGAIN:
		up.wbuf = up.wbuf[:copy(up.wbuf, up.wbuf[n:])]
		up.wblocked = true
		up.unanswered = 0 // no holding back the rest: it may be all that was sent
	case err != nil:
		l.failUp(up, &net.OpError{Op: "write", Net: up.addr.Network(), Addr: up.addr, Err: os.NewSyscallError("write", err)})
	default:
		if cap(up.wbuf) > 1<<20 {
			up.wbuf = nil
		} else {
			up.wbuf = up.wbuf[:0]
		}
	}
}

// connect starts a non-blocking connect of up to its server.
func (l *ploop) connect(up *lup) error {
	dialErr := func(err error) error {
		return &net.OpError{Op: "dial", Net: up.addr.Network(), Addr: up.addr, Err: err}
	}
	var sa syscall.Sockaddr
	family := syscall.AF_INET
	addr := up.addr
	switch addr.Network() {
	case "tcp", "tcp4", "tcp6":
		a, err := net.ResolveTCPAddr(addr.Network(), addr.String())
		if err != nil {
			return dialErr(err)
		}
		addr = a
	case "unix":
		addr = &net.UnixAddr{Net: "unix", Name: addr.String()}
	}
	switch a := addr.(type) {
	case *net.TCPAddr:
		if ip4 := a.IP.To4(); ip4 != nil {
			s := &syscall.SockaddrInet4{Port: a.Port}
			copy(s.Addr[:], ip4)
			sa = s
		} else {
			s := &syscall.SockaddrInet6{Port: a.Port}
			copy(s.Addr[:], a.IP.To16())
			if a.Zone != "" {
				if ifi, err := net.InterfaceByName(a.Zone); err == nil {
					s.ZoneId = uint32(ifi.Index)
				}
			}
			sa, family = s, syscall.AF_INET6
		}
	case *net.UnixAddr:
		sa, family = &syscall.SockaddrUnix{Name: a.Name}, syscall.AF_UNIX
	default:
		return dialErr(errors.New("unsupported address"))
	}
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return dialErr(os.NewSyscallError("socket", err))
	}
	if family != syscall.AF_UNIX {
		syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
	}
	err = syscall.Connect(fd, sa)
	if err != nil && err != syscall.EINPROGRESS {
		syscall.Close(fd)
		return dialErr(os.NewSyscallError("connect", err))
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLOUT | syscall.EPOLLRDHUP | (syscall.EPOLLET & 0xffffffff), Fd: int32(fd)}
	if err := syscall.EpollCtl(l.pl.FD, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		syscall.Close(fd)
		return dialErr(os.NewSyscallError("epoll_ctl", err))
	}
	for fd >= len(l.tab) {
		l.tab = append(l.tab, loopEntry{})
	}
	l.tab[fd] = loopEntry{up: up}
	up.fd, up.connecting, up.hup, up.wblocked = fd, true, false, false
	up.st.conns.Add(1)
	up.st.totalConns.Add(1)
	return nil
}

// connected finishes a connect: on success the queued requests go.
func (l *ploop) connected(up *lup) {
	errno, err := syscall.GetsockoptInt(up.fd, syscall.SOL_SOCKET, syscall.SO_ERROR)
	if err == nil && errno != 0 {
		err = syscall.Errno(errno)
	}
	if err != nil {
		l.failUp(up, &net.OpError{Op: "dial", Net: up.addr.Network(), Addr: up.addr, Err: os.NewSyscallError("connect", err)})
		return
	}
	up.connecting = false
	l.toWQ(up)
}

// readUp reads up's answers and completes the requests they answer.
func (l *ploop) readUp(up *lup) {
	for up.fd >= 0 {
		if up.r == up.w {
			up.r, up.w = 0, 0
			if len(up.rbuf) > 1<<20 {
				up.rbuf = nil // a huge value grew it
			}
		}
		if up.rbuf == nil {
			up.rbuf = make([]byte, readBufSize)
		}
		if up.w == len(up.rbuf) {
			if up.r > 0 {
				up.w = copy(up.rbuf, up.rbuf[up.r:up.w])
				up.r = 0
			} else {
				nb := make([]byte, 2*len(up.rbuf))
				copy(nb, up.rbuf[:up.w])
				up.rbuf = nb
			}
		}
		buf := up.rbuf[up.w:]
		n, err := rawio.Read(uintptr(up.fd), buf)
		if err == syscall.EAGAIN {
			return
		}
		if err != nil || n == 0 {
			if err == nil {
				err = io.ErrUnexpectedEOF
			} else {
				err = &net.OpError{Op: "read", Net: up.addr.Network(), Addr: up.addr, Err: os.NewSyscallError("read", err)}
			}
			l.failUp(up, err)
			return
		}
		up.w += n
		if err := l.parseUp(up); err != nil {
			l.failUp(up, err)
			return
		}
		if len(up.wbuf) > 0 {
			up.unanswered = 0 // the server is answering: what was held goes now
			l.toWQ(up)
		}
		if n < len(buf) && !up.hup {
			return
		}
	}
}

var errUpstreamProtocol = errors.New("memcache: unexpected answer from the server")

// parseUp matches the answers buffered on up to its requests in order.
// The answers to storage commands are forwarded whatever they say; a
// get's are read with internal/protocol's reply grammar, and anything it
// refuses fails the server connection.
func (l *ploop) parseUp(up *lup) error {
	progressed := false
	for up.qh < len(up.q) {
		data := up.rbuf[up.r:up.w]
		nl := bytes.IndexByte(data, '\n')
		if nl < 0 {
			if len(data) > 2048 {
				return errUpstreamProtocol
			}
			break
		}
		f := &up.q[up.qh]
		r := f.r
		line := data[:nl+1]
		if r.store {
			if !r.failed {
				r.out = append(r.out, line...)
			}
			up.r += nl + 1
			l.fragOK(up, f)
			progressed = true
			continue
		}
		if nl == 0 || data[nl-1] != '\r' {
			return errUpstreamProtocol
		}
		text := data[:nl-1]
		switch k := protocol.ClassifyReply(text); {
		case k == protocol.ReplyValue:
			v, ok := protocol.ParseValueLine(text)
			if !ok {
				return errUpstreamProtocol
			}
			total := nl + 1 + v.Size + 2
			if len(data) < total {
				if total > len(up.rbuf) {
					nb := make([]byte, total+readBufSize)
					up.w = copy(nb, data)
					up.r = 0
					up.rbuf = nb
				}
				return nil
			}
			if data[total-2] != '\r' || data[total-1] != '\n' {
				return errUpstreamProtocol
			}
			if !r.failed {
				if !r.split {
					r.out = append(r.out, data[:total]...)
					r.hits++
				} else if !l.keep(r, f, v.Key, data[:total]) {
					return errUpstreamProtocol
				}
			}
			up.r += total
		case k == protocol.ReplyEnd:
			up.r += nl + 1
			l.fragOK(up, f)
			progressed = true
		case k.IsError():
			up.r += nl + 1
			r.fail(string(protocol.TrimLine(line[:len(line)-1])))
			l.fragOK(up, f)
			progressed = true
		default:
			return errUpstreamProtocol
		}
	}
	if up.qh < len(up.q) {
		if progressed {
			up.deadline = l.now.Add(up.u.timeout)
		}
	} else if up.r < up.w {
		return errUpstreamProtocol // an answer to nothing
	}
	return nil
}

// keep stores a split get's VALUE block under the key it answers: the
// server answers its fragment's keys in the order they were asked (misses
// left out).
func (l *ploop) keep(r *lreq, f *lfrag, key, block []byte) bool {
	for ; f.lo < f.hi; f.lo++ {
		k := int(r.order[f.lo])
		if bytes.Equal(r.key(k), key) {
			f.lo++
			r.blk[k] = span{off: int32(len(r.vals)), n: int32(len(block))}
			r.vals = append(r.vals, block...)
			r.hits++
			return true
		}
	}
	return false
}

// fragOK ends the fragment at the head of up's queue, answered.
func (l *ploop) fragOK(up *lup, f *lfrag) {
	r := f.r
	up.st.record(l.now.Sub(f.start), false)
	*f = lfrag{}
	up.qh++
	if up.unanswered > 0 {
		up.unanswered--
	}
	if up.qh == len(up.q) {
		up.q, up.qh = up.q[:0], 0
	}
	if up.failed {
		up.failed = false
		up.u.mc.ReportServer(up.addr, nil)
	}
	l.fragDone(r)
	if up.qh == len(up.q) && up.u != l.gen {
		l.closeUp(up) // an earlier upstream's, done
	}
}

// failUp closes up after a failure; every request on it is answered with
// the failure. A connection the server closed while nothing was asked of
// it is just closed (a server restart, an idle timeout): no request failed.
func (l *ploop) failUp(up *lup, err error) {
	q := up.q[up.qh:]
	asked := len(q) > 0 || up.connecting
	up.q, up.qh, up.unanswered = up.q[:0], 0, 0
	up.wbuf, up.r, up.w = up.wbuf[:0], 0, 0
	l.closeFD(up)
	if asked {
		up.u.mc.ReportServer(up.addr, err)
		up.failed = true
		l.p.ctr.upstreamErrors.Add(1)
		for i := range q {
			f := &q[i]
			up.st.record(l.now.Sub(f.start), true)
			r := f.r
			r.fail(failReplyAddr(up.addr.String(), err))
			*f = lfrag{}
			l.fragDone(r)
		}
	}
	if up.u != l.gen {
		l.forget(up)
	}
}

// closeFD closes up's socket, if open.
func (l *ploop) closeFD(up *lup) {
	if up.fd < 0 {
		return
	}
	syscall.Close(up.fd)
	if up.fd < len(l.tab) {
		l.tab[up.fd] = loopEntry{}
	}
	up.fd, up.connecting, up.hup, up.wblocked = -1, false, false, false
	up.st.conns.Add(-1)
}

// closeUp closes up and forgets it; requests still on it fail.
func (l *ploop) closeUp(up *lup) {
	if up.qh < len(up.q) {
		l.failUp(up, net.ErrClosed)
	}
	l.closeFD(up)
	l.forget(up)
}

// forget drops up from the loop's lists (closed, or failed on an
// earlier upstream).
func (l *ploop) forget(up *lup) {
	for i, x := range l.all {
		if x == up {
			l.all = append(l.all[:i], l.all[i+1:]...)
			break
		}
	}
	if ups := l.ups[up.addr]; ups != nil && up.u == l.gen {
		for i, x := range ups {
			if x == up {
				ups[i] = nil
			}
		}
	}
}

// switchGen moves the loop to upstream u: the connections to the old
// one close once they have answered.
func (l *ploop) switchGen(u *upstream) {
	old := append([]*lup(nil), l.all...)
	clear(l.ups)
	l.gen = u
	for _, up := range old {
		if up.qh == len(up.q) && up.u != l.gen {
			l.closeUp(up)
		}
	}
}

// earliest is the first deadline of a request in flight.
func (l *ploop) earliest() time.Time {
	var d time.Time
	for _, up := range l.all {
		if up.qh < len(up.q) && (d.IsZero() || up.deadline.Before(d)) {
			d = up.deadline
		}
	}
	return d
}

// expire fails the connections whose requests have waited too long.
func (l *ploop) expire() {
	var late []*lup
	for _, up := range l.all {
		if up.qh < len(up.q) && l.now.After(up.deadline) {
			late = append(late, up)
		}
	}
	for _, up := range late {
		l.failUp(up, os.ErrDeadlineExceeded)
	}
}
