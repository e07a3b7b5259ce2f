package server

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/sasl"
)

// limitConn dials addr from the loopback address local and sends a binary
// VERSION; admitted reports whether it was answered (false: refused with
// memcached's "ERROR Too many open connections" and closed). The
// connection stays open until the test ends or close is called.
type limitConn struct {
	nc       net.Conn
	r        *bufio.Reader
	admitted bool
}

func dialLimit(t *testing.T, addr, local string) *limitConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 10 * time.Second}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(protocol.AppendRequest(nil, &protocol.Request{Header: protocol.Header{Opcode: protocol.OpVersion}})); err != nil {
		// A refused connection may be closed before the write.
		return &limitConn{nc: nc}
	}
	c := &limitConn{nc: nc, r: bufio.NewReader(nc)}
	b, err := c.r.Peek(1)
	switch {
	case err == nil && b[0] == protocol.MagicResponse:
		hb := make([]byte, protocol.HeaderLen)
		if _, err := io.ReadFull(c.r, hb); err != nil {
			t.Fatal(err)
		}
		var h protocol.Header
		protocol.ParseHeader(hb, &h)
		c.r.Discard(int(h.BodyLen))
		c.admitted = true
	case err == nil:
		line, _ := c.r.ReadString('\n')
		if line != "ERROR Too many open connections\r\n" {
			t.Fatalf("a refused connection was told %q", line)
		}
	}
	return c
}

// waitAdmitted dials until a connection from local is admitted: the node
// frees a closed connection's slot when it notices the close.
func waitAdmitted(t *testing.T, addr, local string) *limitConn {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := dialLimit(t, addr, local)
		if c.admitted {
			return c
		}
		c.nc.Close()
		if time.Now().After(deadline) {
			t.Fatalf("no connection from %s admitted within 10 s", local)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMaxConnsPerIP: -o max_conns_per_ip=2 refuses a third connection
// from one address, not one from another address, and admits again once
// one of the two closes.
func TestMaxConnsPerIP(t *testing.T) {
	_, addr := startServer(t, func(c *Config) {
		c.Listen = []string{"127.0.0.1"}
		c.MaxConnsPerIP = 2
	})
	a1, a2 := dialLimit(t, addr, "127.0.0.1"), dialLimit(t, addr, "127.0.0.1")
	if !a1.admitted || !a2.admitted {
		t.Fatalf("the first two connections: admitted %v %v", a1.admitted, a2.admitted)
	}
	if c := dialLimit(t, addr, "127.0.0.1"); c.admitted {
		t.Fatal("a third connection from 127.0.0.1 was admitted")
	}
	if c := dialLimit(t, addr, "127.0.0.2"); !c.admitted {
		t.Fatal("a connection from 127.0.0.2 was refused")
	}
	a1.nc.Close()
	waitAdmitted(t, addr, "127.0.0.1")
	// The stats connection itself comes from 127.0.0.1, where two are
	// open: it is refused too. Ask from another address.
	st := statsOfFrom(t, addr, "127.0.0.3")
	if st["rejected_connections_per_ip"] == "0" || st["rejected_connections_per_ip"] == "" {
		t.Errorf("rejected_connections_per_ip is %q", st["rejected_connections_per_ip"])
	}
}

func statsOfFrom(t *testing.T, addr, local string) map[string]string {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 10 * time.Second}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	nc.Write([]byte("stats\r\n"))
	r := bufio.NewReader(nc)
	m := map[string]string{}
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("stats: %v", err)
		}
		if l == "END\r\n" {
			return m
		}
		if f := strings.Fields(l); len(f) == 3 && f[0] == "STAT" {
			m[f[1]] = f[2]
		}
	}
}

// TestMaxUnauthConns: with -S and -o max_unauth_conns=2, a third
// connection is refused while two are unauthenticated, and admitted once
// one of them authenticates; a connection that authenticated and then
// failed a new exchange counts again.
func TestMaxUnauthConns(t *testing.T) {
	_, addr := startServer(t, func(c *Config) {
		c.SASL = true
		c.SASLPasswords = &sasl.Passwords{Current: map[string]string{"testuser": "testpass"}}
		c.MaxUnauthConns = 2
	})
	u1, u2 := dialLimit(t, addr, "127.0.0.1"), dialLimit(t, addr, "127.0.0.1")
	if !u1.admitted || !u2.admitted {
		t.Fatalf("the first two connections: admitted %v %v", u1.admitted, u2.admitted)
	}
	if c := dialLimit(t, addr, "127.0.0.1"); c.admitted {
		t.Fatal("a third unauthenticated connection was admitted")
	}
	auth := func(c *limitConn, pass string) protocol.Status {
		t.Helper()
		c.nc.Write(protocol.AppendRequest(nil, &protocol.Request{Header: protocol.Header{Opcode: protocol.OpSASLAuth},
			Key: []byte("PLAIN"), Value: []byte("\x00testuser\x00" + pass)}))
		hb := make([]byte, protocol.HeaderLen)
		if _, err := io.ReadFull(c.r, hb); err != nil {
			t.Fatal(err)
		}
		var h protocol.Header
		protocol.ParseHeader(hb, &h)
		c.r.Discard(int(h.BodyLen))
		return h.Status
	}
	if st := auth(u1, "testpass"); st != protocol.StatusOK {
		t.Fatalf("auth: status 0x%04x", st)
	}
	u3 := dialLimit(t, addr, "127.0.0.1") // counted at once: no wait
	if !u3.admitted {
		t.Fatal("refused after one of the two authenticated")
	}
	if c := dialLimit(t, addr, "127.0.0.1"); c.admitted {
		t.Fatal("a third unauthenticated connection was admitted (u2, u3 open)")
	}
	// A failed exchange forgets u1's authentication: three would then be
	// unauthenticated. The limit admits new connections only, so u1
	// stays; u3 closing is not enough to admit another.
	if st := auth(u1, "wrong"); st == protocol.StatusOK {
		t.Fatal("a wrong password was taken")
	}
	u3.nc.Close()
	u2.nc.Close()
	waitAdmitted(t, addr, "127.0.0.1")
	if c := dialLimit(t, addr, "127.0.0.1"); c.admitted {
		t.Fatal("admitted a connection while u1 and another are unauthenticated")
	}
}

// TestUnauthTimeout: with -S and -o unauth_timeout, a connection that
// has not authenticated when the time is up is closed and counted in
// unauth_kicks, while one that authenticated in time stays open and
// answers; on the event loops and on a goroutine per connection (the
// path of TLS connections).
func TestUnauthTimeout(t *testing.T) {
	for _, loops := range []bool{true, false} {
		t.Run(map[bool]string{true: "loops", false: "goroutines"}[loops], func(t *testing.T) {
			s, addr := startServer(t, func(c *Config) {
				c.SASL = true
				c.SASLPasswords = &sasl.Passwords{Current: map[string]string{"testuser": "testpass"}}
				c.UnauthTimeout = 300 * time.Millisecond
				c.NoEventLoops = !loops
			})
			authed := dialLimit(t, addr, "127.0.0.1")
			authed.nc.Write(protocol.AppendRequest(nil, &protocol.Request{Header: protocol.Header{Opcode: protocol.OpSASLAuth},
				Key: []byte("PLAIN"), Value: []byte("\x00testuser\x00testpass")}))
			readStatus := func(c *limitConn) (protocol.Status, error) {
				hb := make([]byte, protocol.HeaderLen)
				if _, err := io.ReadFull(c.r, hb); err != nil {
					return 0, err
				}
				var h protocol.Header
				protocol.ParseHeader(hb, &h)
				c.r.Discard(int(h.BodyLen))
				return h.Status, nil
			}
			if st, err := readStatus(authed); err != nil || st != protocol.StatusOK {
				t.Fatalf("auth: 0x%04x %v", st, err)
			}
			idle := dialLimit(t, addr, "127.0.0.1") // answered (VERSION needs no login), never authenticated
			if !idle.admitted {
				t.Fatal("not admitted")
			}
			idle.nc.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := idle.r.ReadByte(); err == nil {
				t.Fatal("the unauthenticated connection got more than its answer")
			} else if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal("the unauthenticated connection stayed open 10 s past unauth_timeout")
			}
			if n := s.unauthKicks.Load(); n != 1 {
				t.Errorf("unauth_kicks %d, want 1", n)
			}
			// authed was accepted before idle, so its time is up too: it
			// still answers.
			authed.nc.SetDeadline(time.Now().Add(10 * time.Second))
			authed.nc.Write(protocol.AppendRequest(nil, &protocol.Request{Header: protocol.Header{Opcode: protocol.OpVersion}}))
			if st, err := readStatus(authed); err != nil || st != protocol.StatusOK {
				t.Errorf("the authenticated connection after the timeout: 0x%04x %v", st, err)
			}
		})
	}
}
