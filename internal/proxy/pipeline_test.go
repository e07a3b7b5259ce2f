package proxy

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

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
				if norm(got) != norm(want) {
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
