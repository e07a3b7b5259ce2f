package server

import (
	"bufio"
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/sasl"
	"github.com/vbcache/vbcache/internal/stream"
	"github.com/vbcache/vbcache/internal/tlsconf"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// testPKI is one cluster's CA and the files of the certificates it
// issued, as vbcache ctl init-security lays them out.
type testPKI struct {
	ca  *tlsconf.CA
	dir string
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	ca, err := tlsconf.NewCA("test cluster CA", time.Now().Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{ca: ca, dir: t.TempDir()}
	if err := os.WriteFile(p.path("ca.pem"), ca.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *testPKI) path(name string) string { return filepath.Join(p.dir, name) }

// issue writes name.pem and name-key.pem for l and returns their paths.
func (p *testPKI) issue(t *testing.T, name string, l tlsconf.Leaf) (cert, key string) {
	t.Helper()
	if l.NotAfter.IsZero() {
		l.NotAfter = time.Now().Add(time.Hour)
	}
	c, k, err := p.ca.Issue(l)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = p.path(name+".pem"), p.path(name+"-key.pem")
	if err := os.WriteFile(cert, c, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, k, 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// client is a TLS configuration presenting the certificate in name.pem
// (none for ""), trusting p's CA.
func (p *testPKI) client(t *testing.T, name string) *tls.Config {
	t.Helper()
	var cert, key string
	if name != "" {
		cert, key = p.path(name+".pem"), p.path(name+"-key.pem")
	}
	cfg, err := tlsconf.LoadClient(p.path("ca.pem"), cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// tlsNode sets c up as `-Z -o ssl_chain_cert=node.pem,ssl_key=...,
// ssl_ca_cert=ca.pem,ssl_verify_mode=1` in cluster mode, as cmdline
// does, and returns the reloader (refresh_certs).
func (p *testPKI) tlsNode(t *testing.T, c *Config, node string) *tlsconf.Reloader {
	t.Helper()
	r, err := tlsconf.New(tlsconf.Options{
		ChainCert: p.path(node + ".pem"), Key: p.path(node + "-key.pem"),
		CACert: p.path("ca.pem"), VerifyMode: tlsconf.VerifyRequest,
	})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := r.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	c.TLS, c.TLSReload, c.PeerTLS = r.Config(), r.Reload, pc
	return r
}

func nodeLeaf() tlsconf.Leaf {
	return tlsconf.Leaf{Name: "vbcache node", Hosts: []string{"127.0.0.1"}, Server: true, Client: true}
}

// dialBinTLS is dialBin over TLS with cfg; the handshake's error is
// returned rather than failing the test.
func dialBinTLS(t *testing.T, addr string, cfg *tls.Config) (*binClient, error) {
	t.Helper()
	d := &tls.Dialer{Config: cfg}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	b := &binClient{t: t, nc: nc, r: bufio.NewReader(nc)}
	// A server refusing the client's certificate says so after the
	// client's side of the handshake ended: the first exchange fails.
	if _, err := b.nc.Write(protocol.AppendRequest(nil, &protocol.Request{Header: protocol.Header{Opcode: protocol.OpNoop}})); err != nil {
		return nil, err
	}
	var hdr [protocol.HeaderLen]byte
	if _, err := b.r.Read(hdr[:1]); err != nil {
		return nil, err
	}
	if _, err := b.r.Read(hdr[1:]); err != nil {
		return nil, err
	}
	return b, nil
}

// On a TLS node that asks for client certificates, a certificate from the
// cluster's CA naming the administrator gives the admin role without
// SASL; a certificate naming anyone else, or none, gives nothing; a
// certificate from another CA or out of date fails the handshake, and
// ssl_handshake_errors counts it. A SCRAM login still works over TLS,
// and so does PLAIN, since the password is encrypted there.
func TestTLSClientCertificateAdmin(t *testing.T) {
	p := newTestPKI(t)
	p.issue(t, "node", nodeLeaf())
	p.issue(t, "admin", tlsconf.Leaf{Name: "admin", Client: true})
	p.issue(t, "reader", tlsconf.Leaf{Name: "reader", Client: true})
	p.issue(t, "expired", tlsconf.Leaf{Name: "admin", Client: true,
		NotBefore: time.Now().Add(-3 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	q := newTestPKI(t)
	q.issue(t, "admin", tlsconf.Leaf{Name: "admin", Client: true})

	s, addr := startCluster(t, func(c *Config) {
		c.ClusterAuth = testAdmin
		p.tlsNode(t, c, "node")
	})
	getVB := func(b *binClient) protocol.Status {
		h, _ := b.do(protocol.OpGetVBucket, 2, nil, nil, nil)
		return h.Status
	}
	for _, tc := range []struct {
		name string
		cfg  *tls.Config
		want protocol.Status
	}{
		{"the admin's certificate", p.client(t, "admin"), protocol.StatusOK},
		{"another user's certificate", p.client(t, "reader"), protocol.StatusAuthError},
		{"no certificate", p.client(t, ""), protocol.StatusAuthError},
	} {
		b, err := dialBinTLS(t, addr, tc.cfg)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := getVB(b); got != tc.want {
			t.Errorf("GET_VBUCKET with %s: %#x, want %#x", tc.name, uint16(got), uint16(tc.want))
		}
	}

	// The certificate's role outlives a failed SASL exchange on the
	// same connection, which forgets only what SASL gave.
	b, _ := dialBinTLS(t, addr, p.client(t, "admin"))
	if h, _ := b.do(protocol.OpSASLAuth, 0, nil, []byte("PLAIN"), []byte("\x00admin\x00wrong")); h.Status != protocol.StatusAuthError {
		t.Fatalf("PLAIN with a wrong password: %#x", uint16(h.Status))
	}
	if got := getVB(b); got != protocol.StatusOK {
		t.Errorf("GET_VBUCKET with the admin's certificate after a failed login: %#x", uint16(got))
	}

	// Logins over TLS without a certificate: SCRAM, and PLAIN.
	b, _ = dialBinTLS(t, addr, p.client(t, ""))
	if err := admin.Login(b.nc, testAdmin.User, testAdmin.Password); err != nil {
		t.Fatalf("SCRAM over TLS: %v", err)
	}
	if got := getVB(b); got != protocol.StatusOK {
		t.Errorf("GET_VBUCKET after SCRAM over TLS: %#x", uint16(got))
	}
	b, _ = dialBinTLS(t, addr, p.client(t, ""))
	if h, body := b.do(protocol.OpSASLAuth, 0, nil, []byte("PLAIN"), []byte("\x00admin\x00"+testAdmin.Password)); h.Status != protocol.StatusOK {
		t.Fatalf("PLAIN over TLS: %#x %q", uint16(h.Status), body)
	}
	if got := getVB(b); got != protocol.StatusOK {
		t.Errorf("GET_VBUCKET after PLAIN over TLS: %#x", uint16(got))
	}

	for _, tc := range []struct {
		name string
		cfg  *tls.Config
	}{
		{"a certificate from another CA", func() *tls.Config {
			c := q.client(t, "admin")
			c.RootCAs = p.client(t, "").RootCAs // it trusts the node; the node does not trust it
			return c
		}()},
		{"an expired certificate", p.client(t, "expired")},
	} {
		if _, err := dialBinTLS(t, addr, tc.cfg); err == nil {
			t.Errorf("%s: the node served the connection", tc.name)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.tlsHandshakeErrors.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("ssl_handshake_errors %d, want 2", s.tlsHandshakeErrors.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Over plain TCP the administrator logs in with SCRAM only: PLAIN would
// have sent the cluster's password in clear, and is refused even when
// the password is right. A data user may still use PLAIN (-S).
func TestPlainAdminLoginNeedsTLS(t *testing.T) {
	_, addr := startCluster(t, func(c *Config) {
		c.ClusterAuth = testAdmin
		c.SASL, c.SASLPasswords = true, &sasl.Passwords{Current: map[string]string{"reader": "r"}}
	})
	b := dialBin(t, addr)
	if h, _ := b.do(protocol.OpSASLAuth, 0, nil, []byte("PLAIN"), []byte("\x00admin\x00"+testAdmin.Password)); h.Status != protocol.StatusAuthError {
		t.Fatalf("the admin's PLAIN login over TCP: %#x, want auth error", uint16(h.Status))
	}
	if h, _ := b.do(protocol.OpSASLAuth, 0, nil, []byte("PLAIN"), []byte("\x00reader\x00r")); h.Status != protocol.StatusOK {
		t.Fatalf("a data user's PLAIN login: %#x", uint16(h.Status))
	}
	if err := admin.Login(b.nc, testAdmin.User, testAdmin.Password); err != nil {
		t.Fatalf("SCRAM over TCP: %v", err)
	}
	if h, _ := b.do(protocol.OpGetVBucket, 2, nil, nil, nil); h.Status != protocol.StatusOK {
		t.Fatalf("GET_VBUCKET after SCRAM: %#x", uint16(h.Status))
	}
}

// Nodes with -Z stream from each other over TLS, each presenting its
// certificate and checking the other's against the cluster's CA: a
// replica streams from a peer of its own CA, keeps streaming across a
// refresh_certs that gives the source a new certificate, and does not
// stream from a node whose certificate another CA issued.
func TestPeersOverTLS(t *testing.T) {
	p := newTestPKI(t)
	p.issue(t, "node", nodeLeaf())
	q := newTestPKI(t)
	q.issue(t, "node", nodeLeaf())
	adminCfg := func(pk *testPKI) *tls.Config {
		c := pk.client(t, "node")
		return c
	}
	waitReplica := func(b *binClient, key, want string) bool {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			h, body := b.do(protocol.OpGetReplica, 1, nil, []byte(key), nil)
			if h.Status == protocol.StatusOK && string(body[h.ExtLen:]) == want {
				return true
			}
			time.Sleep(20 * time.Millisecond)
		}
		return false
	}
	for _, tc := range []struct {
		name    string
		target  *testPKI
		streams bool
	}{{"same CA", p, true}, {"another CA", q, false}} {
		t.Run(tc.name, func(t *testing.T) {
			var srcReload *tlsconf.Reloader
			srcSrv, src := startCluster(t, func(c *Config) {
				c.ClusterAuth = testAdmin
				srcReload = p.tlsNode(t, c, "node")
			})
			_, dst := startCluster(t, func(c *Config) {
				c.ClusterAuth = testAdmin
				tc.target.tlsNode(t, c, "node")
			})
			a, err := dialBinTLS(t, src, adminCfg(p))
			if err != nil {
				t.Fatal(err)
			}
			if err := admin.Login(a.nc, testAdmin.User, testAdmin.Password); err != nil {
				t.Fatal(err)
			}
			b, err := dialBinTLS(t, dst, adminCfg(tc.target))
			if err != nil {
				t.Fatal(err)
			}
			if err := admin.Login(b.nc, testAdmin.User, testAdmin.Password); err != nil {
				t.Fatal(err)
			}
			a.setState(1, vbucket.Active)
			key := keyFor(t, 1)
			a.set(1, key, "first")
			b.setState(1, vbucket.Replica)
			errsBefore := srcSrv.tlsHandshakeErrors.Load()
			if h, body := b.do(stream.OpReplicate, 1, nil, []byte(src), nil); h.Status != protocol.StatusOK {
				t.Fatalf("REPLICATE: %#x %q", uint16(h.Status), body)
			}
			if !tc.streams {
				deadline := time.Now().Add(10 * time.Second)
				for srcSrv.tlsHandshakeErrors.Load() == errsBefore {
					if time.Now().After(deadline) {
						t.Fatal("the source saw no failed handshake in 10 s")
					}
					time.Sleep(20 * time.Millisecond)
				}
				if h, _ := b.do(protocol.OpGetReplica, 1, nil, []byte(key), nil); h.Status == protocol.StatusOK {
					t.Fatal("the replica streamed from a node another CA certified")
				}
				return
			}
			if !waitReplica(b, key, "first") {
				t.Fatal("the replica did not stream over TLS in 10 s")
			}
			// Rotate the source's certificate: the open stream goes on,
			// and new connections get the new certificate.
			old := srcReload.Certificate().Leaf.SerialNumber
			p.issue(t, "node", nodeLeaf())
			if err := srcReload.Reload(); err != nil {
				t.Fatal(err)
			}
			a.set(1, key, "after the rotation")
			if !waitReplica(b, key, "after the rotation") {
				t.Fatal("the stream did not carry a write made after refresh_certs")
			}
			c, err := dialBinTLS(t, src, adminCfg(p))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.nc.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(old) == 0 {
				t.Error("a connection after refresh_certs got the old certificate")
			}
		})
	}
}
