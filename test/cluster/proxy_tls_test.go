package cluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vbcache/vbcache/memcache"
	"github.com/vbcache/vbcache/test/nodeproc"
)

// The proxy in a TLS cluster, both sides on TLS: clients reach it over
// TLS only (--listen-tls-cert), it follows the manager's HTTPS map and
// reaches the nodes over TLS (--tls-ca). pymemcache over TLS passes its
// checks, and a Go text client's keys and a binary client's read back
// after a grow 3→4 made under a load that sees no wrong answer. A plain
// TCP client gets no answer.
func TestProxyOverTLS(t *testing.T) {
	file, nodes, m := startTLSCluster(t, 4, nil)
	px := startProxyProc(t, "--manager", m.url, "--tls-ca", file("ca.pem"),
		"--listen-tls-cert", file("node.pem"), "--listen-tls-key", file("node-key.pem"))

	pem, err := os.ReadFile(file("ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	tlsDial := (&tls.Dialer{Config: &tls.Config{RootCAs: roots}}).DialContext
	newClient := func(proto memcache.Protocol) *memcache.Client {
		c := memcache.New(px.addr)
		c.Protocol = proto
		c.DialContext = tlsDial
		c.Timeout = 5 * time.Second
		return c
	}

	// A plain TCP client: the proxy speaks only TLS, so "version" gets no
	// VERSION.
	if nc, err := net.DialTimeout("tcp", px.addr, 5*time.Second); err != nil {
		t.Fatal(err)
	} else {
		nc.SetDeadline(time.Now().Add(15 * time.Second))
		fmt.Fprintf(nc, "version\r\n")
		line, err := bufio.NewReader(nc).ReadString('\n')
		if strings.HasPrefix(line, "VERSION") {
			t.Errorf("plain TCP to the TLS proxy answered %q", line)
		}
		t.Logf("plain TCP to the TLS proxy: %q, %v", line, err)
		nc.Close()
	}

	// pymemcache over TLS.
	py := ""
	for _, cand := range []string{"/usr/bin/python3", "python3"} {
		if p, err := exec.LookPath(cand); err == nil && exec.Command(p, "-c", "import pymemcache").Run() == nil {
			py = p
			break
		}
	}
	if py == "" {
		nodeproc.Absent(t, "python3 with pymemcache (package python3-pymemcache)")
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		out, err := exec.CommandContext(ctx, py, filepath.Join("..", "security", "testdata", "pymemcache_tls_check.py"), px.addr, file("ca.pem")).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("pymemcache over TLS to the proxy: %v\n%s", err, out)
		}
		t.Logf("%s", strings.TrimSpace(string(out)))
	}

	// Keys written through the proxy in text and in binary.
	const keys = 1000
	text, bin := newClient(memcache.Text), newClient(memcache.Binary)
	for i := range keys {
		if err := text.Set(mcItem(fmt.Sprintf("t-%d", i), fmt.Sprintf("tv-%d", i))); err != nil {
			t.Fatalf("text set through the proxy: %v", err)
		}
		if err := bin.Set(mcItem(fmt.Sprintf("b-%d", i), fmt.Sprintf("bv-%d", i))); err != nil {
			t.Fatalf("binary set through the proxy: %v", err)
		}
	}

	// Grow 3→4 under a read load through the proxy, bounded in count
	// and time.
	var reads, wrong, errs atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			c := newClient([]memcache.Protocol{memcache.Text, memcache.Binary}[w])
			prefix := []string{"t", "b"}[w]
			deadline := time.Now().Add(60 * time.Second)
			for i := 0; i < 200_000 && time.Now().Before(deadline); i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := i % keys
				it, err := c.Get(fmt.Sprintf("%s-%d", prefix, k))
				reads.Add(1)
				switch {
				case err != nil:
					errs.Add(1)
				case string(it.Value) != fmt.Sprintf("%sv-%d", prefix, k):
					wrong.Add(1)
				}
			}
		})
	}
	m.addNode(nodes[3].Addr)
	rb := m.rebalance(60 * time.Second)
	close(stop)
	wg.Wait()
	t.Logf("grow 3→4 behind the TLS proxy: %d vbuckets moved; %d reads, %d wrong, %d errors", rb.Done, reads.Load(), wrong.Load(), errs.Load())
	if wrong.Load() != 0 || errs.Load() != 0 {
		t.Errorf("reads through the proxy during the grow: %d wrong, %d errors", wrong.Load(), errs.Load())
	}
	for i := range keys {
		for _, k := range []struct {
			c      *memcache.Client
			key, v string
		}{{text, fmt.Sprintf("t-%d", i), fmt.Sprintf("tv-%d", i)}, {bin, fmt.Sprintf("b-%d", i), fmt.Sprintf("bv-%d", i)}} {
			it, err := k.c.Get(k.key)
			if err != nil || string(it.Value) != k.v {
				t.Fatalf("after the grow: get %s: %v %v", k.key, it, err)
			}
		}
	}

}

// startTLSCluster runs n TLS cluster nodes (initSecurity's flags, -m 64,
// then extra) under a manager with TLS on every link and its API on
// HTTPS, the first three of them members with vbuckets.
func startTLSCluster(t *testing.T, n int, env []string, extra ...string) (file func(string) string, nodes []*nodeproc.Node, m mgr) {
	t.Helper()
	file, nodeTLS := initSecurity(t)
	for range n {
		nodes = append(nodes, nodeproc.StartEnv(t, nodeproc.Vbcache, vbcacheBin, env, append(append([]string{"-m", "64"}, extra...), nodeTLS...)...))
	}
	m = mgr{t: t, url: startManager(t, append(vb256, "--replicas", "1", "--failover-after", "0",
		"--tls-ca", file("ca.pem"), "--tls-cert", file("node.pem"), "--tls-key", file("node-key.pem"),
		"--api-tls-cert", file("node.pem"), "--api-tls-key", file("node-key.pem"))...).URL()}
	m.waitLeader()
	for _, nd := range nodes[:3] {
		m.addNode(nd.Addr)
	}
	m.rebalance(60 * time.Second)
	return file, nodes, m
}

// The proxy in front of nodes run with -S logs in to them as a data
// user (--auth, over SASL SCRAM inside TLS): a binary client's sets and
// gets go through, and pylibmc logs in over SASL to a proxy that asks its
// clients for a login (--client-auth). Without --auth the nodes refuse
// the proxy: the client gets an error, never a value or a miss. (A -S node speaks only the binary
// protocol, as memcached's does, so text clients are not served there.)
func TestProxySASLToNodes(t *testing.T) {
	pwdb := filepath.Join(t.TempDir(), "data.pwdb")
	if err := os.WriteFile(pwdb, []byte("app:app-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file, _, m := startTLSCluster(t, 3, []string{"MEMCACHED_SASL_PWDB=" + pwdb}, "-S")
	px := startProxyProc(t, "--manager", m.url, "--tls-ca", file("ca.pem"), "--auth", pwdb)
	c := memcache.New(px.addr)
	c.Protocol = memcache.Binary
	c.Timeout = 5 * time.Second
	for i := range 300 {
		k, v := fmt.Sprintf("s-%d", i), fmt.Sprintf("sv-%d", i)
		if err := c.Set(mcItem(k, v)); err != nil {
			t.Fatalf("set %s through the logged-in proxy: %v", k, err)
		}
		if it, err := c.Get(k); err != nil || string(it.Value) != v {
			t.Fatalf("get %s through the logged-in proxy: %v %v", k, it, err)
		}
	}

	// pylibmc (libmemcached, SASL PLAIN through Cyrus SASL) logs in to
	// a proxy asking its clients for a login (--client-auth), which logs
	// in to the nodes in turn; a wrong password stores nothing.
	clients := filepath.Join(t.TempDir(), "clients.pwdb")
	if err := os.WriteFile(clients, []byte("plb:plb-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gated := startProxyProc(t, "--manager", m.url, "--tls-ca", file("ca.pem"), "--auth", pwdb, "--client-auth", clients)
	py := "/usr/bin/python3"
	if exec.Command(py, "-c", "import pylibmc").Run() != nil {
		nodeproc.Absent(t, "python3 with pylibmc (package python3-pylibmc)")
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		out, err := exec.CommandContext(ctx, py, filepath.Join("..", "clients", "scripts", "pylibmc_binary_check.py"), gated.addr, "plb", "plb-secret", "wrong").CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("pylibmc with SASL through the proxy: %v\n%s", err, out)
		}
		t.Logf("%s", strings.TrimSpace(string(out)))
	}

	noAuth := startProxyProc(t, "--manager", m.url, "--tls-ca", file("ca.pem"))
	c = memcache.New(noAuth.addr)
	c.Protocol = memcache.Binary
	c.Timeout = 5 * time.Second
	if _, err := c.Get("s-1"); err == nil || errors.Is(err, memcache.ErrCacheMiss) {
		t.Errorf("get through a proxy that does not log in: %v, want an error", err)
	} else {
		t.Logf("a proxy without --auth: %v", err)
	}
}

// proxyProc is a "vbcache proxy" process.
type proxyProc struct {
	addr string
	out  nodeproc.Output
	cmd  *exec.Cmd
}

// startProxyProc runs "vbcache proxy --listen ADDR args…" until the test
// ends, once it accepts connections.
func startProxyProc(t *testing.T, args ...string) *proxyProc {
	t.Helper()
	port, err := nodeproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p := &proxyProc{addr: fmt.Sprintf("127.0.0.1:%d", port)}
	cmd := exec.Command(vbcacheBin, append([]string{"proxy", "--listen", p.addr}, args...)...)
	p.cmd = cmd
	cmd.Stdout, cmd.Stderr = &p.out, &p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }() // owned by the test: the cleanup waits for it
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("proxy %s log:\n%s", p.addr, p.out.String())
		}
	})
	waitFor(t, 30*time.Second, "the proxy to listen on "+p.addr, func() bool {
		select {
		case <-exited:
			t.Fatalf("proxy exited: %s", p.out.String())
		default:
		}
		c, err := net.DialTimeout("tcp", p.addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return p
}

// The proxy's certificate rotated under load: new files and a SIGHUP
// (memcached's refresh_certs, for the proxy). Clients on open connections
// go on; a client connecting afterwards is handed the new certificate;
// no request of the load fails or reads a wrong value.
func TestProxyTLSRotation(t *testing.T) {
	file, _, m := startTLSCluster(t, 3, nil)
	cert, key, issue := rotatingCert(t, file, "proxy")
	issue("proxy one")
	px := startProxyProc(t, "--manager", m.url, "--tls-ca", file("ca.pem"), "--listen-tls-cert", cert, "--listen-tls-key", key)

	pem, err := os.ReadFile(file("ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	tlsCfg := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}
	// served is the name in the certificate a new connection is shown.
	served := func() string {
		nc, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", px.addr, tlsCfg)
		if err != nil {
			t.Errorf("a new TLS connection to the proxy: %v", err)
			return ""
		}
		defer nc.Close()
		return nc.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if got := served(); got != "proxy one" {
		t.Fatalf("the proxy serves %q", got)
	}

	var ops, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			c := memcache.New(px.addr)
			c.DialContext = (&tls.Dialer{Config: tlsCfg}).DialContext
			c.Timeout = 5 * time.Second
			deadline := time.Now().Add(60 * time.Second)
			for i := 0; i < 100_000 && time.Now().Before(deadline); i++ {
				select {
				case <-stop:
					return
				default:
				}
				k, v := fmt.Sprintf("rot-%d-%d", w, i%200), fmt.Sprintf("v-%d", i)
				if err := c.Set(mcItem(k, v)); err != nil {
					failed.Add(1)
					t.Logf("set %s: %v", k, err)
					continue
				}
				if it, err := c.Get(k); err != nil || string(it.Value) != v {
					failed.Add(1)
					t.Logf("get %s: %v %v", k, it, err)
				}
				ops.Add(2)
			}
		})
	}
	waitFor(t, 30*time.Second, "the load to run", func() bool { return ops.Load() > 500 })
	issue("proxy two")
	if err := px.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "a new connection to be shown the new certificate", func() bool { return served() == "proxy two" })
	before := ops.Load()
	waitFor(t, 30*time.Second, "the load to go on after the rotation", func() bool { return ops.Load() > before+500 })
	close(stop)
	wg.Wait()
	t.Logf("certificate rotated under %d operations through the proxy, %d failed", ops.Load(), failed.Load())
	if failed.Load() != 0 {
		t.Errorf("%d operations failed across the rotation", failed.Load())
	}
}
