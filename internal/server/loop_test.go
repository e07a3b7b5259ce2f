package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
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
