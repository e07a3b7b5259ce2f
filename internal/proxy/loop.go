package proxy

import (
	"fmt"
	"net"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/rawio"
	"github.com/vbcache/vbcache/internal/vbmap"
)

// # Event loops
//
// Every client is served by an event loop, the way twemproxy's one
// thread serves everything: a loop owns an epoll set that holds both its
// client sockets and connections of its own to the servers (a pool's, or
// a cluster's nodes, routed by vbucket: loop_route.go).
// One round of a loop reads every client that is ready and turns each
// complete classic or meta command into a request on its server's
// connection (a multi-key get, gets, gat or gats is split by server, as
// twemproxy fragments it; a noreply or a meta q is not sent, and the
// answer it hides is dropped, so that answers match requests in order);
// flush_all goes to every server; stats, version, verbosity and mn are
// answered in their turn by the loop itself (stats once the requests
// before it are answered, so that it counts them). A binary client's
// requests that name a key go to the servers over binary connections of the loop's own, sent loud whatever opcode
// the client used (so each is answered, in order), and the answer is
// forwarded with the client's opcode unless its quiet opcode hides it (a
// get's miss, any other success); noop, version, quit, stat and
// verbosity are the loop's to answer. The round then reads every server
// connection that is ready and matches its answers to the requests in order; then writes each
// server connection once, with every request the round gave it, and each
// client once, with every reply that is due, in request order. A request
// costs no goroutine switch: on the goroutine path the proxy had before,
// a request and its answer each woke a goroutine, and the scheduler's
// park, netpoll and wake-up were its largest cost after the system calls
// (docs/PERFORMANCE.md). The answers are forwarded as the
// server sent them, so the client sees what memcached said, byte for
// byte. A get's answer is read with internal/protocol's reply grammar,
// the one the Go client reads it with, to find where it ends and which
// key a value is for.
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
// A request the proxy answers without its servers (an unknown command, a
// line or packet memcached refuses, a bad data chunk, a refused meta
// flag, a stats group, a flush_all with a delay) is answered on the loop
// by local.go (textCommand, binaryPacket: inline), once the connection's
// earlier requests are answered, so that its reply goes after theirs.
// Keys go to the servers as the client sent them, control characters
// and all, as memcached takes them.
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
// the selector (auto_eject_hosts); over a cluster, the requests a retry
// may cure go again instead (loop_route.go).
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
// and a wake-up pipe. A client a loop cannot poll (not a plain socket)
// reaches it through a socketpair (Proxy.bridge).
//
// This file holds the loops themselves; a loop's clients are in
// loop_client.go, its requests in loop_req.go, its server connections
// in loop_up.go and a cluster's routing and retries in loop_route.go.

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
	waitNone  uint8 = iota
	waitDrain       // requests on an earlier upstream: wait for their answers
	waitTurn        // a request that waits for the answers to those before it (myTurn)
	waitRoom        // too many requests in flight or replies unwritten
	waitClose       // quit or end of input: close once answered
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
	tab     []loopEntry // by descriptor
	gen     *upstream   // the upstream ups serve
	ups     map[net.Addr][]*lup
	all     []*lup // every server connection, of every generation
	rq, rq2 []*conn
	wq      []*lup
	cq      []*conn
	dq      []*conn
	free    []*lreq
	nconn   int
	// A cluster's (loop_route.go): the map the table is for, its servers
	// by index, each server's address by name (one net.Addr per name, the
	// key of ups), and the requests waiting to go again.
	rt                *vbmap.Config
	rtUp              []net.Addr
	addrs             map[string]net.Addr
	retries, retries2 []lretry
	inflight          int // requests in flight on all server connections
	now               time.Time
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
	fd         int  // -1: not connected
	bin        bool // speaks the binary protocol (for binary clients)
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
	bridge     *upBridge // the connection goes through a bridge (loop_bridge.go); nil: a socket to the server
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
	cmd     protocol.Cmd
	line    bool            // answered by one line (storage, delete, incr, decr, touch)
	meta    bool            // answered by a meta reply (mg, ms, md, ma)
	bin     bool            // a binary request, answered by one response; none of these: VALUE blocks and END
	quiet   bool            // a quiet binary opcode
	op      protocol.Opcode // a binary request's opcode, as the client sent it
	opaque  uint32
	status  protocol.Status // the server's answer to a binary request
	noreply bool
	done    bool
	// A cluster's request keeps what it needs to go again until it is
	// answered (loop_route.go): a one-node request's bytes (sent, for
	// the key in kb), a get's verb and exptime (verb, its keys in kb).
	write  bool      // not sent again unless certainly not applied
	born   time.Time // retries end Cluster.RetryTimeout after this
	tries  int
	sent   []byte
	verb   []byte
	frags  int  // fragments not yet answered
	split  bool // a get over several servers: values gathered per key
	nkeys  int
	hits   int
	failed bool   // out holds a failure line: later answers are dropped
	out    []byte // the reply
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

// startLoops creates and starts the loops (Serve, once). A loop that
// cannot be created is left out; with none, Serve fails (loopErr).
func (p *Proxy) startLoops() {
	var loops []*ploop
	defer func() { p.loops.Store(&loops) }()
	n := p.Loops
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	for range n {
		l, err := newPloop(p)
		if err != nil {
			p.loopErr = fmt.Errorf("proxy: event loop: %w", err)
			if p.Logf != nil && len(loops) > 0 {
				p.Logf("vbcache proxy: %v; serving with %d event loops", p.loopErr, len(loops))
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

// pickLoop chooses the loop for a new client (round robin), or nil
// when there is none.
func (p *Proxy) pickLoop() *ploop {
	loops := p.loopList()
	if len(loops) == 0 {
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
// runtime poller). It returns false, nc untouched, when that fails: nc
// is not a plain socket (Serve bridges it), or the loop has stopped.
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
	c.lp, c.lfd = l, fd
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
		if len(l.retries) > 0 {
			l.runRetries()
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
	if l.inflight > 0 || len(l.retries) > 0 {
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
