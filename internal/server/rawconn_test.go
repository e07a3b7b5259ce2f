package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRequestResponseNeverStalls plays many strict request/response
// clients at once: each sends its next command only after the reply to
// the last. A read loop that waits for the poller while a request is
// already queued (a lost wake-up) stalls such a client for good; every
// reply here must come within the deadline.
func TestRequestResponseNeverStalls(t *testing.T) {
	_, addr := startServer(t, nil)
	const clients, rounds = 32, 400
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer nc.Close()
			br := bufio.NewReader(nc)
			for r := range rounds {
				key := fmt.Sprintf("k%d-%d", i, r%7)
				val := fmt.Sprintf("v%d", r)
				nc.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := fmt.Fprintf(nc, "set %s 0 0 %d\r\n%s\r\n", key, len(val), val); err != nil {
					errs <- err
					return
				}
				if line, err := br.ReadString('\n'); err != nil || line != "STORED\r\n" {
					errs <- fmt.Errorf("client %d round %d set: %q %v", i, r, line, err)
					return
				}
				if _, err := fmt.Fprintf(nc, "get %s\r\n", key); err != nil {
					errs <- err
					return
				}
				want := fmt.Sprintf("VALUE %s 0 %d\r\n%s\r\nEND\r\n", key, len(val), val)
				got := make([]byte, len(want))
				if _, err := io.ReadFull(br, got); err != nil || string(got) != want {
					errs <- fmt.Errorf("client %d round %d get: %q %v", i, r, got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestReplyLargerThanSocketBuffer makes the node's write would-block: a
// multi-get whose replies far exceed the socket buffers (20 MB: more than
// loopback's socket buffers hold), read only once the node is blocked on
// the full socket. The rest of the reply must follow once the client
// reads, and the connection must go on serving.
func TestReplyLargerThanSocketBuffer(t *testing.T) {
	s, addr := startServer(t, nil)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	val := strings.Repeat("x", 500_000)
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(nc, "set big 0 0 %d\r\n%s\r\n", len(val), val)
	if line, err := br.ReadString('\n'); err != nil || line != "STORED\r\n" {
		t.Fatalf("set: %q %v", line, err)
	}
	const n = 40 // 20 MB of replies
	if len(s.loops) > 0 && loopConns(s) != 1 {
		t.Fatalf("%d connections on the event loops, want this one", loopConns(s))
	}
	fmt.Fprintf(nc, "get%s\r\n", strings.Repeat(" big", n))
	// The node fills the socket and blocks. On an event loop, a write the
	// socket will not take detaches the connection from its loop, which
	// is that moment; without loops (VBCACHE_NOLOOP=1) all there is to see
	// is the connection writing (conn_mwrite) 20 MB that the socket
	// buffers cannot hold.
	waitFor(t, "the node blocked writing the reply", func() bool {
		if len(s.loops) > 0 {
			return loopConns(s) == 0
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.conns {
			if connState(c.state.Load()) == stateWrite {
				return true
			}
		}
		return false
	})
	hdr := fmt.Sprintf("VALUE big 0 %d\r\n", len(val))
	buf := make([]byte, len(hdr)+len(val)+2)
	for i := range n {
		if _, err := io.ReadFull(br, buf); err != nil {
			t.Fatalf("value %d: %v", i, err)
		}
		if string(buf[:len(hdr)]) != hdr || string(buf[len(hdr):len(hdr)+len(val)]) != val {
			t.Fatalf("value %d corrupt", i)
		}
	}
	if line, err := br.ReadString('\n'); err != nil || line != "END\r\n" {
		t.Fatalf("end: %q %v", line, err)
	}
	fmt.Fprintf(nc, "version\r\n")
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "VERSION ") {
		t.Fatalf("after: %q %v", line, err)
	}
}
