package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
)

// dialProxy connects to the proxy at addr for the test (closed at its
// end, with a deadline of 30 s) and returns the connection and a reader
// of its replies.
func dialProxy(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	return nc, bufio.NewReader(nc)
}

// statValue reads one general stat of the proxy over a fresh connection.
func statValue(t *testing.T, addr, name string) int64 {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	io.WriteString(nc, "stats\r\n")
	r := bufio.NewReader(nc)
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("stats: %v", err)
		}
		if l == "END\r\n" {
			t.Fatalf("no stat %s", name)
		}
		if f := strings.Fields(l); len(f) == 3 && f[1] == name {
			n, _ := strconv.ParseInt(f[2], 10, 64)
			return n
		}
	}
}

// TestFastPathKeepsOrder: one pipelined write mixing requests an event
// loop forwards (get, gets, multi-get, set, add, replace, incr, delete,
// noreply), answers itself (version) and answers inline (a key too long)
// is answered in request order, with memcached's replies, on the loop
// and off it.
func TestFastPathKeepsOrder(t *testing.T) {
	// One connection per server pipelines a client's sets with its gets;
	// with two, a set waits for what is in flight and gets wait for it.
	for _, conns := range []int{1, 2} {
		t.Run(fmt.Sprintf("server_connections=%d", conns), func(t *testing.T) {
			_, addr := startProxyWith(t, "upstream", 2, fmt.Sprintf("server_connections: %d\n", conns))
			testKeepsOrder(t, addr)
		})
	}
}

func testKeepsOrder(t *testing.T, addr string) {
	script := []struct{ req, reply string }{
		{"set o:a 5 0 3\r\nabc\r\n", "STORED\r\n"},
		{"get o:a\r\n", "VALUE o:a 5 3\r\nabc\r\nEND\r\n"},
		{"get o:missing\r\n", "END\r\n"},
		{"set o:b 0 0 1 noreply\r\nx\r\n", ""},
		{"get o:b\r\n", "VALUE o:b 0 1\r\nx\r\nEND\r\n"},
		{"get o:a o:b o:missing\r\n", "VALUE o:a 5 3\r\nabc\r\nVALUE o:b 0 1\r\nx\r\nEND\r\n"},
		{"add o:a 0 0 1\r\nz\r\n", "NOT_STORED\r\n"},
		{"replace o:none 0 0 1\r\nz\r\n", "NOT_STORED\r\n"},
		{"version\r\n", "VERSION vbcache-proxy\r\n"},
		{"set o:n 0 0 1\r\n7\r\n", "STORED\r\n"},
		{"incr o:n 5\r\n", "12\r\n"},
		{"get o:n\r\n", "VALUE o:n 0 2\r\n12\r\nEND\r\n"},
		{"delete o:n\r\n", "DELETED\r\n"},
		{"get o:n\r\n", "END\r\n"},
		{"get " + strings.Repeat("k", 251) + "\r\n", "CLIENT_ERROR bad command line format\r\n"},
		{"replace o:a 9 0 2\r\nzz\r\n", "STORED\r\n"},
		{"get o:a\r\n", "VALUE o:a 9 2\r\nzz\r\nEND\r\n"},
	}
	var req, want strings.Builder
	for _, s := range script {
		req.WriteString(s.req)
		want.WriteString(s.reply)
	}
	before := statValue(t, addr, "proxy_fast_path")
	for round := range 20 {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(nc, req.String()); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, want.Len())
		if _, err := io.ReadFull(nc, got); err != nil {
			t.Fatalf("round %d: %v after %q", round, err, got)
		}
		nc.Close()
		if string(got) != want.String() {
			t.Fatalf("round %d:\n got %q\nwant %q", round, got, want.String())
		}
	}
	// An event loop serves 16 of the 17 requests; the key too long is
	// answered inline (local.go, not counted).
	if n := statValue(t, addr, "proxy_fast_path") - before; n != 20*16 {
		t.Errorf("fast path served %d requests, want %d", n, 20*16)
	}
	// Round trips of sets and gets all take it.
	before = statValue(t, addr, "proxy_fast_path")
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(nc)
	for i := range 50 {
		fmt.Fprintf(nc, "set o:rt 0 0 1\r\n%d\r\n", i%10)
		if l, err := r.ReadString('\n'); l != "STORED\r\n" {
			t.Fatalf("set: %q %v", l, err)
		}
		io.WriteString(nc, "get o:rt\r\n")
		want := fmt.Sprintf("VALUE o:rt 0 1\r\n%d\r\nEND\r\n", i%10)
		got := make([]byte, len(want))
		if _, err := io.ReadFull(r, got); err != nil || string(got) != want {
			t.Fatalf("get: %q %v", got, err)
		}
	}
	if n := statValue(t, addr, "proxy_fast_path") - before; n != 100 {
		t.Errorf("fast path served %d of 100 round trips", n)
	}
}

// TestFastPathSlowReader: replies the client's socket does not take at
// once (a client that sends all its gets of a big value before reading)
// are written as it drains its socket, in order and whole.
func TestFastPathSlowReader(t *testing.T) {
	_, addr := startProxy(t, "upstream", 1)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	big := bytes.Repeat([]byte("0123456789abcdef"), 400<<10/16)
	fmt.Fprintf(nc, "set big 0 0 %d\r\n%s\r\n", len(big), big)
	r := bufio.NewReader(nc)
	if l, err := r.ReadString('\n'); l != "STORED\r\n" {
		t.Fatalf("set: %q %v", l, err)
	}
	const gets = 40 // 16 MB of replies: far more than the socket buffers
	go io.WriteString(nc, strings.Repeat("get big\r\n", gets))
	for i := range gets {
		readHit(t, r, i, "big", big)
	}
}

// readHit reads a get's reply from r and checks it is key's hit with
// value val (flags 0); i numbers the get in failures.
func readHit(t *testing.T, r *bufio.Reader, i int, key string, val []byte) {
	t.Helper()
	l, err := r.ReadString('\n')
	if err != nil || l != fmt.Sprintf("VALUE %s 0 %d\r\n", key, len(val)) {
		t.Fatalf("get %d: %q %v", i, l, err)
	}
	v := make([]byte, len(val)+len("\r\nEND\r\n"))
	if _, err := io.ReadFull(r, v); err != nil {
		t.Fatalf("get %d: %v", i, err)
	}
	if !bytes.Equal(v[:len(val)], val) || string(v[len(val):]) != "\r\nEND\r\n" {
		t.Fatalf("get %d: wrong value", i)
	}
}

// TestFastPathClientsLeave: clients that close with a request in flight
// (before, during and after its answer) leave the proxy serving everyone
// else correctly.
func TestFastPathClientsLeave(t *testing.T) {
	p, addr := startProxy(t, "upstream", 2)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				nc, err := net.Dial("tcp", addr)
				if err != nil {
					t.Error(err)
					return
				}
				fmt.Fprintf(nc, "set leave:%d:%d 0 0 1\r\nx\r\nget leave:%d:%d\r\n", i, j, i, j)
				nc.Close()
			}
		}()
	}
	// Meanwhile a steady client checks its answers.
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(nc)
	for i := range 500 {
		fmt.Fprintf(nc, "set steady 0 0 %d\r\n%d\r\nget steady\r\n", len(strconv.Itoa(i)), i)
		want := fmt.Sprintf("STORED\r\nVALUE steady 0 %d\r\n%d\r\nEND\r\n", len(strconv.Itoa(i)), i)
		got := make([]byte, len(want))
		if _, err := io.ReadFull(r, got); err != nil || string(got) != want {
			t.Fatalf("steady %d: %q %v", i, got, err)
		}
	}
	wg.Wait()
	// Every connection is gone, with its request settled.
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		n := len(p.conns)
		p.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections left", n)
		}
		runtime.Gosched()
	}
}

// TestFastPathDoesNotAllocate: requests on an event loop, from the
// client's request to its reply, allocate nothing in the proxy (the
// client drives a blocking socket with raw system calls; memcached is
// another process).
func TestFastPathDoesNotAllocate(t *testing.T) {
	_, addr := startProxy(t, "upstream", 2)
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	dial := func() int {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Close(fd) })
		sa := &syscall.SockaddrInet4{Port: ta.Port}
		copy(sa.Addr[:], ta.IP.To4())
		if err := syscall.Connect(fd, sa); err != nil {
			t.Fatal(err)
		}
		return fd
	}
	text, bin := dial(), dial() // a connection speaks one protocol
	buf := make([]byte, 256)
	var bad error
	roundTrip := func(fd int, req []byte, want string) func() {
		return func() {
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
				bad = fmt.Errorf("reply %q, want %q", buf[:n], want)
			}
		}
	}
	set := roundTrip(text, []byte("set alloc 3 0 5\r\nhello\r\n"), "STORED\r\n")
	get := roundTrip(text, []byte("get alloc\r\n"), "VALUE alloc 3 5\r\nhello\r\nEND\r\n")
	set() // connections and buffers
	get()
	// A binary GETK of a key nothing changes, answered with the flags,
	// the key and the value; the CAS field is the server's, so the
	// expected answer is the first one.
	roundTrip(text, []byte("set allocb 3 0 5\r\nhello\r\n"), "STORED\r\n")()
	getk := protocol.AppendRequest(nil, &protocol.Request{Header: protocol.Header{Opcode: protocol.OpGetK, Opaque: 9},
		Key: []byte("allocb")})
	roundTrip(bin, getk, "")()
	n, err := syscall.Read(bin, buf)
	if err != nil || n < protocol.HeaderLen {
		t.Fatalf("binary get: %d %v", n, err)
	}
	binGet := roundTrip(bin, getk, string(buf[:n]))
	binGet()
	cases := map[string]func(){"set": set, "get": get, "binary get": binGet}
	// A multi-key get, split over both servers.
	mget := roundTrip(text, []byte("get alloc allocb alloc:c alloc:d\r\n"),
		"VALUE alloc 3 5\r\nhello\r\nVALUE allocb 3 5\r\nhello\r\nEND\r\n")
	mget()
	cases["multi-get"] = mget
	// And the other commands it serves.
	roundTrip(text, []byte("set allocn 0 0 1\r\n5\r\n"), "STORED\r\n")()
	for name, rt := range map[string][2]string{
		"incr":    {"incr allocn 0\r\n", "5\r\n"},
		"delete":  {"delete allocnone\r\n", "NOT_FOUND\r\n"},
		"touch":   {"touch alloc 0\r\n", "TOUCHED\r\n"},
		"gat":     {"gat 0 alloc allocb\r\n", "VALUE alloc 3 5\r\nhello\r\nVALUE allocb 3 5\r\nhello\r\nEND\r\n"},
		"mg":      {"mg alloc v f q\r\nmg allocnone v q\r\nmn\r\n", "VA 5 f3\r\nhello\r\nMN\r\n"},
		"ms":      {"ms allocm 2 T0\r\nhi\r\n", "HD\r\n"},
		"append":  {"append allocnone 0 0 1\r\nx\r\n", "NOT_STORED\r\n"},
		"noreply": {"set allocq 0 0 1 noreply\r\nx\r\ndelete allocq noreply\r\nmn\r\n", "MN\r\n"},
	} {
		f := roundTrip(text, []byte(rt[0]), rt[1])
		f()
		cases[name] = f
	}
	for name, f := range cases {
		allocs := testing.AllocsPerRun(2000, f)
		if bad != nil {
			t.Fatal(bad)
		}
		if allocs != 0 {
			t.Errorf("a %s through the proxy allocates %.2f times", name, allocs)
		}
	}
}

// FuzzProxyFastPath sends arbitrary bytes over a real socket to a proxy in
// front of a real memcached, then shuts down its side: requests an event
// loop forwards, answers or serves inline (or that take the connection
// off it) mix in any order. Properties: no panic, the
// connection always ends (the proxy answers what it can and closes after
// the client's FIN), and the proxy keeps serving others.
func FuzzProxyFastPath(f *testing.F) {
	for _, s := range []string{
		"set a 0 0 1\r\nx\r\nget a\r\nget a b\r\ngets a\r\n",
		"get a\r\nget a\r\nget a\r\nversion\r\n",
		"set a 0 0 1 noreply\r\nx\r\nadd a 0 0 1\r\ny\r\nreplace a 0 0 2\r\nzz\r\nget a\r\n",
		"get a\r\nmg a v\r\nset b 0 0 3\r\nabc\r\nincr b 1\r\nget b\r\n",
		"set a 0 0 5\r\nab", "get " + strings.Repeat("k", 260) + "\r\nget a\r\n", "get a\r\nquit\r\nget a\r\n",
		// Pipelines: gets and sets in flight together, broken by other commands.
		"get a\r\nget b\r\nset a 0 0 1\r\n1\r\nget a\r\nset b 0 0 2\r\n22\r\ngets b\r\ndelete a\r\nget a\r\nget b\r\n",
		"set a 0 0 1 noreply\r\n1\r\nget a\r\nset a 0 0 1\r\n2\r\nget a b c\r\nadd a 0 0 1\r\n3\r\nget a\r\nset a 0 0 x\r\nget a\r\n",
		strings.Repeat("get a\r\nset a 0 0 1\r\nz\r\n", 20),
		"\x80\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00a",
		// What the event loop forwards, answers itself or serves inline.
		"mg a v q\r\nms a 2 q T0\r\nhi\r\nmg a v k O1\r\nma a q\r\nmd a q\r\nmn\r\nmg a h\r\nmn\r\n",
		"stats\r\nflush_all\r\nflush_all 5\r\nstats x\r\ngat 0\r\ngat 0 a b\r\ncas a 0 0 1 1\r\nx\r\nset a 0 0 1\r\nxyz\r\n",
		"get" + strings.Repeat(" k", 3000) + "\r\nbogus\r\nGET / HTTP/1.1\r\n",
		"set a 0 0 1\r\n1\r\n" + strings.Repeat("x", 3000),
	} {
		f.Add([]byte(s))
	}
	var bin []byte
	for i, op := range []protocol.Opcode{protocol.OpGetKQ, protocol.OpSetQ, protocol.OpGetK, protocol.OpFlushQ, protocol.OpStat, 0x55, protocol.OpNoop} {
		var ext []byte
		if op == protocol.OpSetQ {
			ext = make([]byte, 8)
		}
		bin = protocol.AppendRequest(bin, &protocol.Request{Header: protocol.Header{Opcode: op, Opaque: uint32(i)}, Extras: ext, Key: []byte("a")})
	}
	f.Add(bin)
	_, addr := startProxy(f, "upstream", 2)
	f.Fuzz(func(t *testing.T, data []byte) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		go func() {
			nc.Write(data)
			nc.(*net.TCPConn).CloseWrite()
		}()
		// A reset ends it too: closing with unread input (quit, a
		// garbage line) resets the connection, as memcached's does.
		if _, err := io.Copy(io.Discard, nc); err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("the connection did not end: %v", err)
		}
		// Others are still served.
		other, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		other.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(other, "version\r\n")
		if l, err := bufio.NewReader(other).ReadString('\n'); err != nil || !strings.HasPrefix(l, "VERSION ") {
			t.Fatalf("proxy stopped answering: %q %v", l, err)
		}
	})
}

// heldServer is a fake memcached for the pipelining tests: it answers
// "gets key" with the key as the value and CAS 7, and a set with STORED,
// but only once release is closed, and records the requests it read
// (as "<addr> <key>" and "<addr> set:<key>").
type heldServer struct {
	addr    string
	release chan struct{}
	mu      *sync.Mutex
	cond    *sync.Cond
	got     *[]string // every server's received keys, as "<addr> <key>"
	sent    int       // answers written (under mu)
	drop    bool      // on release, close the connection instead of answering
}

func startHeldServer(t *testing.T, mu *sync.Mutex, cond *sync.Cond, got *[]string) *heldServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &heldServer{addr: ln.Addr().String(), release: make(chan struct{}), mu: mu, cond: cond, got: got}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() { // owned by the test: Cleanup closes ln and waits
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			keys := make(chan string, 64)
			wg.Add(2)
			go func() { // reads and records every request at once
				defer wg.Done()
				defer close(keys)
				r := bufio.NewReader(nc)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					// The proxy's upstream client asks with gets, its
					// event loops with the client's get or gets; both
					// store with "set <key> <flags> <exptime> <bytes>".
					req := strings.Fields(l)
					var key, asked string
					switch {
					case len(req) == 2 && (req[0] == "gets" || req[0] == "get"):
						key, asked = req[1], req[0]+":"+req[1]
					case len(req) == 5 && req[0] == "set":
						n, err := strconv.Atoi(req[4])
						if err != nil {
							return
						}
						if _, err := io.ReadFull(r, make([]byte, n+2)); err != nil {
							return
						}
						key = "set:" + req[1] // answered STORED
						asked = key
					default:
						return
					}
					s.mu.Lock()
					*s.got = append(*s.got, s.addr+" "+key)
					s.cond.Broadcast()
					s.mu.Unlock()
					keys <- asked
				}
			}()
			go func() { // answers in order, once released
				defer wg.Done()
				defer nc.Close()
				for key := range keys {
					select {
					case <-s.release:
					case <-time.After(20 * time.Second):
						return
					}
					if s.drop {
						return // the deferred Close ends the connection
					}
					switch verb, k, _ := strings.Cut(key, ":"); verb {
					case "set":
						io.WriteString(nc, "STORED\r\n")
					case "get":
						fmt.Fprintf(nc, "VALUE %s 0 %d\r\n%s\r\nEND\r\n", k, len(k), k)
					default:
						fmt.Fprintf(nc, "VALUE %s 0 %d 7\r\n%s\r\nEND\r\n", k, len(k), k)
					}
					s.mu.Lock()
					s.sent++
					s.cond.Broadcast()
					s.mu.Unlock()
				}
			}()
		}
	}()
	return s
}

// heldPool is a proxy over two held servers, a and b, which record into
// got under mu.
type heldPool struct {
	mu   sync.Mutex
	cond *sync.Cond
	got  []string
	a, b *heldServer
	addr string // the proxy's
}

// startHeldPool starts two held servers (the first closing its
// connections instead of answering when dropA) and a proxy over them
// with conns connections per server.
func startHeldPool(t *testing.T, conns int, dropA bool) *heldPool {
	h := &heldPool{}
	h.cond = sync.NewCond(&h.mu)
	h.a = startHeldServer(t, &h.mu, h.cond, &h.got)
	h.b = startHeldServer(t, &h.mu, h.cond, &h.got)
	h.a.drop = dropA
	_, h.addr = serveProxy(t, h.a.addr+":1, "+h.b.addr+":1", "server_connections: "+strconv.Itoa(conns)+"\n")
	return h
}

// send opens a client connection and writes req in one write.
func (h *heldPool) send(t *testing.T, req string) net.Conn {
	nc, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(nc, req); err != nil {
		t.Fatal(err)
	}
	return nc
}

// received waits until n requests have reached the servers, for 15 s at
// most, and returns those that have.
func (h *heldPool) received(n int) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	start := time.Now()
	wake := time.AfterFunc(15*time.Second, func() { h.mu.Lock(); h.cond.Broadcast(); h.mu.Unlock() })
	defer wake.Stop()
	for len(h.got) < n && time.Since(start) < 15*time.Second {
		h.cond.Wait()
	}
	return append([]string(nil), h.got...)
}

// TestFastPathPipelinedGets: a client's pipelined gets are in flight
// together, on both servers, and when the second server answers first the
// replies still come in request order.
func TestFastPathPipelinedGets(t *testing.T) {
	testPipelined(t, 2, false)
}

// TestFastPathPipelinedSets: over one connection per server (the
// default), a client's pipelined sets are in flight together with its
// gets, and answered in request order.
func TestFastPathPipelinedSets(t *testing.T) {
	testPipelined(t, 1, true)
}

// testPipelined pipelines 12 requests (gets, and sets when withSets)
// through a proxy with conns connections per server over two held
// servers, checks that all of them reach the servers before any is
// answered, lets the second server answer first, and checks the replies'
// order.
func testPipelined(t *testing.T, conns int, withSets bool) {
	h := startHeldPool(t, conns, false)
	a, b := h.a, h.b

	const n = 12 // fewer than loopMaxQueued: all in flight at once
	var req, want strings.Builder
	for i := range n {
		k := fmt.Sprintf("pipe:%d", i)
		if withSets && i%4 == 1 {
			fmt.Fprintf(&req, "set %s 0 0 1\r\nx\r\n", k)
			want.WriteString("STORED\r\n")
		} else if i%3 == 2 {
			fmt.Fprintf(&req, "gets %s\r\n", k)
			fmt.Fprintf(&want, "VALUE %s 0 %d 7\r\n%s\r\nEND\r\n", k, len(k), k)
		} else {
			fmt.Fprintf(&req, "get %s\r\n", k)
			fmt.Fprintf(&want, "VALUE %s 0 %d\r\n%s\r\nEND\r\n", k, len(k), k)
		}
	}
	nc := h.send(t, req.String())
	// Every get reaches a server before any is answered.
	received := h.received(n)
	if len(received) < n {
		t.Fatalf("only %d of %d pipelined gets reached the servers while none was answered: %q", len(received), n, received)
	}
	onA := 0
	for _, g := range received {
		if strings.HasPrefix(g, a.addr+" ") {
			onA++
		}
	}
	if onA == 0 || onA == n {
		t.Fatalf("the keys did not spread over both servers (%d of %d on the first): pick others", onA, n)
	}
	// The second server answers first; the first one's replies come
	// earlier in the pipeline for some keys, later for others.
	close(b.release)
	h.mu.Lock()
	for b.sent < n-onA {
		h.cond.Wait()
	}
	h.mu.Unlock()
	close(a.release)
	reply := make([]byte, want.Len())
	if _, err := io.ReadFull(nc, reply); err != nil {
		t.Fatalf("%v after %q", err, reply)
	}
	if string(reply) != want.String() {
		t.Fatalf("replies out of order:\n got %q\nwant %q", reply, want.String())
	}
}

// TestFastPathPipelineServerDies: when a server's connection dies with
// pipelined requests in flight, every one of them is answered, in order,
// those on the dead server with SERVER_ERROR, and the client connection
// goes on serving.
func TestFastPathPipelineServerDies(t *testing.T) {
	h := startHeldPool(t, 1, true)
	a, b := h.a, h.b

	const n = 12
	var req strings.Builder
	for i := range n {
		if i%4 == 1 {
			fmt.Fprintf(&req, "set die:%d 0 0 1\r\nx\r\n", i)
		} else {
			fmt.Fprintf(&req, "get die:%d\r\n", i)
		}
	}
	nc := h.send(t, req.String())
	got := h.received(n)
	onA := map[string]bool{}
	for _, g := range got {
		if k, ok := strings.CutPrefix(g, a.addr+" "); ok {
			onA[strings.TrimPrefix(k, "set:")] = true
		}
	}
	all := len(got)
	if all < n || len(onA) == 0 || len(onA) == n {
		t.Fatalf("%d of %d requests reached the servers, %d on the first: need all, on both", all, n, len(onA))
	}
	close(b.release)
	close(a.release) // a's connection dies
	r := bufio.NewReader(nc)
	for i := range n {
		k := fmt.Sprintf("die:%d", i)
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		switch {
		case onA[k]:
			if !strings.HasPrefix(l, "SERVER_ERROR ") {
				t.Fatalf("reply %d (%s, on the dead server): %q", i, k, l)
			}
		case i%4 == 1:
			if l != "STORED\r\n" {
				t.Fatalf("reply %d (%s): %q", i, k, l)
			}
		default:
			want := fmt.Sprintf("VALUE %s 0 %d\r\n", k, len(k))
			rest := make([]byte, len(k)+len("\r\nEND\r\n"))
			if _, err := io.ReadFull(r, rest); l != want || err != nil || string(rest) != k+"\r\nEND\r\n" {
				t.Fatalf("reply %d (%s): %q %q %v", i, k, l, rest, err)
			}
		}
	}
	io.WriteString(nc, "version\r\n")
	if l, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(l, "VERSION ") {
		t.Fatalf("after the failure: %q %v", l, err)
	}
}

// TestFastPathStalledReader: a client that pipelines gets of big values
// and reads nothing until all of them are answered (its socket buffer
// fills up, and the proxy's last write leaves replies unwritten, with no
// request to come) still gets every reply whole.
func TestFastPathStalledReader(t *testing.T) {
	_, addr := startProxy(t, "upstream", 2)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	big := bytes.Repeat([]byte("0123456789abcdef"), 512<<10/16)
	const keys = 8
	for i := range keys {
		fmt.Fprintf(nc, "set stall:%d 0 0 %d\r\n%s\r\n", i, len(big), big)
	}
	r := bufio.NewReader(nc)
	for range keys {
		if l, err := r.ReadString('\n'); l != "STORED\r\n" {
			t.Fatalf("set: %q %v", l, err)
		}
	}
	const gets = 16 // 8 MB of replies, all in flight at once
	var req strings.Builder
	for i := range gets {
		fmt.Fprintf(&req, "get stall:%d\r\n", i%keys)
	}
	if _, err := io.WriteString(nc, req.String()); err != nil {
		t.Fatal(err)
	}
	// Read nothing until the proxy has had every answer: its socket
	// buffer and ours fill, and what is left waits in the proxy.
	sc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	sc.SetDeadline(time.Now().Add(30 * time.Second))
	sr := bufio.NewReader(sc)
	for hits := int64(0); hits < gets; {
		io.WriteString(sc, "stats\r\n")
		for {
			l, err := sr.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if l == "END\r\n" {
				break
			}
			if v, ok := strings.CutPrefix(l, "STAT get_hits "); ok {
				hits, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			}
		}
	}
	for i := range gets {
		readHit(t, r, i, fmt.Sprintf("stall:%d", i%keys), big)
	}
}
