package server

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
)

// Values held back one byte short take store memory, at most half of -m,
// then at most maxHeapInput of heap: past it the text, meta and binary storage commands are refused as
// memcached refuses an item it cannot allocate, their data swallowed, and
// the connections stay in step; the held values, once complete, are
// stored intact (or refused for memory), and the node's loans all come
// back.
func TestHeldValuesUseStoreMemory(t *testing.T) {
	for _, kind := range []string{"set", "ms", "binary"} {
		t.Run(kind, func(t *testing.T) { testHeldValues(t, kind) })
	}
}

func testHeldValues(t *testing.T, kind string) {
	s, addr := startServer(t, func(c *Config) { c.Store.MaxBytes = 4 << 20 })
	const size = 300 << 10
	val := bytes.Repeat([]byte("v"), size)
	type held struct {
		c    net.Conn
		r    *bufio.Reader
		kind string
		last []byte
	}
	var hs []*held
	for i := 0; i < 40; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(time.Minute))
		h := &held{c: c, r: bufio.NewReader(c)}
		key := fmt.Sprint("held", i)
		var req []byte
		h.kind = kind
		switch kind {
		case "set":
			req = fmt.Appendf(nil, "set %s 0 0 %d\r\n%s\r\n", key, size, val)
		case "ms":
			req = fmt.Appendf(nil, "ms %s %d\r\n%s\r\n", key, size, val)
		case "binary":
			hd := protocol.Header{Magic: protocol.MagicRequest, Opcode: protocol.OpSet, KeyLen: uint16(len(key)), ExtLen: 8,
				BodyLen: uint32(8 + len(key) + size), Opaque: uint32(i)}
			req = protocol.AppendHeader(nil, &hd)
			req = append(req, make([]byte, 8)...)
			req = append(req, key...)
			req = append(req, val...)
		}
		h.last = req[len(req)-1:]
		if _, err := c.Write(req[:len(req)-1]); err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	// Another client is served meanwhile. 40 × 300 KB is more than half
	// of -m lent (2 MiB) and the heap's maxHeapInput (8 MiB) together:
	// some are refused.
	o := dialText(t, addr)
	o.expect("set other 0 0 5\r\nhello\r\n", "STORED\r\n")
	o.expect("get other\r\n", "VALUE other 0 5\r\nhello\r\nEND\r\n")
	waitFor(t, "a held value refused", func() bool { return s.inputNoMemory.Load() > 0 })
	refused, stored := 0, 0
	for _, h := range hs {
		h.c.Write(h.last)
	}
	for i, h := range hs {
		var ok, oom bool
		if h.kind == "binary" {
			var hd [protocol.HeaderLen]byte
			if _, err := io.ReadFull(h.r, hd[:]); err != nil {
				t.Fatalf("%d (%s): %v", i, h.kind, err)
			}
			var ph protocol.Header
			protocol.ParseHeader(hd[:], &ph)
			io.CopyN(io.Discard, h.r, int64(ph.BodyLen))
			ok, oom = ph.Status == protocol.StatusOK, ph.Status == protocol.StatusNoMemory
		} else {
			l, err := h.r.ReadString('\n')
			if err != nil {
				t.Fatalf("%d (%s): %v", i, h.kind, err)
			}
			ok = l == "STORED\r\n" || l == "HD\r\n"
			oom = l == "SERVER_ERROR out of memory storing object\r\n"
			if !ok && !oom {
				t.Fatalf("%d (%s): %q", i, h.kind, l)
			}
		}
		switch {
		case ok:
			stored++
			// Intact, unless evicted since by the values stored after it.
			key := fmt.Sprint("held", i)
			fmt.Fprintf(o.nc, "get %s\r\n", key)
			l, _ := o.r.ReadString('\n')
			if l != "END\r\n" {
				if l != fmt.Sprintf("VALUE %s 0 %d\r\n", key, size) {
					t.Fatalf("get %s: %.80q", key, l)
				}
				got := make([]byte, size+7)
				if _, err := io.ReadFull(o.r, got); err != nil || !bytes.Equal(got[:size], val) || string(got[size:]) != "\r\nEND\r\n" {
					t.Fatalf("get %s: the value differs from what was sent (%v)", key, err)
				}
			}
		case oom:
			refused++
		default:
			t.Fatalf("%d (%s): neither stored nor out of memory", i, h.kind)
		}
		// In step: the connection serves its next command.
		if h.kind != "binary" {
			fmt.Fprintf(h.c, "get nothing\r\n")
			if l, _ := h.r.ReadString('\n'); l != "END\r\n" {
				t.Fatalf("%d (%s) after its set: %q", i, h.kind, l)
			}
		}
	}
	if refused == 0 || stored == 0 {
		t.Fatalf("%d stored, %d refused: want both", stored, refused)
	}
	for _, h := range hs {
		h.c.Close()
	}
	// Every loan comes back: the largest is granted again.
	waitFor(t, "the loans returned", func() bool {
		_, l, err := s.store.Borrow(nil, s.store.BorrowMax())
		s.store.Return(l)
		return err == nil
	})
}

// A value of the largest size with its command line is more than any
// loan: it is buffered on the heap, counted in heapIn while it waits, and
// stored whole.
func TestLargestValueBufferedOnHeap(t *testing.T) {
	s, addr := startServer(t, nil)
	key := "big"
	n := s.cfg.Store.ItemSizeMax
	for s.tooLarge(len(key), 0, n) {
		n--
	}
	line := fmt.Sprintf("set %s 0 0 %d\r\n", key, n)
	if len(line)+n+2 <= s.store.BorrowMax() {
		t.Fatalf("a %d-byte value with its line fits a loan of %d: the test does not reach the heap", n, s.store.BorrowMax())
	}
	val := bytes.Repeat([]byte("b"), n)
	req := append(append([]byte(line), val...), '\r', '\n')
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := c.Write(req[:len(req)-1]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the value buffered on the heap", func() bool { return s.heapIn.Load() >= int64(len(req)) })
	if _, err := c.Write(req[len(req)-1:]); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	if l, err := r.ReadString('\n'); l != "STORED\r\n" {
		t.Fatalf("set of %d bytes: %q %v", n, l, err)
	}
	waitFor(t, "the heap buffer returned", func() bool { return s.heapIn.Load() == 0 })
	fmt.Fprintf(c, "get %s\r\n", key)
	if l, _ := r.ReadString('\n'); l != fmt.Sprintf("VALUE %s 0 %d\r\n", key, n) {
		t.Fatalf("get: %q", l)
	}
	got := make([]byte, n+2)
	if _, err := io.ReadFull(r, got); err != nil || !bytes.Equal(got[:n], val) {
		t.Fatalf("get: the value differs (%v)", err)
	}
}

// A multi-get naming a large item again and again, past what the node
// would hold for output, is written as it is built and answered whole;
// gat, which is held whole, is refused with memcached's answer once its
// output would pass maxOutput, and the connection and the budget are whole
// after both.
func TestMultiGetOutputBounded(t *testing.T) {
	// A 4 MiB budget: the limit is reached after 8 values, not 128.
	s, addr := startServer(t, func(cfg *Config) { cfg.outputFloor = 4 << 20 })
	c := dialText(t, addr)
	const size = 500 << 10
	val := bytes.Repeat([]byte("g"), size)
	c.expect(fmt.Sprintf("set big 0 0 %d\r\n%s\r\n", size, val), "STORED\r\n")
	n := int(s.maxOutput()/size) + 10 // more than the budget holds
	readValues := func(n int) {
		t.Helper()
		buf := make([]byte, size+2)
		for i := 0; i < n; i++ {
			if l, _ := c.r.ReadString('\n'); l != fmt.Sprintf("VALUE big 0 %d\r\n", size) {
				t.Fatalf("value %d: %.60q", i, l)
			}
			if _, err := io.ReadFull(c.r, buf); err != nil || !bytes.Equal(buf[:size], val) {
				t.Fatalf("value %d: %v", i, err)
			}
		}
		if l, _ := c.r.ReadString('\n'); l != "END\r\n" {
			t.Fatalf("end: %q", l)
		}
	}
	c.nc.SetDeadline(time.Now().Add(time.Minute))
	fmt.Fprintf(c.nc, "get%s\r\n", strings.Repeat(" big", n))
	readValues(n)
	if got := s.outHeap.Load(); got != 0 {
		t.Fatalf("a get counted %d bytes of held output", got)
	}

	c.expect("gat 0"+strings.Repeat(" big", n)+"\r\n", "SERVER_ERROR out of memory writing get response\r\n")
	fmt.Fprintf(c.nc, "stats\r\n")
	for found := false; ; {
		l, err := c.r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		found = found || l == "STAT response_obj_oom 1\r\n"
		if l == "END\r\n" {
			if !found {
				t.Fatal("stats: no response_obj_oom 1")
			}
			break
		}
	}
	waitFor(t, "the output budget back to 0", func() bool { return s.outHeap.Load() == 0 })
	// A gat within the budget is answered whole.
	fmt.Fprintf(c.nc, "gat 0 big big big\r\n")
	readValues(3)
	waitFor(t, "the output budget back to 0", func() bool { return s.outHeap.Load() == 0 })
}
