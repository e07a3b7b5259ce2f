package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/proxy"
	"github.com/vbcache/vbcache/internal/sasl"
	"github.com/vbcache/vbcache/internal/tlsconf"
)

// runProxy is "vbcache proxy": a memcached-protocol proxy in front of a
// vbcache cluster or a static pool. The configuration is a pool file (-c,
// twemproxy-like YAML; see internal/proxy.Config) or the shortcut flags.
// SIGHUP, or a change of the file's modification time (polled every
// second), reloads the pool without dropping client connections.
func runProxy(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("vbcache proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("c", "", "pool file (YAML: listen, servers, distribution, hash, timeout, … or cluster/manager)")
	listen := fs.String("listen", "127.0.0.1:22121", "address to listen on (without -c)")
	cluster := fs.String("cluster", "", "comma-separated vbcache nodes to bootstrap from (without -c)")
	mgr := fs.String("manager", "", "vbcache manager URL whose streaming map to follow (without -c)")
	servers := fs.String("servers", "", "comma-separated static pool host:port[:weight] (without -c)")
	dist := fs.String("distribution", "ketama", "distribution of a static pool: ketama, modula, or memcache's names")
	hash := fs.String("hash", "", "hash of a static pool (md5 for ketama; crc32a, crc32, one_at_a_time for modula)")
	timeout := fs.Int("timeout", 0, "upstream timeout in milliseconds (0: 2000)")
	upAuth := addClusterAuthFlags(fs, false)
	dataAuth := fs.String("auth", "", "log in to the servers as this data user: a user:password file (memcached's SASL pwdb format, one entry), over SASL for binary clients' requests (nodes run with -S and MEMCACHED_SASL_PWDB) and as a text token for text clients' (nodes run with -Y, the same file)")
	clientAuth := fs.String("client-auth", "", "clients must log in as a user of this user:password file (memcached's SASL pwdb format): binary ones with SASL PLAIN, text ones with memcached's text token (-Y's set); use it with --listen-tls-cert")
	mgrAuth := fs.String("manager-auth", "", "log in to the manager's API with this user:password file (a read-only login of its --api-readers)")
	lnCert := fs.String("listen-tls-cert", "", "serve clients over TLS only, with this certificate chain (PEM); SIGHUP reloads it")
	lnKey := fs.String("listen-tls-key", "", "with --listen-tls-cert: its private key")
	metricsListen := fs.String("metrics-listen", "", "serve Prometheus metrics at http://ADDR/metrics (memcached_exporter's names for the proxy's stats, and per server its requests, errors and latency)")
	lnCA := fs.String("listen-tls-ca", "", "with --listen-tls-cert: clients must present a certificate this CA (PEM) signed, as a node's ssl_verify_mode=2; with --client-auth, one whose common name is a user of that file logs it in; SIGHUP reloads it")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: vbcache proxy -c FILE\n       vbcache proxy [--listen ADDR] --cluster NODE,… | --manager URL | --servers A,B [--distribution ketama]\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	// upstream reads the credentials files anew at every load, so that
	// SIGHUP rotates them for new server connections (and load reads
	// --client-auth anew for clients' new logins).
	upstream := func() (*admin.Credentials, error) {
		cr, err := upAuth.credentials()
		if err != nil || *dataAuth == "" {
			return cr, err
		}
		if cr != nil && cr.User != "" {
			return nil, errors.New("give --auth or --cluster-auth, not both")
		}
		du, err := admin.LoadCredentials(*dataAuth)
		if err != nil {
			return nil, fmt.Errorf("--auth: %w", err)
		}
		if cr != nil {
			du.TLS = cr.TLS
		}
		return du, nil
	}
	load := func() (*proxy.Config, error) {
		up, err := upstream()
		if err != nil {
			return nil, err
		}
		var ml *admin.Credentials
		if *mgrAuth != "" {
			if ml, err = admin.LoadCredentials(*mgrAuth); err != nil {
				return nil, fmt.Errorf("--manager-auth: %w", err)
			}
		}
		var ca *sasl.Passwords
		if *clientAuth != "" {
			if ca, err = sasl.LoadPasswordFile(*clientAuth); err != nil {
				return nil, fmt.Errorf("--client-auth: %w", err)
			}
		}
		if *file != "" {
			cfg, err := proxy.LoadConfig(*file)
			if cfg != nil {
				comparisons(cfg)
				cfg.Upstream, cfg.ManagerLogin, cfg.ClientAuth = up, ml, ca
			}
			return cfg, err
		}
		cfg := &proxy.Config{Listen: *listen, Timeout: *timeout, Upstream: up, ManagerLogin: ml, ClientAuth: ca}
		comparisons(cfg)
		switch {
		case *cluster != "":
			cfg.Cluster = &proxy.ClusterConfig{Nodes: splitList(*cluster)}
		case *mgr != "":
			cfg.Manager = *mgr
		case *servers != "":
			cfg.Servers = splitList(*servers)
			cfg.Distribution, cfg.Hash = *dist, *hash
		default:
			return nil, errors.New("give -c FILE, or --cluster, --manager or --servers")
		}
		return cfg, cfg.Check()
	}
	cfg, err := load()
	if err != nil {
		fmt.Fprintf(stderr, "vbcache proxy: %v\n", err)
		return 2
	}
	var lnTLS *tlsconf.Reloader
	if *lnCA != "" && *lnCert == "" {
		fmt.Fprintln(stderr, "vbcache proxy: --listen-tls-ca needs --listen-tls-cert")
		return 2
	}
	if *lnCert != "" || *lnKey != "" {
		opts := tlsconf.Options{ChainCert: *lnCert, Key: *lnKey}
		if *lnCA != "" {
			opts.CACert, opts.VerifyMode = *lnCA, tlsconf.VerifyRequire
		}
		if lnTLS, err = tlsconf.New(opts); err != nil {
			fmt.Fprintf(stderr, "vbcache proxy: --listen-tls-cert: %v\n", err)
			return 2
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := log.New(stderr, "", log.LstdFlags)
	if err := serveProxy(ctx, cfg, load, *file, lnTLS, *metricsListen, logger); err != nil {
		fmt.Fprintf(stderr, "vbcache proxy: %v\n", err)
		return 1
	}
	return 0
}

// comparisons sets the proxy's choice for comparisons from the
// environment: VBCACHE_NOHOLD=1 (no request hold), as docs/PERFORMANCE.md
// uses it.
func comparisons(cfg *proxy.Config) {
	cfg.NoRequestHold = os.Getenv("VBCACHE_NOHOLD") != ""
}

// serveProxy runs a proxy until ctx ends, reloading on SIGHUP and, when
// file is set, when its modification time changes. With lnTLS it serves
// clients over TLS only, and SIGHUP reloads the certificate too. With
// metricsListen it serves its Prometheus metrics there.
func serveProxy(ctx context.Context, cfg *proxy.Config, load func() (*proxy.Config, error), file string, lnTLS *tlsconf.Reloader, metricsListen string, logger *log.Logger) error {
	// SIGHUP is caught, and the file's mtime taken, before the proxy is
	// built and listens: a SIGHUP sent as soon as the port accepts then
	// reloads rather than ends the process (the signal's default action),
	// and a file changed while the proxy starts is reloaded.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var mtime time.Time
	if file != "" {
		if fi, err := os.Stat(file); err == nil {
			mtime = fi.ModTime()
		}
	}
	bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	p, err := proxy.New(bctx, cfg)
	cancel()
	if err != nil {
		return err
	}
	p.Version = version()
	p.Logf = logger.Printf
	ln, err := p.Listen()
	if err != nil {
		p.Close()
		return err
	}
	scheme := ""
	if lnTLS != nil {
		ln = tls.NewListener(ln, lnTLS.Config())
		scheme = " (TLS)"
	}
	if metricsListen != "" {
		hs, addr, err := metricsServer(metricsListen, p.Metrics())
		if err != nil {
			ln.Close()
			p.Close()
			return fmt.Errorf("--metrics-listen: %w", err)
		}
		defer hs.Close()
		logger.Printf("vbcache proxy: metrics on http://%s/metrics", addr)
	}
	serr := make(chan error, 1)
	go func() { serr <- p.Serve(ln) }() // owned here: p.Close ends it
	logger.Printf("vbcache proxy: listening on %s%s", ln.Addr(), scheme)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	reload := func(why string) {
		if lnTLS != nil && why == "SIGHUP" {
			if err := lnTLS.Reload(); err != nil {
				logger.Printf("vbcache proxy: reload (%s) of the TLS certificate failed, keeping the old one: %v", why, err)
			}
		}
		cfg, err := load()
		if err == nil {
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err = p.Reload(rctx, cfg)
			cancel()
		}
		if err != nil {
			logger.Printf("vbcache proxy: reload (%s) failed, keeping the old pool: %v", why, err)
			return
		}
		logger.Printf("vbcache proxy: reloaded (%s)", why)
	}
	for {
		select {
		case <-ctx.Done():
			p.Close()
			<-serr
			return nil
		case err := <-serr:
			p.Close()
			return err
		case <-hup:
			if file != "" {
				if fi, err := os.Stat(file); err == nil {
					mtime = fi.ModTime()
				}
			}
			reload("SIGHUP")
		case <-tick.C:
			if file == "" {
				continue
			}
			fi, err := os.Stat(file)
			if err != nil || fi.ModTime().Equal(mtime) {
				continue
			}
			mtime = fi.ModTime()
			reload("file changed")
		}
	}
}
