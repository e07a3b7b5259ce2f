// Package server is a vbcache cache node: listeners, the connection loop,
// command dispatch for memcached's text protocol (classic and meta), and
// stats.
//
// # Data flow
//
// Plain TCP and Unix connections are served by event loops, one per thread
// the runtime can run (memcached's libevent worker threads): a loop owns an
// epoll set and serves each ready socket in turn, without a goroutine
// switch. A connection about to block (a parked request, a full socket, a
// stream handoff) leaves its loop for a goroutine of its own, as TLS
// connections have from the start (loop.go). Either way a connection reads
// into its own buffer, cuts complete lines out of it, parses each with
// protocol.ParseTextRequest (memcached's request grammar and error
// replies; the request's tokens and key alias the buffer), and runs each
// command against the store through a store.Tx that lives in the
// connection, so a GET allocates nothing: the value is copied from slab
// memory straight into the connection's output buffer under the store's
// shard lock. Replies to pipelined commands accumulate in the output
// buffer and are written with one write when the input buffer holds no
// further complete command (memcached's conn_mwrite), so a pipeline of N
// gets costs one read and one write.
//
// A storage command whose data has not fully arrived is not consumed: the
// connection reads more (growing the buffer up to the item size limit) and
// parses the line again. Data for an item that is too large is discarded as
// it arrives (memcached's conn_swallow) and never buffered.
//
// # Ownership
//
// Serve owns the accept loops, the event loops and every connection
// goroutine: it waits for all of them before it returns. Counters are
// sharded atomics (counters.go). Everything memcached keeps in globals
// hangs off *Server, so several nodes can live in one process (tests run
// three).
//
// # Compatibility
//
// Replies are byte-for-byte those of memcached 1.6.18 (Debian 12), which the
// differential suite in test/compat checks. Where memcached's behaviour is a
// quirk (noreply also silencing most errors, an in-place decr padding with
// spaces, a failed multi-get dropping replies not yet sent) the quirk is
// reproduced and commented at the place that does it.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbcache/vbcache/internal/sasl"
	"github.com/vbcache/vbcache/internal/store"
	"github.com/vbcache/vbcache/internal/stream"
)

// reservedFDs is what memcached reports as reserved_fds (stats only; the
// connection limit follows memcached's descriptor numbering, see allocFD).
const reservedFDs = 20

// MemcachedVersion is the memcached release whose text protocol this node
// reproduces byte for byte.
const MemcachedVersion = "1.6.18"

// Server is one cache node.
type Server struct {
	cfg   Config
	store *store.Store
	log   *log.Logger

	started time.Time // wall time at New, for uptime

	counters [counterShards]counters

	// connection bookkeeping
	// mu protects conns, listeners, udp, nextID and fds. Nothing that
	// waits is done under it: the shutdown kick (Serve,
	// kickIfClosingLocked) only sets deadlines, which wait for no
	// reader, and sockets are closed after it (a connection's goroutine
	// takes mu to leave, dropConn, after it closes its socket).
	mu        sync.Mutex
	conns     map[uint64]*conn
	listeners []net.Listener
	udp       []net.PacketConn
	nextID    uint64

	currConns      atomic.Int64
	totalConns     atomic.Uint64
	rejectedConns  atomic.Uint64
	connStructures atomic.Uint64

	// The limits against one hostile client (-o max_conns_per_ip,
	// max_unauth_conns; admit). perIP is protected by mu: the open
	// connections of each client address, kept only with the first
	// limit. unauth counts the accepted connections not authenticated
	// while -S or -Y asks for it (conn.setAuthed keeps it).
	perIP          map[netip.Addr]int
	unauth         atomic.Int64
	rejectedPerIP  atomic.Uint64
	rejectedUnauth atomic.Uint64
	// tlsHandshakeErrors counts TLS handshakes that failed (a client
	// certificate from another CA or out of date among them).
	tlsHandshakeErrors atomic.Uint64

	// heapIn is the bytes of input buffers too large for a store loan
	// (input.go), at most maxHeapInput; inputNoMemory counts the
	// requests refused or connections closed for want of input memory.
	heapIn        atomic.Int64
	inputNoMemory atomic.Uint64
	// outHeap is the bytes output buffers have grown past flushAt
	// (input.go), at most maxOutput; outputNoMemory counts the gets
	// refused for it.
	outHeap        atomic.Int64
	outputNoMemory atomic.Uint64

	idleKicks     atomic.Uint64
	unauthKicks   atomic.Uint64 // connections closed by -o unauth_timeout
	limitMaxbytes atomic.Int64  // -m, changed by cache_memlimit
	crawlerStarts atomic.Uint64
	hashpowerInit int
	fds           []bool // protected by mu: memcached-style descriptor slots in use, see allocFD
	tun           tunables
	sasl          *sasl.Authenticator    // -S: shared SASL state (credentials, SCRAM key cache)
	logins        atomic.Pointer[logins] // who may log in; replaced whole by SetLogins
	watch         watchers               // "watch" subscriptions (watch.go)
	cl            *cluster               // cluster mode (--vbuckets); nil when standalone
	loops         []*loop                // event loops (loop.go), set by Listen
	nextLoop      atomic.Uint64          // round robin over loops

	verbosity     atomic.Int32
	detailEnabled atomic.Bool
	detail        prefixStats
	crawlerOn     atomic.Bool

	shutdownCh   chan struct{} // closed by the shutdown command
	shutdownOnce sync.Once
	ready        chan struct{} // closed when listeners are open
	listenOnce   sync.Once
	listenErr    error
	wg           sync.WaitGroup // accept loops and connections
	closing      atomic.Bool
}

// New builds a node from cfg. It validates the configuration and creates
// the store; listeners open in Listen or Serve.
func New(cfg Config) (*Server, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// The item size limit (-I) is enforced here, in memcached's units (see
	// itemSize). The store's own item size (its 40-byte header, key and
	// value) is always smaller, so the store, given the same limit, holds
	// every item memcached would hold.
	sc := cfg.Store
	sc.VBuckets = cfg.VBuckets // cluster mode: per-vbucket item lists for DEL_VBUCKET
	st, err := store.New(sc)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:        cfg,
		store:      st,
		log:        log.New(os.Stderr, "", 0),
		started:    time.Now(),
		conns:      make(map[uint64]*conn),
		shutdownCh: make(chan struct{}),
		ready:      make(chan struct{}),
	}
	s.watch.store = st
	// The protocol-visible version leads with the memcached release whose
	// behaviour we reproduce, so that clients which gate features on the
	// server version (libmemcached parses major.minor.micro) treat us as
	// that release.
	v := cfg.Version
	if v == "" {
		v = "devel"
	}
	s.cfg.Version = MemcachedVersion + "-vbcache-" + v
	if cfg.VBuckets == 0 {
		s.cfg.ClusterAuth = nil // a plain node is memcached
	}
	s.logins.Store(&logins{pwdb: cfg.SASLPasswords, tokens: cfg.AuthTokens, admin: s.cfg.ClusterAuth})
	if cfg.SASL || s.cfg.ClusterAuth != nil {
		a, err := sasl.NewAuthenticator(sasl.Config{Lookup: s.saslLookup(false), Previous: s.saslLookup(true)})
		if err != nil {
			st.Close()
			return nil, err
		}
		s.sasl = a
	}
	if cfg.VBuckets > 0 {
		s.cl = newCluster(&cfg)
		s.cl.streams = stream.NewNode(st, s.cl.vbs, cfg.StreamLogBytes)
		s.cl.streams.Logf = s.log.Printf
		cl := s.cl
		s.cl.streams.ClusterName = cl.clusterName
		// Each dial takes the credentials of the moment, so that a
		// rotation (SetLogins) reaches the streams opened after it.
		s.cl.streams.Dial = func(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error) {
			return s.peerCredentials().DialNet(ctx, addr, timeout)
		}
		st.SetObserver(s.cl.streams.Log)
	}
	s.limitMaxbytes.Store(cfg.Store.MaxBytes)
	s.hashpowerInit = cfg.Store.HashPower
	s.tun = tunables{
		slabAutomove: 1, automoveRatio: 0.8, automoveWindow: 30,
		hotPct: cfg.Store.HotLRUPct, warmPct: cfg.Store.WarmLRUPct,
		hotFactor: 0.2, warmFactor: 2.0, segmented: !cfg.Store.FlatLRU,
		tempTTL: 61, crawlerSleep: 100,
	}
	if !cfg.SlabReassign {
		s.tun.slabAutomove = 0
	}
	s.verbosity.Store(int32(cfg.Verbose))
	s.detailEnabled.Store(cfg.DetailEnabled)
	s.crawlerOn.Store(cfg.LRUCrawler)
	st.SetCrawler(cfg.LRUCrawler)
	s.detail.init()
	return s, nil
}

// Store returns the node's item store (for tests and the stats of
// embedding programs).
func (s *Server) Store() *store.Store { return s.store }

// Listen opens the configured listeners. Serve calls it if it has not been
// called; calling it first lets a caller learn the bound addresses.
func (s *Server) Listen() error {
	s.listenOnce.Do(func() {
		s.listenErr = s.listen()
		if s.listenErr == nil {
			s.makeLoops()
			close(s.ready)
		}
	})
	return s.listenErr
}

func (s *Server) listen() error {
	cfg := &s.cfg
	var lns []net.Listener
	var pcs []net.PacketConn
	fail := func(err error) error {
		for _, l := range lns {
			l.Close()
		}
		for _, p := range pcs {
			p.Close()
		}
		return err
	}
	if cfg.UnixSocket != "" {
		os.Remove(cfg.UnixSocket)
		l, err := net.Listen("unix", cfg.UnixSocket)
		if err != nil {
			return fail(fmt.Errorf("failed to listen on UNIX socket \"%s\": %w", cfg.UnixSocket, err))
		}
		mask := cfg.UnixMask
		if mask == 0 {
			mask = 0o700
		}
		os.Chmod(cfg.UnixSocket, os.FileMode(mask))
		lns = append(lns, l)
	} else {
		addrs := cfg.Listen
		if len(addrs) == 0 {
			addrs = []string{""}
		}
		tcpPort := cfg.Port
		for _, a := range addrs {
			host, port, noTLS := "", "", false
			if a != "" {
				spec, err := ParseListenSpec(a)
				if err != nil {
					return fail(err)
				}
				host, noTLS = spec.Host, spec.NoTLS
				if spec.HasPort {
					port = strconv.Itoa(max(spec.Port, 0))
				}
			}
			if tcpPort != 0 || port != "" {
				if port == "" {
					port = strconv.Itoa(max(tcpPort, 0))
				}
				l, err := net.Listen("tcp", net.JoinHostPort(host, port))
				if err != nil {
					return fail(fmt.Errorf("failed to listen on TCP port %s: %w", port, err))
				}
				if cfg.TLS != nil && !noTLS {
					// The handshake runs in the connection's goroutine on
					// its first read, never in the accept loop.
					l = tls.NewListener(l, cfg.TLS)
				}
				lns = append(lns, l)
			}
			if cfg.UDPPort != 0 {
				p := cfg.UDPPort
				if p < 0 {
					p = 0
				}
				pc, err := net.ListenPacket("udp", net.JoinHostPort(host, strconv.Itoa(p)))
				if err != nil {
					return fail(fmt.Errorf("failed to listen on UDP port %d: %w", p, err))
				}
				pcs = append(pcs, pc)
			}
		}
	}
	s.mu.Lock()
	s.listeners = lns
	s.udp = pcs
	s.mu.Unlock()
	if s.cl != nil {
		for _, l := range lns {
			if l.Addr().Network() == "tcp" {
				s.cl.streams.Name = l.Addr().String()
				break
			}
		}
	}
	if cfg.PortFile != "" {
		if err := s.writePortFile(cfg.PortFile); err != nil {
			return fail(err)
		}
	}
	return nil
}

// writePortFile writes memcached's MEMCACHED_PORT_FILENAME format through a
// temporary file and a rename, so readers never see a partial file.
func (s *Server) writePortFile(name string) error {
	var b strings.Builder
	for _, l := range s.listeners {
		if a, ok := l.Addr().(*net.TCPAddr); ok {
			fmt.Fprintf(&b, "TCP INET: %d\n", a.Port)
		}
	}
	for _, p := range s.udp {
		if a, ok := p.LocalAddr().(*net.UDPAddr); ok {
			fmt.Fprintf(&b, "UDP INET: %d\n", a.Port)
		}
	}
	tmp := name + ".lck"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}

// Addrs returns the addresses the node listens on (after Listen).
func (s *Server) Addrs() []net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []net.Addr
	for _, l := range s.listeners {
		out = append(out, l.Addr())
	}
	for _, p := range s.udp {
		out = append(out, p.LocalAddr())
	}
	return out
}

// ShutdownRequested is closed when a client sent "shutdown" (with -A).
func (s *Server) ShutdownRequested() <-chan struct{} { return s.shutdownCh }

// Serve opens the listeners (unless Listen already did), serves until ctx is
// done or a client sends "shutdown", then closes the listeners and every
// connection, waits for all goroutines it started, stops the store and
// returns. A shutdown by command or context returns nil.
func (s *Server) Serve(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	s.mu.Lock()
	lns := s.listeners
	pcs := s.udp
	s.mu.Unlock()
	s.startLoops()
	for _, l := range lns {
		s.wg.Add(1)
		go s.acceptLoop(l)
	}
	for _, p := range pcs {
		s.wg.Add(1)
		go s.serveUDP(p)
	}
	if s.cl != nil {
		s.wg.Add(1)
		go s.leaseLoop() // ends with parkCtx, below
	}
	select {
	case <-ctx.Done():
	case <-s.shutdownCh:
	}
	s.closing.Store(true)
	if s.cl != nil {
		s.cl.parkStop() // release parked requests now and end takeovers
		s.cl.streams.Close()
	}
	for _, l := range lns {
		l.Close()
	}
	for _, p := range pcs {
		p.Close()
	}
	s.stopLoops()
	s.mu.Lock()
	for _, c := range s.conns {
		if c.nc != nil { // nil: on a loop, which closes it
			kick(c.nc)
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.store.Close()
	if s.cfg.UnixSocket != "" {
		os.Remove(s.cfg.UnixSocket)
	}
	return nil
}

// shutdownWriteGrace is how long a connection's goroutine may still spend
// writing replies once shutdown has begun: a client that reads nothing
// must not keep Serve from returning.
const shutdownWriteGrace = time.Second

// kick makes nc's next read fail at once and its writes fail after
// shutdownWriteGrace, which wakes its goroutine wherever it waits. Setting
// a deadline waits for neither the reader nor the writer, so it may be
// done under s.mu.
func kick(nc net.Conn) {
	nc.SetReadDeadline(time.Unix(1, 0))
	nc.SetWriteDeadline(time.Now().Add(shutdownWriteGrace))
}

func (s *Server) requestShutdown() {
	s.shutdownOnce.Do(func() { close(s.shutdownCh) })
}

func (s *Server) acceptLoop(l net.Listener) {
	defer s.wg.Done()
	var backoff time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.closing.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors or a transient error: back off like
			// net/http does instead of spinning.
			if backoff == 0 {
				backoff = 5 * time.Millisecond
			} else if backoff *= 2; backoff > time.Second {
				backoff = time.Second
			}
			if s.verbosity.Load() > 0 {
				s.log.Printf("accept: %v; retrying in %v", err, backoff)
			}
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		s.totalConns.Add(1)
		fd := s.allocFD()
		if s.cfg.MaxConnsFast && fd >= s.cfg.MaxConns-1 {
			s.freeFD(fd)
			s.rejectedConns.Add(1)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				nc.SetWriteDeadline(time.Now().Add(time.Second))
				io.WriteString(nc, "ERROR Too many open connections\r\n")
				nc.Close()
			}()
			continue
		}
		ip, refused := s.admit(nc)
		if refused != nil {
			s.freeFD(fd)
			refused.Add(1)
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				nc.SetWriteDeadline(time.Now().Add(time.Second))
				io.WriteString(nc, "ERROR Too many open connections\r\n")
				nc.Close()
			}()
			continue
		}
		c := s.newConn(nc, l.Addr(), fd)
		c.ip = ip
		if s.watch.connevents.Load() > 0 {
			s.logConn(c, false)
		}
		if lp := s.pickLoop(nc); lp != nil && lp.add(c, nc) {
			continue
		}
		s.wg.Add(1)
		go c.serve()
	}
}

// allocFD hands out the lowest free descriptor number, as the kernel does
// for memcached. Numbers start where memcached's land: after the standard
// descriptors and each worker thread's four (see firstListenFD), one per
// TCP listener and one per thread for each UDP port. So "-c N" admits the
// same number of clients as memcached's descriptor check
// (fd >= maxconns-1 is refused) and "stats conns" shows familiar numbers.
func (s *Server) allocFD() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	base := s.clientFDBaseLocked()
	for i, used := range s.fds {
		if !used {
			s.fds[i] = true
			return base + i
		}
	}
	s.fds = append(s.fds, true)
	return base + len(s.fds) - 1
}

func (s *Server) freeFD(fd int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := fd - s.clientFDBaseLocked(); i >= 0 && i < len(s.fds) {
		s.fds[i] = false
	}
}

// firstListenFD is the descriptor memcached 1.6.18 gives its first
// listening socket: 7 + 4 per worker thread (measured for -t 1, 2, 4, 8).
func (s *Server) firstListenFD() int { return 7 + 4*s.cfg.Threads }

func (s *Server) clientFDBaseLocked() int {
	return s.firstListenFD() + len(s.listeners) + len(s.udp)*s.cfg.Threads
}

func (s *Server) newConn(nc net.Conn, listen net.Addr, fd int) *conn {
	c := newConn(s, nc)
	c.listen = listen
	c.fd = fd
	c.accepted = true
	c.acceptedAt = sinceStart()
	if s.authRequired() {
		c.unauthCounted = true
		s.unauth.Add(1)
	}
	s.mu.Lock()
	s.nextID++
	c.id = s.nextID
	s.conns[c.id] = c
	s.mu.Unlock()
	c.ctr = &s.counters[c.id%counterShards]
	s.currConns.Add(1)
	s.connStructures.Store(max(s.connStructures.Load(), uint64(s.currConns.Load())))
	return c
}

// admit applies -o max_conns_per_ip and max_unauth_conns to a new
// connection. It returns the client address it counted the connection
// under (zero when that limit is off), or the counter of the limit that
// refuses it.
func (s *Server) admit(nc net.Conn) (ip netip.Addr, refused *atomic.Uint64) {
	if n := s.cfg.MaxUnauthConns; n > 0 && s.authRequired() && s.unauth.Load() >= int64(n) {
		return netip.Addr{}, &s.rejectedUnauth
	}
	if s.cfg.MaxConnsPerIP <= 0 {
		return netip.Addr{}, nil
	}
	ta, ok := nc.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return netip.Addr{}, nil // a unix socket: no address to count by
	}
	ip = ta.AddrPort().Addr().Unmap()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.perIP[ip] >= s.cfg.MaxConnsPerIP {
		return netip.Addr{}, &s.rejectedPerIP
	}
	if s.perIP == nil {
		s.perIP = map[netip.Addr]int{}
	}
	s.perIP[ip]++
	return ip, nil
}

// authRequired reports whether clients must authenticate (-S or -Y).
func (s *Server) authRequired() bool { return s.cfg.SASL || s.cfg.AuthTokens != nil }

func (s *Server) dropConn(c *conn) {
	c.freeInput()
	s.outHeap.Add(-c.outCounted)
	c.outCounted = 0
	if s.watch.connevents.Load() > 0 {
		s.logConn(c, true)
	}
	s.mu.Lock()
	delete(s.conns, c.id)
	if c.ip.IsValid() {
		if s.perIP[c.ip]--; s.perIP[c.ip] <= 0 {
			delete(s.perIP, c.ip)
		}
	}
	s.mu.Unlock()
	if c.unauthCounted {
		s.unauth.Add(-1)
	}
	s.freeFD(c.fd)
	s.currConns.Add(-1)
}

// nowUnix is the coarse wall clock the store keeps (refreshed several
// times a second), cheap enough to read once per command.
func (s *Server) nowUnix() int64 {
	_, u := s.store.Now()
	return u
}

// flush is flush_all with memcached's treatment of the delay: an absolute
// time before the process started (memcached's process_started, 62 s
// before the real start) makes realtime() return 1, oldest_live 0, and
// nothing is flushed; any other time in the past flushes everything now.
func (s *Server) flush(exptime int64) {
	if exptime > realtimeMaxDelta && exptime <= s.started.Unix()-62 {
		return
	}
	s.store.Flush(exptime)
}
