// Package rawio serves a socket from inside the Go runtime poller's read
// loop, the way memcached's event loop serves one: one read(2) per
// readiness, the work it brought, then back to the poller.
//
// net.Conn.Read cannot do that. Each call first tries read(2) and parks
// only on EAGAIN; a request/response peer sends its next message only
// after our answer, so on a busy server nearly every Read begins with a
// read(2) that fails, a third of the system calls. Skipping that read
// from a fresh Read call is not safe: the poller drops readiness noticed
// before the call (pollReset on entry), so a message that arrived in
// between would wait forever. Within one syscall.RawConn.Read call the
// readiness is never dropped. So the caller's callback reads (Read),
// does its work, and returns false to wait whenever its read came back
// short: a short read means the kernel's queue was empty at that
// moment, and the poller's sockets are edge-triggered, so any byte
// arriving after it raises a fresh readiness event that ends the wait. A
// stale event costs one EAGAIN read, as it always did. The exception is
// the peer's FIN: when it arrives with the last bytes, in one readiness
// event, the read returns those bytes short and no event follows for the
// end of the stream. A callback that must notice a peer's shutdown (a
// server answering a client that half-closed) reads again instead of
// waiting after a short read, until a read finds nothing. The callback
// returns true to leave the loop (an error, EOF, output the socket would
// not take, a handoff); the caller does that work outside and may enter a
// fresh loop, whose first callback must read before it waits.
//
// Read and Write are read(2) and write(2) without the scheduler's syscall
// bookkeeping (entersyscall/exitsyscall, a few percent of a busy server's
// CPU). That is safe only because the poller's sockets are non-blocking:
// the call returns at once, data or EAGAIN, and never holds the thread.
// Use them only on non-blocking descriptors: one handed to a RawConn
// callback, or one an event loop of our own owns (internal/server).
package rawio

import (
	"io"
	"net"
	"syscall"
	"unsafe"
)

// Transparent is a net.Conn that wraps another without changing the bytes
// that pass (it counts, or logs its close): Conn looks through it. TLS
// and anything else that transforms the stream must not implement it.
type Transparent interface {
	net.Conn
	TransparentConn() net.Conn
}

// Conn returns nc's raw socket when nc is a plain TCP or Unix socket (not
// TLS; a Transparent wrapper is looked through), or nil.
func Conn(nc net.Conn) syscall.RawConn {
	for {
		t, ok := nc.(Transparent)
		if !ok {
			break
		}
		nc = t.TransparentConn()
	}
	var rc syscall.RawConn
	var err error
	switch nc := nc.(type) {
	case *net.TCPConn:
		rc, err = nc.SyscallConn()
	case *net.UnixConn:
		rc, err = nc.SyscallConn()
	default:
		return nil
	}
	if err != nil {
		return nil
	}
	return rc
}

// Read is read(2) on a non-blocking descriptor: n > 0 bytes, or 0 and
// io.EOF's cause (n == 0, err == nil), or an errno (EAGAIN: nothing yet).
// EINTR is retried.
func Read(fd uintptr, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(n), nil
	}
}

// Fill is the read a callback starts with: n > 0 bytes read into p; or
// wait, nothing to read yet (return false to the poller); or err, io.EOF
// at the end of the stream or the read's error.
func Fill(fd uintptr, p []byte) (n int, wait bool, err error) {
	n, err = Read(fd, p)
	switch {
	case err == syscall.EAGAIN:
		return 0, true, nil
	case err != nil:
		return 0, false, err
	case n == 0 && len(p) > 0:
		return 0, false, io.EOF
	}
	return n, false, nil
}

// Write writes as much of p as the socket takes now. It returns how much
// was written and nil when all of it was, or syscall.EAGAIN (the socket
// is full: wait for it, e.g. with net.Conn.Write for the rest) or the
// write's error.
func Write(fd uintptr, p []byte) (int, error) {
	off := 0
	for off < len(p) {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[off])), uintptr(len(p)-off))
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return off, e
		}
		if n == 0 {
			return off, syscall.EAGAIN
		}
		off += int(n)
	}
	return off, nil
}
