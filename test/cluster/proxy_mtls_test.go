package cluster

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/tlsconf"
	"github.com/vbcache/vbcache/test/nodeproc"
)

// TestProxyClientCertificates: a proxy with --listen-tls-ca serves only
// clients whose certificate the CA signed: none, one from another CA and
// an expired one from the CA itself all fail the handshake (counted in
// ssl_handshake_errors). With --client-auth too, a certificate whose
// common name is a user of the file is that user's login (served at
// once, no SASL or token), while another name from the CA still has to
// log in.
func TestProxyClientCertificates(t *testing.T) {
	file, _ := initSecurity(t)
	node := nodeproc.Start(t, nodeproc.Vbcache, vbcacheBin)
	logins := filepath.Join(t.TempDir(), "clients.pwdb")
	if err := os.WriteFile(logins, []byte("app:app-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	px := startProxyProc(t, "--servers", node.Addr, "--listen-tls-cert", file("node.pem"), "--listen-tls-key", file("node-key.pem"),
		"--listen-tls-ca", file("ca.pem"), "--client-auth", logins)

	dir := t.TempDir()
	ca, err := tlsconf.LoadCA(file("ca.pem"), file("ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := tlsconf.NewCA("another CA", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	cert := func(from *tlsconf.CA, cn string, notAfter time.Time) []tls.Certificate {
		t.Helper()
		c, k, err := from.Issue(tlsconf.Leaf{Name: cn, Client: true, NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: notAfter})
		if err != nil {
			t.Fatal(err)
		}
		cp, kp := filepath.Join(dir, cn+".pem"), filepath.Join(dir, cn+"-key.pem")
		if err := os.WriteFile(cp, c, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(kp, k, 0o600); err != nil {
			t.Fatal(err)
		}
		pair, err := tls.LoadX509KeyPair(cp, kp)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{pair}
	}
	roots := x509.NewCertPool()
	pem, err := os.ReadFile(file("ca.pem"))
	if err != nil || !roots.AppendCertsFromPEM(pem) {
		t.Fatalf("ca.pem: %v", err)
	}
	// talk sends req over TLS with certs and returns the first reply
	// line, or the error that ended the exchange.
	talk := func(certs []tls.Certificate, req string) (string, error) {
		t.Helper()
		cfg := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}
		if certs != nil {
			// Sent whatever CAs the proxy names, as a client that
			// tries its luck would.
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &certs[0], nil }
		}
		nc, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", px.addr, cfg)
		if err != nil {
			return "", err
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(nc, req); err != nil {
			return "", err
		}
		line, err := bufio.NewReader(nc).ReadString('\n')
		return strings.TrimRight(line, "\r\n"), err
	}
	hour := time.Now().Add(time.Hour)
	handshakeErrors := func() int {
		t.Helper()
		nc, err := tls.Dial("tcp", px.addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", Certificates: cert(ca, "app", hour)})
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
				t.Fatalf("stats: no ssl_handshake_errors (%v)", err)
			}
			if v, ok := strings.CutPrefix(l, "STAT ssl_handshake_errors "); ok {
				n, err := strconv.Atoi(strings.TrimSpace(v))
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
	}
	before := handshakeErrors()
	for _, c := range []struct {
		name  string
		certs []tls.Certificate
	}{
		{"no certificate", nil},
		{"a certificate from another CA", cert(other, "app", hour)},
		{"an expired certificate from the CA", cert(ca, "app", time.Now().Add(-time.Hour))},
	} {
		if line, err := talk(c.certs, "version\r\n"); err == nil {
			t.Errorf("%s: served: %q", c.name, line)
		} else {
			t.Logf("%s: %v", c.name, err)
		}
	}
	if line, err := talk(cert(ca, "app", hour), "set k 0 0 1\r\nv\r\n"); err != nil || line != "STORED" {
		t.Errorf("app's certificate, no other login: %q %v, want STORED", line, err)
	}
	stranger := cert(ca, "stranger", hour)
	if line, err := talk(stranger, "get k\r\n"); err != nil || line != "CLIENT_ERROR unauthenticated" {
		t.Errorf("a certificate naming no user: %q %v, want CLIENT_ERROR unauthenticated", line, err)
	}
	if line, err := talk(stranger, "set x 0 0 14\r\napp app-secret\r\n"); err != nil || line != "STORED" {
		t.Errorf("a certificate naming no user, then the token: %q %v, want STORED", line, err)
	}
	if after := handshakeErrors(); after != before+3 {
		t.Errorf("ssl_handshake_errors went from %d to %d, want 3 more", before, after)
	}
}
