package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/sasl"
	"github.com/vbcache/vbcache/internal/server"
	"github.com/vbcache/vbcache/internal/server/servertest"
	"github.com/vbcache/vbcache/internal/tlsconf"
)

// bridgePKI writes a CA and a server certificate for 127.0.0.1 into a
// new directory and returns the server's TLS configuration and a client
// configuration trusting the CA (other: one trusting another CA).
func bridgePKI(t *testing.T) (srv, cli, other *tls.Config) {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for i, name := range []string{"ca", "other"} {
		ca, err := tlsconf.NewCA(name, time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		caFile := write(name+".pem", ca.CertPEM())
		c, err := tlsconf.LoadClient(caFile, "", "")
		if err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			other = c
			break
		}
		cli = c
		cert, key, err := ca.Issue(tlsconf.Leaf{Name: "node", Hosts: []string{"127.0.0.1"}, Server: true, NotAfter: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if srv, err = tlsconf.Build(tlsconf.Options{ChainCert: write("node.pem", cert), Key: write("node-key.pem", key)}); err != nil {
			t.Fatal(err)
		}
	}
	return srv, cli, other
}

// A pool server reached through the bridge (Config.Upstream): over TLS,
// logged in over SASL for binary requests and with a text token (-Y) for
// text ones. A text client's requests and
// a binary client's go through, the second after the first connection
// closed; a proxy trusting another CA answers SERVER_ERROR naming the
// certificate, and one with a wrong password the node's auth error.
// Close ends the bridges' goroutines (the test's leak check is -race's
// and Close's return).
func TestBridgedUpstream(t *testing.T) {
	srvTLS, cliTLS, otherTLS := bridgePKI(t)
	node := servertest.Start(t, server.Config{Version: "test", TLS: srvTLS})
	saslNode := servertest.Start(t, server.Config{Version: "test", TLS: srvTLS, Protocol: server.ProtoBinary,
		SASL: true, SASLPasswords: &sasl.Passwords{Current: map[string]string{"app": "secret"}}})
	start := func(server string, cr *admin.Credentials) (*Proxy, string) {
		t.Helper()
		cfg, err := ParseConfig([]byte("listen: 127.0.0.1:0\ntimeout: 2000\nservers: [" + server + ":1]\n"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Upstream = cr
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
		return p, ln.Addr().String()
	}
	text := func(addr, req string, lines int) string {
		t.Helper()
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(nc, req)
		r := bufio.NewReader(nc)
		var out []string
		for range lines {
			l, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("%q: %v after %q", req, err, out)
			}
			out = append(out, strings.TrimRight(l, "\r\n"))
		}
		return strings.Join(out, "|")
	}
	binary := func(addr string, reqs ...*protocol.Request) []protocol.Header {
		t.Helper()
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		var b []byte
		for _, r := range reqs {
			b = protocol.AppendRequest(b, r)
		}
		nc.Write(b)
		var hs []protocol.Header
		for range reqs {
			var hb [protocol.HeaderLen]byte
			if _, err := io.ReadFull(nc, hb[:]); err != nil {
				t.Fatal(err)
			}
			var h protocol.Header
			protocol.ParseHeader(hb[:], &h)
			io.CopyN(io.Discard, nc, int64(h.BodyLen))
			hs = append(hs, h)
		}
		return hs
	}

	_, addr := start(node, &admin.Credentials{TLS: cliTLS})
	if got := text(addr, "set k 0 0 1\r\nv\r\nget k\r\n", 4); got != "STORED|VALUE k 0 1|v|END" {
		t.Errorf("text through a TLS bridge: %q", got)
	}
	if got := text(addr, "get k\r\n", 3); got != "VALUE k 0 1|v|END" {
		t.Errorf("text through a TLS bridge, second connection: %q", got)
	}

	_, addr = start(node, &admin.Credentials{TLS: otherTLS})
	if got := text(addr, "get k\r\n", 1); !strings.HasPrefix(got, "SERVER_ERROR") || !strings.Contains(got, "certificate") {
		t.Errorf("a bridge trusting another CA: %q, want SERVER_ERROR about the certificate", got)
	}

	// A text connection logs in with memcached's text token (-Y).
	tokenNode := servertest.Start(t, server.Config{Version: "test", TLS: srvTLS, Protocol: server.ProtoASCII,
		AuthTokens: &sasl.Passwords{Current: map[string]string{"app": "secret"}}})
	_, addr = start(tokenNode, &admin.Credentials{TLS: cliTLS, User: "app", Password: "secret"})
	if got := text(addr, "set t 0 0 1\r\nx\r\nget t\r\n", 4); got != "STORED|VALUE t 0 1|x|END" {
		t.Errorf("text through a bridge logged in with a token: %q", got)
	}
	_, addr = start(tokenNode, &admin.Credentials{TLS: cliTLS, User: "app", Password: "wrong"})
	if got := text(addr, "get t\r\n", 1); !strings.HasPrefix(got, "SERVER_ERROR") || !strings.Contains(got, "authentication failure") {
		t.Errorf("text through a bridge with a wrong token: %q", got)
	}

	set := &protocol.Request{Header: protocol.Header{Opcode: protocol.OpSet, Opaque: 1}, Extras: make([]byte, 8), Key: []byte("b"), Value: []byte("w")}
	get := &protocol.Request{Header: protocol.Header{Opcode: protocol.OpGet, Opaque: 2}, Key: []byte("b")}
	_, addr = start(saslNode, &admin.Credentials{TLS: cliTLS, User: "app", Password: "secret"})
	if hs := binary(addr, set, get); hs[0].Status != protocol.StatusOK || hs[1].Status != protocol.StatusOK {
		t.Errorf("binary through a logged-in TLS bridge: %+v", hs)
	}
	_, addr = start(saslNode, &admin.Credentials{TLS: cliTLS, User: "app", Password: "wrong"})
	if hs := binary(addr, get); hs[0].Status == protocol.StatusOK || hs[0].Status == protocol.StatusKeyNotFound {
		t.Errorf("binary through a bridge with a wrong password: %+v", hs)
	}
}
