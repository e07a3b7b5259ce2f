package compat

import (
	"bufio"
	"io"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/test/nodeproc"
)

// TestWatchMutations: "watch mutations" on one connection streams an
// item_store line for every storage command made on another, stored or
// not, as Debian's memcached does: the same lines in the same order
// (set, add, replace, append, prepend, cas with every outcome, a meta
// set), once the timestamp, the sequence number and the client's
// descriptor are masked. A second watcher sees the same lines; a closed
// watcher is dropped (log_watchers).
func TestWatchMutations(t *testing.T) {
	requireServers(t)
	commands := "set foo 5 100 3\r\nbar\r\n" +
		"add foo 0 0 1\r\nx\r\n" +
		"add new 0 0 2\r\nab\r\n" +
		"replace nothere 0 0 1\r\nx\r\n" +
		"replace foo 7 0 4\r\nquux\r\n" +
		"append foo 0 0 2\r\n!!\r\n" +
		"prepend nothere 0 0 1\r\nx\r\n" +
		"cas foo 0 0 1 1\r\nz\r\n" +
		"cas nothere 0 0 1 1\r\nz\r\n" +
		"set big 0 3600 2000\r\n" + strings.Repeat("v", 2000) + "\r\n" +
		"set sp%ce 0 0 1\r\ny\r\n" +
		"ms meta 2 T60\r\nhi\r\n" +
		"quit\r\n"
	mask := regexp.MustCompile(`^ts=\d+\.\d+ gid=\d+ (.*) cfd=\d+ (.*)$`)
	run := func(kind nodeproc.Kind, bin string) []string {
		n := nodeproc.Start(t, kind, bin)
		watch := func() (net.Conn, *bufio.Reader) {
			w, err := net.Dial("tcp", n.Addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { w.Close() })
			w.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(w, "watch mutations\r\n")
			br := bufio.NewReader(w)
			if l, err := br.ReadString('\n'); err != nil || l != "OK\r\n" {
				t.Fatalf("%s: watch mutations: %q %v", kind, l, err)
			}
			return w, br
		}
		_, w1 := watch()
		_, w2 := watch()
		c, err := net.Dial("tcp", n.Addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, commands)
		io.ReadAll(c) // until quit closes it
		c.Close()
		read := func(br *bufio.Reader) []string {
			var lines []string
			for range 12 {
				l, err := br.ReadString('\n')
				if err != nil {
					t.Fatalf("%s: after %d lines: %v", kind, len(lines), err)
				}
				m := mask.FindStringSubmatch(strings.TrimSuffix(l, "\n"))
				if m == nil {
					t.Fatalf("%s: unexpected watcher line %q", kind, l)
				}
				lines = append(lines, m[1]+" "+m[2])
			}
			return lines
		}
		got := read(w1)
		if again := read(w2); strings.Join(again, "\n") != strings.Join(got, "\n") {
			t.Errorf("%s: the second watcher saw\n%s\nthe first\n%s", kind, strings.Join(again, "\n"), strings.Join(got, "\n"))
		}
		return got
	}
	want := run(nodeproc.Memcached, "")
	got := run(nodeproc.Vbcache, vbcacheBin)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("watch mutations:\n%s", diffLines(want, got, "memcached", "vbcache"))
	}
	t.Logf("memcached and vbcache:\n%s", strings.Join(want, "\n"))
}
