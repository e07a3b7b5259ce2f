package proxy

import (
	"bytes"
	"encoding/binary"
	"syscall"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/rawio"
)

// A loop's clients (loop.go): reading their requests, writing their
// replies, and handing a client that leaves the loop to a goroutine.

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
		if c.swallow > 0 { // the data block of a refused storage command
			n := min(c.swallow, c.w-c.r)
			c.r += n
			c.swallow -= n
			continue
		}
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
		var used, more int
		var local bool
		if t := l.p.logins.Load(); t != nil && !c.authed && c.certLogin.Load() {
			c.authed = true // its certificate is its login
		}
		if t := l.p.logins.Load(); t != nil && !c.authed {
			used, more = c.login(t, data)
			if len(c.out) > 0 {
				l.toCQ(c)
			}
			if c.close {
				c.lwait = waitClose
				l.settled(c)
				return 0
			}
			if more > 0 {
				return more
			}
			if used <= 0 {
				return 0
			}
			c.r += used
			continue
		}
		if c.mode == 2 {
			used, more, local = l.binary(c, data)
		} else if nl := bytes.IndexByte(data, '\n'); nl < 0 {
			// memcached's rules for a long line (textCommand): a get's
			// may grow, anything else is garbage and closes.
			local = len(data) > protocol.LineMaxNoNewline
		} else {
			r := &c.req
			protocol.ParseTextRequest(protocol.TrimLine(data[:nl]), r)
			used, more, local = l.command(c, r, data[nl+1:])
			if used >= 0 && !local {
				used += nl + 1
			}
			if more > 0 {
				more += nl + 1
			}
		}
		if local {
			used, more = l.inline(c, data)
		}
		switch {
		case more > 0:
			return more
		case used <= 0:
			return 0 // waiting, detaching, or not a whole request yet
		}
		c.r += used
	}
	return 0
}

// inline serves the request at the front of data, one the proxy answers
// without its servers (an error, a refusal, a long line), with local.go:
// once c's earlier requests are answered, its reply goes after theirs. It returns
// what textCommand or binaryPacket does: the bytes used, or more > 0
// when the request needs that many first, or (0, 0) when the line is not
// whole; used is -1 while c waits for its turn.
func (l *ploop) inline(c *conn, data []byte) (used, more int) {
	if !l.myTurn(c) {
		return -1, 0
	}
	if c.mode == 2 {
		used, more = c.binaryPacket(data)
	} else {
		used, more = c.textCommand(data)
	}
	if len(c.out) > 0 {
		l.toCQ(c)
	}
	if c.close {
		c.lwait = waitClose
		l.settled(c)
	}
	return used, more
}

// command starts r, the request on c's next line, rest being the bytes
// after the line. It returns the bytes of rest used, more > 0 when the
// request needs that many bytes of rest first, or used -1 when the
// request is not started (c's input waits). local says the request is
// inline's to serve: the proxy answers it without its servers.
func (l *ploop) command(c *conn, r *protocol.TextRequest, rest []byte) (used, more int, local bool) {
	t := &r.Tokens
	if r.Err != "" {
		return 0, 0, true
	}
	switch r.Cmd {
	case protocol.CmdGet, protocol.CmdGets, protocol.CmdGat, protocol.CmdGats:
		if t.N-1 == r.First && t.Rest == nil {
			return 0, 0, true // "gat 0": no key, END
		}
		if keyTooLong(r) {
			return 0, 0, true // CLIENT_ERROR, before any server is asked
		}
		if !l.mayStart(c) {
			return -1, 0, false
		}
		l.startGet(c, r)
		return 0, 0, false
	case protocol.CmdSet, protocol.CmdAdd, protocol.CmdReplace, protocol.CmdAppend, protocol.CmdPrepend, protocol.CmdCas:
		n := r.Bytes
		if n > maxBody {
			return 0, 0, true // too large: refused, its data swallowed
		}
		if len(rest) < n {
			return 0, n, false
		}
		if rest[n-2] != '\r' || rest[n-1] != '\n' {
			return 0, 0, true // a bad data chunk
		}
		if !l.mayStart(c) {
			return -1, 0, false
		}
		tokens := 5 // verb, key, flags, exptime, bytes
		if r.Cmd == protocol.CmdCas {
			tokens = 6
		}
		l.startLine(c, r, tokens, rest[:n])
		return n, 0, false
	case protocol.CmdDelete, protocol.CmdIncr, protocol.CmdDecr, protocol.CmdTouch:
		if !l.mayStart(c) {
			return -1, 0, false
		}
		tokens := 3 // verb, key, delta or exptime
		if r.Cmd == protocol.CmdDelete {
			tokens = 2
		}
		l.startLine(c, r, tokens, nil)
		return 0, 0, false
	case protocol.CmdMetaGet, protocol.CmdMetaSet, protocol.CmdMetaDelete, protocol.CmdMetaArith:
		from, allowed, n := 2, mgFlags, 0
		switch r.Cmd {
		case protocol.CmdMetaSet:
			from, allowed, n = 3, msFlags, r.Bytes
		case protocol.CmdMetaDelete:
			allowed = mdFlags
		case protocol.CmdMetaArith:
			allowed = maFlags
		}
		if i, _ := metaRefused(t, from, allowed); i > 0 || n > maxBody {
			return 0, 0, true // refused as local.go refuses it (an ms's data swallowed)
		}
		if len(rest) < n {
			return 0, n, false
		}
		if n > 0 && (rest[n-2] != '\r' || rest[n-1] != '\n') {
			return 0, 0, true // a bad data chunk
		}
		if !l.mayStart(c) {
			return -1, 0, false
		}
		l.startMeta(c, r, rest[:n])
		return n, 0, false
	case protocol.CmdStats:
		if !l.myTurn(c) {
			return -1, 0, false
		}
		l.stats(c, t)
		return 0, 0, false
	case protocol.CmdFlushAll:
		if r.Exptime > 0 {
			return 0, 0, true // a delay: refused (local.go)
		}
		if !l.mayStart(c) {
			return -1, 0, false
		}
		l.startFlush(c, r.Noreply)
		return 0, 0, false
	case protocol.CmdMetaNoop:
		l.local(c, r.Cmd, "MN", false)
		return 0, 0, false
	case protocol.CmdVersion:
		l.local(c, r.Cmd, "VERSION "+l.p.Version, false)
		return 0, 0, false
	case protocol.CmdVerbosity:
		l.p.verbosity.Store(int32(min(r.Level, 2)))
		l.local(c, r.Cmd, "OK", r.Noreply)
		return 0, 0, false
	}
	// The rest the proxy answers itself: quit, an unknown command (or an
	// HTTP request, which closes), me, shutdown.
	return 0, 0, true
}

// binary starts the binary request at the front of data. It returns the
// bytes used, more > 0 when the request needs that many bytes first, 0
// when the header is not whole, or used -1 when the request is not
// started (c's input waits). local says the request is inline's to
// serve: one the loop does not forward (a request whose lengths do not
// fit its opcode, an unknown opcode, a stats group, a flush with a
// delay, a bad packet), which local.go answers as memcached does.
func (l *ploop) binary(c *conn, data []byte) (used, more int, local bool) {
	var req protocol.Request
	n, err := protocol.ParseRequest(data, &req)
	if err != nil {
		return 0, 0, true // closes
	}
	if n == 0 {
		if len(data) < protocol.HeaderLen {
			return 0, 0, false
		}
		if req.BodyLen > maxBody {
			return 0, 0, true // closes
		}
		return 0, protocol.HeaderLen + int(req.BodyLen), false
	}
	op, quiet := req.Opcode.Loud()
	ext, val := len(req.Extras), len(req.Value)
	fits := false
	switch op {
	case protocol.OpGet, protocol.OpGetK, protocol.OpDelete:
		fits = ext == 0 && val == 0
	case protocol.OpGAT, protocol.OpGATK, protocol.OpTouch:
		fits = ext == 4 && val == 0
	case protocol.OpSet, protocol.OpAdd, protocol.OpReplace:
		fits = ext == 8
	case protocol.OpAppend, protocol.OpPrepend:
		fits = ext == 0
	case protocol.OpIncrement, protocol.OpDecrement:
		fits = ext == 20 && val == 0
	case protocol.OpNoop, protocol.OpVerbosity:
		l.localBin(c, &req, nil)
		return n, 0, false
	case protocol.OpVersion:
		l.localBin(c, &req, []byte(l.p.Version)) // allocates: rare
		return n, 0, false
	case protocol.OpQuit:
		if !quiet {
			l.localBin(c, &req, nil)
		}
		c.lwait = waitClose
		l.settled(c)
		return n, 0, false
	case protocol.OpStat:
		if len(req.Key) != 0 {
			return 0, 0, true // a stats group: "Not found"
		}
		if !l.myTurn(c) {
			return -1, 0, false
		}
		l.statsBin(c, &req)
		return n, 0, false
	case protocol.OpFlush:
		if ext == 4 && binary.BigEndian.Uint32(req.Extras) != 0 {
			return 0, 0, true // a delay: refused (local.go)
		}
		if !l.mayStart(c) {
			return -1, 0, false
		}
		l.startFlushBin(c, &req)
		return n, 0, false
	default:
		return 0, 0, true // "Unknown command"
	}
	if !fits || len(req.Key) == 0 || len(req.Key) > protocol.KeyMaxLength {
		return 0, 0, true // "Invalid arguments", and the connection closes
	}
	if !l.mayStart(c) {
		return -1, 0, false
	}
	l.startBin(c, &req, data[:n])
	return n, 0, false
}

// mayStart makes sure a request of c may start now: c has nothing in
// flight on an earlier upstream (else c waits for it).
func (l *ploop) mayStart(c *conn) bool {
	u := l.p.cur.Load()
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

// keyTooLong reports whether one of a get's keys, T[First:N-1] and
// those in the rest of the line, is longer than memcached takes.
func keyTooLong(r *protocol.TextRequest) bool {
	t := &r.Tokens
	for i := r.First; i < t.N-1; i++ {
		if len(t.T[i]) > protocol.KeyMaxLength {
			return true
		}
	}
	for rest := t.Rest; len(rest) > 0; {
		tok := rest
		if i := bytes.IndexByte(rest, ' '); i >= 0 {
			tok, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		if len(tok) > protocol.KeyMaxLength {
			return true
		}
	}
	return false
}

// myTurn reports whether c's requests before this one are all answered;
// if not, c's input waits until they are. A request that reports on what
// came before it (stats) is served then.
func (l *ploop) myTurn(c *conn) bool {
	if c.lqh < len(c.lq) {
		c.lwait = waitTurn
		return false
	}
	return true
}

// settled is called when c's requests, replies or input state changed:
// it lets waiting input go on, or queues c to leave the loop.
func (l *ploop) settled(c *conn) {
	empty := c.lqh == len(c.lq)
	switch c.lwait {
	case waitClose:
		if empty && len(c.out) == 0 {
			l.toDQ(c)
		}
	case waitDrain, waitTurn:
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

// finishClient closes a client that is done with the loop: after quit
// or the end of its input, once its requests are answered.
func (l *ploop) finishClient(c *conn) {
	if c.lqh == len(c.lq) && c.lwait == waitClose {
		l.closeClient(c)
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
