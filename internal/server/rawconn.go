package server

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// Plain sockets are served from inside the runtime poller's read loop,
// the way memcached's event loop serves them: one read(2) per readiness,
// the commands it brought, one write(2) of the replies, then back to the
// poller.
//
// net.Conn.Read cannot do that. Each call first tries read(2) and parks
// only on EAGAIN; a request/response client sends its next request only
// after our reply, so on a busy node nearly every Read begins with a
// read(2) that fails, a third of the node's system calls. Skipping that
// read from a fresh Read call is not safe: the poller drops readiness
// noticed before the call (pollReset), and a request that arrived in
// between would wait forever. Within one syscall.RawConn.Read call the
// readiness is never dropped: the callback (rawStep) reads, serves and
// writes, and returns false to wait whenever its read came back short.
// A short read means the kernel's queue was empty at that moment, and the
// poller's sockets are edge-triggered, so any byte arriving after it
// raises a fresh readiness event that ends the wait. A stale event costs
// one EAGAIN read, as it always did.
//
// rawStep leaves the read loop (returns true) for everything unusual: a
// read error or EOF, replies the socket would not take at once (written
// then by flush, which waits for the socket), a close, a stream handoff,
// shutdown. serveRaw handles those and enters the loop again.

// rawRead and rawWrite are read(2) and write(2) without the scheduler's
// syscall bookkeeping (entersyscall/exitsyscall, a few percent of a busy
// node's CPU). That is safe only because the socket is non-blocking (the
// runtime poller set O_NONBLOCK): the call returns at once, data or
// EAGAIN, and never holds the thread.
func rawRead(fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

func rawWrite(fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

// rawConn returns nc's raw socket when nc is a plain TCP or Unix socket.
func rawConn(nc net.Conn) syscall.RawConn {
	switch nc := nc.(type) {
	case *net.TCPConn:
		rc, err := nc.SyscallConn()
		if err == nil {
			return rc
		}
	case *net.UnixConn:
		rc, err := nc.SyscallConn()
		if err == nil {
			return rc
		}
	}
	return nil
}

// serveRaw is serve's loop for plain sockets.
func (c *conn) serveRaw(idle time.Duration) {
	c.idle = idle
	for {
		c.state.Store(int32(stateRead))
		if idle > 0 {
			c.nc.SetReadDeadline(time.Now().Add(idle))
		}
		c.rawErr = nil
		if err := c.rc.Read(c.rawFn); err != nil {
			if idle > 0 && errors.Is(err, os.ErrDeadlineExceeded) && !c.s.closing.Load() {
				c.s.idleKicks.Add(1)
			}
			return
		}
		// rawStep served what it read; a half-closed client has had its
		// answers but for what the socket has not taken yet.
		if err := c.flush(); err != nil || c.close || c.rawErr != nil {
			return
		}
		if c.producerName != "" {
			c.state.Store(int32(stateWrite))
			c.s.cl.streams.ServeProducer(c.nc, c.rbuf[c.r:c.w], c.producerName)
			return
		}
		if c.s.closing.Load() {
			return
		}
	}
}

// rawStep is the read loop's callback (see above): true leaves the loop.
func (c *conn) rawStep(fd uintptr) bool {
	for {
		buf := c.rbuf[c.w:]
		n, err := rawRead(int(fd), buf)
		if err != nil {
			switch err {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false
			}
			c.rawErr = err
			return true
		}
		if n == 0 {
			c.rawErr = io.EOF
			return true
		}
		c.w += n
		c.ctr.bytesRead.Add(uint64(n))
		c.state.Store(int32(stateParse))
		need := c.processInput()
		if len(c.out) > 0 && !c.writeRaw(int(fd)) {
			return true
		}
		if c.close || c.producerName != "" || c.s.closing.Load() {
			return true
		}
		c.makeRoom(need)
		if n < len(buf) {
			c.state.Store(int32(stateRead))
			if c.idle > 0 {
				c.nc.SetReadDeadline(time.Now().Add(c.idle))
			}
			return false
		}
	}
}

// writeRaw writes the replies straight to the socket. It returns false,
// with what is left in c.out, when the socket would block or failed; the
// caller leaves the read loop and flush finishes the job (or meets the
// error).
func (c *conn) writeRaw(fd int) bool {
	c.state.Store(int32(stateWrite))
	off := 0
	for off < len(c.out) {
		n, err := rawWrite(fd, c.out[off:])
		if n > 0 {
			off += n
			c.ctr.bytesWritten.Add(uint64(n))
		}
		if err == syscall.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			c.out = c.out[:copy(c.out, c.out[off:])]
			c.mark = 0
			c.authMark = -1
			return false
		}
	}
	if cap(c.out) > 4<<20 {
		c.out = nil
	} else {
		c.out = c.out[:0]
	}
	c.mark = 0
	c.authMark = -1
	return true
}
