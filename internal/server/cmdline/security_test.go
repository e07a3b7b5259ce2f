package cmdline

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/server"
	"github.com/vbcache/vbcache/internal/tlsconf"
)

// securityFiles writes, into a temporary directory, a self-signed
// certificate (cert.pem) with its key (key.pem), a key that does not
// match it (other.key), and credential files: good.pw ("u:p" lines) and
// bad.pw (a line without a colon). It returns the directory.
func securityFiles(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "localhost"},
		DNSNames:              []string{"localhost"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := func(k *ecdsa.PrivateKey) []byte {
		b, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: b})
	}
	files := map[string][]byte{
		"cert.pem":  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"key.pem":   pemKey(key),
		"other.key": pemKey(other),
		"good.pw":   []byte("u:p\nv:q\n"),
		"bad.pw":    []byte("no colon here\n"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestSecurityFlags(t *testing.T) {
	dir := securityFiles(t)
	tlsArgs := "-Z -o ssl_chain_cert=$D/cert.pem,ssl_key=$D/key.pem"
	tests := []struct {
		name  string
		args  string
		pwdb  string // MEMCACHED_SASL_PWDB
		check func(t *testing.T, o *Options)
	}{
		{"-S implies binary", "-S", "$D/good.pw", func(t *testing.T, o *Options) {
			c := o.Config
			if !c.SASL || c.Protocol != server.ProtoBinary || c.SASLPasswords.Len() != 2 || c.SASLPasswords.Current["u"] != "p" {
				t.Errorf("got SASL %v protocol %v passwords %v", c.SASL, c.Protocol, c.SASLPasswords)
			}
		}},
		{"-S with -B binary", "--enable-sasl -B binary", "$D/good.pw", func(t *testing.T, o *Options) {
			if !o.Config.SASL || o.Config.Protocol != server.ProtoBinary {
				t.Errorf("got %+v", o.Config)
			}
		}},
		{"-B binary before -S", "-B binary -S", "$D/good.pw", nil},
		{"-Y", "-Y $D/good.pw", "", func(t *testing.T, o *Options) {
			c := o.Config
			if c.AuthTokens.Current["v"] != "q" || c.AuthTokens.Len() != 2 || c.SASL || c.Protocol != server.ProtoASCII || c.AuthFile == "" {
				t.Errorf("got tokens %v SASL %v protocol %v", c.AuthTokens, c.SASL, c.Protocol)
			}
		}},
		{"--auth-file", "--auth-file=$D/good.pw", "", func(t *testing.T, o *Options) {
			if o.Config.AuthTokens.Len() != 2 {
				t.Errorf("got %v", o.Config.AuthTokens)
			}
		}},
		{"-Z defaults", tlsArgs, "", func(t *testing.T, o *Options) {
			c := o.Config.TLS
			if c == nil || o.tlsReloader == nil || c != o.tlsReloader.Config() {
				t.Fatalf("TLS %v, reloader %v", c, o.tlsReloader)
			}
			if c.MinVersion != tls.VersionTLS12 || c.ClientAuth != tls.NoClientCert || !c.SessionTicketsDisabled ||
				c.CipherSuites != nil {
				t.Errorf("got %+v", c)
			}
			cert, err := c.GetCertificate(&tls.ClientHelloInfo{})
			if err != nil || cert.Leaf.Subject.CommonName != "localhost" {
				t.Errorf("certificate %v, %v", cert, err)
			}
			if len(o.Warnings) != 0 {
				t.Errorf("warnings %q", o.Warnings)
			}
		}},
		{"-Z with every ssl option", "--enable-ssl -o ssl_chain_cert=$D/cert.pem,ssl_key=$D/key.pem," +
			"ssl_keyformat=1,ssl_verify_mode=2,ssl_ca_cert=$D/cert.pem,ssl_min_version=3,ssl_session_cache," +
			"ssl_kernel_tls,ssl_wbuf_size=32,ssl_ciphers=ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384",
			"", func(t *testing.T, o *Options) {
				c := o.Config.TLS
				if c.MinVersion != tls.VersionTLS13 || c.ClientAuth != tls.RequireAndVerifyClientCert ||
					c.SessionTicketsDisabled || len(c.CipherSuites) != 2 ||
					c.CipherSuites[0] != tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 {
					t.Errorf("got %+v", c)
				}
				if !o.tlsOpts.KernelTLS || o.tlsOpts.WBufSize != 32 {
					t.Errorf("options %+v", o.tlsOpts)
				}
			}},
		{"ssl options by name", tlsArgs + " -o ssl_keyformat=PEM,ssl_min_version=tlsv1.3,ssl_verify_mode=1", "",
			func(t *testing.T, o *Options) {
				if c := o.Config.TLS; c.MinVersion != tls.VersionTLS13 || c.ClientAuth != tls.VerifyClientCertIfGiven {
					t.Errorf("got %+v", c)
				}
			}},
		{"ssl_min_version 0 and verify mode 3", tlsArgs + " -o ssl_min_version=0,ssl_verify_mode=3,ssl_ca_cert=$D/cert.pem", "",
			func(t *testing.T, o *Options) {
				if c := o.Config.TLS; c.MinVersion != tls.VersionTLS10 || c.ClientAuth != tls.RequireAndVerifyClientCert {
					t.Errorf("got %+v", c)
				}
			}},
		{"ssl_session_cache=no", tlsArgs + " -o ssl_session_cache,ssl_session_cache=no", "",
			func(t *testing.T, o *Options) {
				if !o.Config.TLS.SessionTicketsDisabled {
					t.Errorf("session tickets on")
				}
			}},
		{"OpenSSL cipher keywords warn", tlsArgs + " -o ssl_ciphers=HIGH:!aNULL", "", func(t *testing.T, o *Options) {
			if o.Config.TLS.CipherSuites != nil || len(o.Warnings) != 1 ||
				!strings.HasPrefix(o.Warnings[0], "WARNING: ssl_ciphers: OpenSSL cipher expressions") {
				t.Errorf("suites %v, warnings %q", o.Config.TLS.CipherSuites, o.Warnings)
			}
		}},
		{"verify without a CA warns", tlsArgs + " -o ssl_verify_mode=1", "", func(t *testing.T, o *Options) {
			if len(o.Warnings) != 1 || !strings.Contains(o.Warnings[0], "without ssl_ca_cert") {
				t.Errorf("warnings %q", o.Warnings)
			}
		}},
		{"ssl options without -Z are ignored", "-o ssl_chain_cert=/nonexistent,ssl_verify_mode=2", "",
			func(t *testing.T, o *Options) {
				if o.Config.TLS != nil {
					t.Errorf("TLS on without -Z")
				}
			}},
		{"-Z with a unix socket", tlsArgs + " -s $D/sock", "", func(t *testing.T, o *Options) {
			if o.Config.TLS == nil {
				t.Errorf("TLS not built")
			}
		}},
		{"notls listener with -Z", tlsArgs + " -l notls:127.0.0.1:11312,127.0.0.1", "", func(t *testing.T, o *Options) {
			if o.Config.TLS == nil || len(o.Config.Listen) != 2 {
				t.Errorf("got %+v", o.Config)
			}
		}},
		{"everything", tlsArgs + " -S -Y $D/good.pw -p 11311", "$D/good.pw", func(t *testing.T, o *Options) {
			c := o.Config
			if c.TLS == nil || !c.SASL || c.SASLPasswords.Len() != 2 || c.AuthTokens.Len() != 2 {
				t.Errorf("got %+v", c)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := splitArgs(strings.ReplaceAll(tt.args, "$D", dir))
			env := map[string]string{}
			if tt.pwdb != "" {
				env["MEMCACHED_SASL_PWDB"] = strings.ReplaceAll(tt.pwdb, "$D", dir)
			}
			o, err := parse(args, env)
			if err != nil {
				t.Fatalf("%s: %v", tt.args, err)
			}
			if tt.check != nil {
				tt.check(t, o)
			}
		})
	}
}

// TestSecurityFlagErrors pins the failures that need files; $D is the
// directory securityFiles wrote.
func TestSecurityFlagErrors(t *testing.T) {
	dir := securityFiles(t)
	tests := []struct {
		args string
		pwdb string
		code int
		msg  string
	}{
		{"-S", "/nonexistent", 1,
			"vbcache: -S: cannot open MEMCACHED_SASL_PWDB file [/nonexistent]: no such file or directory"},
		{"-S", "$D/bad.pw", 1, "vbcache: MEMCACHED_SASL_PWDB file $D/bad.pw line 1: malformed entry, want user:password"},
		{"-Y $D/bad.pw", "", 1, "vbcache: authfile $D/bad.pw line 1: malformed entry, want user:password"},
		{"-Y $D", "", 1, "Could not open authfile [$D] for reading, error is a directory"},
		{"-Z -o ssl_chain_cert=$D/cert.pem", "", 64, "Error loading the key: (null) : no PEM private key found"},
		{"-Z -o ssl_chain_cert=$D/cert.pem,ssl_key=/nonexistent", "", 64,
			"Error loading the key: /nonexistent : no such file or directory"},
		{"-Z -o ssl_chain_cert=$D/cert.pem,ssl_key=$D/other.key", "", 64,
			"Error loading the key: $D/other.key : key values mismatch"},
		{"-Z -o ssl_chain_cert=$D/key.pem,ssl_key=$D/key.pem", "", 64,
			"Error loading the certificate chain: $D/key.pem : no PEM certificate found"},
		{"-Z -o ssl_chain_cert=$D/cert.pem,ssl_key=$D/key.pem,ssl_keyformat=2", "", 64,
			"Error loading the key: $D/key.pem : DER keys are not supported (ssl_keyformat=2); " +
				"convert the key to PEM, e.g. openssl pkey -inform DER -in key.der -out key.pem"},
		{"-Z -o ssl_chain_cert=$D/cert.pem,ssl_key=$D/key.pem,ssl_keyformat=-1", "", 64,
			"Error loading the key: $D/key.pem : bad ssl filetype 255 (only 1, PEM, is supported)"},
		{"-Z -o ssl_chain_cert=$D/cert.pem,ssl_key=$D/key.pem,ssl_ca_cert=$D/good.pw", "", 64,
			"Error loading the CA certificate: $D/good.pw : no certificate or crl found"},
		{"-Z -o ssl_chain_cert=$D/cert.pem,ssl_key=$D/key.pem,ssl_ciphers=BOGUS", "", 64,
			"Error setting the provided cipher(s): BOGUS"},
		// TLS is loaded before the credential files.
		{"-Y /nonexistent -Z -o ssl_chain_cert=$D/cert.pem,ssl_key=$D/other.key", "", 64,
			"Error loading the key: $D/other.key : key values mismatch"},
		{"-Y /nonexistent -Z -o ssl_chain_cert=$D/cert.pem,ssl_key=$D/key.pem", "", 1,
			"Could not open authfile [/nonexistent] for reading, error no such file or directory"},
		// Bad -l entries show only after the files have been loaded.
		{"-Z -l fooble", "", 64,
			"Error loading the certificate chain: (null) : no file given (-o ssl_chain_cert=<file>)"},
		{"-Y /nonexistent -l fooble", "", 1,
			"Could not open authfile [/nonexistent] for reading, error no such file or directory"},
		{"-l notls:127.0.0.1 -Y /nonexistent", "", 1,
			"Could not open authfile [/nonexistent] for reading, error no such file or directory"},
		{"-Y $D/good.pw -l notls:127.0.0.1", "", 71,
			"'notls' option is valid only when SSL is enabled\nfailed to listen on one of interface(s) notls:127.0.0.1"},
		{"-Z -o ssl_chain_cert=$D/cert.pem,ssl_key=$D/key.pem -l fooble", "", 71,
			"getaddrinfo(): Name or service not known\nfailed to listen on one of interface(s) fooble"},
		{"-S -Y $D/good.pw", "/nonexistent", 1,
			"vbcache: -S: cannot open MEMCACHED_SASL_PWDB file [/nonexistent]: no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			env := map[string]string{}
			if tt.pwdb != "" {
				env["MEMCACHED_SASL_PWDB"] = strings.ReplaceAll(tt.pwdb, "$D", dir)
			}
			_, err := parse(splitArgs(strings.ReplaceAll(tt.args, "$D", dir)), env)
			if err == nil {
				t.Fatalf("no error, want %q", tt.msg)
			}
			e, ok := err.(*ExitError)
			if !ok {
				t.Fatalf("error %T %v is not an ExitError", err, err)
			}
			want := strings.ReplaceAll(tt.msg, "$D", dir)
			if e.Msg != want || e.Code != tt.code {
				t.Errorf("\n got %d %q\nwant %d %q", e.Code, e.Msg, tt.code, want)
			}
		})
	}
}

// TestTLSReloaderKept checks that the Reloader behind Config.TLS is kept
// for refresh_certs.
func TestTLSReloaderKept(t *testing.T) {
	dir := securityFiles(t)
	o, err := parse(splitArgs("-Z -o ssl_chain_cert="+dir+"/cert.pem,ssl_key="+dir+"/key.pem"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var r *tlsconf.Reloader = o.tlsReloader
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
}
