package compat

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/test/nodeproc"
)

// TestLeakyBinaryGetBigSets replays memcached's t/binary.t (1.6.18) "Leaky
// binary get test" against memcached and the target, each started as
// binary.t starts its server (-o no_modern, with the suite's default -m 64):
// 100 text sets of one 573,440-byte value under keys some_key_1..100, each
// followed by a binary GET of its key on a second connection. The value
// fits -I, so every set must be STORED on both: memcached keeps them all
// (no_modern sizes its pages to the chunk), and a node that fills its limit
// sooner must evict. The GETs mark every item fetched, which left vbcache's
// eviction search without a victim at the 65th set ("SERVER_ERROR out of
// memory storing object").
func TestLeakyBinaryGetBigSets(t *testing.T) {
	requireServers(t)
	flags := []string{"-m", "64", "-o", "no_modern"}
	big := "a big value that's > .5M and < 1M. "
	for len(big)*2 < 1<<20 {
		big += big
	}
	if len(big) != 573440 {
		t.Fatalf("value is %d bytes, binary.t's is 573440", len(big))
	}
	for _, kind := range []nodeproc.Kind{nodeproc.Memcached, target} {
		t.Run(string(kind), func(t *testing.T) {
			node := nodeproc.Start(t, kind, vbcacheBin, flags...)
			if bad := leakyBinaryGet(t, node, big, 100); len(bad) > 0 {
				t.Errorf("%s %s: %d of 100 sets not stored:\n%s", kind, strings.Join(flags, " "),
					len(bad), strings.Join(bad, "\n"))
			}
		})
	}
}

// leakyBinaryGet runs the sets and gets and returns a line for every set or
// get that did not succeed.
func leakyBinaryGet(t *testing.T, node *nodeproc.Node, val string, n int) []string {
	t.Helper()
	dial := func() net.Conn {
		c, err := net.DialTimeout("tcp", node.Addr, stepTimeout)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	text, bin := dial(), dial()
	tr, br := bufio.NewReader(text), bufio.NewReader(bin)
	var bad []string
	for i := 1; i <= n; i++ {
		key := fmt.Sprintf("some_key_%d", i)
		deadline := time.Now().Add(stepTimeout)
		text.SetDeadline(deadline)
		if _, err := fmt.Fprintf(text, "set %s 0 0 %d\r\n%s\r\n", key, len(val), val); err != nil {
			t.Fatalf("set %d: %v", i, err)
		}
		line, err := tr.ReadString('\n')
		if err != nil {
			t.Fatalf("set %d: %v (read %q)", i, err, line)
		}
		if line != "STORED\r\n" {
			bad = append(bad, fmt.Sprintf("  set %d (%s): %q", i, key, line))
		}

		// Binary GET (opcode 0x00), as binary.t's $mc->get.
		req := make([]byte, 24+len(key))
		req[0] = 0x80
		binary.BigEndian.PutUint16(req[2:], uint16(len(key)))
		binary.BigEndian.PutUint32(req[8:], uint32(len(key)))
		binary.BigEndian.PutUint32(req[12:], uint32(i))
		copy(req[24:], key)
		bin.SetDeadline(deadline)
		if _, err := bin.Write(req); err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
		var hdr [24]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
		body := make([]byte, binary.BigEndian.Uint32(hdr[8:]))
		if _, err := io.ReadFull(br, body); err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
		status, extlen := binary.BigEndian.Uint16(hdr[6:]), int(hdr[4])
		if line == "STORED\r\n" && (hdr[0] != 0x81 || status != 0 || extlen > len(body) ||
			!bytes.Equal(body[extlen:], []byte(val))) {
			bad = append(bad, fmt.Sprintf("  get %d (%s) after STORED: status 0x%04x, %d-byte body", i, key, status, len(body)))
		}
	}
	return bad
}
