package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/test/nodeproc"
)

// TestPipelinesAnswerAsMemcached sends random pipelines of storage,
// retrieval and other commands over a few keys, each in one write, to
// the proxy (two servers) and straight to a memcached, and compares the
// replies byte for byte (CAS values aside, which differ between servers).
// It checks what the fast path's pipelining must keep: every reply in
// request order, and every read seeing the writes sent before it, with
// one and with two connections per server.
func TestPipelinesAnswerAsMemcached(t *testing.T) {
	bin := nodeproc.Need(t, "reference", "memcached")
	direct := nodeproc.Start(t, nodeproc.Memcached, bin, "-t", "1").Addr
	for _, conns := range []int{1, 2} {
		t.Run(fmt.Sprintf("server_connections=%d", conns), func(t *testing.T) {
			_, addr := startProxyWith(t, "upstream", 2, fmt.Sprintf("server_connections: %d\n", conns))
			rng := rand.New(rand.NewPCG(uint64(conns), 42))
			rounds := 150
			if testing.Short() {
				rounds = 30
			}
			for round := range rounds {
				req := randomPipeline(rng, fmt.Sprintf("p%d.%d:", conns, round))
				want := exchange(t, direct, req)
				got := exchange(t, addr, req)
				g, w := norm(got), norm(want)
				if conns > 1 {
					g, w = unpad(g), unpad(w)
				}
				if g != w {
					t.Fatalf("round %d: the proxy answered\n%q\nmemcached\n%q\nto\n%q", round, got, want, req)
				}
			}
		})
	}
}

// randomPipeline is 5 to 40 commands over four keys with prefix p.
func randomPipeline(rng *rand.Rand, p string) string {
	var b strings.Builder
	key := func() string { return p + string(rune('a'+rng.IntN(4))) }
	for range 5 + rng.IntN(36) {
		switch rng.IntN(12) {
		case 0, 1, 2:
			fmt.Fprintf(&b, "get %s\r\n", key())
		case 3:
			fmt.Fprintf(&b, "gets %s\r\n", key())
		case 4, 5:
			v := strings.Repeat(string(rune('0'+rng.IntN(10))), 1+rng.IntN(3))
			fmt.Fprintf(&b, "set %s %d 0 %d\r\n%s\r\n", key(), rng.IntN(3), len(v), v)
		case 6:
			fmt.Fprintf(&b, "set %s 0 0 1 noreply\r\n%d\r\n", key(), rng.IntN(10))
		case 7:
			fmt.Fprintf(&b, "add %s 0 0 1\r\n%d\r\n", key(), rng.IntN(10))
		case 8:
			fmt.Fprintf(&b, "replace %s 0 0 2\r\n%02d\r\n", key(), rng.IntN(100))
		case 9:
			fmt.Fprintf(&b, "delete %s\r\n", key())
		case 10:
			fmt.Fprintf(&b, "incr %s %d\r\n", key(), 1+rng.IntN(5))
		case 11:
			fmt.Fprintf(&b, "get %s %s %s\r\n", key(), key(), key())
		}
	}
	return b.String() + "mn\r\n" // ends the replies
}

// exchange sends req in one write and reads the replies up to "MN".
func exchange(t *testing.T, addr, req string) string {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(nc, req); err != nil {
		t.Fatal(err)
	}
	var got []byte
	buf := make([]byte, 4096)
	for !strings.HasSuffix(string(got), "MN\r\n") {
		n, err := nc.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("%s: %v after %q", addr, err, got)
		}
	}
	return string(got)
}

var casField = regexp.MustCompile(`(?m)^(VALUE \S+ \d+ \d+) \d+\r$`)

func norm(s string) string { return casField.ReplaceAllString(s, "$1 CAS\r") }

// paddedValue is a value an incr or decr left shorter than it was:
// memcached writes such a result in place, padded with spaces to the old
// length, only when no other connection holds the item (do_add_delta's
// refcount check), else into a new item of the result's own length. With
// two connections per server the proxy's get of a key may still hold it
// in memcached when its next incr arrives on the other connection, so
// either answer is memcached's.
var paddedValue = regexp.MustCompile(`VALUE (\S+) (\d+) \d+( CAS)?\r\n(\d+) +\r\n`)

// unpad writes every padded value as memcached's unpadded answer.
func unpad(s string) string {
	return paddedValue.ReplaceAllStringFunc(s, func(v string) string {
		m := paddedValue.FindStringSubmatch(v)
		return fmt.Sprintf("VALUE %s %s %d%s\r\n%s\r\n", m[1], m[2], len(m[4]), m[3], m[4])
	})
}

// TestPipelinesAcrossReloads: pipelines of sets and gets keep their
// answers right and in order while the pool is reloaded under them, its
// connections per server switching between one (sets pipelined) and two
// (sets alone in flight).
func TestPipelinesAcrossReloads(t *testing.T) {
	bin := nodeproc.Need(t, "upstream", "memcached")
	var servers []string
	for range 2 {
		servers = append(servers, nodeproc.Start(t, nodeproc.Memcached, bin, "-t", "1").Addr+":1")
	}
	p, addr := serveProxy(t, strings.Join(servers, ", "), "")
	cfgs := make([]*Config, 2)
	for i := range cfgs {
		c, err := ParseConfig([]byte("listen: 127.0.0.1:0\ndistribution: ketama\nhash: md5\nservers: [" +
			strings.Join(servers, ", ") + "]\n" + fmt.Sprintf("server_connections: %d\n", i+1)))
		if err != nil {
			t.Fatal(err)
		}
		cfgs[i] = c
	}
	done := make(chan struct{})
	reloaded := make(chan int, 1)
	var stopOnce sync.Once
	stop := func() int { // ends the reloads and returns how many there were
		stopOnce.Do(func() { close(done) })
		n := <-reloaded
		reloaded <- n
		return n
	}
	t.Cleanup(func() { stop() }) // before serveProxy's Close (cleanups run last first)
	go func() {                  // reloads until stop; owned by the test
		n := 0
		defer func() { reloaded <- n }()
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := p.Reload(context.Background(), cfgs[n%2]); err != nil {
				t.Error(err)
				return
			}
			n++
		}
	}()
	nc, r := dialProxy(t, addr)
	rounds := 300
	if testing.Short() {
		rounds = 50
	}
	for round := range rounds {
		var req, want strings.Builder
		for i := range 8 {
			k := fmt.Sprintf("reload:%d", i)
			v := fmt.Sprintf("%d.%d", round, i)
			fmt.Fprintf(&req, "set %s 0 0 %d\r\n%s\r\nget %s\r\n", k, len(v), v, k)
			fmt.Fprintf(&want, "STORED\r\nVALUE %s 0 %d\r\n%s\r\nEND\r\n", k, len(v), v)
		}
		if _, err := io.WriteString(nc, req.String()); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, want.Len())
		if _, err := io.ReadFull(r, got); err != nil {
			t.Fatalf("round %d: %v after %q", round, err, got)
		}
		if string(got) != want.String() {
			t.Fatalf("round %d:\n got %q\nwant %q", round, got, want.String())
		}
	}
	n := stop()
	if n < 2 {
		t.Fatalf("only %d reloads happened during the pipelines", n)
	}
	t.Logf("%d rounds of 16 pipelined requests across %d reloads", rounds, n)
}

// TestBinaryPipelinesAnswerAsMemcached is TestPipelinesAnswerAsMemcached
// for binary clients: random pipelines of GET, GETK, GETQ, GETKQ, SET,
// SETQ, DELETE and NOOP, each in one write, answered by the proxy as by a
// memcached (CAS fields aside: a pool's text upstream answers stores with
// none, and the servers' CAS values differ anyway).
func TestBinaryPipelinesAnswerAsMemcached(t *testing.T) {
	bin := nodeproc.Need(t, "reference", "memcached")
	direct := nodeproc.Start(t, nodeproc.Memcached, bin, "-t", "1").Addr
	_, addr := startProxy(t, "upstream", 2)
	rng := rand.New(rand.NewPCG(7, 42))
	rounds := 150
	if testing.Short() {
		rounds = 30
	}
	for round := range rounds {
		req, last := randomBinaryPipeline(rng, fmt.Sprintf("b%d:", round))
		want := exchangeBinary(t, direct, req, last)
		got := exchangeBinary(t, addr, req, last)
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d: the proxy answered\n%x\nmemcached\n%x", round, got, want)
		}
	}
	if n := statValue(t, addr, "proxy_fast_path"); n == 0 {
		t.Error("no binary get took the fast path")
	}
}

// randomBinaryPipeline is 5 to 40 requests over four keys with prefix p,
// ending with a NOOP whose opaque it returns.
func randomBinaryPipeline(rng *rand.Rand, p string) ([]byte, uint32) {
	var b []byte
	opaque := uint32(0)
	add := func(op protocol.Opcode, extras, key, value []byte) {
		opaque++
		b = protocol.AppendRequest(b, &protocol.Request{Header: protocol.Header{Opcode: op, Opaque: opaque},
			Extras: extras, Key: key, Value: value})
	}
	for range 5 + rng.IntN(36) {
		key := []byte(p + string(rune('a'+rng.IntN(4))))
		switch rng.IntN(10) {
		case 0, 1:
			add(protocol.OpGet, nil, key, nil)
		case 2, 3:
			add(protocol.OpGetKQ, nil, key, nil)
		case 4:
			add(protocol.OpGetK, nil, key, nil)
		case 5:
			add(protocol.OpGetQ, nil, key, nil)
		case 6, 7:
			op := protocol.OpSet
			if rng.IntN(2) == 0 {
				op = protocol.OpSetQ
			}
			ext := []byte{0, 0, 0, byte(rng.IntN(3)), 0, 0, 0, 0} // flags, exptime 0
			add(op, ext, key, []byte(strings.Repeat(string(rune('0'+rng.IntN(10))), 1+rng.IntN(3))))
		case 8:
			add(protocol.OpDelete, nil, key, nil)
		case 9:
			add(protocol.OpNoop, nil, nil, nil)
		}
	}
	add(protocol.OpNoop, nil, nil, nil)
	return b, opaque
}

// exchangeBinary sends req in one write and returns the responses up to
// the NOOP with opaque last, each with its CAS field zeroed.
func exchangeBinary(t *testing.T, addr string, req []byte, last uint32) []byte {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(req); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(nc)
	var out []byte
	for {
		h := make([]byte, protocol.HeaderLen)
		if _, err := io.ReadFull(r, h); err != nil {
			t.Fatalf("%s: %v after %x", addr, err, out)
		}
		body := make([]byte, binary.BigEndian.Uint32(h[8:]))
		if _, err := io.ReadFull(r, body); err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		clear(h[16:24])
		out = append(append(out, h...), body...)
		if protocol.Opcode(h[1]) == protocol.OpNoop && binary.BigEndian.Uint32(h[12:]) == last {
			return out
		}
	}
}

// TestReloadAfterClose: a Reload that comes during or after Close (a
// SIGHUP while the proxy stops) changes nothing and reports net.ErrClosed
// instead of retiring the closed upstream a second time.
func TestReloadAfterClose(t *testing.T) {
	bin := nodeproc.Need(t, "upstream", "memcached")
	server := nodeproc.Start(t, nodeproc.Memcached, bin, "-t", "1").Addr + ":1"
	p, _ := serveProxy(t, server, "")
	cfg, err := ParseConfig([]byte("listen: 127.0.0.1:0\nservers: [" + server + "]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Reload(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	p.Close()
	if err := p.Reload(context.Background(), cfg); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Reload after Close: %v, want net.ErrClosed", err)
	}
}

func TestUnpad(t *testing.T) {
	in := "VALUE k:b 0 2\r\n7 \r\nEND\r\nVALUE k:d 3 4 CAS\r\n38  \r\nVALUE k:e 0 2\r\nab\r\nEND\r\n"
	want := "VALUE k:b 0 1\r\n7\r\nEND\r\nVALUE k:d 3 2 CAS\r\n38\r\nVALUE k:e 0 2\r\nab\r\nEND\r\n"
	if got := unpad(in); got != want {
		t.Fatalf("unpad:\n got %q\nwant %q", got, want)
	}
}
