package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestLoopHoldsRequestsForTheNextAnswer: on an event loop, a request for
// a server that is answering others waits for the next answer and then
// goes (writeUp's hold), and a request with nothing in flight goes at
// once. The server is a fake that logs each request as it arrives, with
// how many answers it had sent by then, and answers the first one only
// when told.
func TestLoopHoldsRequestsForTheNextAnswer(t *testing.T) {
	if !loopsOn() {
		t.Skip("event loops are off (VBCACHE_NOLOOP)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	type arrival struct {
		key      string
		answered int // answers sent before it arrived
	}
	var (
		mu       sync.Mutex
		cond     = sync.NewCond(&mu)
		log      []arrival
		answered int
	)
	release := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() { // the fake server, owned by the test (Cleanup waits)
		defer wg.Done()
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		keys := make(chan string, 16)
		wg.Add(1)
		go func() { // logs requests as they arrive
			defer wg.Done()
			defer close(keys)
			r := bufio.NewReader(nc)
			for {
				l, err := r.ReadString('\n')
				if err != nil {
					return
				}
				f := strings.Fields(l)
				if len(f) != 2 || f[0] != "get" {
					return
				}
				mu.Lock()
				log = append(log, arrival{f[1], answered})
				cond.Broadcast()
				mu.Unlock()
				keys <- f[1]
			}
		}()
		first := true
		for k := range keys {
			if first {
				first = false
				select {
				case <-release:
				case <-time.After(20 * time.Second):
					return
				}
			}
			io.WriteString(nc, "VALUE "+k+" 0 1\r\nx\r\nEND\r\n")
			mu.Lock()
			answered++
			mu.Unlock()
		}
	}()
	// One loop: the two clients share its connection to the server.
	cfg, err := ParseConfig([]byte("listen: 127.0.0.1:0\nservers: [" + ln.Addr().String() + ":1]\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.NoEventLoops = testNoLoops
	p, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.Logf, p.Loops = nil, 1
	pln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(pln)
	t.Cleanup(func() { p.Close() })
	addr := pln.Addr().String()
	arrived := func(n int) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		wake := time.AfterFunc(10*time.Second, func() { mu.Lock(); cond.Broadcast(); mu.Unlock() })
		defer wake.Stop()
		start := time.Now()
		for len(log) < n && time.Since(start) < 10*time.Second {
			cond.Wait()
		}
		if len(log) < n {
			t.Fatalf("%d requests reached the server, want %d: %v", len(log), n, log)
		}
	}
	dial := func() (net.Conn, *bufio.Reader) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		nc.SetDeadline(time.Now().Add(20 * time.Second))
		return nc, bufio.NewReader(nc)
	}
	a, ar := dial()
	b, br := dial()
	before := statValue(t, addr, "proxy_fast_path")
	io.WriteString(a, "get first\r\n")
	arrived(1) // nothing was in flight: it went at once
	io.WriteString(b, "get second\r\n")
	// The proxy has b's request (it counts it when it starts it) before
	// the server answers a's.
	deadline := time.Now().Add(10 * time.Second)
	for statValue(t, addr, "proxy_fast_path")-before < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the proxy did not take the second request")
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	for _, c := range []struct {
		r   *bufio.Reader
		key string
	}{{ar, "first"}, {br, "second"}} {
		want := "VALUE " + c.key + " 0 1\r\nx\r\nEND\r\n"
		got := make([]byte, len(want))
		if _, err := io.ReadFull(c.r, got); err != nil || string(got) != want {
			t.Fatalf("%s: %q %v, want %q", c.key, got, err, want)
		}
	}
	arrived(2)
	mu.Lock()
	defer mu.Unlock()
	if log[1].key != "second" || log[1].answered != 1 {
		t.Fatalf("the second request reached the server as %+v: want it held until the first was answered", log[1])
	}
}

// TestLoopServerDown: requests for a server that refuses connections are
// answered with memcached's SERVER_ERROR naming it, in order, a noreply
// set with nothing, and the connection goes on (also off the loop).
func TestLoopServerDown(t *testing.T) {
	down := closedAddr(t)
	_, addr := serveProxy(t, down+":1", "timeout: 2000\n")
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(nc, "get a\r\nset a 0 0 1 noreply\r\nx\r\nget a b c\r\nset b 0 0 1\r\ny\r\nversion\r\nget a\r\n")
	r := bufio.NewReader(nc)
	prefix := "SERVER_ERROR proxy upstream " + down + ": "
	for i, want := range []string{prefix, prefix, prefix, "VERSION ", prefix} {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		if !strings.HasPrefix(l, want) {
			t.Fatalf("reply %d: %q, want %q…", i, l, want)
		}
		if want == prefix && !strings.Contains(l, "refused") {
			t.Fatalf("reply %d: %q does not say the connection was refused", i, l)
		}
	}
}

// TestLoopSplitGetOfBigValues: a multi-key get whose keys live on both
// servers and whose values (300 KB each) arrive over many reads is
// answered in the order of its keys, misses left out, duplicates kept, as
// memcached answers it; the sets before it, pipelined in the same write,
// are all answered first.
func TestLoopSplitGetOfBigValues(t *testing.T) {
	_, addr := startProxy(t, "upstream", 2)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	var req, want, value strings.Builder
	keys := []string{"big:a", "big:b", "big:c", "big:d", "big:e", "big:f"}
	vals := map[string]string{}
	for i, k := range keys {
		value.Reset()
		for value.Len() < 300<<10 {
			value.WriteString(k + strings.Repeat(string(rune('0'+i)), 61) + "\n")
		}
		vals[k] = value.String()
		req.WriteString("set " + k + " 7 0 " + strconv.Itoa(len(vals[k])) + "\r\n" + vals[k] + "\r\n")
		want.WriteString("STORED\r\n")
	}
	ask := []string{"big:f", "big:missing", "big:a", "big:c", "big:a", "big:b", "big:e", "big:d"}
	req.WriteString("get " + strings.Join(ask, " ") + "\r\n")
	for _, k := range ask {
		if v, ok := vals[k]; ok {
			want.WriteString("VALUE " + k + " 7 " + strconv.Itoa(len(v)) + "\r\n" + v + "\r\n")
		}
	}
	want.WriteString("END\r\n")
	go io.WriteString(nc, req.String()) // the replies fill the sockets before the requests are all sent
	got := make([]byte, want.Len())
	if _, err := io.ReadFull(nc, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != want.String() {
		for i := range got {
			if got[i] != want.String()[i] {
				t.Fatalf("the replies differ at byte %d of %d: %q, want %q", i, len(got), got[max(0, i-40):min(len(got), i+40)], want.String()[max(0, i-40):min(len(got), i+40)])
			}
		}
	}
}
