package server

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/sasl"
	"github.com/vbcache/vbcache/internal/store"
	"github.com/vbcache/vbcache/internal/tlsconf"
)

const (
	readBufSize = 16 << 10 // memcached's READ_BUFFER_SIZE
	// maxGetLine bounds a multi-get line. memcached grows its buffer
	// without a limit; we stop at 64 MiB (over 250,000 maximal keys) and
	// close the connection, so one hostile line cannot take the node's
	// memory.
	maxGetLine = 64 << 20
	// flushAt is the output size at which replies are written even
	// though more pipelined commands wait.
	flushAt = 256 << 10
)

// connState names mirror memcached's for "stats conns".
type connState int32

const (
	stateNewCmd connState = iota
	stateRead
	stateParse
	stateWrite
	stateSwallow
	stateClosing
)

func (s connState) String() string {
	switch s {
	case stateRead:
		return "conn_read"
	case stateParse:
		return "conn_parse_cmd"
	case stateWrite:
		return "conn_mwrite"
	case stateSwallow:
		return "conn_swallow"
	case stateClosing:
		return "conn_closing"
	}
	return "conn_new_cmd"
}

// conn is one client connection. All fields but state and lastCmd are
// owned by the connection's goroutine.
type conn struct {
	s      *Server
	nc     net.Conn
	listen net.Addr
	// lp is the event loop serving the connection, lfd its descriptor
	// there (nc is nil meanwhile), or nil and -1 (see loop.go).
	lp    *loop
	lfd   int
	hup   bool     // the loop saw the peer's shutdown: read to the end
	raddr net.Addr // the peer, for stats conns
	// lastRead is when the loop last read from the connection
	// (sinceStart), kept only with an idle timeout.
	lastRead time.Duration
	id       uint64
	fd       int // memcached-style descriptor number (see Server.allocFD)
	ctr      *counters

	rbuf []byte // input; unread bytes are rbuf[r:w]
	r, w int
	// base is the connection's fixed read buffer (readBufSize; nil for
	// UDP). A request that must be buffered whole and does not fit in it
	// (a value still arriving) gets a bigger rbuf whose memory is counted
	// (room, in: input.go): loan, store memory lent under -m, or, when
	// it is larger than any loan, heap bytes counted in Server.heapIn.
	// next and nextLoan/nextHeap are a bigger buffer got for the request
	// waiting, installed by makeRoom.
	base     []byte
	loan     store.Loan
	heap     int
	next     []byte
	nextLoan store.Loan
	nextHeap int
	out      []byte // replies not yet written
	// outCounted is what out has grown past flushAt, counted in
	// Server.outHeap (input.go).
	outCounted int64
	// mark is the length of out at the last point where memcached would
	// already have written its replies; a failed multi-get drops what
	// came after it (memcached's conn_release_items culls unsent replies).
	mark int

	mode      connMode        // text or binary, decided by the first byte
	bh        protocol.Header // the binary request being served
	bquiet    bool            // it is a quiet variant
	binStat   bool            // stats go out as binary Stat packets
	authed    bool            // passed SASL (-S) or the ascii token (-Y); set through setAuthed
	admin     bool            // logged in as Config.ClusterAuth's user: may send cluster-control requests
	certAdmin bool            // its verified TLS client certificate names Config.ClusterAuth's user: admin whatever SASL says
	// accepted: from a listener (not UDP). unauthCounted: counted in
	// Server.unauth. ip: counted in Server.perIP under it (zero: not).
	accepted, unauthCounted bool
	acceptedAt              time.Duration // sinceStart at the accept, for -o unauth_timeout
	ip                      netip.Addr
	// authMark is where the last unsent -Y answer starts, or -1.
	authMark int
	saslSrv  *sasl.Server // the SASL exchange in progress, if any

	swallow int  // bytes of rejected data still to discard
	noreply bool // the current command asked for no reply
	close   bool // close once out is written
	// closeWhy is what a conn_close line gives as the reason (watch.go);
	// set where the reason is not an error.
	closeWhy closeReason
	// logq holds the watch lines the current command made, published
	// once it is done (watch.go).
	logq []logLine

	tx store.Tx
	// producerName is set by a stream OPEN: the connection is handed to
	// the stream producer once the answer is written.
	producerName  string
	producerNamed bool   // the OPEN named the consumer as the map does (stream.OpenNamed)
	entered       int    // 1 + the vbucket the current command was admitted to (cluster mode), or 0
	mutsAtAdmit   uint64 // c.tx.Mutations() when it was admitted (leaveVB)
	outAtAdmit    int    // len(c.out) when it was admitted: where its reply starts (leaveVB)
	syncKey       []byte // under --sync-replication, the key of a text or meta command admitted (leaveVB)
	syncKeyOK     bool   // syncKey is the admitted command's key
	readsChecked  bool   // a multi-get checks its reads' replication itself (leaveVB)
	// leaseNow is the monotonic clock as the lease check reads it
	// (leaseClock), once per processInput call: requests that arrived
	// in one read are checked against one reading, taken after they
	// arrived. leaseRead says it was taken; whatever may block in
	// between (a park, a flush, a synchronous-replication wait) clears
	// it.
	leaseNow  int64
	leaseRead bool
	req       protocol.TextRequest // the text command being served
	num       [24]byte             // digits for incr/decr
	scratch   []byte               // meta reply flags, append/prepend staging

	state   atomic.Int32 // connState, read by "stats conns"
	lastCmd atomic.Int64 // unix seconds of the last command
}

// setAuthed records whether the connection is authenticated, and keeps
// Server.unauth (-o max_unauth_conns) in step.
func (c *conn) setAuthed(v bool) {
	c.authed = v
	if !v {
		c.admin = c.certAdmin
	}
	switch {
	case v && c.unauthCounted:
		c.unauthCounted = false
		c.s.unauth.Add(-1)
	case !v && !c.unauthCounted && c.accepted && c.s.authRequired():
		c.unauthCounted = true
		c.s.unauth.Add(1)
	}
}

func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, authMark: -1, lfd: -1}
	c.tx.OnEvict(c.logEviction)
	if nc != nil {
		c.raddr = nc.RemoteAddr()
		c.base = make([]byte, readBufSize)
		c.rbuf = c.base
	}
	c.lastCmd.Store(s.nowUnix())
	return c
}

// connMode is the protocol a connection speaks; memcached decides it from
// the first byte (0x80: binary) unless -B forces one.
type connMode uint8

const (
	modeUnknown connMode = iota
	modeText
	modeBinary
)

func (c *conn) serve() {
	defer c.s.wg.Done()
	defer c.s.dropConn(c)
	defer c.nc.Close()
	if tc, ok := c.nc.(*tls.Conn); ok && !c.handshake(tc) {
		return
	}
	c.serveLoop()
}

// handshakeTimeout bounds a TLS handshake: a client that connects and
// sends nothing holds a connection for no longer than this.
const handshakeTimeout = 10 * time.Second

// handshake runs a TLS connection's handshake before its first request,
// so that a verified client certificate naming the cluster administrator
// gives the admin role (Config.ClusterAuth) from the start.
func (c *conn) handshake(tc *tls.Conn) bool {
	tc.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := tc.Handshake(); err != nil {
		c.s.tlsHandshakeErrors.Add(1)
		return false
	}
	tc.SetDeadline(time.Time{})
	if adm := c.s.adminLogin(); adm != nil && c.s.cl != nil && tlsconf.PeerName(tc.ConnectionState()) == adm.User {
		c.certAdmin = true
		c.setAuthed(true)
		c.admin = true
	}
	return true
}

// isTLS reports whether the connection is encrypted.
func (c *conn) isTLS() bool {
	_, ok := c.nc.(*tls.Conn)
	return ok
}

// serveLoop serves a connection that is not on an event loop (loop.go):
// TLS, loops turned off, or detached from its loop. net.Conn.Read costs a
// read(2) that finds nothing before each wait, which the loops do without;
// but reading until that read also sees a half-closed peer's end of
// stream when it came with the last request.
func (c *conn) serveLoop() {
	idle := c.s.cfg.IdleTimeout
	var unauth time.Duration // the unauth_timeout deadline, in sinceStart time
	if t := c.s.cfg.UnauthTimeout; t > 0 && c.s.authRequired() {
		unauth = c.acceptedAt + t
	}
	for {
		c.state.Store(int32(stateParse))
		need := c.processInput()
		if err := c.flush(); err != nil || c.close {
			return
		}
		if c.producerName != "" {
			c.state.Store(int32(stateWrite))
			c.s.cl.streams.ServeProducer(c.nc, c.rbuf[c.r:c.w], c.producerName, c.producerNamed)
			return
		}
		if c.s.closing.Load() {
			c.closeWhy = closeShutdown
			return
		}
		c.makeRoom(need)
		c.state.Store(int32(stateRead))
		var dl time.Time
		if idle > 0 {
			dl = time.Now().Add(idle)
		}
		if unauth > 0 && c.unauthCounted {
			if u := time.Now().Add(unauth - sinceStart()); dl.IsZero() || u.Before(dl) {
				dl = u
			}
		}
		if idle > 0 || unauth > 0 {
			c.nc.SetReadDeadline(dl) // zero once authenticated without idle_timeout
		}
		n, err := c.nc.Read(c.rbuf[c.w:])
		if n > 0 {
			c.w += n
			c.ctr.bytesRead.Add(uint64(n))
		}
		if err != nil {
			if (idle > 0 || unauth > 0) && errors.Is(err, os.ErrDeadlineExceeded) && !c.s.closing.Load() {
				if unauth > 0 && c.unauthCounted && sinceStart() >= unauth {
					c.s.unauthKicks.Add(1)
				} else {
					c.s.idleKicks.Add(1)
				}
				c.closeWhy = closeIdle
				return
			}
			switch {
			case c.s.closing.Load():
				c.closeWhy = closeShutdown
			case errors.Is(err, io.EOF):
				c.closeWhy = closeNormal
			}
			// A half-closed client still gets answers to what it sent.
			if n > 0 {
				c.processInput()
				c.flush()
			}
			return
		}
	}
}

// makeRoom compacts the input buffer, and moves it to a bigger one when
// the next line or value needs more than it holds (need, from
// processInput): the one room got, or one got now. A buffer no longer
// needed goes back (input.go).
func (c *conn) makeRoom(need int) {
	if c.r == c.w {
		c.r, c.w = 0, 0
		if need <= len(c.base) && (c.loan.Lent() || c.heap > 0) {
			c.shrinkInput()
		}
	}
	if need > len(c.rbuf)-c.r {
		if need > len(c.rbuf) {
			c.growInput(need)
			return
		}
		c.w = copy(c.rbuf, c.rbuf[c.r:c.w])
		c.r = 0
	} else if c.w == len(c.rbuf) && c.r > 0 {
		c.w = copy(c.rbuf, c.rbuf[c.r:c.w])
		c.r = 0
	}
}

func (c *conn) flush() error {
	c.leaseRead = false // a write may block: the lease check reads the clock again
	if len(c.out) == 0 {
		return nil
	}
	if c.lp != nil {
		if c.writeRaw(uintptr(c.lfd)) {
			return nil
		}
		c.detach() // and wait for the socket below
	}
	if c.nc == nil {
		if c.close { // the detach failed
			return net.ErrClosed
		}
		return nil // a UDP reply, sent by serveUDP
	}
	c.state.Store(int32(stateWrite))
	n, err := c.nc.Write(c.out)
	c.ctr.bytesWritten.Add(uint64(n))
	c.resetOut()
	return err
}

// resetOut empties the reply buffer once it is written (dropping it when a
// big reply grew it); nothing unsent is left for mark and authMark.
func (c *conn) resetOut() {
	c.dropOut(0)
	c.mark = 0
	c.authMark = -1
}

// processInput runs every complete command in the input buffer. It returns
// how many buffered bytes (from c.r) the next command needs when that is
// more than a plain read would bring in, or 0.
func (c *conn) processInput() (need int) {
	reqs := 0
	c.leaseRead = false
	for !c.close && c.producerName == "" {
		if c.swallow > 0 {
			n := min(c.swallow, c.w-c.r)
			c.r += n
			c.swallow -= n
			if c.swallow > 0 {
				c.state.Store(int32(stateSwallow))
				return 0
			}
		}
		data := c.rbuf[c.r:c.w]
		if len(data) == 0 {
			return 0
		}
		if c.mode == modeUnknown {
			switch {
			case c.s.cfg.Protocol == ProtoASCII:
				c.mode = modeText
			case c.s.cfg.Protocol == ProtoBinary || data[0] == protocol.MagicRequest:
				// A binary-only node refuses text: its first byte fails
				// the magic check and the connection closes.
				c.mode = modeBinary
			default:
				c.mode = modeText
			}
		}
		if c.mode == modeBinary {
			used, more := c.binaryPacket(data)
			if len(c.logq) > 0 {
				c.publishLog()
			}
			c.leaveVB()
			if more > 0 {
				return more
			}
			if used == 0 {
				return 0
			}
			c.lastCmd.Store(c.s.nowUnix())
			c.r += used
			if len(c.out) >= flushAt {
				if c.flush() != nil {
					c.close = true
					return 0
				}
			}
			continue
		}
		if c.s.cfg.AuthTokens != nil && !c.authed {
			used, more := c.asciiAuth(data)
			if more > 0 {
				return more
			}
			if used == 0 {
				return 0
			}
			c.r += used
			continue
		}
		nl := bytes.IndexByte(data, '\n')
		if nl < 0 {
			if len(data) > protocol.LineMaxNoNewline {
				p := 0
				for p < len(data) && data[p] == ' ' {
					p++
				}
				if p > 100 || !(bytes.HasPrefix(data[p:], []byte("get ")) || bytes.HasPrefix(data[p:], []byte("gets "))) {
					c.close = true
					c.out = c.out[:c.mark]
					return 0
				}
				if len(data) >= maxGetLine || !c.room(len(data)+readBufSize) {
					c.close = true
					return 0
				}
				return len(data) + readBufSize
			}
			return 0
		}
		line := protocol.TrimLine(data[:nl])
		rest := data[nl+1:]
		c.noreply = false
		c.lastCmd.Store(c.s.nowUnix())
		used, more := c.dispatch(line, rest)
		if len(c.logq) > 0 {
			c.publishLog()
		}
		c.leaveVB()
		if more > 0 {
			// A storage command waits for its data; nothing was consumed.
			return nl + 1 + more
		}
		c.r += nl + 1 + used
		reqs++
		if reqs >= c.s.cfg.ReqsPerEvent {
			// memcached yields the worker thread here and writes what it has.
			c.ctr.connYields.Add(1)
			c.mark = len(c.out)
			reqs = 0
		}
		if len(c.out) >= flushAt {
			if c.flush() != nil {
				c.close = true
				return 0
			}
		}
	}
	return 0
}

// reply appends a line and CRLF unless the command asked for no reply
// (memcached's out_string, which noreply silences, errors included).
func (c *conn) reply(s string) {
	if c.noreply {
		return
	}
	c.out = append(c.out, s...)
	c.out = append(c.out, '\r', '\n')
}

// replyErr always replies (memcached's out_errstring).
func (c *conn) replyErr(s string) {
	c.noreply = false
	c.reply(s)
}

// setNoreply is memcached's set_noreply_maybe: the token before the
// terminal token decides.
func (c *conn) setNoreply() bool {
	t := &c.req.Tokens
	if t.N >= 2 && string(t.T[t.N-2]) == "noreply" {
		c.noreply = true
	}
	return c.noreply
}
