package memcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/clock"
	"github.com/vbcache/vbcache/internal/server"
	"github.com/vbcache/vbcache/internal/server/servertest"
)

// startNode runs an in-process vbcache node on a loopback port (STYLE.md
// habit 13) and stops it when the test ends.
func startNode(tb testing.TB) string {
	tb.Helper()
	cfg := server.Config{Version: "test"}
	cfg.Store.Clock = clock.NewFake(time.Unix(1700000000, 0))
	return servertest.Start(tb, cfg)
}

// checkGoroutines fails the test if goroutines started during it are
// still running at its end (after the cleanups registered before it).
func checkGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(2 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			runtime.Gosched()
			time.Sleep(time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<16)
			t.Errorf("%d goroutines leaked:\n%s", n-before, buf[:runtime.Stack(buf, true)])
		}
	})
}

func eachProtocol(t *testing.T, f func(t *testing.T, c *Client)) {
	for _, p := range []struct {
		name  string
		proto Protocol
	}{{"text", Text}, {"binary", Binary}} {
		t.Run(p.name, func(t *testing.T) {
			checkGoroutines(t)
			addr := startNode(t)
			c := New(addr)
			c.Protocol = p.proto
			c.Timeout = 5 * time.Second
			t.Cleanup(func() { c.Close() })
			f(t, c)
		})
	}
}

func TestClientCommands(t *testing.T) {
	eachProtocol(t, func(t *testing.T, c *Client) {
		must := func(what string, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		wantErr := func(what string, err, want error) {
			t.Helper()
			if !errors.Is(err, want) {
				t.Fatalf("%s: err = %v, want %v", what, err, want)
			}
		}
		must("ping", c.Ping())
		must("set", c.Set(&Item{Key: "a", Value: []byte("alpha"), Flags: 42}))
		it, err := c.Get("a")
		must("get", err)
		if it.Key != "a" || string(it.Value) != "alpha" || it.Flags != 42 || it.CasID == 0 {
			t.Fatalf("get a = %+v", it)
		}
		_, err = c.Get("missing")
		wantErr("get missing", err, ErrCacheMiss)
		wantErr("add existing", c.Add(&Item{Key: "a", Value: []byte("x")}), ErrNotStored)
		must("add", c.Add(&Item{Key: "b", Value: []byte("beta")}))
		wantErr("replace missing", c.Replace(&Item{Key: "zz", Value: []byte("x")}), ErrNotStored)
		must("replace", c.Replace(&Item{Key: "b", Value: []byte("BETA")}))
		must("append", c.Append(&Item{Key: "b", Value: []byte("-end")}))
		must("prepend", c.Prepend(&Item{Key: "b", Value: []byte("start-")}))
		wantErr("append missing", c.Append(&Item{Key: "nokey", Value: []byte("x")}), ErrNotStored)
		if it, _ := c.Get("b"); it == nil || string(it.Value) != "start-BETA-end" {
			t.Fatalf("after append/prepend: %+v", it)
		}
		// CAS
		it, _ = c.Get("a")
		it.Value = []byte("new")
		must("cas", c.CompareAndSwap(it))
		it.Value = []byte("stale")
		wantErr("cas stale", c.CompareAndSwap(it), ErrCASConflict)
		// Counters
		must("set n", c.Set(&Item{Key: "n", Value: []byte("10")}))
		if v, err := c.Increment("n", 5); err != nil || v != 15 {
			t.Fatalf("incr = %d, %v", v, err)
		}
		if v, err := c.Decrement("n", 20); err != nil || v != 0 {
			t.Fatalf("decr = %d, %v", v, err)
		}
		_, err = c.Increment("nonum", 1)
		wantErr("incr missing", err, ErrCacheMiss)
		must("set s", c.Set(&Item{Key: "s", Value: []byte("abc")}))
		if _, err := c.Increment("s", 1); err == nil || errors.Is(err, ErrCacheMiss) {
			t.Fatalf("incr non-numeric: %v", err)
		}
		// Touch, GetAndTouch, Delete
		must("touch", c.Touch("a", 100))
		wantErr("touch missing", c.Touch("nokey", 100), ErrCacheMiss)
		if it, err := c.GetAndTouch("a", 100); err != nil || string(it.Value) != "new" {
			t.Fatalf("gat = %+v, %v", it, err)
		}
		_, err = c.GetAndTouch("nokey", 1)
		wantErr("gat missing", err, ErrCacheMiss)
		must("delete", c.Delete("a"))
		wantErr("delete again", c.Delete("a"), ErrCacheMiss)
		// Keys
		wantErr("long key", c.Set(&Item{Key: strings.Repeat("k", 251), Value: []byte("x")}), ErrMalformedKey)
		wantErr("space key", c.Set(&Item{Key: "a b", Value: []byte("x")}), ErrMalformedKey)
		long := strings.Repeat("k", 250)
		must("250-byte key", c.Set(&Item{Key: long, Value: []byte("x")}))
		utf := "ключ-鍵-🔑"
		must("utf-8 key", c.Set(&Item{Key: utf, Value: []byte("u")}))
		// Values: binary bytes, empty, large.
		bin := make([]byte, 0, 300000)
		for i := 0; len(bin) < cap(bin); i++ {
			bin = append(bin, byte(i*7), '\r', '\n', 0)
		}
		must("set big", c.Set(&Item{Key: "big", Value: bin}))
		if it, err := c.Get("big"); err != nil || !bytes.Equal(it.Value, bin) {
			t.Fatalf("big value differs: %v", err)
		}
		must("set empty", c.Set(&Item{Key: "empty", Value: []byte{}}))
		if it, err := c.Get("empty"); err != nil || len(it.Value) != 0 {
			t.Fatalf("empty: %+v %v", it, err)
		}
		// GetMulti
		keys := []string{"nope", long, utf}
		for i := 0; i < 150; i++ {
			k := fmt.Sprintf("m%d", i)
			keys = append(keys, k)
			must("set "+k, c.Set(&Item{Key: k, Value: []byte("v-" + k), Flags: uint32(i)}))
		}
		m, err := c.GetMulti(keys)
		must("getmulti", err)
		if len(m) != 152 || string(m[utf].Value) != "u" || string(m[long].Value) != "x" {
			t.Fatalf("GetMulti: %d items", len(m))
		}
		for i := 0; i < 150; i++ {
			k := fmt.Sprintf("m%d", i)
			if it := m[k]; it == nil || string(it.Value) != "v-"+k || it.Flags != uint32(i) || it.Key != k {
				t.Fatalf("GetMulti[%s] = %+v", k, it)
			}
		}
		if m, err := c.GetMulti(nil); err != nil || m == nil || len(m) != 0 {
			t.Fatalf("GetMulti(nil) = %v, %v", m, err)
		}
		must("flush", c.FlushAll())
		_, err = c.Get("b")
		wantErr("after flush", err, ErrCacheMiss)
	})
}

// TestPipelined runs many goroutines over two connections and checks each
// sees its own answers.
func TestPipelined(t *testing.T) {
	eachProtocol(t, func(t *testing.T, c *Client) {
		c.MaxConns = 2
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 100; i++ {
					k := fmt.Sprintf("g%d-%d", g, i)
					if err := c.Set(&Item{Key: k, Value: []byte(k)}); err != nil {
						errs <- err
						return
					}
					it, err := c.Get(k)
					if err != nil || string(it.Value) != k {
						errs <- fmt.Errorf("get %s: %v %v", k, it, err)
						return
					}
					if _, err := c.Get(k + "-miss"); !errors.Is(err, ErrCacheMiss) {
						errs <- fmt.Errorf("miss %s: %v", k, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		n := 0
		for _, p := range c.pools {
			n += len(*p.conns.Load())
		}
		if n > 2 {
			t.Fatalf("%d connections open, MaxConns 2", n)
		}
	})
}

// TestMultiServer spreads keys over four nodes with each selector and
// reads them back, singly and with GetMulti.
func TestMultiServer(t *testing.T) {
	checkGoroutines(t)
	var servers []Server
	for i := 0; i < 4; i++ {
		servers = append(servers, Server{Addr: startNode(t), Weight: i + 1})
	}
	for _, d := range Distributions {
		t.Run(d.Name, func(t *testing.T) {
			sel, err := NewSelector(d.Name, servers, nil)
			if err != nil {
				t.Fatal(err)
			}
			c := NewFromSelector(sel)
			defer c.Close()
			if d.Name == "vbucket" || d.Name == "ketama" {
				c.Protocol = Binary // binary requests carry the vbucket id
			}
			var keys []string
			for i := 0; i < 200; i++ {
				k := fmt.Sprintf("%s-%d", d.Name, i)
				keys = append(keys, k)
				if err := c.Set(&Item{Key: k, Value: []byte(k)}); err != nil {
					t.Fatal(err)
				}
			}
			m, err := c.GetMulti(keys)
			if err != nil || len(m) != len(keys) {
				t.Fatalf("GetMulti: %d of %d, %v", len(m), len(keys), err)
			}
			// Each key is on its server and no other.
			for _, s := range servers {
				one := New(s.Addr)
				got, err := one.GetMulti(keys)
				one.Close()
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range keys {
					a, _ := sel.PickServer(k)
					if (a.String() == s.Addr) != (got[k] != nil) {
						t.Fatalf("key %s: selector says %s, found on %s: %v", k, a, s.Addr, got[k] != nil)
					}
				}
			}
		})
	}
}

// TestContextCancel abandons a request to a server that never answers:
// the call returns the context's error and nothing leaks.
func TestContextCancel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		nc, err := ln.Accept()
		if err == nil {
			accepted <- nc
		}
	}()
	checkGoroutines(t)
	c := New(ln.Addr().String())
	c.Timeout = 5 * time.Second
	c.MaxConns = 1 // the fake server accepts one connection
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.GetContext(ctx, "k")
		errc <- err
	}()
	nc := <-accepted
	defer nc.Close()
	buf := make([]byte, 64)
	n, _ := nc.Read(buf) // the request arrived
	if string(buf[:n]) != "gets k\r\n" {
		t.Fatalf("request %q", buf[:n])
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	// The late answer is parsed and dropped; the connection stays usable.
	nc.Write([]byte("END\r\n"))
	go func() {
		nc.Read(buf)
		nc.Write([]byte("VERSION 1\r\n"))
	}()
	if err := c.Ping(); err != nil {
		t.Fatalf("ping after abandon: %v", err)
	}
	c.Close()
}

// TestTimeout: a server that stops answering fails the request after
// Timeout, and the connection is replaced.
func TestTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		for _, nc := range conns {
			nc.Close()
		}
	})
	checkGoroutines(t)
	c := New(ln.Addr().String())
	c.Timeout = 50 * time.Millisecond
	defer c.Close()
	_, err = c.Get("k")
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("err = %v, want a timeout", err)
	}
}

func TestDialFailure(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	c := New(addr)
	defer c.Close()
	if _, err := c.Get("k"); err == nil {
		t.Fatal("get from a closed port succeeded")
	}
}

func TestNoServers(t *testing.T) {
	c := New()
	if _, err := c.Get("k"); !errors.Is(err, ErrNoServers) {
		t.Fatalf("err = %v", err)
	}
}
