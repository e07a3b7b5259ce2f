package manager

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"go.etcd.io/etcd/client/pkg/v3/logutil"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// EmbeddedEtcd is a single-member etcd run inside the manager's process,
// the default store for a cluster on one machine.
type EmbeddedEtcd struct {
	e         *embed.Etcd
	level     zap.AtomicLevel // its log level; Close silences it
	ClientURL string          // where clients reach it
}

// EtcdMember describes one embedded member of a (possibly multi-member)
// etcd cluster: tests run three of them to exercise leader loss.
type EtcdMember struct {
	Name       string
	Dir        string
	ClientURL  string // e.g. http://127.0.0.1:2379
	PeerURL    string // e.g. http://127.0.0.1:2380
	Cluster    string // initial cluster: "n1=http://…,n2=http://…"; empty: just this member
	Token      string // initial cluster token
	QuietLogs  bool   // log only errors
	StartLimit time.Duration
	// TLS, when its CA is set, serves the client and peer URLs (https://)
	// with its certificate and requires one from its CA of every client
	// and peer (etcd's --client-cert-auth and --peer-client-cert-auth).
	TLS EtcdTLS
}

// EtcdTLS are the files of etcd's TLS: the CA that clients' and peers'
// certificates must chain to, and the certificate (with server and client
// use) and key a member serves and dials its peers with, and a client
// presents.
type EtcdTLS struct{ CAFile, CertFile, KeyFile string }

// info is t as etcd's transport takes it, requiring client certificates.
func (t EtcdTLS) info() transport.TLSInfo {
	return transport.TLSInfo{CertFile: t.CertFile, KeyFile: t.KeyFile, TrustedCAFile: t.CAFile, ClientCertAuth: true}
}

// ClientConfig is the TLS configuration of an etcd client presenting t's
// certificate and verifying the members against t's CA.
func (t EtcdTLS) ClientConfig() (*tls.Config, error) {
	i := t.info()
	i.ClientCertAuth = false
	return i.ClientConfig()
}

// CertUser is the etcd user a client presenting t's certificate is: its
// subject's common name, as etcd maps a verified client certificate to a
// user under --client-cert-auth.
func (t EtcdTLS) CertUser() (string, error) {
	c, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return "", err
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return "", err
	}
	if leaf.Subject.CommonName == "" {
		return "", fmt.Errorf("%s: the certificate has no common name, which etcd would take as its user", t.CertFile)
	}
	return leaf.Subject.CommonName, nil
}

// EnableEtcdAuth turns on etcd's own authentication (its users and roles)
// with user, the common name of the certificate the managers present
// (CertUser), as the one user holding the root role, besides the root
// user etcd requires; neither has a password, so only a certificate
// naming one of them logs in. From then on a client whose certificate
// the CA signed but names anyone else (a data client's, say) is refused
// every request: the cluster's CA no longer opens its state to whoever
// holds any of its certificates. It is idempotent, so every manager of an
// embedded etcd cluster may call it as it starts; etcd serves AuthEnable
// once. cli must present user's certificate.
func EnableEtcdAuth(ctx context.Context, cli *clientv3.Client, user string) error {
	st, err := cli.AuthStatus(ctx)
	if err != nil {
		return fmt.Errorf("etcd auth status: %w", err)
	}
	if st.Enabled {
		return nil
	}
	for _, u := range []string{"root", user} {
		if _, err := cli.UserAddWithOptions(ctx, u, "", &clientv3.UserAddOptions{NoPassword: true}); err != nil && !errors.Is(err, rpctypes.ErrUserAlreadyExist) {
			return fmt.Errorf("etcd user %q: %w", u, err)
		}
		if _, err := cli.UserGrantRole(ctx, u, "root"); err != nil { // a second grant is ignored
			return fmt.Errorf("etcd user %q: root role: %w", u, err)
		}
		if u == user { // user is root itself
			break
		}
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return fmt.Errorf("etcd auth enable: %w", err)
	}
	return nil
}

// StartEtcd starts an embedded etcd member and waits until it serves.
func StartEtcd(m EtcdMember) (*EmbeddedEtcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = m.Name
	if cfg.Name == "" {
		cfg.Name = "vbcache"
	}
	cfg.Dir = m.Dir
	cu, err := url.Parse(m.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("etcd client URL: %w", err)
	}
	pu, err := url.Parse(m.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("etcd peer URL: %w", err)
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	if m.Cluster != "" {
		cfg.InitialCluster = m.Cluster
	} else {
		cfg.InitialCluster = cfg.Name + "=" + m.PeerURL
	}
	if m.Token != "" {
		cfg.InitialClusterToken = m.Token
	}
	if m.TLS.CAFile != "" {
		if cu.Scheme != "https" || pu.Scheme != "https" {
			return nil, fmt.Errorf("etcd with TLS: the client and peer URLs must be https:// (%s, %s)", m.ClientURL, m.PeerURL)
		}
		cfg.ClientTLSInfo, cfg.PeerTLSInfo = m.TLS.info(), m.TLS.info()
	}
	// etcd's own logger (its default format), with a level we can change:
	// Close silences it, or stopping logs each closed listener as an
	// error ("setting up serving from embedded etcd failed").
	level := zap.NewAtomicLevelAt(zapcore.ErrorLevel)
	if !m.QuietLogs {
		level.SetLevel(zapcore.WarnLevel)
	}
	zcfg := logutil.DefaultZapLoggerConfig
	zcfg.Level = level
	lg, err := zcfg.Build()
	if err != nil {
		return nil, fmt.Errorf("etcd logger: %w", err)
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	limit := m.StartLimit
	if limit == 0 {
		limit = 60 * time.Second
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-time.After(limit):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("embedded etcd did not become ready in %v", limit)
	}
	return &EmbeddedEtcd{e: e, level: level, ClientURL: m.ClientURL}, nil
}

// Close stops the member, quietly.
func (e *EmbeddedEtcd) Close() {
	e.level.SetLevel(zapcore.FatalLevel)
	e.e.Close()
}
