package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/manager"
	"github.com/vbcache/vbcache/internal/proxy"
	"github.com/vbcache/vbcache/internal/tlsconf"
)

// runLocal is "vbcache local": a manager with an embedded etcd and N node
// processes on loopback, the proxy's port first (base), the manager's HTTP
// API on base+1, the nodes on base+2 … base+1+N, then the Prometheus
// metrics: the manager's and proxy's on base+2+N, the nodes' on base+3+N
// … base+2+2N. Ctrl-C stops everything and removes the data directory
// unless --keep.
func runLocal(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("vbcache local", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodes := fs.Int("nodes", 3, "number of cache nodes")
	replicas := fs.Int("replicas", 1, "replicas per vbucket (0-3)")
	base := fs.Int("base-port", 11211, "first port: proxy, then manager (base+1), then nodes (base+2 …), then the metrics (base+2+N …)")
	vbuckets := fs.Int("vbuckets", 1024, "number of vbuckets")
	memory := fs.Int("m", 64, "memory per node in megabytes (memcached's -m)")
	dataDir := fs.String("data-dir", "", "where the embedded etcd keeps its data (default: a new temporary directory)")
	keep := fs.Bool("keep", false, "keep the data directory when stopping")
	chain := fs.Bool("chain", false, "chained replication (replica 2 from replica 1) instead of star, as vbcache manager's flag")
	syncRep := fs.Bool("sync-replication", false, "nodes answer a write once its replicas have it (a failover then loses no acknowledged write)")
	failoverAfter := fs.Duration("failover-after", 10*time.Second, "the manager fails over a node that stops answering for this long (0: only by hand), as vbcache manager's flag")
	maxMoves := fs.Int("max-moves", 8, "vbucket moves at once during a rebalance, as vbcache manager's flag")
	useTLS := fs.Bool("tls", false, "every link on TLS: a CA and certificates made in the data directory's security/ (as ctl init-security), nodes with -Z, the manager's API on HTTPS, the proxy on TLS to clients and to nodes")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: vbcache local [flags]\n\nStarts a whole cluster on this machine: an embedded etcd, a manager and\nN cache nodes, populated and rebalanced; Ctrl-C stops it.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *nodes < 1 || *nodes > 64 || *replicas < 0 || *replicas > 3 || *base < 1 || *base+2+2**nodes > 65535 {
		fmt.Fprintln(stderr, "vbcache local: want 1-64 nodes, 0-3 replicas and ports below 65536")
		return 2
	}
	if *failoverAfter < 0 {
		fmt.Fprintln(stderr, "vbcache local: --failover-after must not be negative")
		return 2
	}
	if *maxMoves < 1 {
		fmt.Fprintln(stderr, "vbcache local: --max-moves must be at least 1")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := log.New(stderr, "", log.LstdFlags)
	if err := local(ctx, localConfig{nodes: *nodes, replicas: *replicas, base: *base, vbuckets: *vbuckets,
		memory: *memory, dataDir: *dataDir, keep: *keep, syncReplication: *syncRep, chain: *chain, failoverAfter: *failoverAfter, maxMoves: *maxMoves, tls: *useTLS}, stdout, logger); err != nil {
		fmt.Fprintf(stderr, "vbcache local: %v\n", err)
		return 1
	}
	return 0
}

type localConfig struct {
	nodes, replicas, base, vbuckets, memory int
	dataDir                                 string
	keep, syncReplication                   bool
	chain                                   bool          // the manager's --chain
	tls                                     bool          // --tls
	failoverAfter                           time.Duration // the manager's --failover-after
	maxMoves                                int           // the manager's --max-moves
}

func local(ctx context.Context, c localConfig, stdout io.Writer, logger *log.Logger) error {
	dir := c.dataDir
	if dir == "" {
		d, err := os.MkdirTemp("", "vbcache-local-")
		if err != nil {
			return err
		}
		dir = d
	}
	if !c.keep {
		defer os.RemoveAll(dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// The cluster administrator's login, which the nodes require for
	// control requests and the manager logs in with: made here, kept with
	// the data (a kept directory's is used again).
	authFile := filepath.Join(dir, secAdminPWDB)
	// With --tls, a CA and the certificates too, as init-security makes
	// them (its admin.pwdb is then the login): made once, kept with the
	// data.
	secDir := filepath.Join(dir, "security")
	sec := func(name string) string { return filepath.Join(secDir, name) }
	if c.tls {
		authFile = sec(secAdminPWDB)
		if _, err := os.Stat(sec(secCA)); errors.Is(err, fs.ErrNotExist) {
			if _, err := writeSecurity(secDir, []string{"localhost", "127.0.0.1", "::1"}, time.Now().Add(825*24*time.Hour)); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
	}
	if f, err := os.OpenFile(authFile, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
		_, err = f.Write(newAdminPWDB())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return err
	}
	// Check the ports first: a clear message beats a half-started cluster.
	for p := c.base; p <= c.base+2+2*c.nodes; p++ {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			return fmt.Errorf("port %d is taken (choose another --base-port): %w", p, err)
		}
		ln.Close()
	}
	etcdClient, etcdPeer, err := freePorts(2)
	if err != nil {
		return err
	}
	// Prometheus metrics: one endpoint for this process's manager and
	// proxy (metricsPort(0)), then one per node.
	metricsPort := func(i int) string { return strconv.Itoa(c.base + 2 + c.nodes + i) }
	metricsURL := func(i int) string { return "http://127.0.0.1:" + metricsPort(i) + "/metrics" }
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	// SIGHUP reloads every process's certificates and logins (a rotation
	// of the files in dir): the manager, which runs in this process,
	// catches it itself; local passes it on to its nodes. Caught before
	// any node starts, so that it never ends local.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// The nodes: child processes, stopped when local returns.
	var addrs []string
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			p.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			done := make(chan struct{})
			go func() { p.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				p.Process.Kill()
				<-done
			}
		}
	}()
	for i := range c.nodes {
		port := c.base + 2 + i
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		cmd := exec.Command(exe, "server", "--vbuckets", strconv.Itoa(c.vbuckets), "-p", strconv.Itoa(port),
			"-l", "127.0.0.1", "-U", "0", "-m", strconv.Itoa(c.memory), "--cluster-auth", authFile,
			"--metrics-listen", "127.0.0.1:"+metricsPort(1+i))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if os.Geteuid() == 0 {
			cmd.Args = append(cmd.Args, "-u", "root")
		}
		if c.syncReplication {
			cmd.Args = append(cmd.Args, "--sync-replication")
		}
		if c.tls {
			cmd.Args = append(cmd.Args, "-Z", "-o", localNodeTLS(sec))
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("starting node %s: %w", addr, err)
		}
		procs = append(procs, cmd)
		addrs = append(addrs, addr)
	}
	for _, a := range addrs {
		if err := waitListening(ctx, a, 10*time.Second); err != nil {
			return err
		}
	}
	hupDone := make(chan struct{})
	defer close(hupDone)
	go func() { // owned here: ends when local returns
		for {
			select {
			case <-hupDone:
				return
			case <-hup:
			}
			for _, p := range procs {
				p.Process.Signal(syscall.SIGHUP)
			}
		}
	}()
	mf := managerFlags{listen: net.JoinHostPort("127.0.0.1", strconv.Itoa(c.base+1)), dataDir: filepath.Join(dir, "etcd"), etcdName: "vbcache",
		etcdClient: "http://127.0.0.1:" + strconv.Itoa(etcdClient), etcdPeer: "http://127.0.0.1:" + strconv.Itoa(etcdPeer),
		vbuckets: c.vbuckets, replicas: c.replicas, chain: c.chain, failoverAfter: c.failoverAfter, maxMoves: c.maxMoves, prefix: "/vbcache/default",
		clusterAuth: authFile, metricsListen: "127.0.0.1:" + metricsPort(0)}
	proxyMetrics := &lateCollector{}
	mf.metrics = []prometheus.Collector{proxyMetrics}
	if c.tls {
		mf.etcdClient = "https://127.0.0.1:" + strconv.Itoa(etcdClient)
		mf.etcdPeer = "https://127.0.0.1:" + strconv.Itoa(etcdPeer)
		mf.tlsCA, mf.tlsCert, mf.tlsKey = sec(secCA), sec(secNode), sec(secNodeKey)
		mf.apiCert, mf.apiKey = sec(secNode), sec(secNodeKey)
	}
	ready := make(chan *manager.Manager, 1)
	mctx, mstop := context.WithCancel(ctx)
	defer mstop()
	merr := make(chan error, 1)
	go func() { merr <- runManager(mctx, mf, logger, ready) }() // owned here: mstop ends it
	var m *manager.Manager
	select {
	case m = <-ready:
	case err := <-merr:
		return err
	case <-ctx.Done():
		return nil
	}
	for {
		if leading, _ := m.Leader(); leading {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-merr:
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
	st := m.State()
	for _, a := range addrs {
		if slices.Contains(st.Nodes, a) {
			continue
		}
		if err := m.AddNode(ctx, a); err != nil {
			return err
		}
	}
	start := time.Now()
	if err := m.StartRebalance(ctx); err != nil && !errors.Is(err, manager.ErrRebalancing) {
		return err
	}
	for {
		s := m.State()
		if s.Rebalance == nil || !s.Rebalance.Running {
			if s.Rebalance != nil && s.Rebalance.Err != "" {
				return fmt.Errorf("rebalance: %s", s.Rebalance.Err)
			}
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(50 * time.Millisecond):
		}
	}
	mgr := "http://" + mf.listen
	// The proxy on the base port, following the manager's map.
	pcfg := &proxy.Config{Listen: net.JoinHostPort("127.0.0.1", strconv.Itoa(c.base)), Manager: mgr}
	var lnTLS *tls.Config
	if c.tls {
		mgr = "https://" + mf.listen
		pcfg.Manager = mgr
		up, err := tlsconf.LoadClient(sec(secCA), sec(secNode), sec(secNodeKey))
		if err != nil {
			return err
		}
		pcfg.Upstream = &admin.Credentials{TLS: up}
		r, err := tlsconf.New(tlsconf.Options{ChainCert: sec(secNode), Key: sec(secNodeKey)})
		if err != nil {
			return err
		}
		lnTLS = r.Config()
	}
	if err := pcfg.Check(); err != nil {
		return err
	}
	px, err := proxy.New(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	px.Version = version()
	px.Logf = logger.Printf
	pln, err := px.Listen()
	if err != nil {
		px.Close()
		return fmt.Errorf("proxy: %w", err)
	}
	if lnTLS != nil {
		pln = tls.NewListener(pln, lnTLS)
	}
	go px.Serve(pln) // owned here: px.Close ends it
	defer px.Close()
	pm := px.Metrics()
	proxyMetrics.c.Store(&pm)
	nodeMetrics := make([]string, c.nodes)
	var nodeTargets []string
	for i := range nodeMetrics {
		nodeMetrics[i] = metricsURL(1 + i)
		nodeTargets = append(nodeTargets, strconv.Quote("127.0.0.1:"+metricsPort(1+i)))
	}
	// A Prometheus configuration that scrapes them all, for
	// `prometheus --config.file` (Debian's prometheus package).
	promConfig := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(promConfig, []byte(fmt.Sprintf(`# Written by vbcache local: every process's metrics (docs/OPERATIONS.md, "Metrics").
global:
  scrape_interval: 5s
scrape_configs:
  - job_name: vbcache
    static_configs: [{targets: ["127.0.0.1:%s"]}]
  - job_name: nodes
    static_configs: [{targets: [%s]}]
`, metricsPort(0), strings.Join(nodeTargets, ", "))), 0o644); err != nil {
		return err
	}
	nodeHow, proxyHow, login, nodeFlags := "binary, text, meta", "(telnet localhost %[1]d reaches the cluster)", "", ""
	if c.tls {
		nodeHow = "TLS: binary, text, meta"
		proxyHow = "(TLS: openssl s_client -connect 127.0.0.1:%[1]d -CAfile " + sec(secCA) + " reaches the cluster)"
		login = " VBCACHE_TLS_CA=" + sec(secCA) + " VBCACHE_TLS_CERT=" + sec(secAdmin) + " VBCACHE_TLS_KEY=" + sec(secAdminKey)
		nodeFlags = " -Z -o " + localNodeTLS(sec)
	}
	proxyHow = fmt.Sprintf(proxyHow, c.base)
	fmt.Fprintf(stdout, `vbcache local: %d nodes, %d vbuckets, %d replica(s), ready in %v

  nodes (%s):   %s
  manager (HTTP API):           %s
  cluster map for clients:      %s/pools/default/b/default
  proxy (text, meta, binary):   127.0.0.1:%d   %s
  metrics (Prometheus):         %s   (manager and proxy)
                                %s   (nodes)
                                prometheus --config.file=%s   scrapes them all

  export VBCACHE_CLUSTER_AUTH=%s%s   (the cluster administrator: nodes and the manager take changes only from it)
  vbcache ctl --manager %s status
  vbcache server --vbuckets %d --cluster-auth $VBCACHE_CLUSTER_AUTH%s -p PORT -l 127.0.0.1   then   vbcache ctl --manager %s add-node 127.0.0.1:PORT && vbcache ctl --manager %s rebalance --wait

Data in %s (%s at exit). Ctrl-C stops the cluster; kill -HUP %d reloads every process's logins and certificates.
`, c.nodes, c.vbuckets, c.replicas, time.Since(start).Round(time.Millisecond), nodeHow, strings.Join(addrs, " "), mgr, mgr, c.base, proxyHow,
		metricsURL(0), strings.Join(nodeMetrics, " "), promConfig,
		authFile, login, mgr, c.vbuckets, nodeFlags, mgr, mgr, dir, map[bool]string{true: "kept", false: "removed"}[c.keep], os.Getpid())
	select {
	case <-ctx.Done():
	case err := <-merr:
		return err
	}
	fmt.Fprintln(stdout, "vbcache local: stopping")
	mstop()
	<-merr
	return nil
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(n int) (int, int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, 0, err
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports[0], ports[1], nil
}

// lateCollector passes a scrape on to a collector set after the metrics
// endpoint started (local's proxy, made after its manager); before, it
// has nothing. It describes nothing, which the registry takes as an
// unchecked collector.
type lateCollector struct {
	c atomic.Pointer[prometheus.Collector]
}

func (l *lateCollector) Describe(chan<- *prometheus.Desc) {}

func (l *lateCollector) Collect(ch chan<- prometheus.Metric) {
	if c := l.c.Load(); c != nil {
		(*c).Collect(ch)
	}
}

// waitListening waits until addr answers a control request.
func waitListening(ctx context.Context, addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := admin.Dial(ctx, addr)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s did not start: %w", addr, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// localNodeTLS is the -o value of a --tls node: the security files sec
// names, client certificates asked for (the admin's is a login).
func localNodeTLS(sec func(string) string) string {
	return fmt.Sprintf("ssl_chain_cert=%s,ssl_key=%s,ssl_ca_cert=%s,ssl_verify_mode=1", sec(secNode), sec(secNodeKey), sec(secCA))
}
