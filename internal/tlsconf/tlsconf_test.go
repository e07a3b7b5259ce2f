package tlsconf

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pki is a throw-away CA with a server and a client certificate, all
// written as PEM files into a test's temporary directory.
type pki struct {
	dir        string
	caCert     *x509.Certificate
	caKey      crypto.Signer
	caFile     string
	serverCert string // chain file
	serverKey  string
	clientCert tls.Certificate
	roots      *x509.CertPool // for clients: trusts the CA
}

var serial int64

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// issue signs a certificate for key; parent nil makes it self-signed.
func issue(t testing.TB, tmpl *x509.Certificate, key crypto.Signer, parent *x509.Certificate, parentKey crypto.Signer) *x509.Certificate {
	t.Helper()
	serial++
	tmpl.SerialNumber = big.NewInt(serial)
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newCA(t testing.TB, name string) (*x509.Certificate, crypto.Signer) {
	key := newKey(t)
	c := issue(t, &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}, key, nil, nil)
	return c, key
}

func serverTemplate(cn string) *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
}

func clientCert(t testing.TB, caCert *x509.Certificate, caKey crypto.Signer, cn string) tls.Certificate {
	key := newKey(t)
	c := issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, key, caCert, caKey)
	return tls.Certificate{Certificate: [][]byte{c.Raw}, PrivateKey: key, Leaf: c}
}

func pemCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func pemPKCS8(t testing.TB, key crypto.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func writeFile(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeServer issues a server certificate with common name cn and writes
// chain and key to chain.pem and key.pem.
func (p *pki) writeServer(t testing.TB, cn string) {
	key := newKey(t)
	c := issue(t, serverTemplate(cn), key, p.caCert, p.caKey)
	p.serverCert = writeFile(t, p.dir, "chain.pem", pemCert(c))
	p.serverKey = writeFile(t, p.dir, "key.pem", pemPKCS8(t, key))
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir()}
	p.caCert, p.caKey = newCA(t, "test CA")
	p.caFile = writeFile(t, p.dir, "ca.pem", pemCert(p.caCert))
	p.writeServer(t, "server-a")
	p.clientCert = clientCert(t, p.caCert, p.caKey, "client")
	p.roots = x509.NewCertPool()
	p.roots.AddCert(p.caCert)
	return p
}

func (p *pki) options() Options {
	return Options{ChainCert: p.serverCert, Key: p.serverKey, CACert: p.caFile}
}

// result is one handshake seen from both ends.
type result struct {
	serverErr, clientErr error
	peerCN               string // server certificate's common name, as the client saw it
	clientCerts          int    // client certificates the server saw
	version              uint16
	suite                uint16
}

// handshake connects a client to a server over loopback. The server says
// "ok" after its handshake, so a rejection that TLS 1.3 reports only
// after the client's handshake shows up as clientErr as well.
func handshake(t *testing.T, server, client *tls.Config) result {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type srvResult struct {
		err   error
		certs int
	}
	done := make(chan srvResult, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- srvResult{err: err}
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		tc := tls.Server(c, server)
		if err := tc.Handshake(); err != nil {
			done <- srvResult{err: err}
			return
		}
		_, err = tc.Write([]byte("ok"))
		done <- srvResult{err: err, certs: len(tc.ConnectionState().PeerCertificates)}
	}()

	var r result
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	client = client.Clone()
	client.ServerName = "localhost"
	tc := tls.Client(c, client)
	if r.clientErr = tc.Handshake(); r.clientErr == nil {
		st := tc.ConnectionState()
		r.peerCN = st.PeerCertificates[0].Subject.CommonName
		r.version, r.suite = st.Version, st.CipherSuite
		buf := make([]byte, 2)
		if _, err := io.ReadFull(tc, buf); err != nil {
			r.clientErr = err
		}
	}
	s := <-done
	r.serverErr, r.clientCerts = s.err, s.certs
	return r
}

func TestVerifyModes(t *testing.T) {
	p := newPKI(t)
	otherCA, otherKey := newCA(t, "other CA")
	stranger := clientCert(t, otherCA, otherKey, "stranger")

	tests := []struct {
		mode      VerifyMode
		cert      *tls.Certificate
		ok        bool
		seenCerts int
	}{
		{VerifyNone, nil, true, 0},
		{VerifyNone, &p.clientCert, true, 0}, // not asked for, so not sent
		{VerifyRequest, nil, true, 0},
		{VerifyRequest, &p.clientCert, true, 1},
		{VerifyRequest, &stranger, false, 0},
		{VerifyRequire, nil, false, 0},
		{VerifyRequire, &p.clientCert, true, 1},
		{VerifyRequire, &stranger, false, 0},
		{VerifyOnce, nil, false, 0},
		{VerifyOnce, &p.clientCert, true, 1},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("mode %d", tt.mode)
		if tt.cert != nil {
			name += " with " + tt.cert.Leaf.Subject.CommonName
		}
		t.Run(name, func(t *testing.T) {
			o := p.options()
			o.VerifyMode = tt.mode
			cfg, err := Build(o)
			if err != nil {
				t.Fatal(err)
			}
			client := &tls.Config{RootCAs: p.roots}
			if tt.cert != nil {
				// Send it whatever CAs the server names, so that
				// the server's verification is what is tested.
				client.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
					return tt.cert, nil
				}
			}
			r := handshake(t, cfg, client)
			if tt.ok {
				if r.serverErr != nil || r.clientErr != nil {
					t.Fatalf("server %v, client %v", r.serverErr, r.clientErr)
				}
				if r.peerCN != "server-a" || r.clientCerts != tt.seenCerts {
					t.Errorf("peer %q, client certs %d", r.peerCN, r.clientCerts)
				}
			} else if r.serverErr == nil || r.clientErr == nil {
				t.Fatalf("handshake succeeded: server %v, client %v", r.serverErr, r.clientErr)
			}
		})
	}
}

func TestClientAuthMapping(t *testing.T) {
	for mode, want := range map[VerifyMode]tls.ClientAuthType{
		VerifyNone:    tls.NoClientCert,
		VerifyRequest: tls.VerifyClientCertIfGiven,
		VerifyRequire: tls.RequireAndVerifyClientCert,
		VerifyOnce:    tls.RequireAndVerifyClientCert,
	} {
		if got := mode.ClientAuth(); got != want {
			t.Errorf("mode %d: %v, want %v", mode, got, want)
		}
	}
}

func TestVerifyWithoutCA(t *testing.T) {
	p := newPKI(t)
	var warnings []string
	o := p.options()
	o.CACert = ""
	o.VerifyMode = VerifyRequest
	o.Warnf = func(f string, a ...any) { warnings = append(warnings, fmt.Sprintf(f, a...)) }
	cfg, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "without ssl_ca_cert") {
		t.Errorf("warnings %q", warnings)
	}
	// As with OpenSSL in memcached: no CA, so a client certificate
	// cannot be verified, but clients without one get in.
	if r := handshake(t, cfg, &tls.Config{RootCAs: p.roots}); r.serverErr != nil || r.clientErr != nil {
		t.Errorf("without a client cert: server %v, client %v", r.serverErr, r.clientErr)
	}
	r := handshake(t, cfg, &tls.Config{RootCAs: p.roots, Certificates: []tls.Certificate{p.clientCert}})
	if r.serverErr == nil {
		t.Errorf("client cert accepted without a CA")
	}
}

func TestMinVersion(t *testing.T) {
	p := newPKI(t)
	tests := []struct {
		min, clientMin, clientMax uint16
		ok                        bool
		want                      uint16
	}{
		{0, 0, 0, true, tls.VersionTLS13},
		{0, tls.VersionTLS11, tls.VersionTLS11, false, 0}, // default is TLS 1.2
		{0, 0, tls.VersionTLS12, true, tls.VersionTLS12},
		{tls.VersionTLS13, 0, tls.VersionTLS12, false, 0},
		{tls.VersionTLS13, 0, 0, true, tls.VersionTLS13},
		{tls.VersionTLS10, tls.VersionTLS10, tls.VersionTLS10, true, tls.VersionTLS10},
		{tls.VersionTLS11, tls.VersionTLS10, tls.VersionTLS10, false, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("server %x client %x-%x", tt.min, tt.clientMin, tt.clientMax), func(t *testing.T) {
			o := p.options()
			o.MinVersion = tt.min
			cfg, err := Build(o)
			if err != nil {
				t.Fatal(err)
			}
			r := handshake(t, cfg, &tls.Config{RootCAs: p.roots, MinVersion: tt.clientMin, MaxVersion: tt.clientMax})
			if !tt.ok {
				if r.serverErr == nil {
					t.Fatalf("handshake succeeded at %x", r.version)
				}
				return
			}
			if r.serverErr != nil || r.clientErr != nil {
				t.Fatalf("server %v, client %v", r.serverErr, r.clientErr)
			}
			if r.version != tt.want {
				t.Errorf("version %x, want %x", r.version, tt.want)
			}
		})
	}
	if _, err := Build(Options{ChainCert: p.serverCert, Key: p.serverKey, MinVersion: 0x0300}); err == nil ||
		err.Error() != "Invalid ssl_min_version. Use help to see valid options." {
		t.Errorf("SSL 3.0: %v", err)
	}
}

func TestReload(t *testing.T) {
	p := newPKI(t)
	r, err := New(p.options())
	if err != nil {
		t.Fatal(err)
	}
	client := &tls.Config{RootCAs: p.roots}
	if res := handshake(t, r.Config(), client); res.clientErr != nil || res.peerCN != "server-a" {
		t.Fatalf("before reload: %v %q", res.clientErr, res.peerCN)
	}
	p.writeServer(t, "server-b") // overwrites chain.pem and key.pem
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if res := handshake(t, r.Config(), client); res.clientErr != nil || res.peerCN != "server-b" {
		t.Fatalf("after reload: %v %q", res.clientErr, res.peerCN)
	}

	// A failed reload keeps serving the last good certificate.
	writeFile(t, p.dir, "key.pem", pemPKCS8(t, newKey(t)))
	err = r.Reload()
	if err == nil || err.Error() != "Error loading the key: "+p.serverKey+" : key values mismatch" {
		t.Fatalf("reload with a mismatched key: %v", err)
	}
	if cn := r.Certificate().Leaf.Subject.CommonName; cn != "server-b" {
		t.Errorf("serving %q after a failed reload", cn)
	}
	if res := handshake(t, r.Config(), client); res.clientErr != nil || res.peerCN != "server-b" {
		t.Fatalf("after failed reload: %v %q", res.clientErr, res.peerCN)
	}
}

func TestReloadClientCA(t *testing.T) {
	p := newPKI(t)
	o := p.options()
	o.VerifyMode = VerifyRequire
	r, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	newCACert, newCAKey := newCA(t, "new CA")
	newClient := clientCert(t, newCACert, newCAKey, "new client")
	client := &tls.Config{RootCAs: p.roots, Certificates: []tls.Certificate{newClient}}
	if res := handshake(t, r.Config(), client); res.serverErr == nil {
		t.Fatal("client of an unknown CA accepted")
	}
	writeFile(t, p.dir, "ca.pem", pemCert(newCACert))
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if res := handshake(t, r.Config(), client); res.serverErr != nil || res.clientErr != nil {
		t.Fatalf("after CA reload: server %v, client %v", res.serverErr, res.clientErr)
	}
}

func TestSessionCache(t *testing.T) {
	p := newPKI(t)
	for _, on := range []bool{false, true} {
		o := p.options()
		o.SessionCache = on
		cfg, err := Build(o)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.SessionTicketsDisabled == on {
			t.Errorf("ssl_session_cache %v: SessionTicketsDisabled %v", on, cfg.SessionTicketsDisabled)
		}
		if r := handshake(t, cfg, &tls.Config{RootCAs: p.roots}); r.clientErr != nil || r.serverErr != nil {
			t.Errorf("ssl_session_cache %v: server %v, client %v", on, r.serverErr, r.clientErr)
		}
	}
}

func TestKeyFormats(t *testing.T) {
	p := newPKI(t)
	ecKey := newKey(t)
	ecCert := issue(t, serverTemplate("ec"), ecKey, p.caCert, p.caKey)
	sec1, err := x509.MarshalECPrivateKey(ecKey)
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rsaCert := issue(t, serverTemplate("rsa"), rsaKey, p.caCert, p.caKey)

	combined := writeFile(t, p.dir, "combined.pem",
		append(append(pemCert(ecCert), pemCert(p.caCert)...),
			pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1})...))
	tests := []struct {
		name       string
		chain, key string
		cn         string
		chainLen   int
	}{
		{"SEC 1 key in the chain file, chain with CA", combined, "", "ec", 2},
		{"PKCS #1 RSA key", writeFile(t, p.dir, "rsa.pem", pemCert(rsaCert)),
			writeFile(t, p.dir, "rsa.key", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY",
				Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)})), "rsa", 1},
		{"PKCS #8 key", p.serverCert, p.serverKey, "server-a", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(Options{ChainCert: tt.chain, Key: tt.key, KeyFormat: KeyFormatPEM})
			if err != nil {
				t.Fatal(err)
			}
			if c := r.Certificate(); c.Leaf.Subject.CommonName != tt.cn || len(c.Certificate) != tt.chainLen {
				t.Errorf("got %q with %d certs", c.Leaf.Subject.CommonName, len(c.Certificate))
			}
			res := handshake(t, r.Config(), &tls.Config{RootCAs: p.roots})
			if res.clientErr != nil || res.peerCN != tt.cn {
				t.Errorf("handshake: %v %q", res.clientErr, res.peerCN)
			}
		})
	}
}

// TestBuildErrors pins the start-up messages, which follow memcached
// 1.6.18's (checked against Debian's /usr/bin/memcached); the reasons
// after the last " : " are Go's.
func TestBuildErrors(t *testing.T) {
	p := newPKI(t)
	dir := p.dir
	garbage := writeFile(t, dir, "garbage", []byte("user:pass\n"))
	otherKey := writeFile(t, dir, "other.key", pemPKCS8(t, newKey(t)))
	encrypted := writeFile(t, dir, "enc.key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY",
		Headers: map[string]string{"Proc-Type": "4,ENCRYPTED", "DEK-Info": "AES-128-CBC,00"}, Bytes: []byte{1}}))
	tests := []struct {
		name string
		o    Options
		msg  string
	}{
		{"nothing", Options{},
			"Error loading the certificate chain: (null) : no file given (-o ssl_chain_cert=<file>)"},
		{"missing chain", Options{ChainCert: "/nonexistent", Key: p.serverKey},
			"Error loading the certificate chain: /nonexistent : no such file or directory"},
		{"chain is a key", Options{ChainCert: p.serverKey, Key: p.serverKey},
			"Error loading the certificate chain: " + p.serverKey + " : no PEM certificate found"},
		{"no key", Options{ChainCert: p.serverCert},
			"Error loading the key: (null) : no PEM private key found"},
		{"missing key", Options{ChainCert: p.serverCert, Key: "/nonexistent"},
			"Error loading the key: /nonexistent : no such file or directory"},
		{"key is a cert", Options{ChainCert: p.serverCert, Key: p.serverCert},
			"Error loading the key: " + p.serverCert + " : no PEM private key found"},
		{"key mismatch", Options{ChainCert: p.serverCert, Key: otherKey},
			"Error loading the key: " + otherKey + " : key values mismatch"},
		{"encrypted key", Options{ChainCert: p.serverCert, Key: encrypted},
			"Error loading the key: " + encrypted + " : encrypted private keys are not supported"},
		{"DER key", Options{ChainCert: p.serverCert, Key: p.serverKey, KeyFormat: KeyFormatDER},
			"Error loading the key: " + p.serverKey + " : DER keys are not supported (ssl_keyformat=2); " +
				"convert the key to PEM, e.g. openssl pkey -inform DER -in key.der -out key.pem"},
		{"bad key format", Options{ChainCert: p.serverCert, Key: p.serverKey, KeyFormat: 3},
			"Error loading the key: " + p.serverKey + " : bad ssl filetype 3 (only 1, PEM, is supported)"},
		{"missing CA", Options{ChainCert: p.serverCert, Key: p.serverKey, CACert: "/nonexistent"},
			"Error loading the CA certificate: /nonexistent : no such file or directory"},
		{"CA without certs", Options{ChainCert: p.serverCert, Key: p.serverKey, CACert: garbage},
			"Error loading the CA certificate: " + garbage + " : no certificate or crl found"},
		{"key checked before CA", Options{ChainCert: p.serverCert, Key: otherKey, CACert: "/nonexistent"},
			"Error loading the key: " + otherKey + " : key values mismatch"},
		{"bad ciphers", Options{ChainCert: p.serverCert, Key: p.serverKey, Ciphers: "BOGUS"},
			"Error setting the provided cipher(s): BOGUS"},
		{"certificates checked before ciphers", Options{Ciphers: "BOGUS"},
			"Error loading the certificate chain: (null) : no file given (-o ssl_chain_cert=<file>)"},
		{"verify mode", Options{ChainCert: p.serverCert, Key: p.serverKey, VerifyMode: 4},
			"Invalid ssl_verify_mode. Use help to see valid options."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Build(tt.o)
			if err == nil {
				t.Fatalf("no error, want %q", tt.msg)
			}
			if err.Error() != tt.msg {
				t.Errorf("got  %q\nwant %q", err, tt.msg)
			}
		})
	}
	// The file error stays inspectable.
	_, err := Build(Options{ChainCert: "/nonexistent"})
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%v does not match os.ErrNotExist", err)
	}
}

func TestCiphers(t *testing.T) {
	tests := []struct {
		list     string
		want     []uint16
		warn     string // substring of the one warning expected, "" for none
		errorMsg string
	}{
		{"", nil, "", ""},
		{"ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384",
			[]uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}, "", ""},
		{"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 ECDHE-ECDSA-AES128-SHA",
			[]uint16{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA}, "", ""},
		{"HIGH:!aNULL:!MD5", nil, "using Go's default suites", ""},
		{"ECDHE+AESGCM:@STRENGTH", nil, "using Go's default suites", ""},
		{"ECDHE-RSA-AES128-GCM-SHA256:HIGH", nil, "using Go's default suites", ""},
		{"TLS_AES_128_GCM_SHA256", nil, "TLS 1.3 suites cannot be chosen", ""},
		{"DHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256",
			[]uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256}, "not available in Go, ignored: DHE-RSA-AES128-GCM-SHA256", ""},
		{"BOGUS:ECDHE-ECDSA-AES128-GCM-SHA256", []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}, "", ""},
		{"BOGUS", nil, "", "Error setting the provided cipher(s): BOGUS"},
		{"DHE-RSA-AES128-GCM-SHA256", nil, "not available", "Error setting the provided cipher(s): DHE-RSA-AES128-GCM-SHA256"},
	}
	for _, tt := range tests {
		t.Run(tt.list, func(t *testing.T) {
			var warnings []string
			got, err := parseCiphers(tt.list, func(f string, a ...any) { warnings = append(warnings, fmt.Sprintf(f, a...)) })
			if tt.errorMsg != "" {
				if err == nil || err.Error() != tt.errorMsg {
					t.Fatalf("error %v, want %q", err, tt.errorMsg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("suites %x, want %x", got, tt.want)
			}
			if tt.warn == "" && len(warnings) > 0 || tt.warn != "" && (len(warnings) != 1 || !strings.Contains(warnings[0], tt.warn)) {
				t.Errorf("warnings %q, want one containing %q", warnings, tt.warn)
			}
		})
	}
}

// TestCipherHandshake checks that an ssl_ciphers list is what TLS 1.2
// clients get.
func TestCipherHandshake(t *testing.T) {
	p := newPKI(t)
	o := p.options()
	o.Ciphers = "ECDHE-ECDSA-AES256-GCM-SHA384"
	cfg, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	r := handshake(t, cfg, &tls.Config{RootCAs: p.roots, MaxVersion: tls.VersionTLS12})
	if r.clientErr != nil || r.suite != tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 {
		t.Fatalf("%v, suite %s", r.clientErr, tls.CipherSuiteName(r.suite))
	}
	r = handshake(t, cfg, &tls.Config{RootCAs: p.roots, MaxVersion: tls.VersionTLS12,
		CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}})
	if r.serverErr == nil {
		t.Fatalf("client without the configured suite got in with %s", tls.CipherSuiteName(r.suite))
	}
}
