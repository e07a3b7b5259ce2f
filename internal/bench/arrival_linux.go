//go:build linux && (amd64 || arm64 || riscv64 || ppc64le || s390x || loong64)

package bench

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// arrivalReader reads a TCP connection with recvmsg and keeps the kernel's
// receive timestamp (SO_TIMESTAMPNS) of the last segment each read
// returned. Latency measured to that time excludes the generator's own
// delay in getting round to the reply: on one core shared with a server,
// a burst of replies waits in the socket buffers while the generator
// handles the ones before it, and the time each waited there is the
// generator's, not the server's (see Config.Arrival).
type arrivalReader struct {
	rc   syscall.RawConn
	n    *atomic.Uint64 // bytes read, for the connection's counters
	oob  [64]byte
	last int64 // wall-clock ns of the last segment of the latest read; 0 when it had none

	// Read's arguments and results, for readFn (a method value made once,
	// so that a read does not allocate a closure).
	p      []byte
	nr     int
	err    error
	readFn func(fd uintptr) bool
}

// newArrivalReader turns on receive timestamps for nc and returns a reader
// of it. It fails where the connection is not a TCP socket or the kernel
// refuses the option.
func newArrivalReader(nc net.Conn, n *atomic.Uint64) (*arrivalReader, error) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil, errNoArrival
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
	}); err != nil {
		return nil, err
	}
	if serr != nil {
		return nil, serr
	}
	a := &arrivalReader{rc: rc, n: n}
	a.readFn = a.read
	return a, nil
}

func (a *arrivalReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	a.p, a.nr, a.err = p, 0, nil
	if err := a.rc.Read(a.readFn); err != nil {
		return 0, err // a deadline, or the connection closed
	}
	a.p = nil
	if a.err != nil {
		return 0, a.err
	}
	if a.nr == 0 {
		return 0, io.EOF
	}
	a.n.Add(uint64(a.nr))
	return a.nr, nil
}

// read is one recvmsg; false asks RawConn to wait for the socket to become
// readable and call it again.
func (a *arrivalReader) read(fd uintptr) bool {
	n, oobn, _, _, err := syscall.Recvmsg(int(fd), a.p, a.oob[:], 0)
	if err == syscall.EAGAIN || err == syscall.EINTR {
		return false
	}
	if err != nil {
		a.err = err
		return true
	}
	a.nr = n
	a.last, _ = parseTimestampNS(a.oob[:oobn]) // 0: the segments carried none
	return true
}

// parseTimestampNS finds SCM_TIMESTAMPNS in a control message buffer and
// returns it in nanoseconds since the epoch.
func parseTimestampNS(b []byte) (int64, bool) {
	// struct cmsghdr on the 64-bit Linux ports: a size_t length, then
	// the level and the type as ints.
	const hdr = 16
	for len(b) >= hdr {
		l := int(binary.NativeEndian.Uint64(b[0:8]))
		level := int32(binary.NativeEndian.Uint32(b[8:12]))
		typ := int32(binary.NativeEndian.Uint32(b[12:16]))
		if l < hdr || l > len(b) {
			return 0, false
		}
		if level == syscall.SOL_SOCKET && typ == syscall.SCM_TIMESTAMPNS && l >= hdr+16 {
			d := b[hdr:]
			sec := int64(binary.NativeEndian.Uint64(d[0:8]))
			nsec := int64(binary.NativeEndian.Uint64(d[8:16]))
			return sec*1e9 + nsec, true
		}
		b = b[cmsgAlign(l):]
	}
	return 0, false
}

func cmsgAlign(l int) int {
	const a = 8 // sizeof(long) on the 64-bit Linux ports
	return (l + a - 1) &^ (a - 1)
}

// awaitTimestamps waits until the kernel timestamps TCP segments on
// loopback, or fails after limit. Turning SO_TIMESTAMPNS on switches the
// kernel's receive timestamps on for every socket, but through a
// deferred work item: until a kernel worker has run it, segments arrive
// without one. On a core that real-time processes keep busy that worker
// can wait for most of a run, so the generator checks first, with a
// connection of its own, before its load starts.
func awaitTimestamps(limit time.Duration) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	cl, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return err
	}
	defer cl.Close()
	sv, err := ln.Accept()
	if err != nil {
		return err
	}
	defer sv.Close()
	var n atomic.Uint64
	a, err := newArrivalReader(sv, &n)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(limit)
	buf := make([]byte, 16)
	for {
		if _, err := cl.Write([]byte{'.'}); err != nil {
			return err
		}
		sv.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := a.Read(buf); err != nil {
			return err
		}
		if a.last != 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the kernel gave no receive timestamps within %v (--arrival)", limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
