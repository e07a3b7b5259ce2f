package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/sasl"
	"github.com/vbcache/vbcache/internal/server"
	"github.com/vbcache/vbcache/internal/server/servertest"
)

// A proxy with Config.ClientAuth serves nothing before a login: text
// clients log in with memcached's token (-Y's set), binary ones with
// SASL PLAIN; before that, and after a wrong password, every request
// gets memcached's refusal and reaches no server. A login and requests
// sent in one write are served in order.
func TestClientLogin(t *testing.T) {
	node := servertest.Start(t, server.Config{Version: "test"})
	cfg, err := ParseConfig([]byte("listen: 127.0.0.1:0\nservers: [" + node + ":1]\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ClientAuth = &sasl.Passwords{Current: map[string]string{"app": "secret"}}
	p, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.Logf = nil
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln) // ends at p.Close
	t.Cleanup(func() { p.Close() })
	addr := ln.Addr().String()
	dial := func() (net.Conn, *bufio.Reader) {
		t.Helper()
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		return nc, bufio.NewReader(nc)
	}
	lines := func(r *bufio.Reader, n int) string {
		t.Helper()
		var out []string
		for range n {
			l, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("%v after %q", err, out)
			}
			out = append(out, strings.TrimRight(l, "\r\n"))
		}
		return strings.Join(out, "|")
	}

	nc, r := dial()
	io.WriteString(nc, "set k 0 0 1\r\nv\r\nget k\r\nset x 0 0 10\r\napp wrong!\r\n")
	if got := lines(r, 3); got != "CLIENT_ERROR authentication failure|CLIENT_ERROR unauthenticated|CLIENT_ERROR authentication failure" {
		t.Errorf("text before a login: %q", got)
	}
	io.WriteString(nc, "set x 0 0 10\r\napp secret\r\nset k 0 0 1\r\nv\r\nget k\r\n")
	if got := lines(r, 5); got != "STORED|STORED|VALUE k 0 1|v|END" {
		t.Errorf("text login then requests: %q", got)
	}

	bin := func(nc net.Conn, br *bufio.Reader, reqs ...*protocol.Request) []string {
		t.Helper()
		var b []byte
		for _, q := range reqs {
			b = protocol.AppendRequest(b, q)
		}
		nc.Write(b)
		var out []string
		for range reqs {
			hb := make([]byte, protocol.HeaderLen)
			if _, err := io.ReadFull(br, hb); err != nil {
				t.Fatal(err)
			}
			var h protocol.Header
			protocol.ParseHeader(hb, &h)
			body := make([]byte, h.BodyLen)
			io.ReadFull(br, body)
			out = append(out, h.Status.Text()+":"+string(body[int(h.ExtLen)+int(h.KeyLen):]))
		}
		return out
	}
	req := func(op protocol.Opcode, key, value string) *protocol.Request {
		q := &protocol.Request{Header: protocol.Header{Opcode: op}, Key: []byte(key), Value: []byte(value)}
		if op == protocol.OpSet {
			q.Extras = make([]byte, 8)
		}
		return q
	}
	nc, r = dial()
	got := bin(nc, r, req(protocol.OpGet, "k", ""), req(protocol.OpSASLList, "", ""),
		req(protocol.OpSASLAuth, "PLAIN", "\x00app\x00wrong"), req(protocol.OpSASLAuth, "SCRAM-SHA-256", "n,,n=app"),
		req(protocol.OpSASLAuth, "PLAIN", "\x00app\x00secret"), req(protocol.OpGet, "k", ""))
	want := []string{protocol.StatusAuthError.Text() + ":" + protocol.StatusAuthError.Text(), protocol.StatusOK.Text() + ":PLAIN",
		protocol.StatusAuthError.Text() + ":" + protocol.StatusAuthError.Text(), protocol.StatusAuthError.Text() + ":" + protocol.StatusAuthError.Text(),
		protocol.StatusOK.Text() + ":Authenticated", protocol.StatusOK.Text() + ":v"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("binary: %q, want %q", got, want)
	}
	if n, e := p.ctr.authCmds.Load(), p.ctr.authErrors.Load(); n != 6 || e != 4 {
		t.Errorf("auth_cmds %d auth_errors %d, want 6 and 4", n, e)
	}

	// A reload rotates the password: the next logins take the new one
	// (and, while the file has it on a second line, the old one); a
	// connection logged in before stays so.
	rot := *cfg
	rot.ClientAuth = &sasl.Passwords{Current: map[string]string{"app": "new secret"}, Previous: map[string]string{"app": "secret"}}
	if err := p.Reload(context.Background(), &rot); err != nil {
		t.Fatal(err)
	}
	for _, pw := range []string{"new secret", "secret"} {
		nc, r := dial()
		if got := bin(nc, r, req(protocol.OpSASLAuth, "PLAIN", "\x00app\x00"+pw)); got[0] != protocol.StatusOK.Text()+":Authenticated" {
			t.Errorf("during the rotation, %q: %q", pw, got)
		}
	}
	done := *cfg
	done.ClientAuth = &sasl.Passwords{Current: map[string]string{"app": "new secret"}}
	if err := p.Reload(context.Background(), &done); err != nil {
		t.Fatal(err)
	}
	nc2, r2 := dial()
	if got := bin(nc2, r2, req(protocol.OpSASLAuth, "PLAIN", "\x00app\x00secret")); got[0] != protocol.StatusAuthError.Text()+":"+protocol.StatusAuthError.Text() {
		t.Errorf("the old password after the rotation: %q", got)
	}
	if got := bin(nc, r, req(protocol.OpGet, "k", "")); got[0] != protocol.StatusOK.Text()+":v" {
		t.Errorf("a connection logged in before the rotation: %q", got)
	}
	// A reload cannot turn the logins off.
	off := *cfg
	off.ClientAuth = nil
	if err := p.Reload(context.Background(), &off); err != nil {
		t.Fatal(err)
	}
	nc3, r3 := dial()
	if got := bin(nc3, r3, req(protocol.OpGet, "k", "")); got[0] != protocol.StatusAuthError.Text()+":"+protocol.StatusAuthError.Text() {
		t.Errorf("after a reload without --client-auth, a request before a login: %q", got)
	}
}

// FuzzClientLogin feeds anything to a connection that has not logged in:
// no panic, every step uses bytes or stops, and the connection is logged
// in only by input that holds the password.
func FuzzClientLogin(f *testing.F) {
	for _, s := range []string{
		"set x 0 0 10\r\napp secret\r\nget k\r\n", "get k\r\n", "set x 0 0 99999999\r\n", "set x 0 0 3\r\nabcde",
		string(protocol.AppendRequest(nil, &protocol.Request{Header: protocol.Header{Opcode: protocol.OpSASLAuth}, Key: []byte("PLAIN"), Value: []byte("\x00app\x00secret")})),
		string(protocol.AppendRequest(nil, &protocol.Request{Header: protocol.Header{Opcode: protocol.OpSASLList}})),
		"\x80\x21\x00\x05\x00\x00\x00\x00\xff\xff\xff\xff",
	} {
		f.Add([]byte(s))
	}
	p := &Proxy{}
	logins := &sasl.Passwords{Current: map[string]string{"app": "secret"}}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		c := &conn{p: p, mode: 1}
		if data[0] == protocol.MagicRequest {
			c.mode = 2
		}
		for r := 0; r < len(data) && !c.authed && !c.close; {
			used, more := c.login(logins, data[r:])
			if used <= 0 {
				if more > len(data)-r || more == 0 {
					break // waits for input that will not come
				}
				t.Fatalf("needs %d bytes of the %d it has, and used none", more, len(data)-r)
			}
			r += used
		}
		if c.authed && !strings.Contains(string(data), "secret") {
			t.Fatalf("logged in by %q", data)
		}
	})
}
