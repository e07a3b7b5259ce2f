package proxy

import (
	"bytes"
	"context"
	"errors"
	"log"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/rawio"
	"github.com/vbcache/vbcache/memcache"
)

const (
	readBufSize = 16 << 10
	maxGetLine  = 64 << 20 // a multi-key get line may be this long
	maxBody     = 64 << 20 // largest binary body or text value accepted
	flushAt     = 256 << 10
	drainLimit  = 30 * time.Second // how long a retired upstream may keep requests
)

// Proxy is a running proxy: a listener, the client connections and the
// current upstream.
type Proxy struct {
	Version string // reported by "version"
	Logf    func(string, ...any)
	// Loops is how many event loops (loop.go) the first Serve starts for
	// pool clients: 0 is one per P (GOMAXPROCS).
	Loops int
	// noLoops and noHold are Config.NoEventLoops and NoRequestHold, as New
	// found them.
	noLoops, noHold bool

	cur     atomic.Pointer[upstream] // the upstream new requests use
	st      *serverStats
	started time.Time

	// reloadMu serializes Reload and protects listen. It is held while
	// Reload builds the new upstream (dials, a cluster's bootstrap, bounded
	// by Reload's ctx); nothing Reload waits for takes it.
	reloadMu sync.Mutex
	listen   string

	// mu protects conns, closed and ln; a Reload swaps cur under it.
	// Nothing that can wait is done under it: Close collects the sockets
	// under mu and closes them after, since a socket's Close waits for its
	// goroutine to leave the RawConn callback (serveRaw), and a connection
	// leaving (serve, the loops' closeClient and detach) takes mu.
	mu     sync.Mutex
	conns  map[*conn]struct{}
	closed bool
	ln     net.Listener
	// closing is set when Close begins: a connection served inside its
	// socket's RawConn callback leaves it at its next read (rawStep), since
	// a client that keeps the socket's queue full would otherwise keep it
	// there, and Close with it.
	closing atomic.Bool

	closeOnce sync.Once

	wg sync.WaitGroup // connection goroutines and retiring upstreams

	ctr       counters
	verbosity atomic.Int32

	// The event loops (loop.go), made by the first Serve; nextLoop is the
	// accept goroutines' round robin.
	loopsOnce sync.Once
	loops     atomic.Pointer[[]*ploop]
	nextLoop  atomic.Uint64
}

// counters are the memcached-style general stats.
type counters struct {
	currConns, totalConns, reloads, reloadErrors                         atomic.Int64
	cmdGet, getHits, getMisses, cmdSet, cmdTouch, touchHits, touchMisses atomic.Int64
	deleteHits, deleteMisses, incrHits, incrMisses, decrHits, decrMisses atomic.Int64
	casHits, casMisses, casBadval, cmdFlush, bytesRead, bytesWritten     atomic.Int64
	upstreamErrors                                                       atomic.Int64
	fastPath                                                             atomic.Int64 // requests served on an event loop (the goroutine path's inline code aside), stats requests aside
}

// New builds a proxy for cfg and connects its upstream (a cluster's
// bootstrap is bounded by ctx). Serve starts it.
func New(ctx context.Context, cfg *Config) (*Proxy, error) {
	p := &Proxy{st: newServerStats(), started: time.Now(), conns: make(map[*conn]struct{}), listen: cfg.Listen,
		Version: "vbcache-proxy", Logf: log.Printf, noLoops: cfg.NoEventLoops, noHold: cfg.NoRequestHold}
	u, err := newUpstream(ctx, cfg, p.st)
	if err != nil {
		return nil, err
	}
	p.cur.Store(u)
	return p, nil
}

// Listen opens the configured listen address (host:port, or a unix socket
// path containing "/").
func (p *Proxy) Listen() (net.Listener, error) {
	if bytes.ContainsRune([]byte(p.listen), '/') {
		os.Remove(p.listen)
		return net.Listen("unix", p.listen)
	}
	return net.Listen("tcp", p.listen)
}

// Serve accepts clients on ln until Close. Each connection has one
// goroutine, owned by the Proxy (Close waits for it).
func (p *Proxy) Serve(ln net.Listener) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		ln.Close()
		return net.ErrClosed
	}
	p.ln = ln
	p.mu.Unlock()
	p.loopsOnce.Do(p.startLoops)
	for {
		nc, err := ln.Accept()
		if err != nil {
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		c := &conn{p: p, nc: nc, rbuf: make([]byte, readBufSize), goConn: goConn{raw: rawio.Conn(nc)}}
		c.rawFn = c.rawStep
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			nc.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.ctr.currConns.Add(1)
		p.ctr.totalConns.Add(1)
		if l := p.pickLoop(nc); l != nil && l.add(c, nc) {
			continue
		}
		p.wg.Add(1)
		go c.serve()
	}
}

// Reload replaces the upstream with one built from cfg. Client connections
// stay open: requests that start after Reload returns use the new
// upstream, and the old one is closed once its requests have finished.
// A changed listen address is not applied (it needs a restart); Reload
// reports it in the log.
//
// A Reload during or after Close returns net.ErrClosed and changes
// nothing: Close retires the upstream it finds, once.
func (p *Proxy) Reload(ctx context.Context, cfg *Config) error {
	p.reloadMu.Lock()
	defer p.reloadMu.Unlock()
	u, err := newUpstream(ctx, cfg, p.st)
	if err != nil {
		p.ctr.reloadErrors.Add(1)
		return err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		u.retire(0)
		return net.ErrClosed
	}
	old := p.cur.Swap(u)
	p.wg.Add(1) // under mu, before Close's Wait can begin
	p.mu.Unlock()
	if cfg.Listen != p.listen && p.Logf != nil {
		p.Logf("vbcache proxy: listen changed from %s to %s: restart to apply", p.listen, cfg.Listen)
	}
	p.ctr.reloads.Add(1)
	for _, l := range p.loopList() {
		l.pl.Wake() // to switch to u at once
	}
	go func() { // owned by p: Close waits for it
		defer p.wg.Done()
		old.retire(drainLimit)
	}()
	return nil
}

// Close stops accepting, closes every client connection, waits for their
// goroutines and closes the upstream. Later calls wait for the first.
func (p *Proxy) Close() error {
	p.closeOnce.Do(p.close)
	return nil
}

func (p *Proxy) close() {
	p.closing.Store(true)
	p.mu.Lock()
	p.closed = true
	ln := p.ln
	ncs := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		if c.nc != nil { // nil: on a loop
			ncs = append(ncs, c.nc)
		}
	}
	p.mu.Unlock()
	// Closed outside mu (see mu). A connection that gets its net.Conn
	// after this (detach) sees closed and closes it itself.
	if ln != nil {
		ln.Close()
	}
	for _, nc := range ncs {
		nc.Close()
	}
	p.loopsOnce.Do(func() {}) // no loops start after this
	for _, l := range p.loopList() {
		l.stop()
	}
	p.wg.Wait()
	p.cur.Load().retire(0)
}

// acquire returns the current upstream with a reference held.
func (p *Proxy) acquire() *upstream {
	for {
		u := p.cur.Load()
		if u.acquire() {
			return u
		}
	}
}

// conn is one client connection. What every path uses is here: the
// socket's buffers, the request being parsed and how to answer it. The
// state of each path is a type of its own, embedded: loopConn while an
// event loop serves the connection (loop.go), goConn once a goroutine of
// its own does (below), and getScratch for that goroutine's multi-key
// gets.
type conn struct {
	p    *Proxy
	nc   net.Conn
	rbuf []byte // unread input is rbuf[r:w]
	r, w int
	out  []byte

	mode    uint8                // 0 unknown, 1 text, 2 binary
	req     protocol.TextRequest // the text command being served
	noreply bool
	close   bool
	swallow int

	loopConn
	goConn
	getScratch
}

// goConn is the state of a connection served by a goroutine of its own
// (serve): it reads requests, runs each against the upstream in order
// (the upstream client pipelines the requests of every connection over
// its few connections per server) and writes the replies, flushing when
// the input is drained. Requests of one connection run one at a time, so
// a pipelined "set k … / get k" sees its own write.
type goConn struct {
	// raw is nc's raw socket when nc is a plain one (serveRaw drives it);
	// rawFn is c.rawStep bound once, rawErr the error that ended it.
	raw     syscall.RawConn
	rawFn   func(fd uintptr) bool
	rawErr  error
	resumed bool // detached with input or replies left: serve them first

	rc   reqCtx        // the upstream requests' context
	item memcache.Item // a storage command's item, reused
}

// getScratch is the plain path's space for multi-key gets (text.go's
// get), reused from request to request.
type getScratch struct {
	keys   []string   // the keys, substrings of one string
	keyEnd []int      // where each key ends in kb
	kb     []byte     // the keys' bytes, back to back
	hits   []hit      // per key: where its value is in vals (off -1: a miss)
	vals   []byte     // the values fetched
	srvs   []*srvStat // the servers a request went to
}

// hit locates one key's value in conn.vals.
type hit struct {
	off, n int
	flags  uint32
	cas    uint64
}

func (c *conn) serve() {
	defer c.p.wg.Done()
	defer func() {
		c.rc.stop()
		c.nc.Close()
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.p.mu.Unlock()
		c.p.ctr.currConns.Add(-1)
	}()
	// Detached from an event loop (loop.go): the requests it left and
	// its replies go before the first read.
	c.resumed = c.r < c.w || len(c.out) > 0
	if c.raw != nil {
		c.serveRaw()
		return
	}
	if c.resumed {
		need := c.processInput()
		if err := c.flush(); err != nil || c.close {
			return
		}
		c.makeRoom(need)
	}
	for {
		need := c.processInput()
		if err := c.flush(); err != nil || c.close {
			return
		}
		c.makeRoom(need)
		n, err := c.nc.Read(c.rbuf[c.w:])
		if n > 0 {
			c.w += n
			c.p.ctr.bytesRead.Add(int64(n))
		}
		if err != nil {
			return
		}
	}
}

// serveRaw is serve's loop for plain sockets: it runs inside the runtime
// poller's read loop (see internal/rawio), where rawStep reads, serves
// what it read, writes the replies, and waits when a read finds nothing.
// It reads until then, not just until a short read: a client that sends
// its last requests and shuts down its side (printf … | nc -N) may have
// its FIN arrive with them, and then no readiness event would follow for
// the end of the stream. rawStep leaves the loop for a read error or EOF,
// a close, or replies the socket would not take at once (flush waits for
// the socket).
func (c *conn) serveRaw() {
	for {
		c.rawErr = nil
		if err := c.raw.Read(c.rawFn); err != nil {
			return
		}
		if err := c.flush(); err != nil || c.close || c.rawErr != nil {
			return
		}
	}
}

// rawStep is serveRaw's callback: true leaves the poller's loop.
func (c *conn) rawStep(fd uintptr) bool {
	if c.resumed {
		c.resumed = false
		if c.rawServe(fd) {
			return true
		}
	}
	for {
		if c.p.closing.Load() {
			c.rawErr = net.ErrClosed // Close waits for this callback to return
			return true
		}
		buf := c.rbuf[c.w:]
		n, wait, err := rawio.Fill(fd, buf)
		if wait {
			return false
		}
		if err != nil {
			c.rawErr = err
			return true
		}
		c.w += n
		c.p.ctr.bytesRead.Add(int64(n))
		if c.rawServe(fd) {
			return true
		}
	}
}

// rawServe serves the buffered requests and writes the replies, as much
// as the socket takes: true leaves the poller's loop (a close, or replies
// left for flush).
func (c *conn) rawServe(fd uintptr) bool {
	need := c.processInput()
	if len(c.out) > 0 {
		rest, err := c.writeNow(fd, c.out)
		if err != nil {
			c.out = rest
			return true
		}
		c.resetOut()
	}
	if c.close {
		return true
	}
	c.makeRoom(need)
	return false
}

// writeNow writes what socket fd takes of b now, without waiting, and
// returns the rest (moved to b's front) and the error (EAGAIN: the socket
// is full).
func (c *conn) writeNow(fd uintptr, b []byte) ([]byte, error) {
	n, err := rawio.Write(fd, b)
	c.p.ctr.bytesWritten.Add(int64(n))
	return b[:copy(b, b[n:])], err
}

// makeRoom compacts the input buffer, and grows it when the next request
// needs more than it holds (need, from processInput) or it is full.
func (c *conn) makeRoom(need int) {
	if c.r == c.w {
		c.r, c.w = 0, 0
		if cap(c.rbuf) > 4*readBufSize {
			c.item = memcache.Item{} // its Value may point into the old buffer
			c.rbuf = make([]byte, readBufSize)
		}
	}
	if need > len(c.rbuf)-c.r {
		if c.r > 0 {
			c.w = copy(c.rbuf, c.rbuf[c.r:c.w])
			c.r = 0
		}
		if need > len(c.rbuf) {
			nb := make([]byte, max(need, 2*len(c.rbuf)))
			copy(nb, c.rbuf[:c.w])
			c.rbuf = nb
		}
	} else if c.w == len(c.rbuf) {
		if c.r > 0 {
			c.w = copy(c.rbuf, c.rbuf[c.r:c.w])
			c.r = 0
		} else {
			nb := make([]byte, 2*len(c.rbuf))
			copy(nb, c.rbuf[:c.w])
			c.rbuf = nb
		}
	}
}

func (c *conn) flush() error {
	if len(c.out) == 0 {
		return nil
	}
	n, err := c.nc.Write(c.out)
	c.p.ctr.bytesWritten.Add(int64(n))
	c.resetOut()
	return err
}

// resetOut empties the reply buffer, dropping it when a big reply grew it.
func (c *conn) resetOut() {
	if cap(c.out) > 4<<20 {
		c.out = nil
	} else {
		c.out = c.out[:0]
	}
}

// processInput runs every whole request buffered. It returns how many
// bytes from c.r the next request needs when that is known.
func (c *conn) processInput() (need int) {
	for !c.close {
		if c.swallow > 0 {
			n := min(c.swallow, c.w-c.r)
			c.r += n
			c.swallow -= n
			if c.swallow > 0 {
				return 0
			}
		}
		data := c.rbuf[c.r:c.w]
		if len(data) == 0 {
			return 0
		}
		if c.mode == 0 {
			c.mode = 1
			if data[0] == protocol.MagicRequest {
				c.mode = 2
			}
		}
		var used, more int
		if c.mode == 2 {
			used, more = c.binaryPacket(data)
		} else {
			used, more = c.textCommand(data)
		}
		if more > 0 {
			return more
		}
		if used == 0 {
			return 0
		}
		c.r += used
		if len(c.out) >= flushAt {
			if c.flush() != nil {
				c.close = true
			}
		}
	}
	return 0
}

// textCommand handles one text command at the front of data: it returns
// the bytes used, or more > 0 when the command needs that many bytes in
// all, or (0, 0) when the line is not complete.
func (c *conn) textCommand(data []byte) (used, more int) {
	nl := bytes.IndexByte(data, '\n')
	if nl < 0 {
		if len(data) > protocol.LineMaxNoNewline {
			// memcached: a long line that is not a get is garbage; close.
			p := 0
			for p < len(data) && data[p] == ' ' {
				p++
			}
			if p > 100 || !(bytes.HasPrefix(data[p:], []byte("get ")) || bytes.HasPrefix(data[p:], []byte("gets "))) ||
				len(data) >= maxGetLine {
				c.close = true
				return 0, 0
			}
		}
		return 0, 0
	}
	line := protocol.TrimLine(data[:nl])
	u, m := c.dispatch(line, data[nl+1:])
	if m > 0 {
		return 0, nl + 1 + m
	}
	return nl + 1 + u, 0
}
