package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"
)

// The client side: how a cluster's processes dial each other over TLS.
// A node streams from its peers and asks them for leases; the manager,
// ctl and movecheck send control requests. Each of them verifies the
// node it dials against the cluster's CA (not the system's roots: a
// cluster's certificates come from its own CA, `vbcache ctl
// init-security`), checks that the certificate names the host it dialed,
// and presents its own certificate, which a node asking for one
// (ssl_verify_mode) verifies against the same CA.

// ClientConfig is the configuration a node dials its peers with: it
// presents the certificate it serves with (which init-security issues
// for both uses) and verifies a peer against ssl_ca_cert. Both follow
// Reload, so a rotation reaches the next connection a node opens, and
// connections already open (streams among them) stay as they are.
//
// Verification is done in VerifyConnection, against the pool loaded
// last, rather than by crypto/tls against a RootCAs fixed now; that is
// why InsecureSkipVerify is set (the pattern crypto/tls documents for
// custom verification): nothing is skipped.
func (r *Reloader) ClientConfig() (*tls.Config, error) {
	if r.cur.Load().roots == nil {
		return nil, errors.New("ssl_ca_cert is not set: a cluster node needs the cluster's CA to verify its peers")
	}
	return &tls.Config{
		MinVersion: r.base.MinVersion,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return r.cur.Load().cert, nil
		},
		InsecureSkipVerify: true, // verified by VerifyConnection below
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyServer(cs, r.cur.Load().roots, time.Now())
		},
	}, nil
}

// LoadClient builds the configuration a tool or the manager dials nodes
// with: caFile is the cluster's CA (required), certFile and keyFile an
// optional client certificate (both or neither). The files are read
// once.
func LoadClient(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" {
		return nil, errors.New("no CA file: TLS to a cluster's nodes needs the cluster's CA (ca.pem from vbcache ctl init-security)")
	}
	roots, err := loadCAs(caFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", caFile, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}
	switch {
	case certFile != "" && keyFile != "":
		chain, leaf, err := loadChain(certFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", certFile, err)
		}
		key, err := loadKey(keyFile, KeyFormatPEM, leaf)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{{Certificate: chain, PrivateKey: key, Leaf: leaf}}
	case certFile != "" || keyFile != "":
		return nil, errors.New("a client certificate needs both its certificate and its key file")
	}
	return cfg, nil
}

// verifyServer is what crypto/tls would check with RootCAs set to roots:
// the chain, that the leaf may serve, and that it names cs.ServerName.
func verifyServer(cs tls.ConnectionState, roots *x509.CertPool, now time.Time) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: the peer sent no certificate")
	}
	opts := x509.VerifyOptions{
		Roots:         roots,
		DNSName:       cs.ServerName,
		Intermediates: x509.NewCertPool(),
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(opts)
	return err
}

// PeerName is the common name of a connection's verified client
// certificate, or "" when the client sent none or it was not verified
// (ssl_verify_mode 0, where crypto/tls does not verify what it gets).
func PeerName(cs tls.ConnectionState) string {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return ""
	}
	return cs.VerifiedChains[0][0].Subject.CommonName
}
