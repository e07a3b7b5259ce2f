package proxy

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/vbcache/vbcache/test/nodeproc"
)

// The benchmarks run the proxy in process in front of two memcached
// processes (their allocations are not counted) and drive it from the
// benchmark goroutines over TCP with fixed request bytes, so allocs/op is
// the proxy's and the memcache client's per request. ns/op includes the
// loopback round trips and memcached; CPU per operation is measured with
// "vbcache bench proxies" (docs/PERFORMANCE.md).
//
//	go test ./internal/proxy -run '^$' -bench . -benchmem
func benchProxy(b *testing.B) string {
	b.Helper()
	_, addr := startProxy(b, "benchmark upstream", 2)
	// Load the keys.
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	r := bufio.NewReader(nc)
	val := bytes.Repeat([]byte("v"), 100)
	for i := range benchKeys {
		req := "set " + benchKey(i) + " 0 0 100\r\n" + string(val) + "\r\n"
		if _, err := io.WriteString(nc, req); err != nil {
			b.Fatal(err)
		}
		if l, err := r.ReadString('\n'); err != nil || l != "STORED\r\n" {
			b.Fatalf("set: %q %v", l, err)
		}
	}
	return addr
}

// startProxy runs a proxy in process for the test, in front of n memcached
// processes (ketama over md5), and returns it and its address. why says
// what memcached is needed for, when it is missing.
func startProxy(tb testing.TB, why string, n int) (*Proxy, string) {
	tb.Helper()
	return startProxyWith(tb, why, n, "")
}

// startProxyWith is startProxy with more lines of pool configuration.
func startProxyWith(tb testing.TB, why string, n int, extra string) (*Proxy, string) {
	tb.Helper()
	bin := nodeproc.Need(tb, why, "memcached")
	var servers []string
	for range n {
		servers = append(servers, nodeproc.Start(tb, nodeproc.Memcached, bin, "-t", "1").Addr+":1")
	}
	return serveProxy(tb, strings.Join(servers, ", "), extra)
}

// serveProxy starts an in-process proxy over servers (host:port:weight,
// comma-separated) with ketama over md5 and more lines of configuration.
func serveProxy(tb testing.TB, servers, extra string) (*Proxy, string) {
	tb.Helper()
	cfg, err := ParseConfig([]byte("listen: 127.0.0.1:0\ndistribution: ketama\nhash: md5\nservers: [" +
		servers + "]\n" + extra))
	if err != nil {
		tb.Fatal(err)
	}
	p, err := New(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	p.Logf = nil
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go p.Serve(ln)
	tb.Cleanup(func() { p.Close() })
	return p, ln.Addr().String()
}

const benchKeys = 1000

func benchKey(i int) string { return "bench:" + strconv.Itoa(i%benchKeys) }

// benchRequests runs reqs round robin on parallel connections; each reply
// ends with end and is want bytes long.
func benchRequests(b *testing.B, reqs [][]byte, want int, end []byte) {
	addr := benchProxy(b)
	b.SetParallelism(8)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			b.Error(err)
			return
		}
		defer nc.Close()
		buf := make([]byte, 64<<10)
		i := 0
		for pb.Next() {
			if _, err := nc.Write(reqs[i%len(reqs)]); err != nil {
				b.Error(err)
				return
			}
			i++
			n := 0
			for n < want || !bytes.HasSuffix(buf[:n], end) {
				m, err := nc.Read(buf[n:])
				if err != nil {
					b.Error(err)
					return
				}
				n += m
			}
			if n != want {
				b.Errorf("reply of %d bytes, want %d: %q", n, want, buf[:min(n, 200)])
				return
			}
		}
	})
}

func BenchmarkProxyGet(b *testing.B) {
	var reqs [][]byte
	for i := range benchKeys {
		reqs = append(reqs, []byte("get "+benchKey(i)+"\r\n"))
	}
	// "VALUE bench:NNN 0 100\r\n" + 100 + "\r\nEND\r\n", keys of 1–3 digits:
	// the length varies, so check the suffix only.
	benchRequestsVar(b, reqs, []byte("\r\nEND\r\n"))
}

func BenchmarkProxySet(b *testing.B) {
	val := string(bytes.Repeat([]byte("v"), 100))
	var reqs [][]byte
	for i := range benchKeys {
		reqs = append(reqs, []byte("set "+benchKey(i)+" 0 0 100\r\n"+val+"\r\n"))
	}
	benchRequests(b, reqs, len("STORED\r\n"), []byte("STORED\r\n"))
}

func BenchmarkProxyGetMulti10(b *testing.B) {
	var reqs [][]byte
	for i := 0; i < benchKeys; i += 10 {
		req := "get"
		for j := i; j < i+10; j++ {
			req += " " + benchKey(j)
		}
		reqs = append(reqs, []byte(req+"\r\n"))
	}
	benchRequestsVar(b, reqs, []byte("\r\nEND\r\n"))
}

// benchRequestsVar is benchRequests for replies whose length varies: each
// must end with end and hold no error.
func benchRequestsVar(b *testing.B, reqs [][]byte, end []byte) {
	addr := benchProxy(b)
	b.SetParallelism(8)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			b.Error(err)
			return
		}
		defer nc.Close()
		buf := make([]byte, 64<<10)
		i := 0
		for pb.Next() {
			if _, err := nc.Write(reqs[i%len(reqs)]); err != nil {
				b.Error(err)
				return
			}
			i++
			n := 0
			for !bytes.HasSuffix(buf[:n], end) {
				m, err := nc.Read(buf[n:])
				if err != nil {
					b.Error(err)
					return
				}
				n += m
			}
			if !bytes.HasPrefix(buf[:n], []byte("VALUE ")) {
				b.Errorf("reply %q", buf[:min(n, 200)])
				return
			}
		}
	})
}
