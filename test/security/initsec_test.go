package security

import (
	"bufio"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/tlsconf"
	"github.com/vbcache/vbcache/test/nodeproc"
)

// initSecurity runs "vbcache ctl init-security" into a new directory and
// returns it.
func initSecurity(t *testing.T, args ...string) string {
	t.Helper()
	if buildErr != nil {
		t.Fatalf("cannot build vbcache: %v", buildErr)
	}
	dir := filepath.Join(t.TempDir(), "sec")
	out, err := exec.Command(vbcacheBin, append([]string{"ctl", "init-security", "--dir", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("vbcache ctl init-security: %v\n%s", err, out)
	}
	t.Logf("vbcache ctl init-security --dir DIR:\n%s", out)
	return dir
}

// TestInitSecurityFiles: every file is there, 0600 in a 0700 directory,
// the certificates verify against the CA with the right uses, and a
// second run into the same directory changes nothing.
func TestInitSecurityFiles(t *testing.T) {
	dir := initSecurity(t, "--hosts", "127.0.0.1,node1.example")
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("the directory: %v, mode %v; want 0700", err, st.Mode().Perm())
	}
	names := []string{"ca.pem", "ca-key.pem", "node.pem", "node-key.pem", "admin.pem", "admin-key.pem", "admin.pwdb"}
	before := map[string][]byte{}
	for _, n := range names {
		p := filepath.Join(dir, n)
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", n, st.Mode().Perm())
		}
		before[n], _ = os.ReadFile(p)
	}
	ca, err := tlsconf.LoadCA(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	leaf := func(name string) *x509.Certificate {
		c, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		x, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	node, admin := leaf("node"), leaf("admin")
	for _, c := range []struct {
		cert  *x509.Certificate
		usage x509.ExtKeyUsage
		host  string
		ok    bool
	}{
		{node, x509.ExtKeyUsageServerAuth, "127.0.0.1", true},
		{node, x509.ExtKeyUsageServerAuth, "node1.example", true},
		{node, x509.ExtKeyUsageServerAuth, "node2.example", false},
		{node, x509.ExtKeyUsageClientAuth, "", true},
		{admin, x509.ExtKeyUsageClientAuth, "", true},
		{admin, x509.ExtKeyUsageServerAuth, "", false},
	} {
		_, err := c.cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: c.host, KeyUsages: []x509.ExtKeyUsage{c.usage}})
		if (err == nil) != c.ok {
			t.Errorf("%s as %v for %q: verify error %v, want ok=%v", c.cert.Subject.CommonName, c.usage, c.host, err, c.ok)
		}
	}
	if admin.Subject.CommonName != "admin" {
		t.Errorf("the admin certificate's CN is %q", admin.Subject.CommonName)
	}
	pw, _ := os.ReadFile(filepath.Join(dir, "admin.pwdb"))
	if user, pass, ok := strings.Cut(strings.TrimSuffix(string(pw), "\n"), ":"); !ok || user != "admin" || len(pass) < 32 || strings.Contains(pass, ":") {
		t.Errorf("admin.pwdb is %q, want admin:<at least 32 characters>", pw)
	}

	out, err := exec.Command(vbcacheBin, "ctl", "init-security", "--dir", dir).CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), "already exists") {
		t.Errorf("a second run: exit %d, %q; want 1 and \"already exists\"", code, out)
	}
	for _, n := range names {
		if b, _ := os.ReadFile(filepath.Join(dir, n)); string(b) != string(before[n]) {
			t.Errorf("a second run changed %s", n)
		}
	}
	if err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.Contains(strings.Join(names, " "), d.Name()) {
			t.Errorf("unexpected file %s", p)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestInitSecurityMutualTLS runs a node with the files init-security
// wrote, requiring client certificates (ssl_verify_mode=2): the admin's
// certificate is served; no certificate, a certificate from another CA
// and an expired certificate from the cluster's own CA are refused.
func TestInitSecurityMutualTLS(t *testing.T) {
	dir := initSecurity(t)
	p := func(n string) string { return filepath.Join(dir, n) }
	n := nodeproc.Start(t, nodeproc.Vbcache, vbcacheBin, "-Z", "-o",
		"ssl_chain_cert="+p("node.pem")+",ssl_key="+p("node-key.pem")+",ssl_ca_cert="+p("ca.pem")+",ssl_verify_mode=2")

	ca, err := tlsconf.LoadCA(p("ca.pem"), p("ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	pair := func(certPEM, keyPEM []byte, err error) []tls.Certificate {
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{c}
	}
	adminCert, err := tls.LoadX509KeyPair(p("admin.pem"), p("admin-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := tlsconf.NewCA("another CA", time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	foreign := pair(other.Issue(tlsconf.Leaf{Name: "admin", Client: true, NotAfter: time.Now().Add(time.Hour)}))
	expired := pair(ca.Issue(tlsconf.Leaf{Name: "admin", Client: true, NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}))

	// session sends a set and a get; with TLS 1.3 a refused certificate
	// shows as an error on the client's first read.
	session := func(certs []tls.Certificate) (string, error) {
		cfg := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1",
			// Send the certificate even when the server's list of
			// acceptable CAs does not name its issuer (crypto/tls
			// would otherwise send none).
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				if len(certs) == 0 {
					return &tls.Certificate{}, nil
				}
				return &certs[0], nil
			}}
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", n.Addr, cfg)
		if err != nil {
			return "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("set k 0 0 1\r\nv\r\nget k\r\n")); err != nil {
			return "", err
		}
		r := bufio.NewReader(c)
		var got []string
		for len(got) < 4 {
			line, err := r.ReadString('\n')
			if err != nil {
				return strings.Join(got, ""), err
			}
			got = append(got, line)
		}
		return strings.Join(got, ""), nil
	}
	if got, err := session([]tls.Certificate{adminCert}); err != nil || got != "STORED\r\nVALUE k 0 1\r\nv\r\nEND\r\n" {
		t.Fatalf("with the admin's certificate: %q, %v", got, err)
	}
	for name, certs := range map[string][]tls.Certificate{"no certificate": nil, "another CA's": foreign, "expired": expired} {
		if got, err := session(certs); err == nil || got != "" {
			t.Errorf("%s: answered %q (err %v); want the handshake refused", name, got, err)
		} else {
			t.Logf("%s: refused: %v", name, err)
		}
	}
}

// TestInitSecurityAdminPassword: a node reading admin.pwdb (-S,
// MEMCACHED_SASL_PWDB) takes the admin's password over SCRAM-SHA-256 and
// refuses another.
func TestInitSecurityAdminPassword(t *testing.T) {
	dir := initSecurity(t)
	b, err := os.ReadFile(filepath.Join(dir, "admin.pwdb"))
	if err != nil {
		t.Fatal(err)
	}
	_, pass, _ := strings.Cut(strings.TrimSpace(string(b)), ":")
	n := nodeproc.StartEnv(t, nodeproc.Vbcache, vbcacheBin, []string{"MEMCACHED_SASL_PWDB=" + filepath.Join(dir, "admin.pwdb")}, "-S", "-B", "binary")
	auth := func(pass string) uint16 {
		bc := dialBin(t, n.Addr)
		s := newScram(sha256.New, "admin", pass)
		st, v := bc.call(opSASLAuth, nil, []byte("SCRAM-SHA256"), s.first())
		if st != stAuthCont {
			t.Fatalf("auth: status 0x%04x %q, want continue", st, v)
		}
		fin, err := s.final(v)
		if err != nil {
			t.Fatal(err)
		}
		st, v = bc.call(opSASLStep, nil, []byte("SCRAM-SHA256"), fin)
		if st == stOK {
			if err := s.verify(v); err != nil {
				t.Error(err)
			}
			if st, v := bc.call(opSet, make([]byte, 8), []byte("k"), []byte("v")); st != stOK {
				t.Errorf("set as admin: 0x%04x %q", st, v)
			}
		}
		return st
	}
	if st := auth(pass); st != stOK {
		t.Errorf("the admin's password: status 0x%04x, want OK", st)
	}
	if st := auth(pass + "x"); st != stAuthError {
		t.Errorf("a wrong password: status 0x%04x, want 0x0020", st)
	}
}
