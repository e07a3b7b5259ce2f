package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/manager"
	"github.com/vbcache/vbcache/internal/sasl"
	"github.com/vbcache/vbcache/internal/tlsconf"
)

// managerFlags are "vbcache manager"'s settings; "vbcache local" fills
// them too.
type managerFlags struct {
	listen        string
	metricsListen string // --metrics-listen: Prometheus metrics over HTTP; "" none
	// metrics, when not nil, are more collectors for the metrics endpoint
	// (vbcache local serves its proxy's there too).
	metrics       []prometheus.Collector
	advertise     string
	dataDir       string
	etcdEndpoints string
	etcdClient    string
	etcdPeer      string
	etcdName      string
	etcdCluster   string
	etcdToken     string
	vbuckets      int
	replicas      int
	chain         bool
	failoverAfter time.Duration
	lease         time.Duration
	probe         time.Duration
	maxMoves      int
	prefix        string
	clusterAuth   string
	tlsCA         string // --tls-ca: dial nodes over TLS, verifying them against it
	tlsCert       string // --tls-cert, --tls-key: the certificate presented to nodes
	tlsKey        string
	apiReaders    string // --api-readers: the API's read-only logins (user:password file)
	apiCert       string // --api-tls-cert, --api-tls-key: serve the HTTP API over HTTPS
	apiKey        string
}

func (f *managerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "listen", "127.0.0.1:11212", "HTTP API address (the config, the streaming config, ctl)")
	fs.StringVar(&f.advertise, "advertise", "", "URL other managers and clients use to reach this one (default http://LISTEN)")
	fs.StringVar(&f.dataDir, "data-dir", "vbcache-manager.etcd", "data directory of the embedded etcd member")
	fs.StringVar(&f.etcdEndpoints, "etcd-endpoints", "", "comma-separated endpoints of an external etcd cluster (then no embedded member runs)")
	fs.StringVar(&f.etcdClient, "etcd-client-url", "http://127.0.0.1:2379", "embedded etcd: client URL (https://: TLS with --tls-cert, client certificates from --tls-ca required)")
	fs.StringVar(&f.etcdPeer, "etcd-peer-url", "http://127.0.0.1:2380", "embedded etcd: peer URL (https://: TLS between members, as the client URL)")
	fs.StringVar(&f.etcdName, "etcd-name", "vbcache", "embedded etcd: this member's name")
	fs.StringVar(&f.etcdCluster, "etcd-initial-cluster", "", "embedded etcd: the members of a new multi-member cluster, name=peerURL,… (default: this member alone)")
	fs.StringVar(&f.etcdToken, "etcd-initial-cluster-token", "vbcache", "embedded etcd: the token of a new multi-member cluster")
	fs.IntVar(&f.vbuckets, "vbuckets", 1024, "number of vbuckets of a new cluster (a power of two; fixed for the cluster's life)")
	fs.IntVar(&f.replicas, "replicas", 1, "number of replicas of a new cluster (0-3)")
	fs.BoolVar(&f.chain, "chain", false, "chained replication (replica 2 from replica 1) instead of star")
	fs.DurationVar(&f.failoverAfter, "failover-after", 10*time.Second, "fail over a node that stops answering for this long (0: only by hand)")
	fs.DurationVar(&f.lease, "lease", 5*time.Second, "how long a node may serve without hearing from the manager or, when no manager is heard, its peers; a failover waits for it")
	fs.DurationVar(&f.probe, "probe-interval", time.Second, "how often the leader probes each node with a lease grant (the lease is at least 4 of them)")
	fs.IntVar(&f.maxMoves, "max-moves", 4, "vbucket moves at once during a rebalance")
	fs.StringVar(&f.prefix, "prefix", "/vbcache/default", "etcd key prefix of this cluster's state")
	fs.StringVar(&f.clusterAuth, "cluster-auth", "", "the cluster administrator's user:password file (ctl init-security's admin.pwdb) the manager logs in to nodes with; none: for nodes run with --insecure-cluster")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "dial nodes over TLS (nodes run with -Z), verifying them against this CA file (ctl init-security's ca.pem)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "with --tls-ca: the client certificate presented to nodes (ctl init-security's node.pem)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "with --tls-cert: its private key")
	fs.StringVar(&f.apiCert, "api-tls-cert", "", "serve the HTTP API over HTTPS with this certificate (ctl init-security's node.pem); other managers reach it trusting --tls-ca")
	fs.StringVar(&f.apiKey, "api-tls-key", "", "with --api-tls-cert: its private key")
	fs.StringVar(&f.metricsListen, "metrics-listen", "", "serve Prometheus metrics at http://ADDR/metrics (the manager's view of the cluster, etcd's round trip)")
	fs.StringVar(&f.apiReaders, "api-readers", "", "with --cluster-auth: read-only logins of the HTTP API, a user:password file (memcached's SASL pwdb format); then every read needs one of them or the administrator's")
}

// runManagerCmd is "vbcache manager".
func runManagerCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("vbcache manager", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f managerFlags
	f.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: vbcache manager [flags]\n\nRuns a cluster manager: the cluster map in etcd (an embedded member by\ndefault), membership, rebalance, failover, and the HTTP API that\n\"vbcache ctl\" and proxies use.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := log.New(stderr, "", log.LstdFlags)
	if err := runManager(ctx, f, logger, nil); err != nil {
		fmt.Fprintf(stderr, "vbcache manager: %v\n", err)
		return 1
	}
	return 0
}

// runManager runs a manager (and its embedded etcd unless endpoints are
// given) until ctx ends. ready, if not nil, receives the manager once it
// serves HTTP.
func runManager(ctx context.Context, f managerFlags, logger *log.Logger, ready chan<- *manager.Manager) error {
	creds, err := (clusterAuthFlags{file: &f.clusterAuth, ca: &f.tlsCA, cert: &f.tlsCert, key: &f.tlsKey}).credentials()
	if err != nil {
		return fmt.Errorf("--cluster-auth or --tls-*: %w", err)
	}
	// What SIGHUP reloads: the certificates (the one presented to nodes,
	// with the CA they are verified against, and the API's), the
	// administrator's login (--cluster-auth) and the API's readers. A
	// reload reaches the next connection and the next API request; open
	// connections stay as they are, logged in.
	var reloaders []*tlsconf.Reloader
	// Caught from the start: a SIGHUP sent as soon as the port accepts
	// reloads rather than ends the process.
	hup := make(chan os.Signal, 1)
	if f.tlsCert != "" || f.apiCert != "" || f.clusterAuth != "" || f.apiReaders != "" {
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	if f.tlsCA != "" && f.tlsCert != "" {
		r, err := tlsconf.New(tlsconf.Options{ChainCert: f.tlsCert, Key: f.tlsKey, CACert: f.tlsCA})
		if err != nil {
			return fmt.Errorf("--tls-cert: %w", err)
		}
		if creds.TLS, err = r.ClientConfig(); err != nil {
			return fmt.Errorf("--tls-ca: %w", err)
		}
		reloaders = append(reloaders, r)
	}
	endpoints := splitList(f.etcdEndpoints)
	// etcd over https:// takes the cluster's TLS files: members serve
	// with --tls-cert and require certificates from --tls-ca of clients
	// and peers, and this manager's client presents --tls-cert.
	etcdURLs := endpoints
	if len(endpoints) == 0 {
		etcdURLs = []string{f.etcdClient, f.etcdPeer}
	}
	var etcdTLS manager.EtcdTLS
	if slices.ContainsFunc(etcdURLs, func(u string) bool { return strings.HasPrefix(u, "https://") }) {
		if f.tlsCA == "" || f.tlsCert == "" || f.tlsKey == "" {
			return errors.New("etcd over https:// needs --tls-ca, --tls-cert and --tls-key: its members and clients present certificates from the cluster's CA")
		}
		etcdTLS = manager.EtcdTLS{CAFile: f.tlsCA, CertFile: f.tlsCert, KeyFile: f.tlsKey}
	}
	embedded := len(endpoints) == 0
	if embedded {
		e, err := manager.StartEtcd(manager.EtcdMember{Name: f.etcdName, Dir: f.dataDir, ClientURL: f.etcdClient, PeerURL: f.etcdPeer,
			Cluster: f.etcdCluster, Token: f.etcdToken, QuietLogs: true, TLS: etcdTLS})
		if err != nil {
			return fmt.Errorf("embedded etcd in %s: %w", f.dataDir, err)
		}
		defer e.Close()
		endpoints = []string{f.etcdClient}
	}
	ecfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: quietZap()}
	if etcdTLS.CAFile != "" {
		if ecfg.TLS, err = etcdTLS.ClientConfig(); err != nil {
			return fmt.Errorf("etcd client TLS: %w", err)
		}
	}
	cli, err := clientv3.New(ecfg)
	if err != nil {
		return err
	}
	defer cli.Close()
	if embedded && etcdTLS.CAFile != "" {
		// The embedded members' own users and roles: only the
		// managers' certificate logs in to etcd, not every certificate
		// of the CA (an external etcd's auth is its operator's).
		user, err := etcdTLS.CertUser()
		if err != nil {
			return fmt.Errorf("--tls-cert: %w", err)
		}
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = manager.EnableEtcdAuth(actx, cli, user)
		cancel()
		if err != nil {
			return err
		}
	}
	var readers *sasl.Passwords
	if f.apiReaders != "" {
		if creds == nil || creds.User == "" {
			return errors.New("--api-readers needs --cluster-auth: without the administrator's login the API has no roles")
		}
		if readers, err = sasl.LoadPasswordFile(f.apiReaders); err != nil {
			return fmt.Errorf("--api-readers: %w", err)
		}
	}
	var apiTLS *tls.Config
	var leaderTransport http.RoundTripper
	if f.apiCert != "" || f.apiKey != "" {
		r, err := tlsconf.New(tlsconf.Options{ChainCert: f.apiCert, Key: f.apiKey})
		if err != nil {
			return fmt.Errorf("--api-tls-cert: %w", err)
		}
		apiTLS = r.Config()
		reloaders = append(reloaders, r)
		if creds == nil || creds.TLS == nil {
			return errors.New("--api-tls-cert needs --tls-ca: a follower passes changes on to the leader's HTTPS API and verifies it against the cluster's CA")
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = creds.TLS
		leaderTransport = tr
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	scheme := "http://"
	if apiTLS != nil {
		scheme = "https://"
	}
	adv := f.advertise
	if adv == "" {
		adv = scheme + ln.Addr().String()
	}
	_, portStr, _ := net.SplitHostPort(ln.Addr().String())
	port, _ := strconv.Atoi(portStr)
	m, err := manager.New(manager.Config{Etcd: cli, Prefix: f.prefix, Advertise: adv, MgmtPort: port, MgmtTLS: apiTLS != nil, Credentials: creds, Readers: readers, LeaderTransport: leaderTransport,
		NumVBuckets: f.vbuckets, Replicas: f.replicas, Chain: f.chain, FailoverAfter: f.failoverAfter,
		Lease: f.lease, ProbeInterval: f.probe, MaxMoves: f.maxMoves, Logf: logger.Printf})
	if err != nil {
		ln.Close()
		return err
	}
	srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 10 * time.Second}
	if apiTLS != nil {
		ln = tls.NewListener(ln, apiTLS)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }() // owned here: Shutdown below ends it
	runDone := make(chan error, 1)
	go func() { runDone <- m.Run(ctx) }() // owned here: ends with ctx
	if ready != nil {
		ready <- m
	}
	if f.metricsListen != "" {
		hs, addr, err := metricsServer(f.metricsListen, append(f.metrics, m.Metrics())...)
		if err != nil {
			return fmt.Errorf("--metrics-listen: %w", err)
		}
		defer hs.Close()
		logger.Printf("vbcache manager: metrics on http://%s/metrics", addr)
	}
	logger.Printf("vbcache manager: HTTP on %s, etcd %s", adv, strings.Join(endpoints, ","))
	reloadLogins := func() error {
		var adm *admin.Credentials
		var rd *sasl.Passwords
		var err error
		if f.clusterAuth != "" {
			if adm, err = admin.LoadCredentials(f.clusterAuth); err != nil {
				return fmt.Errorf("--cluster-auth: %w", err)
			}
		}
		if f.apiReaders != "" {
			if rd, err = sasl.LoadPasswordFile(f.apiReaders); err != nil {
				return fmt.Errorf("--api-readers: %w", err)
			}
		}
		return m.SetLogins(adm, rd)
	}
	if len(reloaders) > 0 || f.clusterAuth != "" || f.apiReaders != "" {
		hupDone := make(chan struct{})
		defer close(hupDone)
		go func() { // owned here: ends when runManager returns
			for {
				select {
				case <-hupDone:
					return
				case <-hup:
				}
				what, failed := []string{}, false
				for _, r := range reloaders {
					if err := r.Reload(); err != nil {
						failed = true
						logger.Printf("vbcache manager: SIGHUP: certificate reload failed, keeping the old one: %v", err)
					}
				}
				if len(reloaders) > 0 {
					what = append(what, "certificates")
				}
				if f.clusterAuth != "" || f.apiReaders != "" {
					if err := reloadLogins(); err != nil {
						failed = true
						logger.Printf("vbcache manager: SIGHUP: login reload failed, keeping the old ones: %v", err)
					}
					what = append(what, "logins")
				}
				if !failed {
					logger.Printf("vbcache manager: SIGHUP: %s reloaded", strings.Join(what, " and "))
				}
			}
		}()
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	srv.Shutdown(sctx)
	cancel()
	if serveErr == nil {
		<-runDone
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}
