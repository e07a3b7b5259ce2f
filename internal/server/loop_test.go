package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// loopConns counts the connections the node's event loops serve.
func loopConns(s *Server) int {
	n := 0
	for _, l := range s.loops {
		l.mu.Lock()
		for _, c := range l.conns {
			if c != nil {
				n++
			}
		}
		l.mu.Unlock()
	}
	return n
}

// waitFor spins (yielding, not sleeping) until cond holds, for at most
// ten seconds of wall time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}

func TestLoopServesPlainSockets(t *testing.T) {
	s, addr := startServer(t, nil)
	if len(s.loops) == 0 {
		t.Fatal("no event loops")
	}
	var cs []*textClient
	for i := range 3 {
		c := dialText(t, addr)
		c.expect(fmt.Sprintf("set k%d 0 0 1\r\nx\r\n", i), "STORED\r\n")
		cs = append(cs, c)
	}
	if n := loopConns(s); n != 3 {
		t.Fatalf("%d connections on the loops, want 3", n)
	}
	// stats conns knows a loop connection's peer.
	c := cs[0]
	fmt.Fprintf(c.nc, "stats conns\r\n")
	found := false
	for {
		line, err := c.r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "END\r\n" {
			break
		}
		if strings.HasSuffix(line, ":addr tcp:"+c.nc.LocalAddr().String()+"\r\n") {
			found = true
		}
	}
	if !found {
		t.Errorf("stats conns does not show %s", c.nc.LocalAddr())
	}
	// A client that goes away is closed and forgotten.
	cs[1].nc.Close()
	waitFor(t, "the closed connection to leave the loop", func() bool { return loopConns(s) == 2 })
	waitFor(t, "curr_connections to drop", func() bool { return s.currConns.Load() == 2 })
	cs[2].expect("get k2\r\n", "VALUE k2 0 1\r\nx\r\nEND\r\n")
}

// TestLoopPipelinerTakesTurns streams a long pipeline of gets (many full
// reads in a row, so the loop ends the pipeliner's turn and comes back to
// it) while another client does request/response round trips on the same
// loop: every get is answered, in order, and the other client is served
// throughout.
func TestLoopPipelinerTakesTurns(t *testing.T) {
	s, addr := startServer(t, func(c *Config) { c.Threads = 1 })
	if len(s.loops) != 1 {
		t.Fatalf("%d loops, want 1", len(s.loops))
	}
	if got := roundTrip(t, addr, "set p 0 0 2\r\nhi\r\n", 8); got != "STORED\r\n" {
		t.Fatalf("set: %q", got)
	}
	const gets = 30000 // 210 kB of requests: far more than maxReadsPerTurn buffers
	pipe, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer pipe.Close()
	pipe.SetDeadline(time.Now().Add(15 * time.Second))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		io.WriteString(pipe, strings.Repeat("get p\r\n", gets))
	}()
	other, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	done := make(chan error, 1)
	go func() {
		for i := range 200 {
			if got := roundTripConn(t, other, "version\r\n"); !strings.HasPrefix(got, "VERSION ") {
				done <- fmt.Errorf("round %d: %q", i, got)
				return
			}
		}
		done <- nil
	}()
	want := "VALUE p 0 2\r\nhi\r\nEND\r\n"
	buf := make([]byte, len(want))
	br := bufio.NewReaderSize(pipe, 64<<10)
	for i := range gets {
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != want {
			t.Fatalf("get %d: %q %v", i, buf, err)
		}
	}
	wg.Wait()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestLoopShutdownClosesClients: Serve returns with clients connected to
// the loops, and each sees its connection closed.
func TestLoopShutdownClosesClients(t *testing.T) {
	cfg := Config{Port: -1, PortSet: true, Listen: []string{"127.0.0.1"}, MaxConnsFast: true, Version: "test"}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	<-s.ready
	addr := s.Addrs()[0].String()
	var ncs []net.Conn
	for range 4 {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if got := roundTripConn(t, nc, "version\r\n"); !strings.HasPrefix(got, "VERSION ") {
			t.Fatalf("version: %q", got)
		}
		ncs = append(ncs, nc)
	}
	if n := loopConns(s); n != 4 {
		t.Fatalf("%d connections on the loops, want 4", n)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	for i, nc := range ncs {
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := nc.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("client %d: read %d, %v; want EOF", i, n, err)
		}
	}
}

// TestLoopDetachesBlockedConnection parks a request on a pending vbucket:
// its connection leaves the loop (a parked request must not hold up the
// others) and the loop goes on serving everyone else meanwhile.
func TestLoopDetachesBlockedConnection(t *testing.T) {
	s, addr := startCluster(t, func(c *Config) { c.VBucketParkTimeout = time.Hour; c.Threads = 1 })
	admin := dialBin(t, addr) // detaches on its first vbucket change
	admin.setState(3, vbucket.Active)
	admin.set(3, "k", "v")
	admin.setState(3, vbucket.Pending)
	others := make([]*textClient, 3)
	for i := range others {
		others[i] = dialText(t, addr)
		others[i].expect("version\r\n", "VERSION "+s.cfg.Version+"\r\n")
	}
	before := loopConns(s)
	client := dialBin(t, addr)
	client.do(protocol.OpNoop, 0, nil, nil, nil)
	waitFor(t, "the client on the loop", func() bool { return loopConns(s) == before+1 })
	client.send(protocol.OpGet, 3, nil, []byte("k"), nil)
	waitParked(s, 1)
	if n := loopConns(s); n != before {
		t.Fatalf("%d connections on the loop with one parked, want %d", n, before)
	}
	for _, o := range others {
		o.expect("version\r\n", "VERSION "+s.cfg.Version+"\r\n")
	}
	admin.setState(3, vbucket.Active)
	h, body := client.read()
	if h.Status != protocol.StatusOK || string(body) != "\x00\x00\x00\x00v" {
		t.Fatalf("parked get: %#x %q", h.Status, body)
	}
	if h, _ := client.do(protocol.OpNoop, 0, nil, nil, nil); h.Opcode != protocol.OpNoop {
		t.Fatalf("after the park: %+v", h)
	}
}

// TestLoopUnrulyClients puts every kind of awkward client on one loop at
// once: garbage that closes the connection, a client that resets its
// connection in the middle of a value, half-closers, quitters, a big
// reader, a pipeliner. A well-behaved client on the same loop is answered
// throughout, and when they are gone the node has forgotten every one.
//
// It runs twice: on a loop, and with a goroutine per connection.
func TestLoopUnrulyClients(t *testing.T) {
	t.Run("loop", func(t *testing.T) { unrulyClients(t, nil) })
	t.Run("goroutines", func(t *testing.T) {
		unrulyClients(t, func(c *Config) { c.NoEventLoops = true })
	})
}

func unrulyClients(t *testing.T, mutate func(*Config)) {
	s, addr := startServer(t, func(c *Config) {
		c.Threads = 1
		if mutate != nil {
			mutate(c)
		}
	})
	control := dialText(t, addr)
	control.expect("set ctl 0 0 2\r\nok\r\n", "STORED\r\n")
	big := strings.Repeat("b", 500_000)
	fmt.Fprintf(control.nc, "set big 0 0 %d\r\n%s\r\n", len(big), big)
	control.expect("", "STORED\r\n")

	dial := func() (net.Conn, error) {
		nc, err := net.Dial("tcp", addr)
		if err == nil {
			nc.SetDeadline(time.Now().Add(20 * time.Second))
		}
		return nc, err
	}
	clients := []func() error{
		func() error { // a line with no end: memcached closes
			nc, err := dial()
			if err != nil {
				return err
			}
			defer nc.Close()
			io.WriteString(nc, strings.Repeat("\x00garbage", 1000))
			if _, err := io.ReadAll(nc); err != nil && !isReset(err) {
				return fmt.Errorf("garbage: %v", err)
			}
			return nil
		},
		func() error { // reset in the middle of a value
			nc, err := dial()
			if err != nil {
				return err
			}
			io.WriteString(nc, "set torn 0 0 100\r\nonly part of it")
			nc.(*net.TCPConn).SetLinger(0)
			return nc.Close()
		},
		func() error { // half-close: answers still come
			nc, err := dial()
			if err != nil {
				return err
			}
			defer nc.Close()
			io.WriteString(nc, "get ctl\r\n")
			nc.(*net.TCPConn).CloseWrite()
			b, err := io.ReadAll(nc)
			if want := "VALUE ctl 0 2\r\nok\r\nEND\r\n"; string(b) != want || err != nil {
				return fmt.Errorf("half-close: %q %v", b, err)
			}
			return nil
		},
		func() error { // quit after a command
			nc, err := dial()
			if err != nil {
				return err
			}
			defer nc.Close()
			io.WriteString(nc, "get ctl\r\nquit\r\nget ctl\r\n")
			b, err := io.ReadAll(nc)
			if want := "VALUE ctl 0 2\r\nok\r\nEND\r\n"; string(b) != want || err != nil {
				return fmt.Errorf("quit: %q %v", b, err)
			}
			return nil
		},
		func() error { // 20 MB of replies to one multi-get (more than the socket buffers)
			nc, err := dial()
			if err != nil {
				return err
			}
			defer nc.Close()
			const n = 40
			io.WriteString(nc, "get"+strings.Repeat(" big", n)+"\r\n")
			want := fmt.Sprintf("VALUE big 0 %d\r\n%s\r\n", len(big), big)
			buf := make([]byte, len(want))
			br := bufio.NewReaderSize(nc, 1<<20)
			for i := range n {
				if _, err := io.ReadFull(br, buf); err != nil || string(buf) != want {
					return fmt.Errorf("big value %d: %v", i, err)
				}
			}
			if line, err := br.ReadString('\n'); line != "END\r\n" {
				return fmt.Errorf("big: end %q %v", line, err)
			}
			return nil
		},
		func() error { // a pipeline of 5000 gets
			nc, err := dial()
			if err != nil {
				return err
			}
			defer nc.Close()
			const n = 5000
			go io.WriteString(nc, strings.Repeat("get ctl\r\n", n))
			want := "VALUE ctl 0 2\r\nok\r\nEND\r\n"
			buf := make([]byte, len(want))
			br := bufio.NewReader(nc)
			for i := range n {
				if _, err := io.ReadFull(br, buf); err != nil || string(buf) != want {
					return fmt.Errorf("pipeline %d: %q %v", i, buf, err)
				}
			}
			return nil
		},
	}
	errs := make(chan error, 4*len(clients))
	var wg sync.WaitGroup
	for range 4 {
		for _, f := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- f()
			}()
		}
	}
	for i := range 100 {
		control.expect("get ctl\r\n", "VALUE ctl 0 2\r\nok\r\nEND\r\n")
		if i%10 == 0 {
			runtime.Gosched()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	waitFor(t, "the unruly clients to be forgotten", func() bool { return s.currConns.Load() == 1 && loopConns(s) <= 1 })
	control.expect("get ctl\r\n", "VALUE ctl 0 2\r\nok\r\nEND\r\n")
}

// isReset reports a connection reset, which a server's close can turn
// into when the client's bytes are still unread.
func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET)
}

func TestLoopServesUnixSockets(t *testing.T) {
	sock := t.TempDir() + "/vbcache.sock"
	s, _ := startServer(t, func(c *Config) { c.UnixSocket = sock })
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	c := &textClient{t: t, nc: nc, r: bufio.NewReader(nc)}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	c.expect("set u 0 0 1\r\nx\r\n", "STORED\r\n")
	if n := loopConns(s); n != 1 {
		t.Fatalf("%d connections on the loops, want 1", n)
	}
	c.expect("get u\r\n", "VALUE u 0 1\r\nx\r\nEND\r\n")
	nc.Close()
	waitFor(t, "the unix client to be forgotten", func() bool { return loopConns(s) == 0 && s.currConns.Load() == 0 })
}

// TestLoopIdleTimeout: a loop closes the connection that stays idle past
// -o idle_timeout while another keeps the same loop busy, and only that
// one.
func TestLoopIdleTimeout(t *testing.T) {
	s, addr := startServer(t, func(c *Config) { c.IdleTimeout = time.Second; c.Threads = 1 })
	idle := dialText(t, addr)
	busy := dialText(t, addr)
	busy.expect("version\r\n", "VERSION "+s.cfg.Version+"\r\n")
	if n := loopConns(s); n != 2 {
		t.Fatalf("%d connections on the loop, want 2", n)
	}
	closed := make(chan error, 1)
	go func() {
		_, err := idle.r.ReadByte()
		closed <- err
	}()
	for done := false; !done; {
		busy.expect("version\r\n", "VERSION "+s.cfg.Version+"\r\n")
		select {
		case err := <-closed:
			if err != io.EOF {
				t.Fatalf("idle connection: %v, want EOF", err)
			}
			done = true
		default:
		}
	}
	if k := s.idleKicks.Load(); k != 1 {
		t.Errorf("idle_kicks = %d, want 1", k)
	}
	busy.expect("version\r\n", "VERSION "+s.cfg.Version+"\r\n")
}

// TestLoopRoundTripDoesNotAllocate: a request served by an event loop,
// including the loop parking in the runtime poller while it waits for the
// next one, allocates nothing. The client is a blocking socket driven by
// raw system calls, so the process's allocation count is the node's.
func TestLoopRoundTripDoesNotAllocate(t *testing.T) {
	s, addr := startServer(t, nil)
	if len(s.loops) == 0 {
		t.Fatal("no event loops")
	}
	c := dialText(t, addr)
	c.expect("set k 0 0 5\r\nhello\r\n", "STORED\r\n")
	ta := s.Addrs()[0].(*net.TCPAddr)
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	sa := &syscall.SockaddrInet4{Port: ta.Port}
	copy(sa.Addr[:], ta.IP.To4())
	if err := syscall.Connect(fd, sa); err != nil {
		t.Fatal(err)
	}
	req := []byte("get k\r\n")
	want := "VALUE k 0 5\r\nhello\r\nEND\r\n"
	buf := make([]byte, 256)
	var bad error
	roundTrip := func() {
		if _, err := syscall.Write(fd, req); err != nil {
			bad = err
			return
		}
		n := 0
		for n < len(want) {
			m, err := syscall.Read(fd, buf[n:])
			if err != nil || m <= 0 {
				bad = fmt.Errorf("read: %d, %v", m, err)
				return
			}
			n += m
		}
		if string(buf[:n]) != want {
			bad = fmt.Errorf("reply %q", buf[:n])
		}
	}
	roundTrip() // the connection joins its loop
	allocs := testing.AllocsPerRun(2000, roundTrip)
	if bad != nil {
		t.Fatal(bad)
	}
	if allocs != 0 {
		t.Errorf("a round trip through the loop allocates %.2f times", allocs)
	}
}
