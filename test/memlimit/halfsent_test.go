package memlimit

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/vbcache/vbcache/test/nodeproc"
)

// The half-sent value attack (issue 25): many connections each send a
// binary SET of a large value and stop one byte short. memcached reads a
// value into the item it allocated from its slabs, so what such clients
// hold is item memory, within -m, and past it they get "Out of memory".
// A node must do the same: its RSS stays within -m plus a small constant
// per connection, it keeps serving other clients meanwhile, and once the
// last bytes arrive every held value is stored intact or refused with
// Out of memory, nothing else.
const (
	attackConns = 200
	attackMiB   = 32          // the node's -m
	attackValue = 1000 << 10  // bytes per held value: under -I 1m with its key
	perConnRSS  = 20 << 10    // allowed per connection: 2 MB per 100
	attackWait  = time.Minute // for the node to read what was sent
)

func TestHalfSentValuesVbcache(t *testing.T) {
	if buildErr != nil {
		t.Fatalf("cannot build vbcache: %v", buildErr)
	}
	n := nodeproc.Start(t, nodeproc.Vbcache, vbcacheBin, "-m", strconv.Itoa(attackMiB), "-c", "4096")
	r := halfSent(t, n)
	if grew, limit := r.rssHeld-r.rssIdle, int64(attackMiB<<20+attackConns*perConnRSS); grew > limit {
		t.Errorf("RSS grew by %.1f MiB with %d values held, more than -m %d MiB + %d KiB per connection (%.1f MiB)",
			float64(grew)/(1<<20), attackConns, attackMiB, perConnRSS>>10, float64(limit)/(1<<20))
	}
	if r.stored == 0 {
		t.Errorf("no held value was stored once complete")
	}
	if r.otherErr != "" {
		t.Errorf("another client during the attack: %s", r.otherErr)
	}
}

// TestHalfSentValuesMemcached runs the attack against memcached, the
// figures to compare with; it checks only that every answer is a store or
// Out of memory.
func TestHalfSentValuesMemcached(t *testing.T) {
	if _, err := exec.LookPath("memcached"); err != nil {
		nodeproc.Absent(t, "memcached not found in PATH (package memcached)")
	}
	n := nodeproc.Start(t, nodeproc.Memcached, "", "-m", strconv.Itoa(attackMiB), "-c", "4096")
	halfSent(t, n)
}

type attackResult struct {
	rssIdle, rssHeld  int64
	stored, noMemory  int
	otherErr          string // what went wrong for a client not in the attack
	otherSets, others int
}

func binSet(key string, value []byte, opaque uint32) []byte {
	p := make([]byte, 24+8+len(key)+len(value))
	p[0], p[1] = 0x80, 0x01 // request, SET
	binary.BigEndian.PutUint16(p[2:], uint16(len(key)))
	p[4] = 8 // extras: flags, exptime
	binary.BigEndian.PutUint32(p[8:], uint32(8+len(key)+len(value)))
	binary.BigEndian.PutUint32(p[12:], opaque)
	binary.BigEndian.PutUint32(p[24:], 7) // flags
	copy(p[32:], key)
	copy(p[32+len(key):], value)
	return p
}

func halfSent(t *testing.T, n *nodeproc.Node) attackResult {
	var res attackResult
	ctl := dial(t, n.Addr)
	read0, _ := strconv.ParseInt(ctl.stats(t)["bytes_read"], 10, 64)
	var err error
	if res.rssIdle, err = n.RSS(); err != nil {
		t.Fatal(err)
	}

	// Every connection sends all of its SET but the last byte.
	conns := make([]net.Conn, attackConns)
	pkts := make([][]byte, attackConns)
	var sent int64
	for i := range conns {
		c, err := net.DialTimeout("tcp", n.Addr, 5*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(2 * attackWait))
		conns[i] = c
		pkts[i] = binSet(fmt.Sprintf("held:%d", i), value(fmt.Sprint("held:", i), attackValue), uint32(i))
		sent += int64(len(pkts[i]) - 1)
	}
	var wg sync.WaitGroup
	errs := make(chan error, attackConns)
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Write(pkts[i][:len(pkts[i])-1]); err != nil {
				errs <- fmt.Errorf("connection %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Wait until the node has read it all.
	deadline := time.Now().Add(attackWait)
	for {
		read, _ := strconv.ParseInt(ctl.stats(t)["bytes_read"], 10, 64)
		if read-read0 >= sent {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node read %d of the %d bytes sent in %v", read-read0, sent, attackWait)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if res.rssHeld, err = n.RSS(); err != nil {
		t.Fatal(err)
	}

	// Meanwhile another client stores and reads small and 100 KB values.
	for i := 0; i < 200 && res.otherErr == ""; i++ {
		size := 100
		if i%10 == 0 {
			size = 100 << 10
		}
		k := fmt.Sprint("other:", i)
		v := value(k, size)
		fmt.Fprintf(ctl.w, "set %s 0 0 %d\r\n%s\r\n", k, size, v)
		ctl.w.Flush()
		if l := ctl.line(t); l != "STORED" {
			res.otherErr = fmt.Sprintf("set of %d bytes: %q", size, l)
			break
		}
		fmt.Fprintf(ctl.w, "get %s\r\n", k)
		ctl.w.Flush()
		if l := ctl.line(t); l != fmt.Sprintf("VALUE %s 0 %d", k, size) {
			res.otherErr = fmt.Sprintf("get of a %d-byte value: %q", size, l)
			break
		}
		got := make([]byte, size+2)
		if _, err := io.ReadFull(ctl.r, got); err != nil || !bytes.Equal(got[:size], v) {
			res.otherErr = fmt.Sprintf("get of a %d-byte value: wrong data (%v)", size, err)
			break
		}
		if l := ctl.line(t); l != "END" {
			t.Fatalf("get %s: %q", k, l)
		}
		res.otherSets++
	}

	// The last bytes: each SET is answered, stored or Out of memory.
	for i, c := range conns {
		if _, err := c.Write(pkts[i][len(pkts[i])-1:]); err != nil {
			t.Fatalf("connection %d: last byte: %v", i, err)
		}
	}
	var stored []int
	for i, c := range conns {
		var h [24]byte
		if _, err := io.ReadFull(c, h[:]); err != nil {
			t.Fatalf("connection %d: no answer to its SET: %v", i, err)
		}
		body := make([]byte, binary.BigEndian.Uint32(h[8:]))
		if _, err := io.ReadFull(c, body); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		switch st := binary.BigEndian.Uint16(h[6:]); {
		case h[0] != 0x81 || h[1] != 0x01 || binary.BigEndian.Uint32(h[12:]) != uint32(i):
			t.Fatalf("connection %d: answer % x is not to its SET", i, h)
		case st == 0:
			stored = append(stored, i)
		case st == 0x82:
			res.noMemory++
		default:
			t.Fatalf("connection %d: status %#x %q, want stored or Out of memory", i, st, body)
		}
	}
	res.stored = len(stored)
	// What was stored is what was sent (unless evicted since).
	hits := 0
	for _, i := range stored {
		k := fmt.Sprint("held:", i)
		fmt.Fprintf(ctl.w, "get %s\r\n", k)
		ctl.w.Flush()
		l := ctl.line(t)
		if l == "END" {
			continue
		}
		if l != fmt.Sprintf("VALUE %s 7 %d", k, attackValue) {
			t.Fatalf("get %s: %q", k, l)
		}
		got := make([]byte, attackValue+2)
		if _, err := io.ReadFull(ctl.r, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[:attackValue], value(k, attackValue)) {
			t.Fatalf("get %s: the value differs from what was sent", k)
		}
		if l := ctl.line(t); l != "END" {
			t.Fatalf("get %s: %q", k, l)
		}
		hits++
	}
	t.Logf("%s -m %d, %d connections each holding %d KiB of a SET: VmRSS %.1f → %.1f MiB (+%.1f MiB); then %d stored (%d still there), %d Out of memory; another client's sets meanwhile: %d ok%s",
		n.Kind, attackMiB, attackConns, attackValue>>10, float64(res.rssIdle)/(1<<20), float64(res.rssHeld)/(1<<20),
		float64(res.rssHeld-res.rssIdle)/(1<<20), res.stored, hits, res.noMemory, res.otherSets, ifErr(res.otherErr))
	return res
}

func ifErr(s string) string {
	if s == "" {
		return ""
	}
	return ", then " + s
}
