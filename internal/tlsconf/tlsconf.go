// Package tlsconf turns memcached's TLS settings (-Z with the -o ssl_*
// options) into a *tls.Config for vbcache's listeners.
//
// Data flow: internal/server/cmdline fills an Options from the command
// line; New reads the certificate chain, the private key and the client
// CA file once, at start-up, and returns a Reloader. The Reloader's Config
// is what the server listens with. Its certificate (and client CA pool) live behind an
// atomic pointer, so Reload, which memcached's "refresh_certs" command
// will call, swaps them for new connections without a lock and without
// touching connections already established. A failed Reload keeps the
// old certificate, as memcached does.
//
// Errors carry memcached 1.6.18's start-up wording ("Error loading the
// certificate chain: <file> : <reason>"); the reasons are Go's, not
// OpenSSL's error codes.
//
// What cannot map exactly onto crypto/tls, and what this package does
// instead:
//
//   - ssl_verify_mode 3 ("once": do not ask again on renegotiation) is the
//     same as 2, because a Go server never renegotiates.
//   - ssl_verify_mode 1–3 without ssl_ca_cert verifies against an empty
//     pool, as OpenSSL does in memcached (no default verify paths are
//     loaded), so every client certificate is rejected; New warns.
//   - ssl_ciphers is an OpenSSL cipher expression. A list of plain suite
//     names (OpenSSL's "ECDHE-RSA-AES128-GCM-SHA256" or the IANA
//     "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256") becomes Config.CipherSuites,
//     in the given order. Anything using OpenSSL's keywords ("HIGH",
//     "DEFAULT", "!aNULL", "ECDHE+AESGCM", "@STRENGTH") keeps Go's default
//     suites, with a warning. TLS 1.3 suites cannot be configured in Go,
//     and OpenSSL configures them with a different option anyway. A list
//     in which nothing is recognised fails as OpenSSL's does.
//   - ssl_keyformat: only PEM; DER (2) is refused with a hint to convert.
//   - ssl_session_cache turns on session resumption (session tickets, the
//     only kind Go has); without it resumption is off, as in memcached.
//   - ssl_wbuf_size and ssl_kernel_tls are accepted and ignored: Go's
//     crypto/tls sizes its own buffers and has no kernel TLS offload.
package tlsconf

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync/atomic"
)

// VerifyMode is ssl_verify_mode: whether the server asks clients for a
// certificate, with memcached's numbers.
type VerifyMode uint8

// Verify modes.
const (
	// VerifyNone (0, the default) does not ask for a client certificate.
	VerifyNone VerifyMode = iota
	// VerifyRequest (1) asks for one and verifies it if the client sends
	// it; clients without a certificate are let in.
	VerifyRequest
	// VerifyRequire (2) rejects clients without a valid certificate.
	VerifyRequire
	// VerifyOnce (3) is OpenSSL's "require, but only at the first
	// handshake"; Go never renegotiates, so it is VerifyRequire.
	VerifyOnce
)

// ClientAuth is the tls.ClientAuthType closest to the mode.
func (m VerifyMode) ClientAuth() tls.ClientAuthType {
	switch m {
	case VerifyRequest:
		return tls.VerifyClientCertIfGiven
	case VerifyRequire, VerifyOnce:
		return tls.RequireAndVerifyClientCert
	}
	return tls.NoClientCert
}

// KeyFormat is ssl_keyformat, with OpenSSL's SSL_FILETYPE numbers.
type KeyFormat uint8

// Key formats. Zero means PEM.
const (
	KeyFormatPEM KeyFormat = 1 // SSL_FILETYPE_PEM
	KeyFormatDER KeyFormat = 2 // SSL_FILETYPE_ASN1; refused
)

// Options are memcached's -o ssl_* settings. Zero values mean memcached's
// defaults.
type Options struct {
	// ChainCert is ssl_chain_cert: a PEM file with the server certificate
	// first, then any intermediates. Required.
	ChainCert string
	// Key is ssl_key: the PEM private key. If empty, the key is looked
	// for in ChainCert (memcached itself requires ssl_key).
	Key string
	// KeyFormat is ssl_keyformat (PEM).
	KeyFormat KeyFormat
	// VerifyMode is ssl_verify_mode (VerifyNone).
	VerifyMode VerifyMode
	// CACert is ssl_ca_cert: PEM certificates of the CAs that client
	// certificates must chain to (none).
	CACert string
	// Ciphers is ssl_ciphers, an OpenSSL cipher list ("": Go's defaults).
	// See the package comment for how much of it is understood.
	Ciphers string
	// MinVersion is ssl_min_version as a tls.VersionTLS* constant
	// (tls.VersionTLS12, memcached's default).
	MinVersion uint16
	// SessionCache is ssl_session_cache: allow session resumption (off).
	SessionCache bool
	// WBufSize is ssl_wbuf_size in kilobytes; accepted and ignored.
	WBufSize int
	// KernelTLS is ssl_kernel_tls; accepted and ignored.
	KernelTLS bool
	// Warnf receives warnings about settings that Go cannot honour
	// exactly (one line each, no trailing newline). Nil drops them.
	Warnf func(format string, args ...any)
}

// Reloader serves a certificate (and client CA pool) that Reload can
// replace while connections are being accepted. It is safe for
// concurrent use.
type Reloader struct {
	opts Options
	cur  atomic.Pointer[loaded] // replaced whole by Reload
	base *tls.Config            // built once by New; never modified after
}

// loaded is what one read of the files produced.
type loaded struct {
	cert      *tls.Certificate
	clientCAs *x509.CertPool // nil unless VerifyMode asks for certificates
	roots     *x509.CertPool // ssl_ca_cert whatever VerifyMode is: what ClientConfig verifies peers with (nil: none given)
}

// Build reads the files o names and returns the server's *tls.Config.
// It is New(o) followed by Config, for callers that never reload.
func Build(o Options) (*tls.Config, error) {
	r, err := New(o)
	if err != nil {
		return nil, err
	}
	return r.Config(), nil
}

// New checks o, reads its certificate chain, key and CA file, and returns
// a Reloader serving them. Errors read like memcached's start-up errors.
func New(o Options) (*Reloader, error) {
	if o.VerifyMode > VerifyOnce {
		return nil, errors.New("Invalid ssl_verify_mode. Use help to see valid options.")
	}
	minVersion := o.MinVersion
	if minVersion == 0 {
		minVersion = tls.VersionTLS12
	}
	switch minVersion {
	case tls.VersionTLS10, tls.VersionTLS11, tls.VersionTLS12, tls.VersionTLS13:
	default:
		return nil, errors.New("Invalid ssl_min_version. Use help to see valid options.")
	}
	r := &Reloader{opts: o}
	l, err := r.load()
	if err != nil {
		return nil, err
	}
	// memcached sets the cipher list after loading the certificates.
	suites, err := parseCiphers(o.Ciphers, o.warnf)
	if err != nil {
		return nil, err
	}
	if o.VerifyMode != VerifyNone && o.CACert == "" {
		o.warnf("ssl_verify_mode=%d without ssl_ca_cert: no client certificate can be verified, "+
			"so clients that send one are refused", o.VerifyMode)
	}
	r.cur.Store(l)
	r.base = &tls.Config{
		MinVersion:             minVersion,
		CipherSuites:           suites,
		ClientAuth:             o.VerifyMode.ClientAuth(),
		SessionTicketsDisabled: !o.SessionCache,
		GetCertificate:         r.GetCertificate,
	}
	if o.VerifyMode != VerifyNone {
		// The client CA pool can change on Reload too, and ClientCAs
		// is read straight from the Config, so each handshake gets a
		// copy with the current pool.
		r.base.GetConfigForClient = r.configForClient
	}
	return r, nil
}

func (o Options) warnf(format string, args ...any) {
	if o.Warnf != nil {
		o.Warnf(format, args...)
	}
}

// Config returns the server configuration. Its certificate and client CA
// pool follow Reload. The caller must not modify it.
func (r *Reloader) Config() *tls.Config { return r.base }

// GetCertificate returns the current certificate; it is the Config's
// tls.Config.GetCertificate.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.cur.Load().cert, nil
}

// Certificate returns the certificate currently served.
func (r *Reloader) Certificate() *tls.Certificate { return r.cur.Load().cert }

func (r *Reloader) configForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	c := r.base.Clone()
	c.GetConfigForClient = nil
	c.ClientCAs = r.cur.Load().clientCAs
	return c, nil
}

// Reload reads the certificate chain, key and CA file again and, if all
// of them load, serves them to new connections. On error the old ones
// stay in use. It is what memcached's refresh_certs does.
func (r *Reloader) Reload() error {
	l, err := r.load()
	if err != nil {
		return err
	}
	r.cur.Store(l)
	return nil
}

// load reads the files in memcached's order: chain, key, CA.
func (r *Reloader) load() (*loaded, error) {
	o := r.opts
	chain, leaf, err := loadChain(o.ChainCert)
	if err != nil {
		return nil, fmt.Errorf("Error loading the certificate chain: %s : %w", nullable(o.ChainCert), err)
	}
	keyFile := o.Key
	if keyFile == "" {
		keyFile = o.ChainCert
	}
	key, err := loadKey(keyFile, o.KeyFormat, leaf)
	if err != nil {
		return nil, fmt.Errorf("Error loading the key: %s : %w", nullable(o.Key), err)
	}
	l := &loaded{cert: &tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf}}
	if o.VerifyMode != VerifyNone {
		l.clientCAs = x509.NewCertPool()
	}
	if o.CACert != "" {
		pool, err := loadCAs(o.CACert)
		if err != nil {
			return nil, fmt.Errorf("Error loading the CA certificate: %s : %w", o.CACert, err)
		}
		l.roots = pool
		if o.VerifyMode != VerifyNone {
			l.clientCAs = pool
		}
	}
	return l, nil
}

// nullable names a file in a message as memcached's printf of a NULL
// string does.
func nullable(name string) string {
	if name == "" {
		return "(null)"
	}
	return name
}

// readFile reads name, reporting failures the way the OpenSSL messages
// do: just the reason ("no such file or directory").
func readFile(name, option string) ([]byte, error) {
	if name == "" {
		return nil, fmt.Errorf("no file given (-o %s=<file>)", option)
	}
	b, err := os.ReadFile(name)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return nil, pe.Err
		}
		return nil, err
	}
	return b, nil
}

// loadChain returns the DER certificates of a PEM chain file, and the
// first of them parsed.
func loadChain(name string) ([][]byte, *x509.Certificate, error) {
	b, err := readFile(name, "ssl_chain_cert")
	if err != nil {
		return nil, nil, err
	}
	var chain [][]byte
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type == "CERTIFICATE" {
			chain = append(chain, block.Bytes)
		}
	}
	if len(chain) == 0 {
		return nil, nil, errors.New("no PEM certificate found")
	}
	leaf, err := x509.ParseCertificate(chain[0])
	if err != nil {
		return nil, nil, err
	}
	return chain, leaf, nil
}

// loadKey reads the first PEM private key in name and checks that it
// belongs to leaf.
func loadKey(name string, format KeyFormat, leaf *x509.Certificate) (crypto.PrivateKey, error) {
	switch format {
	case 0, KeyFormatPEM:
	case KeyFormatDER:
		return nil, errors.New("DER keys are not supported (ssl_keyformat=2); " +
			"convert the key to PEM, e.g. openssl pkey -inform DER -in key.der -out key.pem")
	default:
		return nil, fmt.Errorf("bad ssl filetype %d (only 1, PEM, is supported)", format)
	}
	b, err := readFile(name, "ssl_key")
	if err != nil {
		return nil, err
	}
	var block *pem.Block
	for {
		block, b = pem.Decode(b)
		if block == nil {
			return nil, errors.New("no PEM private key found")
		}
		if block.Type == "PRIVATE KEY" || strings.HasSuffix(block.Type, " PRIVATE KEY") {
			break
		}
	}
	if _, encrypted := block.Headers["DEK-Info"]; encrypted || block.Type == "ENCRYPTED PRIVATE KEY" {
		return nil, errors.New("encrypted private keys are not supported")
	}
	key, err := parseKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	pub, ok := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	signer, isSigner := key.(crypto.Signer)
	if !ok || !isSigner || !pub.Equal(signer.Public()) {
		return nil, errors.New("key values mismatch")
	}
	return key, nil
}

// parseKey reads a PKCS #8, PKCS #1 (RSA) or SEC 1 (EC) private key.
func parseKey(der []byte) (crypto.PrivateKey, error) {
	if k, err := x509.ParsePKCS8PrivateKey(der); err == nil {
		switch k := k.(type) {
		case *rsa.PrivateKey, *ecdsa.PrivateKey, ed25519.PrivateKey:
			return k, nil
		}
		return nil, errors.New("unsupported private key type")
	}
	if k, err := x509.ParsePKCS1PrivateKey(der); err == nil {
		return k, nil
	}
	if k, err := x509.ParseECPrivateKey(der); err == nil {
		return k, nil
	}
	return nil, errors.New("cannot parse the private key (want PKCS #8, PKCS #1 or SEC 1)")
}

// loadCAs reads a PEM file of CA certificates.
func loadCAs(name string) (*x509.CertPool, error) {
	b, err := readFile(name, "ssl_ca_cert")
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, errors.New("no certificate or crl found")
	}
	return pool, nil
}
