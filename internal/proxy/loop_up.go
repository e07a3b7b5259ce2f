package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/rawio"
)

// A loop's server connections (loop.go): connecting, writing the
// requests a round gave them (with the hold), reading and matching the
// answers, failures and timeouts.

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
	if cr := up.u.cfg.Upstream; cr != nil && (cr.TLS != nil || cr.User != "") && family != syscall.AF_UNIX {
		return l.connectBridged(up, cr)
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
	return l.pollUp(up, fd, dialErr)
}

// pollUp makes fd, connecting, up's socket on the loop.
func (l *ploop) pollUp(up *lup, fd int, dialErr func(error) error) error {
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
	if up.bin {
		return l.parseUpBin(up)
	}
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
		if r.line {
			if up.u.cluster && nl > 0 {
				if why := refusal(line[:nl-1]); why != nil {
					up.r += nl + 1
					l.refused(up, f, why)
					progressed = true
					continue
				}
			}
			switch {
			case r.failed:
			case r.cmd == protocol.CmdFlushAll: // one answer per server: finish says OK if each did
				if string(line) != "OK\r\n" {
					r.fail(string(protocol.TrimLine(line[:nl])))
				}
			default:
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
		if r.meta {
			total := nl + 1
			m, ok := protocol.ParseMetaReply(text)
			switch {
			case m.Code == protocol.MetaVA && ok:
				total += m.Size + 2
				if !l.whole(up, data, total) {
					return nil
				}
				if data[total-2] != '\r' || data[total-1] != '\n' {
					return errUpstreamProtocol
				}
			case !ok && !protocol.ClassifyReply(text).IsError():
				return errUpstreamProtocol
			case !ok && up.u.cluster:
				if why := refusal(text); why != nil {
					up.r += total
					l.refused(up, f, why)
					progressed = true
					continue
				}
			}
			if !r.failed {
				r.out = append(r.out, data[:total]...)
			}
			up.r += total
			l.fragOK(up, f)
			progressed = true
			continue
		}
		switch k := protocol.ClassifyReply(text); {
		case k == protocol.ReplyValue:
			v, ok := protocol.ParseValueLine(text)
			if !ok {
				return errUpstreamProtocol
			}
			total := nl + 1 + v.Size + 2
			if !l.whole(up, data, total) {
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
			if why := refusal(text); why != nil && up.u.cluster {
				l.refused(up, f, why)
				progressed = true
				continue
			}
			r.fail(string(protocol.TrimLine(line[:len(line)-1])))
			l.fragOK(up, f)
			progressed = true
		default:
			return errUpstreamProtocol
		}
	}
	return l.parsed(up, progressed)
}

// parseUpBin is parseUp for a binary connection: each request has one
// response, with the opcode it was sent with, forwarded with the
// client's opcode.
func (l *ploop) parseUpBin(up *lup) error {
	progressed := false
	for up.qh < len(up.q) {
		data := up.rbuf[up.r:up.w]
		var h protocol.Header
		if protocol.ParseHeader(data, &h) != nil {
			break
		}
		f := &up.q[up.qh]
		r := f.r
		loud, _ := r.op.Loud()
		if h.Magic != protocol.MagicResponse || h.Opcode != loud || int(h.KeyLen)+int(h.ExtLen) > int(h.BodyLen) || h.BodyLen > maxBody {
			return errUpstreamProtocol
		}
		total := protocol.HeaderLen + int(h.BodyLen)
		if !l.whole(up, data, total) {
			break
		}
		if why := refusalBin(h.Status); why != nil && up.u.cluster && r.cmd != protocol.CmdFlushAll {
			if h.Status == protocol.StatusNotMyVBucket {
				if body := data[protocol.HeaderLen+int(h.ExtLen)+int(h.KeyLen) : total]; len(body) > 0 {
					up.u.setRoute(body) // the node's map: parsed, rare
				}
			}
			up.r += total
			l.refused(up, f, why)
			progressed = true
			continue
		}
		switch {
		case r.failed:
		case r.cmd == protocol.CmdFlushAll: // one answer per server: finish says OK if each did
			if h.Status != protocol.StatusOK {
				r.fail("SERVER_ERROR flush: " + h.Status.Text())
			}
		default:
			at := len(r.out)
			r.out = append(r.out, data[:total]...)
			r.out[at+1] = byte(r.op)
			r.status = h.Status
		}
		up.r += total
		l.fragOK(up, f)
		progressed = true
	}
	return l.parsed(up, progressed)
}

// parsed ends a parse of up's answers: a connection with requests left
// that answered some gets a new deadline; one with none left must have
// no more to say.
func (l *ploop) parsed(up *lup, progressed bool) error {
	if up.qh < len(up.q) {
		if progressed {
			up.deadline = l.now.Add(up.u.timeout)
		}
	} else if up.r < up.w {
		return errUpstreamProtocol // an answer to nothing
	}
	return nil
}

// whole reports whether data, up's unparsed answers, holds the total
// bytes of the next answer; if not, up's buffer is made to hold them.
func (l *ploop) whole(up *lup, data []byte, total int) bool {
	if len(data) >= total {
		return true
	}
	if total > len(up.rbuf) {
		nb := make([]byte, total+readBufSize)
		up.w = copy(nb, data)
		up.r = 0
		up.rbuf = nb
	}
	return false
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
	l.dequeue(up, f)
	l.fragDone(r)
	l.closeIfDone(up)
}

// dequeue takes the fragment f, answered, off the head of up's queue.
func (l *ploop) dequeue(up *lup, f *lfrag) {
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
		up.u.report(up.addr, nil)
	}
}

// closeIfDone closes up once it has answered everything, if it is an
// earlier upstream's.
func (l *ploop) closeIfDone(up *lup) {
	if up.qh == len(up.q) && up.u != l.gen {
		l.closeUp(up)
	}
}

// failUp closes up after a failure; every request on it is answered with
// the failure. A connection the server closed while nothing was asked of
// it is just closed (a server restart, an idle timeout): no request failed.
func (l *ploop) failUp(up *lup, err error) {
	if b := up.bridge; b != nil {
		if e := b.err.Load(); e != nil {
			err = *e // the bridge's dial failed: nothing reached the server
		}
	}
	q := up.q[up.qh:]
	asked := len(q) > 0 || up.connecting
	up.q, up.qh, up.unanswered = up.q[:0], 0, 0
	up.wbuf, up.r, up.w = up.wbuf[:0], 0, 0
	l.closeFD(up)
	if asked {
		up.u.report(up.addr, err)
		up.failed = true
		l.p.ctr.upstreamErrors.Add(1)
		for i := range q {
			f := &q[i]
			up.st.record(l.now.Sub(f.start), true)
			r, lo, hi := f.r, f.lo, f.hi
			*f = lfrag{}
			if up.u.cluster && resendable(r.write, err) {
				l.inflight--
				l.retryLater(r, lo, hi, up.addr.String(), err) // allocates: rare
				continue
			}
			r.fail(failReplyAddr(up.addr.String(), err))
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
	up.bridge = nil
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
	clear(l.addrs)
	l.rt, l.rtUp = nil, l.rtUp[:0]
	l.gen = u
	for _, up := range old {
		if up.qh == len(up.q) && up.u != l.gen {
			l.closeUp(up)
		}
	}
}

// earliest is the first deadline of a request in flight or due time of
// a retry.
func (l *ploop) earliest() time.Time {
	d := l.firstRetry()
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
		var err error = os.ErrDeadlineExceeded
		if up.connecting {
			// Nothing was sent: the connect did not finish in time.
			err = &net.OpError{Op: "dial", Net: up.addr.Network(), Addr: up.addr, Err: err}
		}
		l.failUp(up, err)
	}
}
