package memcache

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// These tests pin the client's promise that nothing it does can hang: an
// op ends within its Timeout whatever the server does, and Close returns.
// Each failed on the client whose conn closed its socket under cn.mu (and
// from inside the reader's RawRead callback), issue 19.

// fakeServer accepts connections on loopback and hands each to serve, in
// its own goroutine; the listener and every connection close when the test
// ends, and the goroutines are waited for.
func fakeServer(t *testing.T, serve func(i int, nc net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				serve(i, nc)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, nc := range conns {
			nc.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// answerGets answers each text gets with the reply bad(i) gives for
// connection i, or a miss when bad returns "".
func answerGets(bad func(i int) string) func(i int, nc net.Conn) {
	return func(i int, nc net.Conn) {
		r := bufio.NewReader(nc)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			switch {
			case strings.HasPrefix(line, "gets "):
				reply := bad(i)
				if reply == "" {
					reply = "END\r\n"
				}
				if _, err := nc.Write([]byte(reply)); err != nil {
					return
				}
			case strings.HasPrefix(line, "version"):
				nc.Write([]byte("VERSION fake\r\n"))
			}
		}
	}
}

// within runs f and fails the test if it has not returned after d.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
	}
}

// TestCloseWhileReaderInCallback: Close runs while the reader is inside
// its read callback, which on a plain socket holds the descriptor's read
// lock. The hook holds the reader there until Close has marked the conn
// failed, then lets it parse, which takes cn.mu: a Close that closes the
// socket under cn.mu waits for the callback, which waits for cn.mu.
func TestCloseWhileReaderInCallback(t *testing.T) {
	checkGoroutines(t)
	addr := fakeServer(t, answerGets(func(int) string { return "" }))
	c := New(addr)
	c.Timeout = time.Second
	c.MaxConns = 1
	gate := make(chan struct{})
	var once sync.Once
	c.testReadHook = func(cn *conn) {
		once.Do(func() {
			close(gate) // the reader is inside its callback, bytes unparsed
			// Wait (a bounded poll) until Close has failed the conn.
			for deadline := time.Now().Add(5 * time.Second); !cn.failed.Load() && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
		})
	}
	getErr := make(chan error, 1)
	go func() {
		_, err := c.Get("k")
		getErr <- err
	}()
	<-gate
	within(t, 5*time.Second, "Close", func() { c.Close() })
	err := <-getErr
	if err != nil && !errors.Is(err, ErrCacheMiss) && !errors.Is(err, errClosed) {
		t.Fatalf("Get: %v", err)
	}
	// The client still works after Close, on a new connection.
	c.testReadHook = nil
	if _, err := c.Get("k"); !errors.Is(err, ErrCacheMiss) {
		t.Fatalf("Get after Close: %v", err)
	}
	c.Close()
}

// TestReaderFailsItsOwnConn: a reply the reader cannot parse, or one no
// request asked for, makes the reader fail the conn from inside its read
// callback. The op gets an error within its Timeout, the next op works on
// a new connection, and Close returns.
func TestReaderFailsItsOwnConn(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply string // the first connection's answer to a gets
		first error  // what the first Get returns (nil: any error)
	}{
		{"malformed", "BOGUS REPLY\r\n", nil},
		{"unsolicited", "END\r\nEND\r\n", ErrCacheMiss}, // the second END answers nothing
	} {
		{
			t.Run(tc.name, func(t *testing.T) {
				checkGoroutines(t)
				addr := fakeServer(t, answerGets(func(i int) string {
					if i == 0 {
						return tc.reply
					}
					return ""
				}))
				c := New(addr)
				c.Timeout = 500 * time.Millisecond
				c.MaxConns = 1
				var err error
				start := time.Now()
				within(t, 5*time.Second, "Get", func() { _, err = c.Get("k") })
				if tc.first == nil && err == nil {
					t.Fatal("Get of a malformed reply succeeded")
				}
				if tc.first != nil && !errors.Is(err, tc.first) {
					t.Fatalf("Get: %v, want %v", err, tc.first)
				}
				if d := time.Since(start); d > c.Timeout+4*time.Second { // slack for a loaded machine
					t.Errorf("Get took %v with Timeout %v", d, c.Timeout)
				}
				// The conn the reader failed is replaced: wait until it is
				// (the unsolicited END arrives after the first answer).
				deadline := time.Now().Add(5 * time.Second)
				for {
					_, err = c.Get("k")
					if errors.Is(err, ErrCacheMiss) {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("Get on a new connection: %v", err)
					}
				}
				within(t, 5*time.Second, "Close", func() { c.Close() })
			})
		}
	}
}

// TestTrickleEndsWithinTimeout: a server that sends its answer one byte
// at a time, slower than the answer could complete in Timeout, fails the
// op at its Timeout: bytes arriving do not move an op's deadline on.
func TestTrickleEndsWithinTimeout(t *testing.T) {
	checkGoroutines(t)
	stop := make(chan struct{})
	addr := fakeServer(t, func(_ int, nc net.Conn) {
		r := bufio.NewReader(nc)
		if _, err := r.ReadString('\n'); err != nil {
			return
		}
		reply := fmt.Sprintf("VALUE k 0 1000 1\r\n%s\r\nEND\r\n", strings.Repeat("x", 1000))
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < len(reply); i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := nc.Write([]byte{reply[i]}); err != nil {
				return
			}
		}
	})
	defer close(stop)
	c := New(addr)
	c.Timeout = 300 * time.Millisecond
	defer c.Close()
	start := time.Now()
	var err error
	within(t, 15*time.Second, "Get", func() { _, err = c.Get("k") })
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Get: %v, want a timeout", err)
	}
	if d := time.Since(start); d > c.Timeout+4*time.Second { // slack for a loaded machine
		t.Errorf("Get took %v with Timeout %v", d, c.Timeout)
	}
}

// TestCloseUnderLoad is the reproduction as a user meets it: 16
// goroutines doing Gets and Sets against a node while the program closes
// the client after 0-20 ms, many times over each protocol. Every Close
// returns, and so does every op.
func TestCloseUnderLoad(t *testing.T) {
	rounds := 200
	if testing.Short() {
		rounds = 10
	}
	eachProtocol(t, func(t *testing.T, c *Client) {
		for round := 0; round < rounds; round++ {
			ctx, cancel := context.WithCancel(context.Background())
			// Close comes after a random number of ops, 0 to 400.
			closeAt := rand.Int64N(401)
			var ops atomic.Int64
			reached := make(chan struct{})
			var once sync.Once
			var wg sync.WaitGroup
			for g := 0; g < 16; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					key := fmt.Sprintf("k%d", g)
					for i := 0; i < 2000 && ctx.Err() == nil; i++ {
						if ops.Add(1) >= closeAt {
							once.Do(func() { close(reached) })
						}
						if i%2 == 0 {
							c.Set(&Item{Key: key, Value: []byte("v")})
						} else {
							c.Get(key)
						}
					}
					once.Do(func() { close(reached) })
				}()
			}
			<-reached
			within(t, 10*time.Second, fmt.Sprintf("Close (round %d)", round), func() { c.Close() })
			cancel()
			within(t, 10*time.Second, fmt.Sprintf("the ops (round %d)", round), wg.Wait)
		}
	})
}
