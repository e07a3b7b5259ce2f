package rawio

import (
	"errors"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// Poller is the epoll set of an event loop of our own (the node's,
// internal/server; the proxy's, internal/proxy), served by one goroutine
// at a time: Poll takes what is ready without blocking, and Park waits
// for it in the runtime poller, which watches the set as one more
// descriptor (an epoll set is readable while it has events), so an idle
// loop parks like any goroutine. Blocking in epoll_wait instead would
// hold the runtime's P in a system call, and the process's other
// goroutines would wait for sysmon to take it back, up to 10 ms when idle.
//
// A pipe registered in the set lets other goroutines wake the loop
// (Wake); its reads show up as events on WakeFD.
type Poller struct {
	FD     int                  // the epoll set, for epoll_ctl
	Events []syscall.EpollEvent // what Poll and Park return, Events[:n]

	f     *os.File // FD in the runtime poller
	rc    syscall.RawConn
	wake  [2]int
	got   int
	ready func(uintptr) bool // made once: parking allocates nothing
	armed time.Time          // f's read deadline, zero if none
}

// NewPoller creates an epoll set returning up to maxEvents events at a
// time, with its wake-up pipe.
func NewPoller(maxEvents int) (*Poller, error) {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	p := &Poller{FD: fd, Events: make([]syscall.EpollEvent, maxEvents)}
	p.ready = func(uintptr) bool {
		p.got = p.Poll()
		return p.got > 0
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, os.NewSyscallError("fcntl", err)
	}
	p.f = os.NewFile(uintptr(fd), "epoll") // non-blocking: in the runtime poller
	if p.rc, err = p.f.SyscallConn(); err != nil {
		p.f.Close()
		return nil, err
	}
	if err := syscall.Pipe2(p.wake[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		p.f.Close()
		return nil, os.NewSyscallError("pipe2", err)
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(p.wake[0])}
	if err := syscall.EpollCtl(fd, syscall.EPOLL_CTL_ADD, p.wake[0], &ev); err != nil {
		p.Close()
		return nil, os.NewSyscallError("epoll_ctl", err)
	}
	return p, nil
}

// Close closes the set and the pipe.
func (p *Poller) Close() {
	p.f.Close()
	syscall.Close(p.wake[0])
	syscall.Close(p.wake[1])
}

// WakeFD is the descriptor whose events are Wake's.
func (p *Poller) WakeFD() int { return p.wake[0] }

// Wake makes the set ready, from any goroutine; the loop sees an event
// on WakeFD until DrainWake.
func (p *Poller) Wake() { syscall.Write(p.wake[1], []byte{0}) }

// DrainWake empties the wake-up pipe.
func (p *Poller) DrainWake() {
	var b [64]byte
	for {
		if n, _ := Read(uintptr(p.wake[0]), b[:]); n < len(b) {
			return
		}
	}
}

// Poll is a non-blocking epoll_wait into Events, without the scheduler's
// syscall bookkeeping (it never blocks).
func (p *Poller) Poll() int {
	for {
		r, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_WAIT, uintptr(p.FD), uintptr(unsafe.Pointer(&p.Events[0])), uintptr(len(p.Events)), 0, 0, 0)
		switch e {
		case 0:
			return int(r)
		case syscall.EINTR:
			continue
		}
		return 0 // EBADF: closed; Park reports it
	}
}

// Park returns the next ready events, parking in the runtime poller until
// there are some, or until the armed deadline has passed, when it returns
// none (and nothing is armed any more). A non-zero deadline is armed
// first; zero leaves what is armed (Armed) as it is. It polls once before
// parking, inside one RawConn.Read, so no event is lost between the poll
// and the wait (the set's readiness is edge-triggered there, and a poll
// that found it empty is followed by a fresh edge for any later event;
// see the package comment). ok is false once the set is closed.
func (p *Poller) Park(deadline time.Time) (n int, ok bool) {
	if !deadline.IsZero() && !deadline.Equal(p.armed) {
		p.armed = deadline
		p.f.SetReadDeadline(deadline)
	}
	p.got = 0
	err := p.rc.Read(p.ready)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		p.armed = time.Time{}
		p.f.SetReadDeadline(time.Time{})
		return 0, true
	}
	return p.got, err == nil
}

// Armed is the deadline Park will wake at, zero if none.
func (p *Poller) Armed() time.Time { return p.armed }

// Dup returns a descriptor of its own for nc's socket (a plain TCP or
// Unix socket, or a Transparent wrapper of one), close-on-exec and, like
// the original, non-blocking; the caller may then close nc, which takes
// the original out of the runtime poller.
func Dup(nc net.Conn) (int, bool) {
	rc := Conn(nc)
	if rc == nil {
		return -1, false
	}
	fd := -1
	if err := rc.Control(func(s uintptr) {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, s, syscall.F_DUPFD_CLOEXEC, 0)
		if e == 0 {
			fd = int(r)
		}
	}); err != nil || fd < 0 {
		return -1, false
	}
	return fd, true
}
