package security

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/test/nodeproc"
)

// tlsFiles is a throwaway CA and a server certificate for 127.0.0.1 that
// it signed, as PEM files.
type tlsFiles struct{ ca, cert, key string }

func makeCerts(t *testing.T) tlsFiles {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "vbcache test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caTmpl, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	return tlsFiles{
		ca:   write("ca.pem", "CERTIFICATE", caDER),
		cert: write("server.pem", "CERTIFICATE", srvDER),
		key:  write("server.key", "PRIVATE KEY", keyDER),
	}
}

// eachTLSServer runs f against memcached -Z (if it was built with TLS) and
// vbcache -Z; vbcache is skipped while it does not start with -Z.
func eachTLSServer(t *testing.T, f func(t *testing.T, n *nodeproc.Node, c tlsFiles)) {
	certs := makeCerts(t)
	flags := []string{"-Z", "-o", "ssl_chain_cert=" + certs.cert + ",ssl_key=" + certs.key}
	t.Run("memcached", func(t *testing.T) {
		mc := nodeproc.Need(t, "the reference implementation (package memcached)", "memcached")
		help, _ := exec.Command(mc, "-h").CombinedOutput()
		if !bytes.Contains(help, []byte("--enable-ssl")) {
			t.Skip("this memcached is built without TLS (no --enable-ssl in memcached -h)")
		}
		f(t, nodeproc.Start(t, nodeproc.Memcached, "", flags...), certs)
	})
	t.Run("vbcache", func(t *testing.T) {
		if buildErr != nil {
			t.Fatalf("cannot build vbcache: %v", buildErr)
		}
		n, err := nodeproc.StartNoCleanup(nodeproc.Vbcache, vbcacheBin, flags...)
		if err != nil {
			// Not a missing tool: the feature is not there yet.
			t.Skipf("vbcache does not start with -Z yet: %v", err)
		}
		t.Cleanup(n.Stop)
		f(t, n, certs)
	})
}

// sClient sends input through `openssl s_client` (verifying the server
// against the test CA) and returns what the server sent back until it
// closed the connection.
func sClient(t *testing.T, addr string, certs tlsFiles, input []byte) []byte {
	t.Helper()
	openssl := nodeproc.Need(t, "TLS client checks (package openssl)", "openssl")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// -quiet implies -ign_eof: s_client keeps reading until the server
	// closes, which the input's final quit makes it do.
	cmd := exec.CommandContext(ctx, openssl, "s_client", "-connect", addr, "-CAfile", certs.ca,
		"-verify_return_error", "-verify_ip", "127.0.0.1", "-quiet")
	cmd.Stdin = bytes.NewReader(input)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil && out.Len() == 0 {
		t.Fatalf("openssl s_client: %v\n%s", err, errOut.String())
	}
	return out.Bytes()
}

func TestTLSOpensslText(t *testing.T) {
	eachTLSServer(t, func(t *testing.T, n *nodeproc.Node, certs tlsFiles) {
		// the final quit makes the server close, which ends s_client
		got := sClient(t, n.Addr, certs, []byte("set tk 5 0 5\r\nhello\r\nget tk\r\nversion\r\nquit\r\n"))
		want := "STORED\r\nVALUE tk 5 5\r\nhello\r\nEND\r\nVERSION "
		if !strings.HasPrefix(string(got), want) {
			t.Fatalf("over TLS: got %q, want prefix %q", got, want)
		}
	})
}

// binReq builds a binary request (magic 0x80, opcode, key length, extras
// length, body length; opaque and CAS 0).
func binReq(op byte, extras, key, value []byte) []byte {
	h := make([]byte, 24)
	h[0], h[1] = 0x80, op
	binary.BigEndian.PutUint16(h[2:], uint16(len(key)))
	h[4] = byte(len(extras))
	binary.BigEndian.PutUint32(h[8:], uint32(len(extras)+len(key)+len(value)))
	return append(append(append(h, extras...), key...), value...)
}

func TestTLSOpensslBinary(t *testing.T) {
	eachTLSServer(t, func(t *testing.T, n *nodeproc.Node, certs tlsFiles) {
		flags := []byte{0, 0, 0, 9, 0, 0, 0, 0} // flags 9, exptime 0
		var in []byte
		in = append(in, binReq(opSet, flags, []byte("bk"), []byte("binval"))...)
		in = append(in, binReq(opGet, nil, []byte("bk"), nil)...)
		in = append(in, binReq(0x0b, nil, nil, nil)...) // version
		in = append(in, binReq(0x07, nil, nil, nil)...) // quit
		got := sClient(t, n.Addr, certs, in)
		type resp struct {
			op     byte
			status uint16
			extras []byte
			value  []byte
		}
		var rs []resp
		for len(got) >= 24 && got[0] == 0x81 {
			bl := int(binary.BigEndian.Uint32(got[8:]))
			if len(got) < 24+bl {
				break
			}
			el, kl := int(got[4]), int(binary.BigEndian.Uint16(got[2:]))
			rs = append(rs, resp{got[1], binary.BigEndian.Uint16(got[6:]), got[24 : 24+el], got[24+el+kl : 24+bl]})
			got = got[24+bl:]
		}
		if len(rs) != 4 || len(got) != 0 {
			t.Fatalf("want 4 reply packets (set, get, version, quit), got %d (+%d stray bytes): %+v", len(rs), len(got), rs)
		}
		if rs[0].op != opSet || rs[0].status != 0 {
			t.Errorf("set: %+v", rs[0])
		}
		if rs[1].op != opGet || rs[1].status != 0 || string(rs[1].value) != "binval" || !bytes.Equal(rs[1].extras, flags[:4]) {
			t.Errorf("get: %+v", rs[1])
		}
		if rs[2].op != 0x0b || rs[2].status != 0 || len(rs[2].value) == 0 {
			t.Errorf("version: %+v", rs[2])
		}
		if rs[3].op != 0x07 || rs[3].status != 0 {
			t.Errorf("quit: %+v", rs[3])
		}
	})
}

func TestTLSPymemcache(t *testing.T) {
	py := ""
	for _, cand := range []string{"/usr/bin/python3", "python3"} {
		if p, err := exec.LookPath(cand); err == nil && exec.Command(p, "-c", "import pymemcache").Run() == nil {
			py = p
			break
		}
	}
	if py == "" {
		nodeproc.Absent(t, "python3 module pymemcache not importable (package python3-pymemcache)")
	}
	eachTLSServer(t, func(t *testing.T, n *nodeproc.Node, certs tlsFiles) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, py, filepath.Join("testdata", "pymemcache_tls_check.py"), n.Addr, certs.ca).CombinedOutput()
		if err != nil {
			t.Fatalf("pymemcache over TLS: %v\n%s", err, out)
		}
		t.Logf("%s", out)
	})
}

// TestTLSPlainRefused: a plain-text client on a TLS port gets no answer.
func TestTLSPlainRefused(t *testing.T) {
	eachTLSServer(t, func(t *testing.T, n *nodeproc.Node, _ tlsFiles) {
		c, err := net.DialTimeout("tcp", n.Addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write([]byte("version\r\n"))
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 256)
		k, _ := c.Read(buf)
		if bytes.Contains(buf[:k], []byte("VERSION")) {
			t.Fatalf("plain text on a TLS port was answered: %q", buf[:k])
		}
	})
}

// TestTLSStatsSettings: "stats settings" reports -Z's options as memcached
// -Z does, line for line: the files, the verify mode, the buffer size in
// bytes, the session cache and the minimum version.
func TestTLSStatsSettings(t *testing.T) {
	certs := makeCerts(t)
	flags := []string{"-Z", "-o", "ssl_chain_cert=" + certs.cert + ",ssl_key=" + certs.key + ",ssl_ca_cert=" + certs.ca +
		",ssl_verify_mode=1,ssl_wbuf_size=32,ssl_session_cache,ssl_min_version=3"}
	ssl := func(n *nodeproc.Node) []string {
		var lines []string
		for _, l := range strings.Split(string(sClient(t, n.Addr, certs, []byte("stats settings\r\nquit\r\n"))), "\r\n") {
			if strings.HasPrefix(l, "STAT ssl_") {
				lines = append(lines, l)
			}
		}
		return lines
	}
	mc := nodeproc.Need(t, "the reference implementation (package memcached)", "memcached")
	if help, _ := exec.Command(mc, "-h").CombinedOutput(); !bytes.Contains(help, []byte("--enable-ssl")) {
		t.Skip("this memcached is built without TLS (no --enable-ssl in memcached -h)")
	}
	if buildErr != nil {
		t.Fatalf("cannot build vbcache: %v", buildErr)
	}
	want := ssl(nodeproc.Start(t, nodeproc.Memcached, "", flags...))
	got := ssl(nodeproc.Start(t, nodeproc.Vbcache, vbcacheBin, flags...))
	if len(want) < 10 || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("stats settings over TLS:\nvbcache:\n%s\nmemcached:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
