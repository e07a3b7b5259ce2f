package memcache

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"
)

// outcome is a Completion that hands each outcome to the test.
type outcome chan result

type result struct {
	it  *Item
	err error
}

// Complete copies the item: it is the client's once Complete returns.
func (o outcome) Complete(it *Item, err error) {
	if it != nil {
		c := *it
		c.Value = append([]byte(nil), it.Value...)
		it = &c
	}
	o <- result{it, err}
}

func (o outcome) next(t *testing.T) result {
	t.Helper()
	select {
	case r := <-o:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no completion")
		return result{}
	}
}

func TestAsyncRequests(t *testing.T) {
	checkGoroutines(t) // first: its check runs after the node's cleanup
	addr := startNode(t)
	for name, proto := range map[string]Protocol{"text": Text, "binary": Binary} {
		t.Run(name, func(t *testing.T) {
			c := New(addr)
			c.Protocol = proto
			defer c.Close()
			h := make(outcome, 1)
			key := "async:" + name
			it := &Item{Key: key, Value: []byte("hello"), Flags: 7}
			if !c.StoreAsync("set", it, h) {
				t.Fatal("set not started")
			}
			if r := h.next(t); r.err != nil || r.it != nil {
				t.Fatalf("set: %+v", r)
			}
			if !c.GetAsync(key, h) {
				t.Fatal("get not started")
			}
			if r := h.next(t); r.err != nil || string(r.it.Value) != "hello" || r.it.Flags != 7 || r.it.CasID == 0 {
				t.Fatalf("get: %+v", r)
			}
			c.GetAsync(key+":none", h)
			if r := h.next(t); !errors.Is(r.err, ErrCacheMiss) || r.it != nil {
				t.Fatalf("get miss: %+v", r)
			}
			c.StoreAsync("add", &Item{Key: key, Value: []byte("x")}, h)
			if r := h.next(t); !errors.Is(r.err, ErrNotStored) {
				t.Fatalf("add: %+v", r)
			}
			c.StoreAsync("replace", &Item{Key: key + ":none", Value: []byte("x")}, h)
			if r := h.next(t); !errors.Is(r.err, ErrNotStored) {
				t.Fatalf("replace: %+v", r)
			}
			// Not sent: the caller takes the waiting path.
			if c.StoreAsync("cas", it, h) || c.StoreAsync("append", it, h) || c.GetAsync("bad key", h) {
				t.Fatal("started a request GetAsync/StoreAsync does not send")
			}
			select {
			case r := <-h:
				t.Fatalf("completion for a request not sent: %+v", r)
			default:
			}
		})
	}
}

// TestAsyncFailure: requests in flight on a connection that fails (the
// server closes it, or does not answer within Timeout) complete with the
// error, every one of them.
func TestAsyncFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- nc
		}
	}()
	c := New(ln.Addr().String())
	c.Timeout = 200 * time.Millisecond
	c.MaxConns = 1
	defer c.Close()
	h := make(outcome, 8)

	// The server closes the connection with three requests in flight.
	for i := range 3 {
		if !c.GetAsync("k"+string(rune('a'+i)), h) {
			t.Fatal("not started")
		}
	}
	nc := <-accepted
	nc.Close()
	for range 3 {
		if r := h.next(t); r.err == nil || r.it != nil {
			t.Fatalf("got %+v, want an error", r)
		}
	}

	// The server says nothing: the requests time out.
	c.GetAsync("late", h)
	nc = <-accepted
	defer nc.Close()
	r := h.next(t)
	var ne net.Error
	if !errors.As(r.err, &ne) || !ne.Timeout() {
		t.Fatalf("got %+v, want a timeout", r)
	}
}

// TestAsyncCluster: a cluster client sends nothing asynchronously (its
// requests may need retries after a new map).
func TestAsyncCluster(t *testing.T) {
	c := &Client{cl: &cluster{}}
	h := make(outcome, 1)
	if c.GetAsync("k", h) || c.StoreAsync("set", &Item{Key: "k"}, h) {
		t.Fatal("a cluster client started an asynchronous request")
	}
}

// chain is a Completion that starts the next get from Complete itself.
type chain struct {
	c    *Client
	left int
	done chan error
}

func (ch *chain) Complete(it *Item, err error) {
	if err != nil || string(it.Value) != "v" {
		ch.done <- fmt.Errorf("get: %v %v", it, err)
		return
	}
	if ch.left--; ch.left == 0 {
		ch.done <- nil
		return
	}
	if !ch.c.GetAsync("chained", ch) {
		ch.done <- errors.New("not started")
	}
}

// TestAsyncChained: a Completion may start the client's next request.
func TestAsyncChained(t *testing.T) {
	c := New(startNode(t))
	defer c.Close()
	if err := c.Set(&Item{Key: "chained", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	ch := &chain{c: c, left: 100, done: make(chan error, 1)}
	c.GetAsync("chained", ch)
	select {
	case err := <-ch.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("stuck with %d gets left", ch.left)
	}
}

// TestStoreContext: over the binary protocol a store returns the item's
// new CAS (the one a gets then returns); over text, 0. The item is left
// as it was either way.
func TestStoreContext(t *testing.T) {
	addr := startNode(t)
	ctx := context.Background()
	for name, proto := range map[string]Protocol{"text": Text, "binary": Binary} {
		t.Run(name, func(t *testing.T) {
			c := New(addr)
			c.Protocol = proto
			defer c.Close()
			key := "storecas:" + name
			for _, verb := range []string{"set", "replace", "append", "prepend", "cas"} {
				it := &Item{Key: key, Value: []byte("a")}
				if verb == "cas" {
					g, err := c.Get(key)
					if err != nil {
						t.Fatal(err)
					}
					it.CasID = g.CasID
				}
				before := *it
				cas, err := c.StoreContext(ctx, verb, it)
				if err != nil {
					t.Fatalf("%s: %v", verb, err)
				}
				got, err := c.Get(key)
				if err != nil {
					t.Fatal(err)
				}
				want := uint64(0)
				if proto == Binary {
					want = got.CasID
				}
				if cas != want {
					t.Errorf("%s: CAS %d, want %d", verb, cas, want)
				}
				if it.CasID != before.CasID {
					t.Errorf("%s changed the item's CasID", verb)
				}
			}
			if _, err := c.StoreContext(ctx, "incr", &Item{Key: key}); err == nil {
				t.Error("StoreContext took the verb incr")
			}
		})
	}
}

// TestIncrDecrAndTouchCAS: over the binary protocol, IncrDecrContext
// returns the item's new CAS and TouchItemContext its flags and CAS (the
// ones a gets then returns); over text, 0.
func TestIncrDecrAndTouchCAS(t *testing.T) {
	addr := startNode(t)
	ctx := context.Background()
	for name, proto := range map[string]Protocol{"text": Text, "binary": Binary} {
		t.Run(name, func(t *testing.T) {
			c := New(addr)
			c.Protocol = proto
			defer c.Close()
			key := "arithcas:" + name
			if err := c.Set(&Item{Key: key, Value: []byte("10"), Flags: 7}); err != nil {
				t.Fatal(err)
			}
			check := func(what string, cas uint64) {
				t.Helper()
				got, err := c.Get(key)
				if err != nil {
					t.Fatal(err)
				}
				want := uint64(0)
				if proto == Binary {
					want = got.CasID
				}
				if cas != want {
					t.Errorf("%s: CAS %d, want %d", what, cas, want)
				}
			}
			v, cas, err := c.IncrDecrContext(ctx, key, true, 5)
			if err != nil || v != 15 {
				t.Fatalf("incr: %d %v", v, err)
			}
			check("incr", cas)
			v, cas, err = c.IncrDecrContext(ctx, key, false, 3)
			if err != nil || v != 12 {
				t.Fatalf("decr: %d %v", v, err)
			}
			check("decr", cas)
			flags, cas, err := c.TouchItemContext(ctx, key, 100)
			if err != nil {
				t.Fatal(err)
			}
			check("touch", cas)
			if want := map[Protocol]uint32{Text: 0, Binary: 7}[proto]; flags != want {
				t.Errorf("touch: flags %d, want %d", flags, want)
			}
			if _, _, err := c.IncrDecrContext(ctx, "arithcas:none", true, 1); !errors.Is(err, ErrCacheMiss) {
				t.Errorf("incr of a missing key: %v", err)
			}
		})
	}
}
