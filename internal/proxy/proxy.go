package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/sasl"
	"github.com/vbcache/vbcache/internal/tlsconf"
)

const (
	// handshakeTimeout bounds a TLS client's handshake, as the node's.
	handshakeTimeout = 10 * time.Second

	readBufSize = 16 << 10
	maxGetLine  = 64 << 20 // a multi-key get line may be this long
	maxBody     = 64 << 20 // largest binary body or text value accepted
	flushAt     = 256 << 10
)

// Proxy is a running proxy: a listener, the client connections and the
// current upstream.
type Proxy struct {
	Version string // reported by "version"
	Logf    func(string, ...any)
	// Loops is how many event loops (loop.go) the first Serve starts: 0
	// is one per P (GOMAXPROCS).
	Loops int
	// noHold is Config.NoRequestHold, as New found it.
	noHold bool
	// logins is Config.ClientAuth, as New or the latest Reload found it
	// (nil: clients need no login). Reload cannot turn it on or off.
	logins atomic.Pointer[sasl.Passwords]

	cur     atomic.Pointer[upstream] // the upstream new requests use
	st      *serverStats
	started time.Time

	// reloadMu serializes Reload and protects listen. It is held while
	// Reload builds the new upstream (dials, a cluster's bootstrap, bounded
	// by Reload's ctx); nothing Reload waits for takes it.
	reloadMu sync.Mutex
	listen   string

	// mu protects conns, bridged, closed and ln; a Reload swaps cur
	// under it. Nothing that can wait is done under it: Close collects the
	// sockets under mu and closes them after, and a connection leaving
	// (the loops' closeClient, a bridge's end) takes mu.
	mu      sync.Mutex
	conns   map[*conn]struct{}
	bridged map[net.Conn]struct{} // the clients that bridge copies for
	closed  bool
	ln      net.Listener

	closeOnce sync.Once

	wg sync.WaitGroup // the loops, the bridges' goroutines and retiring upstreams

	// bctx ends the dials of bridged server connections (loop_bridge.go)
	// when Close calls bcancel.
	bctx    context.Context
	bcancel context.CancelFunc

	ctr       counters
	verbosity atomic.Int32

	// The event loops (loop.go), made by the first Serve (loopErr: why
	// there are none); nextLoop is the accept goroutines' round robin.
	loopsOnce sync.Once
	loops     atomic.Pointer[[]*ploop]
	loopErr   error
	nextLoop  atomic.Uint64
}

// counters are the memcached-style general stats.
type counters struct {
	currConns, totalConns, reloads, reloadErrors                         atomic.Int64
	cmdGet, getHits, getMisses, cmdSet, cmdTouch, touchHits, touchMisses atomic.Int64
	deleteHits, deleteMisses, incrHits, incrMisses, decrHits, decrMisses atomic.Int64
	casHits, casMisses, casBadval, cmdFlush, bytesRead, bytesWritten     atomic.Int64
	upstreamErrors                                                       atomic.Int64
	authCmds, authErrors                                                 atomic.Int64 // clients' logins (auth.go)
	tlsHandshakeErrors                                                   atomic.Int64 // TLS clients whose handshake failed (ssl_handshake_errors)
	fastPath                                                             atomic.Int64 // requests forwarded or answered by an event loop (inline answers and stats requests aside)
}

// New builds a proxy for cfg and connects its upstream (a cluster's
// bootstrap is bounded by ctx). Serve starts it.
func New(ctx context.Context, cfg *Config) (*Proxy, error) {
	p := &Proxy{st: newServerStats(), started: time.Now(), conns: make(map[*conn]struct{}), bridged: make(map[net.Conn]struct{}),
		listen: cfg.Listen, Version: "vbcache-proxy", Logf: log.Printf, noHold: cfg.NoRequestHold}
	u, err := newUpstream(ctx, cfg, p.st)
	if err != nil {
		return nil, err
	}
	p.bctx, p.bcancel = context.WithCancel(context.Background())
	p.cur.Store(u)
	if cfg.ClientAuth.Len() > 0 {
		p.logins.Store(cfg.ClientAuth)
	}
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

// Serve accepts clients on ln until Close and hands each to an event
// loop (loop.go); a connection that is not a plain socket is bridged to
// one (bridge). It fails when no event loop could be started.
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
	if len(p.loopList()) == 0 {
		ln.Close()
		return p.loopErr
	}
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
		c := &conn{p: p, nc: nc, rbuf: make([]byte, readBufSize)}
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
		l := p.pickLoop()
		if l.add(c, nc) || p.bridge(c, nc, l) {
			continue
		}
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		nc.Close()
		p.ctr.currConns.Add(-1)
	}
}

// bridge serves nc, a connection a loop cannot poll (not a plain socket;
// a TLS connection will be one), through a socketpair: the loop l serves
// one end as it serves any client, and two goroutines, owned by the
// Proxy (Close closes nc and waits for them), copy between nc and the
// other end. Either side's end of input is passed on as a shutdown of
// writes; the client's end, or the loop's, closes nc. It reports false,
// nc untouched, when the bridge cannot be made.
func (p *Proxy) bridge(c *conn, nc net.Conn, l *ploop) bool {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	near, err1 := fdConn(fds[0]) // the loop's end
	far, err2 := fdConn(fds[1])
	if err1 != nil || err2 != nil {
		for _, x := range []net.Conn{near, far} {
			if x != nil {
				x.Close()
			}
		}
		return false
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		near.Close()
		far.Close()
		return false
	}
	p.bridged[nc] = struct{}{}
	p.wg.Add(2)
	p.mu.Unlock()
	end := func() {
		p.mu.Lock()
		delete(p.bridged, nc)
		p.mu.Unlock()
		nc.Close()
		far.Close()
	}
	if !l.add(c, near) {
		near.Close()
		end()
		p.wg.Add(-2)
		return false
	}
	go func() { // the client's requests to the loop
		defer p.wg.Done()
		if tc, ok := nc.(*tls.Conn); ok {
			// A client gets handshakeTimeout to finish its TLS handshake.
			tc.SetDeadline(time.Now().Add(handshakeTimeout))
			err := tc.Handshake()
			tc.SetDeadline(time.Time{})
			if err != nil {
				p.ctr.tlsHandshakeErrors.Add(1)
				far.(*net.UnixConn).CloseWrite()
				return
			}
			if name := tlsconf.PeerName(tc.ConnectionState()); name != "" {
				if _, ok := p.logins.Load().Lookup(name); ok {
					c.certLogin.Store(true)
				}
			}
		}
		io.Copy(far, nc)
		far.(*net.UnixConn).CloseWrite()
	}()
	go func() { // the loop's replies to the client
		defer p.wg.Done()
		io.Copy(nc, far)
		end()
	}()
	return true
}

// fdConn makes a net.Conn of socket descriptor fd, which it closes.
func fdConn(fd int) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "")
	defer f.Close()
	return net.FileConn(f)
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
		u.retire()
		return net.ErrClosed
	}
	old := p.cur.Swap(u)
	p.wg.Add(1) // under mu, before Close's Wait can begin
	p.mu.Unlock()
	if cur := p.logins.Load(); (cur.Len() == 0) != (cfg.ClientAuth.Len() == 0) {
		if p.Logf != nil {
			p.Logf("vbcache proxy: --client-auth cannot be turned on or off by a reload: restart to apply")
		}
	} else if cur != nil {
		p.logins.Store(cfg.ClientAuth) // a rotation: new logins use it
	}
	if cfg.Listen != p.listen && p.Logf != nil {
		p.Logf("vbcache proxy: listen changed from %s to %s: restart to apply", p.listen, cfg.Listen)
	}
	p.ctr.reloads.Add(1)
	for _, l := range p.loopList() {
		l.pl.Wake() // to switch to u at once
	}
	go func() { // owned by p: Close waits for it
		defer p.wg.Done()
		old.retire()
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
	p.mu.Lock()
	p.closed = true
	ln := p.ln
	ncs := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		if c.nc != nil { // nil: on a loop
			ncs = append(ncs, c.nc)
		}
	}
	for nc := range p.bridged {
		ncs = append(ncs, nc)
	}
	p.mu.Unlock()
	// Closed outside mu (see mu).
	if ln != nil {
		ln.Close()
	}
	for _, nc := range ncs {
		nc.Close()
	}
	p.loopsOnce.Do(func() {}) // no loops start after this
	p.bcancel()
	for _, l := range p.loopList() {
		l.stop()
	}
	p.wg.Wait()
	p.cur.Load().retire()
}

// conn is one client connection: the socket's buffers, the request
// being parsed and how to answer it, and (loopConn) the state its event
// loop keeps for it.
type conn struct {
	p    *Proxy
	nc   net.Conn // until a loop takes the socket (add); nil after
	rbuf []byte   // unread input is rbuf[r:w]
	r, w int
	out  []byte

	mode    uint8                // 0 unknown, 1 text, 2 binary
	req     protocol.TextRequest // the text command being served
	noreply bool
	close   bool
	swallow int
	authed  bool // logged in (auth.go), when the proxy asks clients to
	// certLogin: the client's verified TLS certificate names a user of
	// the logins, which logs it in without SASL (auth.go). Set by the
	// bridge's handshake goroutine before the first byte reaches the
	// loop, read by the loop.
	certLogin atomic.Bool

	loopConn
}

// makeRoom compacts the input buffer, and grows it when the next request
// needs more than it holds (need, from processInput) or it is full.
func (c *conn) makeRoom(need int) {
	if c.r == c.w {
		c.r, c.w = 0, 0
		if cap(c.rbuf) > 4*readBufSize {
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

// resetOut empties the reply buffer, dropping it when a big reply grew it.
func (c *conn) resetOut() {
	if cap(c.out) > 4<<20 {
		c.out = nil
	} else {
		c.out = c.out[:0]
	}
}
