package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// statValue reads one general stat over a new text connection.
func statOf(t *testing.T, addr, name string) uint64 {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(nc, "stats\r\n")
	br := bufio.NewReader(nc)
	for {
		l, err := br.ReadString('\n')
		if err != nil || l == "END\r\n" {
			t.Fatalf("stats: no %s (%v)", name, err)
		}
		if v, ok := strings.CutPrefix(l, "STAT "+name+" "); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
}

// A watcher that does not read never slows a writer: its lines are
// dropped once its queue and socket are full (log_watcher_skipped), every
// set is answered, and a watcher that closes is dropped (log_watchers);
// "watch" over a kind vbcache does not stream is refused.
func TestWatchSlowWatcher(t *testing.T) {
	_, addr := startServer(t, nil)
	w, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	w.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(w, "watch mutations\r\n")
	if l, err := bufio.NewReader(w).ReadString('\n'); err != nil || l != "OK\r\n" {
		t.Fatalf("watch: %q %v", l, err)
	}
	if n := statOf(t, addr, "log_watchers"); n != 1 {
		t.Fatalf("log_watchers %d, want 1", n)
	}
	const sets = 60_000
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	go func() { // owned by the test: ends once the sets are written
		var b strings.Builder
		for i := range sets {
			fmt.Fprintf(&b, "set k%d 0 0 1\r\nv\r\n", i)
		}
		io.WriteString(c, b.String())
	}()
	br := bufio.NewReader(c)
	for i := range sets {
		if l, err := br.ReadString('\n'); err != nil || l != "STORED\r\n" {
			t.Fatalf("set %d: %q %v", i, l, err)
		}
	}
	sent, skipped := statOf(t, addr, "log_watcher_sent"), statOf(t, addr, "log_watcher_skipped")
	if sent+skipped != sets || skipped == 0 {
		t.Errorf("log_watcher_sent %d + log_watcher_skipped %d, want %d with some skipped", sent, skipped, sets)
	}
	w.Close()
	for deadline := time.Now().Add(10 * time.Second); statOf(t, addr, "log_watchers") != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("log_watchers still 1 after the watcher closed")
		}
	}
	// memcached 1.6.18 takes sysevents (and logs nothing of it here) and
	// has no deletions, which is an ERROR as any unknown kind.
	if got := roundTrip(t, addr, "watch mutations sysevents\r\n", len("OK\r\n")); got != "OK\r\n" {
		t.Errorf("watch mutations sysevents: %q, want OK", got)
	}
	if got := roundTrip(t, addr, "watch deletions\r\n", len("ERROR\r\n")); got != "ERROR\r\n" {
		t.Errorf("watch deletions: %q, want ERROR", got)
	}
	if got := roundTrip(t, addr, "watch bogus\r\n", len("ERROR\r\n")); got != "ERROR\r\n" {
		t.Errorf("watch bogus: %q", got)
	}
}

// Watchers come and go while lines are published (for the race
// detector): publish reads a list that add and remove replace, never
// change in place.
func TestWatchersComeAndGo(t *testing.T) {
	var w watchers
	done := make(chan struct{})
	go func() { // owned by the test: ends when done closes
		line := []byte("x\n")
		for {
			select {
			case <-done:
				return
			default:
				w.publish(watchMutations, line)
			}
		}
	}()
	for range 1000 {
		a := &watcher{kinds: watchMutations | watchFetchers, lines: make(chan []byte, 1)}
		b := &watcher{kinds: watchMutations | watchEvictions, lines: make(chan []byte, 1)}
		w.add(a)
		w.add(b)
		w.remove(a)
		w.remove(b)
	}
	close(done)
	if n := w.count(); n != 0 || w.mutations.Load() != 0 || w.fetchers.Load() != 0 || w.evictions.Load() != 0 {
		t.Fatalf("%d watchers, %d for mutations, %d fetchers, %d evictions left", n, w.mutations.Load(), w.fetchers.Load(), w.evictions.Load())
	}
}

// The store's eviction log is on exactly while someone watches
// evictions: the first such watcher turns it on, the last one's leaving
// turns it off, and watchers of other kinds leave it alone.
func TestWatchEvictionsSwitchTheStoreLog(t *testing.T) {
	s, err := New(Config{Port: -1, PortSet: true, Version: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.store.Close()
	on := func() bool { return s.store.EvictionLogOn() }
	f := &watcher{kinds: watchFetchers, lines: make(chan []byte, 1)}
	a := &watcher{kinds: watchEvictions | watchMutations, lines: make(chan []byte, 1)}
	b := &watcher{kinds: watchEvictions, lines: make(chan []byte, 1)}
	s.watch.add(f)
	if on() {
		t.Fatal("on with a fetchers watcher only")
	}
	s.watch.add(a)
	s.watch.add(b)
	s.watch.remove(a)
	if !on() {
		t.Fatal("off with an evictions watcher left")
	}
	s.watch.remove(b)
	if on() {
		t.Fatal("on after the last evictions watcher left")
	}
	s.watch.remove(f)
}
