package proxy

import (
	"context"
	"net"
	"testing"
)

// closedAddr returns a loopback address nothing listens on: upstream
// requests fail fast with a real dial error.
func closedAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

// FuzzProxyText feeds arbitrary bytes to what the proxy answers itself
// (local.go: text, meta and, by the first byte, binary), as the loops
// hand it requests (FuzzProxyFastPath fuzzes the loops). Properties: no
// panic, no request uses more bytes than there are, and processing ends.
func FuzzProxyText(f *testing.F) {
	for _, s := range []string{
		"get a b c\r\n", "gets a\r\n", "gat 10 a b\r\n", "set k 0 0 1\r\nx\r\n", "cas k 0 0 1 5\r\nx\r\n",
		"incr k 1\r\n", "delete k 0 noreply\r\n", "touch k 1\r\n", "mg k v f c k s O123 q\r\n",
		"ms k 2 T0 F3 MA\r\nhi\r\n", "md k q\r\n", "ma k D5 MD v\r\n", "mn\r\n", "stats\r\n",
		"flush_all 0\r\n", "verbosity 1\r\n", "version\r\nquit\r\n", "set k 0 0 -1\r\n",
		"\x80\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00k",
		"\x80\x0a\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
	} {
		f.Add([]byte(s))
	}
	cfg := &Config{Listen: "127.0.0.1:0", Servers: []string{closedAddr(f)}, Timeout: 50}
	if err := cfg.Check(); err != nil {
		f.Fatal(err)
	}
	p, err := New(context.Background(), cfg)
	if err != nil {
		f.Fatal(err)
	}
	defer p.Close()
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &conn{p: p, rbuf: append([]byte(nil), data...)}
		c.w = len(c.rbuf)
		// Each step uses at least a byte or stops, so this ends.
		for c.r < c.w || c.swallow > 0 {
			if c.swallow > 0 {
				n := min(c.swallow, c.w-c.r)
				c.r += n
				c.swallow -= n
				if c.r == c.w {
					return
				}
			}
			var used, more int
			if c.rbuf[c.r] == 0x80 {
				used, more = c.binaryPacket(c.rbuf[c.r:c.w])
			} else {
				used, more = c.textCommand(c.rbuf[c.r:c.w])
			}
			c.out = c.out[:0]
			if used < 0 || used > c.w-c.r {
				t.Fatalf("a request at %d used %d of the %d bytes left", c.r, used, c.w-c.r)
			}
			if c.close || used == 0 || more > 0 {
				return
			}
			c.r += used
		}
	})
}

// TestConfigTwemproxy: a twemproxy pool file parses, names map onto
// memcache's distributions, and unsupported hashes are refused.
func TestConfigTwemproxy(t *testing.T) {
	c, err := ParseConfig([]byte(`alpha:
  listen: 127.0.0.1:22121
  hash: fnv1a_64
  distribution: ketama
  servers:
   - 127.0.0.1:11211:1
`))
	if err == nil {
		t.Fatalf("fnv1a_64 with ketama accepted: %+v", c)
	}
	for _, tc := range []struct{ dist, hash, want string }{
		{"ketama", "md5", "ketama"}, {"", "", "ketama"}, {"modula", "crc32a", "modulo-crc32"},
		{"modula", "crc32", "modulo"}, {"modula", "one_at_a_time", "modulo-oaat"}, {"modulo-python", "", "modulo-python"},
	} {
		c, err := ParseConfig([]byte("listen: 127.0.0.1:1\nservers: [\"127.0.0.1:11211:2 name\"]\ndistribution: \"" +
			tc.dist + "\"\nhash: \"" + tc.hash + "\"\nauto_eject_hosts: true\nserver_retry_timeout: 100\nserver_failure_limit: 3\ntimeout: 400\nserver_connections: 4\n"))
		if err != nil {
			t.Fatalf("%s/%s: %v", tc.dist, tc.hash, err)
		}
		if got, _ := c.selectorName(); got != tc.want {
			t.Errorf("%s/%s → %s, want %s", tc.dist, tc.hash, got, tc.want)
		}
	}
	if _, err := ParseConfig([]byte("listen: x\nservers: [a:1]\nbogus: 1\n")); err == nil {
		t.Error("unknown key accepted")
	}
	c, err = ParseConfig([]byte("listen: 127.0.0.1:1\nmanager: http://127.0.0.1:2\n"))
	if err != nil || c.Cluster == nil || c.Cluster.Manager != "http://127.0.0.1:2" {
		t.Errorf("manager config: %+v %v", c, err)
	}
}
