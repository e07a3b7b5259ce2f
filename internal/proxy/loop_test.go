package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/test/nodeproc"
)

// TestLoopHoldsRequestsForTheNextAnswer: on an event loop, a request for
// a server that is answering others waits for the next answer and then
// goes (writeUp's hold), and a request with nothing in flight goes at
// once. The server is a fake that logs each request as it arrives, with
// how many answers it had sent by then, and answers the first one only
// when told.
func TestLoopHoldsRequestsForTheNextAnswer(t *testing.T) {
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
			// Counted before it is written: the proxy may send the
			// next request, and the reader log it, as soon as the
			// answer is on the wire.
			mu.Lock()
			answered++
			mu.Unlock()
			io.WriteString(nc, "VALUE "+k+" 0 1\r\nx\r\nEND\r\n")
		}
	}()
	// One loop: the two clients share its connection to the server.
	cfg, err := ParseConfig([]byte("listen: 127.0.0.1:0\nservers: [" + ln.Addr().String() + ":1]\n"))
	if err != nil {
		t.Fatal(err)
	}
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

// TestLoopServesTextCommands: one pipelined write of every classic
// command the servers answer (the storage commands, cas, delete in its
// forms, incr and decr, touch, gat and gats, each with and without
// noreply, also where memcached answers with an error) and of meta
// commands (with q, O, k, b) is answered by a
// proxy over two servers exactly as one memcached answers it, and on an
// event loop no request leaves it: every one is counted in
// proxy_fast_path (the mn that ends it too). The counters "stats" reports count the requests the
// same way on the loop and off it (VBCACHE_NOLOOP=1).
func TestLoopServesTextCommands(t *testing.T) {
	bin := nodeproc.Need(t, "reference", "memcached")
	direct := nodeproc.Start(t, nodeproc.Memcached, bin, "-t", "1").Addr
	_, addr := startProxy(t, "upstream", 2)
	var script []string
	for i, k := range []string{"c:a", "c:b", "c:c", "c:d", "c:e", "c:f"} {
		script = append(script,
			"set "+k+" 3 0 2\r\n1"+strconv.Itoa(i)+"\r\n",
			"add "+k+" 0 0 1\r\nx\r\n",
			"append "+k+" 0 0 2\r\n00\r\n",
			"prepend "+k+" 0 0 1 noreply\r\n9\r\n",
			"append c:none"+k+" 0 0 1\r\nz\r\n",
			"replace c:none"+k+" 0 0 1\r\nz\r\n",
			"incr "+k+" 5\r\n",
			"decr "+k+" 3\r\n",
			"decr "+k+" 1 noreply\r\n",
			"incr c:none"+k+" 1\r\n",
			"gets "+k+"\r\n",
			"cas "+k+" 0 0 1 1\r\ny\r\n",
			"cas c:none"+k+" 0 0 1 1\r\ny\r\n",
			"touch "+k+" 100\r\n",
			"touch c:none"+k+" 100\r\n",
			"touch "+k+" 100 noreply\r\n",
			"gat 0 "+k+" c:none "+k+"\r\n",
			"gats 0 c:none "+k+"\r\n",
			"set "+k+"t 0 0 3\r\nabc\r\n",
			"incr "+k+"t 1\r\n",
			"delete "+k+"t 0\r\n",
			"delete "+k+"t\r\n",
			"delete "+k+" noreply\r\n",
			"get "+k+" c:a c:b c:c c:d c:e c:f\r\n",
			"verbosity 0 noreply\r\n",
			"verbosity 1\r\n",
			"ms "+k+"m 2 F5 T0\r\nhi\r\n",
			"ms "+k+"m 2 q MA\r\nyo\r\n",
			"mg "+k+"m v f k O9 q\r\n",
			"ms "+base64.StdEncoding.EncodeToString([]byte(k+"b"))+" 2 b\r\nbb\r\n",
			"mg "+base64.StdEncoding.EncodeToString([]byte(k+"b"))+" b v k s\r\n",
			"mg c:none"+k+" v q\r\n",
			"mg c:none"+k+" v k\r\n",
			"ms "+k+"n 1\r\n5\r\n",
			"ma "+k+"n v D3\r\n",
			"ma "+k+"n q\r\n",
			"ma c:none"+k+" q\r\n",
			"md "+k+"n q\r\n",
			"md "+k+"n q O5\r\n",
			"gets"+strings.Repeat(" "+k+"m c:none", 30)+"\r\n", // more keys than a line's tokens
		)
	}
	req := strings.Join(script, "")
	counters := []string{"cmd_get", "get_hits", "get_misses", "cmd_set", "cmd_touch", "touch_hits", "touch_misses",
		"delete_hits", "delete_misses", "incr_hits", "incr_misses", "decr_hits", "decr_misses", "cas_hits", "cas_misses", "cas_badval"}
	before := map[string]int64{}
	for _, s := range append(counters, "proxy_fast_path") {
		before[s] = statValue(t, addr, s)
	}
	got, want := exchange(t, addr, req+"mn\r\n"), exchange(t, direct, req+"mn\r\n")
	if norm(got) != norm(want) {
		t.Fatalf("the proxy answered\n%q\nmemcached\n%q", got, want)
	}
	// Per key: the gets and the 7-key get (all misses by then: deleted,
	// or not set yet); 9 storage commands; 3 touches and the 5 keys of
	// the gat and gats (2 misses), counted as touches; two deletes that
	// hit and one that misses; incr and decr hits, a miss, and an incr
	// of "abc" that memcached refuses (counted as neither); the cas of a
	// wrong unique (EXISTS) and of a missing key; 4 mg (2 hits), 4 ms and
	// 2 md (a hit, a miss); a gets of 60 keys, half of them hits.
	wantCtr := map[string]int64{"cmd_get": 8 + 4 + 60, "get_hits": 1 + 2 + 30, "get_misses": 7 + 2 + 30, "cmd_set": 9 + 4,
		"cmd_touch": 8, "touch_hits": 5, "touch_misses": 3, "delete_hits": 2 + 1, "delete_misses": 1 + 1,
		"incr_hits": 1, "incr_misses": 1, "decr_hits": 2, "decr_misses": 0, "cas_hits": 0, "cas_misses": 1, "cas_badval": 1}
	for _, s := range counters {
		if d := statValue(t, addr, s) - before[s]; d != 6*wantCtr[s] {
			t.Errorf("stats %s went up by %d, want %d", s, d, 6*wantCtr[s])
		}
	}
	if n := statValue(t, addr, "proxy_fast_path") - before["proxy_fast_path"]; n != int64(len(script)+1) {
		t.Errorf("the event loop served %d of the %d requests (with the mn)", n, len(script)+1)
	}
}

// TestLoopServesBinary: one pipelined write of every binary request that
// names a key (the loud and the quiet forms of get, getk, gat, gatk,
// set, add, replace, append, prepend, delete, incr, decr, and touch, a
// cas, an incr that creates the item), noops and flushes is answered by
// a proxy
// over two servers as one memcached answers it (CAS fields zeroed: the
// servers count their own), and on an event loop none of them leaves it.
func TestLoopServesBinary(t *testing.T) {
	bin := nodeproc.Need(t, "reference", "memcached")
	direct := nodeproc.Start(t, nodeproc.Memcached, bin, "-t", "1").Addr
	_, addr := startProxy(t, "upstream", 2)
	var req []byte
	opaque := uint32(0)
	add := func(op protocol.Opcode, extras []byte, key string, value string) {
		opaque++
		req = protocol.AppendRequest(req, &protocol.Request{Header: protocol.Header{Opcode: op, Opaque: opaque},
			Extras: extras, Key: []byte(key), Value: []byte(value)})
	}
	store := []byte{0, 0, 0, 7, 0, 0, 0, 0} // flags 7, exptime 0
	ttl := []byte{0, 0, 0x0e, 0x10}         // an hour
	delta := func(d, initial uint64, exp uint32) []byte {
		return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, d), initial), exp)
	}
	for _, k := range []string{"b:a", "b:b", "b:c", "b:d", "b:e", "b:f"} {
		add(protocol.OpGet, nil, k, "")
		add(protocol.OpGetQ, nil, k, "")
		add(protocol.OpGetK, nil, k, "")
		add(protocol.OpGetKQ, nil, k, "")
		add(protocol.OpSet, store, k, "v1")
		add(protocol.OpSetQ, store, k, "v2")
		add(protocol.OpAdd, store, k, "v3")
		add(protocol.OpAddQ, store, k, "v3")
		add(protocol.OpAddQ, store, k+"n", "v3")
		add(protocol.OpReplace, store, k, "v4")
		add(protocol.OpReplaceQ, store, k+"none", "v4")
		add(protocol.OpAppend, nil, k, "+a")
		add(protocol.OpPrependQ, nil, k, "p+")
		add(protocol.OpAppendQ, nil, k+"none", "x")
		add(protocol.OpGet, nil, k, "")
		add(protocol.OpGetKQ, nil, k, "")
		add(protocol.OpGAT, ttl, k, "")
		add(protocol.OpGATQ, ttl, k+"none", "")
		add(protocol.OpGATK, ttl, k+"none", "")
		add(protocol.OpGATKQ, ttl, k, "")
		add(protocol.OpTouch, ttl, k, "")
		add(protocol.OpTouch, ttl, k+"none", "")
		add(protocol.OpIncrement, delta(5, 40, 0), k+"i", "")
		add(protocol.OpIncrement, delta(5, 40, 0), k+"i", "")
		add(protocol.OpDecrementQ, delta(3, 0, 0), k+"i", "")
		add(protocol.OpDecrement, delta(3, 0, 0xffffffff), k+"none", "")
		add(protocol.OpIncrement, delta(1, 0, 0), k, "")
		add(protocol.OpDelete, nil, k+"i", "")
		add(protocol.OpDeleteQ, nil, k+"n", "")
		add(protocol.OpDeleteQ, nil, k+"none", "")
		add(protocol.OpNoop, nil, "", "")
	}
	add(protocol.OpFlushQ, nil, "", "")
	add(protocol.OpGetK, nil, "b:a", "")
	add(protocol.OpSet, store, "b:a", "v5")
	add(protocol.OpFlush, nil, "", "")
	add(protocol.OpGetK, nil, "b:a", "")
	add(protocol.OpGetK, nil, "b:b", "")
	add(protocol.OpNoop, nil, "", "")
	n := opaque
	before := statValue(t, addr, "proxy_fast_path")
	want, got := exchangeBinary(t, direct, req, opaque), exchangeBinary(t, addr, req, opaque)
	if !bytes.Equal(got, want) {
		t.Fatalf("the proxy answered\n%x\nmemcached\n%x", got, want)
	}
	if served := statValue(t, addr, "proxy_fast_path") - before; served != int64(n) {
		t.Errorf("the event loop served %d of the %d requests", served, n)
	}
}

// TestLoopServerDownBinary: binary requests for a server that refuses
// connections are answered with status 0x84 and the text of the text
// protocol's SERVER_ERROR, a quiet one too (memcached's quiet hides
// successes and misses, never errors), in order before the noop.
func TestLoopServerDownBinary(t *testing.T) {
	down := closedAddr(t)
	_, addr := serveProxy(t, down+":1", "timeout: 2000\n")
	var req []byte
	for i, op := range []protocol.Opcode{protocol.OpGet, protocol.OpSetQ, protocol.OpGetKQ, protocol.OpNoop} {
		var ext []byte
		if op == protocol.OpSetQ {
			ext = make([]byte, 8)
		}
		key := []byte("k")
		if op == protocol.OpNoop {
			key = nil
		}
		req = protocol.AppendRequest(req, &protocol.Request{Header: protocol.Header{Opcode: op, Opaque: uint32(i + 1)}, Extras: ext, Key: key})
	}
	got := exchangeBinary(t, addr, req, 4)
	prefix := "proxy upstream " + down + ": "
	for i, op := range []protocol.Opcode{protocol.OpGet, protocol.OpSetQ, protocol.OpGetKQ, protocol.OpNoop} {
		var h protocol.Header
		if err := protocol.ParseHeader(got, &h); err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		body := got[protocol.HeaderLen : protocol.HeaderLen+int(h.BodyLen)]
		got = got[protocol.HeaderLen+int(h.BodyLen):]
		if h.Opcode != op || h.Opaque != uint32(i+1) {
			t.Fatalf("response %d is to %v opaque %d, want %v opaque %d", i, h.Opcode, h.Opaque, op, i+1)
		}
		if op == protocol.OpNoop {
			if h.Status != protocol.StatusOK {
				t.Errorf("noop: status %#x", h.Status)
			}
			continue
		}
		if h.Status != protocol.StatusInternal || !strings.HasPrefix(string(body), prefix) || !strings.Contains(string(body), "refused") {
			t.Errorf("response %d: status %#x %q, want %#x %q… refused", i, h.Status, body, protocol.StatusInternal, prefix)
		}
	}
}

// TestLoopServesStatsAndFlush: stats and flush_all pipelined with other
// requests are served on the event loop in their turn: stats counts the
// requests before it, flush_all empties every server, and a stats group
// the proxy does not have is memcached's ERROR.
func TestLoopServesStatsAndFlush(t *testing.T) {
	_, addr := startProxy(t, "upstream", 2)
	before := statValue(t, addr, "proxy_fast_path")
	gets := statValue(t, addr, "cmd_get")
	var req strings.Builder
	keys := []string{"sf:a", "sf:b", "sf:c", "sf:d", "sf:e", "sf:f"}
	for _, k := range keys {
		req.WriteString("set " + k + " 0 0 1\r\nx\r\n")
	}
	req.WriteString("get " + strings.Join(keys, " ") + "\r\nstats\r\nflush_all\r\nget " + strings.Join(keys, " ") +
		"\r\nflush_all noreply\r\nstats reset\r\nstats nosuchgroup\r\nflush_all 0\r\n")
	nreq := len(keys) + 8 - 3 // the three stats requests are not counted
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(nc, req.String())
	r := bufio.NewReader(nc)
	want := strings.Repeat("STORED\r\n", len(keys))
	for _, k := range keys {
		want += "VALUE " + k + " 0 1\r\nx\r\n"
	}
	want += "END\r\n"
	got := make([]byte, len(want))
	if _, err := io.ReadFull(r, got); err != nil || string(got) != want {
		t.Fatalf("got %q (%v), want %q", got, err, want)
	}
	sawGets := false
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if l == "END\r\n" {
			break
		}
		if f := strings.Fields(l); len(f) == 3 && f[0] == "STAT" && f[1] == "cmd_get" {
			sawGets = true
			if n, _ := strconv.ParseInt(f[2], 10, 64); n != gets+int64(len(keys)) {
				t.Errorf("stats after a get of %d keys: cmd_get %d, want %d", len(keys), n, gets+int64(len(keys)))
			}
		}
	}
	if !sawGets {
		t.Error("stats has no cmd_get")
	}
	want = "OK\r\nEND\r\nRESET\r\nERROR\r\nOK\r\n"
	got = make([]byte, len(want))
	if _, err := io.ReadFull(r, got); err != nil || string(got) != want {
		t.Fatalf("got %q (%v), want %q", got, err, want)
	}
	if n := statValue(t, addr, "proxy_fast_path") - before; n != int64(nreq) {
		t.Errorf("the event loop served %d of the %d requests", n, nreq)
	}
}

// TestLoopAnswersErrorsInline: requests the proxy answers without its
// servers (unknown commands, bad lines, a bad data chunk, a key too
// long, bad meta flags) are answered on the event loop in their turn, as
// memcached answers them, and the connection stays on the loop: the
// requests after them are still served there. (A get of a key too long
// is left out: memcached then drops the replies of the requests before
// it that it has not sent yet, which depends on how its reads split the
// pipeline; the node copies that, the proxy does not.)
func TestLoopAnswersErrorsInline(t *testing.T) {
	bin := nodeproc.Need(t, "reference", "memcached")
	direct := nodeproc.Start(t, nodeproc.Memcached, bin, "-t", "1").Addr
	_, addr := startProxy(t, "upstream", 2)
	script := []struct {
		req     string
		forward bool // a request the loop forwards (counted in proxy_fast_path)
	}{
		{"set e:a 0 0 1\r\n1\r\n", true},
		{"bogus\r\n", false},
		{"get\r\n", false},
		{"gat 0\r\n", false},
		{"get e:a\r\n", true},
		{"set e:b 0 0 x\r\n", false},
		{"set e:b 0 0 1\r\nxyz\r\n", false},
		{"get e:a e:b\r\n", true},
		{"incr e:a abc\r\n", false},
		{"delete " + strings.Repeat("k", 251) + "\r\n", false},
		{"set e:c 0 0 -1\r\n", false},
		{"mg e:a v !\r\n", false},
		{"mg e:a v v\r\n", false},
		{"ms e:a abc\r\n", false},
		{"ms e:a 1\r\nxyz\r\n", false},
		{"incr e:a 1\r\n", true},
		{"flush_all abc\r\n", false},
		{"verbosity\r\n", false},
		{"get e:a\r\n", true},
	}
	var req strings.Builder
	forwarded := 0
	for _, s := range script {
		req.WriteString(s.req)
		if s.forward {
			forwarded++
		}
	}
	before := statValue(t, addr, "proxy_fast_path")
	got, want := exchange(t, addr, req.String()+"mn\r\n"), exchange(t, direct, req.String()+"mn\r\n")
	if got != want {
		t.Fatalf("the proxy answered\n%q\nmemcached\n%q", got, want)
	}
	if n := statValue(t, addr, "proxy_fast_path") - before; n != int64(forwarded+1) {
		t.Errorf("the event loop served %d requests, want %d (with the mn): the connection left it", n, forwarded+1)
	}
	// Binary: an unknown opcode is answered as memcached answers it,
	// between requests the loop forwards.
	var breq []byte
	for i, op := range []protocol.Opcode{protocol.OpGetK, 0x55, protocol.OpGetK, protocol.OpNoop} {
		r := &protocol.Request{Header: protocol.Header{Opcode: op, Opaque: uint32(i + 1)}, Key: []byte("e:a")}
		if op == 0x55 || op == protocol.OpNoop {
			r.Key = nil // memcached reads no further after an unknown opcode's key
		}
		breq = protocol.AppendRequest(breq, r)
	}
	before = statValue(t, addr, "proxy_fast_path")
	bgot, bwant := exchangeBinary(t, addr, breq, 4), exchangeBinary(t, direct, breq, 4)
	if !bytes.Equal(bgot, bwant) {
		t.Fatalf("the proxy answered\n%x\nmemcached\n%x", bgot, bwant)
	}
	if n := statValue(t, addr, "proxy_fast_path") - before; n != 3 {
		t.Errorf("the event loop served %d binary requests, want 3: the connection left it", n)
	}
}
