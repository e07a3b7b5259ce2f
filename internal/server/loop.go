package server

import (
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/vbcache/vbcache/internal/rawio"
)

// # Event loops
//
// Plain TCP and Unix connections are served by event loops, the way
// memcached's worker threads serve them: a loop owns an epoll instance
// and, for each socket it reports readable, reads, serves every complete
// command, writes the replies and moves on to the next socket. No
// goroutine switches between connections: a goroutine per connection
// costs a park and a wake-up per request (gopark, the scheduler, the
// runtime's netpoll), which was the difference left between this node and
// memcached in CPU per request (docs/PERFORMANCE.md).
//
// The loop takes a connection's descriptor out of the runtime poller at
// accept: it duplicates the descriptor and closes the net.Conn (which
// removes the original from the runtime's epoll set), so the runtime never
// sees the socket's events. Sockets are registered edge-triggered; the loop
// reads until a read comes back short, which proves the kernel's queue was
// empty at that moment, so any later byte raises a fresh event (the same
// argument as internal/rawio's). With one exception: the peer's FIN. When
// it came with the last bytes in one event, the read returns those bytes
// short and no event will follow for the end of the stream; so an event
// that reports the peer's shutdown (EPOLLRDHUP, EPOLLHUP, EPOLLERR) marks
// the connection (conn.hup) and it is read until the end, not until a
// short read.
//
// An idle loop parks in the runtime poller, which watches the loop's epoll
// set as one more descriptor; a busy loop never leaves its goroutine.
//
// A loop must never block. Whatever would block a connection (replies the
// socket will not take at once, a request parked on a pending vbucket, a
// takeover, a stream handoff, an operator's vbucket change) detaches the
// connection first: the loop hands itself to a fresh goroutine, which
// carries on with the events not yet served, and the current goroutine
// becomes the connection's own. The descriptor goes back to the runtime
// poller as a net.Conn and the connection is served from then on as
// before the loops existed (serveLoop), so every blocking path keeps its
// tested behaviour. Detaching is rare on a data connection; control
// connections (the manager's, streams) detach on their first such command.
//
// TLS connections keep a goroutine each. Config.NoEventLoops
// (VBCACHE_NOLOOP=1 in vbcache server's environment) turns the loops off
// altogether, for comparisons (docs/PERFORMANCE.md).
//
// With an idle timeout (-o idle_timeout) a loop sweeps its connections
// every quarter of the timeout (at most every second), as memcached's
// connection-timeout thread does, and closes those that have read nothing
// for the timeout; an idle loop parks with a deadline for that. The same
// sweep closes the connections still unauthenticated -o unauth_timeout
// after their accept.
//
// # Ownership
//
// Listen creates the loops, Serve starts their goroutines and waits for
// them (Server.wg). At any moment one
// goroutine runs a loop; it alone touches its connections' buffers and
// its events. conns is shared with the accept goroutines, which add to it,
// under mu. Shutdown writes to the loop's wake pipe; the loop closes its
// connections and stops.

// maxLoopEvents is how many ready sockets one epoll_wait returns at most.
const maxLoopEvents = 128

type loop struct {
	s *Server
	// pl is the loop's epoll set, which parks in the runtime poller when
	// idle, like any goroutine (see wait); Serve wakes it to stop.
	pl *rawio.Poller

	mu      sync.Mutex // protects conns and stopped; add's epoll_ctl under it never waits, descriptors close after it
	conns   []*conn    // by descriptor
	stopped bool       // the loop has closed its connections; add refuses

	// Owned by the goroutine running the loop: rest are the connections
	// after the one being served in this round, again those to serve
	// again in the next (see maxReadsPerTurn); a handoff passes both on.
	rest  []*conn
	again []*conn
	// The sweep (zero sweepEvery: none) of idle connections (zero idle:
	// none) and of those unauthenticated for too long (zero unauth: none):
	// due at nextSweep, every sweepEvery; times are sinceStart.
	idle, unauth, sweepEvery, nextSweep time.Duration
}

// loopStart is the origin of the loops' clock (monotonic).
var loopStart = time.Now()

func sinceStart() time.Duration { return time.Since(loopStart) }

// loopsWanted is how many event loops a node runs: one per thread (-t)
// the Go runtime can run at once.
func (s *Server) loopsWanted() int {
	return max(1, min(s.cfg.Threads, runtime.GOMAXPROCS(0)))
}

// makeLoops creates the loops (Listen calls it, so that their number is
// known once the listeners are open). A loop that cannot be created is
// left out: its connections get goroutines.
func (s *Server) makeLoops() {
	if s.cfg.NoEventLoops {
		return
	}
	for range s.loopsWanted() {
		l, err := newLoop(s)
		if err != nil {
			if s.verbosity.Load() > 0 {
				s.log.Printf("event loop: %v; connections get goroutines", err)
			}
			break
		}
		s.loops = append(s.loops, l)
	}
}

// startLoops starts the loops' goroutines (owned by Serve through s.wg).
func (s *Server) startLoops() {
	for _, l := range s.loops {
		s.wg.Add(1)
		go l.run(nil)
	}
}

// stopLoops wakes every loop to close its connections and stop.
func (s *Server) stopLoops() {
	for _, l := range s.loops {
		l.pl.Wake()
	}
}

func newLoop(s *Server) (*loop, error) {
	pl, err := rawio.NewPoller(maxLoopEvents)
	if err != nil {
		return nil, err
	}
	l := &loop{s: s, pl: pl, idle: s.cfg.IdleTimeout}
	if s.authRequired() {
		l.unauth = s.cfg.UnauthTimeout
	}
	for _, d := range []time.Duration{l.idle, l.unauth} {
		if d > 0 {
			every := min(max(d/4, 10*time.Millisecond), time.Second)
			if l.sweepEvery == 0 || every < l.sweepEvery {
				l.sweepEvery = every
			}
		}
	}
	return l, nil
}

// pickLoop chooses the loop for a new connection on nc (round robin, as
// memcached dispatches to its threads), or nil when nc is not a plain
// socket or there are no loops.
func (s *Server) pickLoop(nc net.Conn) *loop {
	if len(s.loops) == 0 {
		return nil
	}
	switch nc.(type) {
	case *net.TCPConn, *net.UnixConn:
	default:
		return nil
	}
	return s.loops[s.nextLoop.Add(1)%uint64(len(s.loops))]
}

// add moves c, accepted on nc, onto the loop. It returns false, with nc
// untouched, when the loop cannot take it (the caller serves c with a
// goroutine).
func (l *loop) add(c *conn, nc net.Conn) bool {
	fd, ok := rawio.Dup(nc)
	if !ok {
		return false
	}
	c.s.mu.Lock()
	c.nc = nil
	c.s.mu.Unlock()
	c.lp, c.lfd = l, fd
	if l.idle > 0 {
		c.lastRead = sinceStart()
	}
	l.mu.Lock()
	ok = !l.stopped
	if ok {
		for fd >= len(l.conns) {
			l.conns = append(l.conns, nil)
		}
		l.conns[fd] = c
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | (syscall.EPOLLET & 0xffffffff), Fd: int32(fd)}
		if err := syscall.EpollCtl(l.pl.FD, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
			l.conns[fd] = nil
			ok = false
		}
	}
	l.mu.Unlock()
	if !ok {
		syscall.Close(fd)
		c.lp, c.lfd = nil, -1
		c.s.mu.Lock()
		c.nc = nc
		c.s.kickIfClosingLocked(nc)
		c.s.mu.Unlock()
		return false
	}
	nc.Close() // the duplicate keeps the socket open
	return true
}

// forget removes descriptor fd's connection from the loop's table.
func (l *loop) forget(fd int) {
	l.mu.Lock()
	if fd < len(l.conns) { // the table is gone once the loop stopped
		l.conns[fd] = nil
	}
	l.mu.Unlock()
}

// maxReadsPerTurn bounds the full reads one connection is served in a
// row before the loop serves the others (memcached's -R, counted in
// buffers rather than requests): a client that pipelines without pause
// then takes turns with everyone else.
const maxReadsPerTurn = 4

// serveResult is what serving one connection after an event led to.
type serveResult uint8

const (
	served   serveResult = iota // the socket is drained (or closed); wait for its next event
	more                        // input may be left after its turn: serve it again soon
	detached                    // the connection left the loop; this goroutine is its own now
)

// run is the loop's goroutine. work is what a previous goroutine of this
// loop had not served when it detached a connection.
func (l *loop) run(work []*conn) {
	defer l.s.wg.Done()
	for {
		if l.sweepEvery > 0 {
			if now := sinceStart(); now >= l.nextSweep {
				l.sweep(now)
				l.nextSweep = now + l.sweepEvery
			}
		}
		if len(work) == 0 {
			n, ok := l.wait(len(l.again) == 0)
			if !ok {
				return // closed under us: cannot happen, stop closes it last
			}
			var stop bool
			work, stop = l.collect(l.pl.Events[:n], work)
			if stop {
				l.stop()
				return
			}
			work = append(work, l.again...)
			l.again = l.again[:0]
		}
		for i, c := range work {
			if c.lp != l {
				continue // closed or detached earlier in this round
			}
			l.rest = work[i+1:]
			switch l.serve(c) {
			case more:
				l.again = append(l.again, c)
			case detached:
				c.resume()
				return
			}
		}
		clear(work)
		work = work[:0]
	}
}

// collect appends the connections behind evs to work. stop reports a
// wake-up for shutdown.
func (l *loop) collect(evs []syscall.EpollEvent, work []*conn) (_ []*conn, stop bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range evs {
		fd := int(ev.Fd)
		if fd == l.pl.WakeFD() {
			if l.s.closing.Load() {
				return work, true
			}
			continue
		}
		if c := l.lookup(fd); c != nil {
			if ev.Events&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0 {
				c.hup = true
			}
			work = append(work, c)
		}
	}
	return work, false
}

// lookup is the connection on descriptor fd. l.mu is held.
func (l *loop) lookup(fd int) *conn {
	if fd < len(l.conns) {
		return l.conns[fd]
	}
	return nil
}

// wait returns the next ready events. When there are none and block is
// set, it parks the goroutine in the runtime poller until the epoll set is
// readable (rawio.Poller.Park, which polls first: no poll of our own, or
// an idle loop would poll twice before parking), or until the idle sweep
// is due, when it returns none. Blocking in epoll_wait instead would hold
// the runtime's P, and the node's other goroutines (detached connections,
// streams, timers) would wait for sysmon to take it back. ok is false
// once the set is closed.
func (l *loop) wait(block bool) (n int, ok bool) {
	if !block {
		return l.pl.Poll(), true
	}
	var sweep time.Time
	if l.sweepEvery > 0 {
		sweep = time.Now().Add(l.sweepEvery)
	}
	return l.pl.Park(sweep)
}

// sweep closes the connections that have read nothing for the idle
// timeout (memcached's idle_kicks), and those not authenticated
// unauth_timeout after their accept (unauth_kicks).
func (l *loop) sweep(now time.Duration) {
	var idle, unauth []*conn
	l.mu.Lock()
	for _, c := range l.conns {
		switch {
		case c == nil:
		case l.unauth > 0 && c.unauthCounted && now-c.acceptedAt >= l.unauth:
			unauth = append(unauth, c)
		case l.idle > 0 && now-c.lastRead >= l.idle:
			idle = append(idle, c)
		}
	}
	l.mu.Unlock()
	for _, c := range idle {
		l.s.idleKicks.Add(1) // before the client can see the close
		c.closeWhy = closeIdle
		l.close(c)
	}
	for _, c := range unauth {
		l.s.unauthKicks.Add(1)
		c.closeWhy = closeIdle
		l.close(c)
	}
}

// serve reads and serves c after an event.
func (l *loop) serve(c *conn) serveResult {
	fd := uintptr(c.lfd)
	for reads := 1; ; reads++ {
		buf := c.rbuf[c.w:]
		n, wait, err := rawio.Fill(fd, buf)
		if wait {
			return served
		}
		if err != nil {
			// EOF or a reset: the replies to what came before are out.
			if err == io.EOF {
				c.closeWhy = closeNormal
			}
			l.close(c)
			return served
		}
		c.w += n
		c.ctr.bytesRead.Add(uint64(n))
		if l.idle > 0 {
			c.lastRead = sinceStart()
		}
		c.state.Store(int32(stateParse))
		need := c.processInput()
		if c.lp == nil {
			return detached // by a command that blocks
		}
		if len(c.out) > 0 && !c.writeRaw(fd) {
			c.detach() // flush in resume waits for the socket
			return detached
		}
		if c.close || c.s.closing.Load() {
			if !c.close {
				c.closeWhy = closeShutdown
			}
			l.close(c)
			return served
		}
		if c.producerName != "" {
			c.detach()
			return detached
		}
		c.makeRoom(need)
		if n < len(buf) && !c.hup {
			c.state.Store(int32(stateRead))
			return served
		}
		if reads == maxReadsPerTurn {
			return more
		}
	}
}

// close closes a connection the loop serves (or served, in stop).
func (l *loop) close(c *conn) {
	c.state.Store(int32(stateClosing))
	l.forget(c.lfd)
	syscall.Close(c.lfd) // also leaves the epoll set
	c.lp, c.lfd = nil, -1
	c.s.dropConn(c)
}

// stop closes every connection of the loop (shutdown) and its descriptors.
func (l *loop) stop() {
	l.mu.Lock()
	l.stopped = true
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	for _, c := range conns {
		if c != nil {
			c.closeWhy = closeShutdown
			l.close(c)
		}
	}
	l.pl.Close()
}

// handoff starts a fresh goroutine on the loop, which first serves the
// connections the current one has not reached. The current goroutine must not
// touch the loop's state afterwards.
func (l *loop) handoff() {
	work := append(slices.Clone(l.rest), l.again...)
	l.rest, l.again = nil, nil
	l.s.wg.Add(1)
	go l.run(work)
}

// mayBlock is called before anything that can wait (a pending vbucket, a
// takeover, an operator's vbucket change): a connection on a loop is
// detached first, so the wait holds up no other connection.
func (c *conn) mayBlock() {
	if c.lp != nil {
		c.detach()
	}
}

// detach takes c off its loop (see the file comment). The loop goes on in a
// new goroutine; c's descriptor becomes a net.Conn again.
func (c *conn) detach() {
	l, fd := c.lp, c.lfd
	// Off the loop first: the next goroutine must neither get c's events
	// nor serve it from the connections it inherits.
	l.forget(fd)
	syscall.EpollCtl(l.pl.FD, syscall.EPOLL_CTL_DEL, fd, nil)
	c.lp, c.lfd = nil, -1
	l.handoff()
	c.reattach(fd)
}

// reattach makes descriptor fd c's net.Conn (registered with the runtime
// poller) and closes fd. On failure c is marked to close.
func (c *conn) reattach(fd int) {
	f := os.NewFile(uintptr(fd), "")
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		c.close = true
		return
	}
	c.s.mu.Lock()
	c.nc = nc
	c.s.kickIfClosingLocked(nc)
	c.s.mu.Unlock()
}

// resume serves a detached connection on its own goroutine until it ends,
// as serve does: serveLoop's first round writes what the loop could not
// and hands a stream over.
func (c *conn) resume() {
	defer c.s.dropConn(c)
	if c.nc == nil {
		return // reattach failed
	}
	defer c.nc.Close()
	c.serveLoop()
}

// kickIfClosingLocked does for nc what Serve's shutdown does for every
// connection with a net.Conn, for one that got its net.Conn after Serve
// went through them: its next read fails at once, and its writes soon
// (kick). s.mu is held (Serve
// sets closing before it takes s.mu to go through the connections).
func (s *Server) kickIfClosingLocked(nc net.Conn) {
	if s.closing.Load() {
		kick(nc)
	}
}

// writeRaw writes the replies straight to the socket of a connection on a
// loop. It returns false, with what is left in c.out, when the socket
// would block or failed; the caller detaches the connection and flush
// finishes the job (or meets the error) on the connection's goroutine.
func (c *conn) writeRaw(fd uintptr) bool {
	c.state.Store(int32(stateWrite))
	n, err := rawio.Write(fd, c.out)
	c.ctr.bytesWritten.Add(uint64(n))
	if err != nil {
		c.out = c.out[:copy(c.out, c.out[n:])]
		c.mark = 0
		c.authMark = -1
		return false
	}
	c.resetOut()
	return true
}
