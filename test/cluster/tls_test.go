package cluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/tlsconf"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/memcache"
)

// TestTLSClusterGrowAndFailover runs a cluster whose every link is TLS
// and logged in: nodes with -Z (memcached's ssl_* options, from the
// files `vbcache ctl init-security` writes) and --cluster-auth, a
// manager dialing them with --tls-ca and a client certificate, clients
// over TLS. Nodes stream to each other only over TLS (their listeners
// speak nothing else), so replicas that catch up and moves that finish
// prove the node-to-node links; the manager's adds, rebalances and
// failover prove its links. Under a load, the cluster grows 3→4 with no
// wrong answer and no acknowledged write lost, then a node is killed and
// failed over, and every key still reads back from the promoted
// replicas. A plain TCP client gets no answer from any node, and the
// manager's API answers only HTTPS (--api-tls-cert).
func TestTLSClusterGrowAndFailover(t *testing.T) {
	keys := 5_000
	if raceEnabled || testing.Short() {
		keys = 2_000
	}
	file, nodeTLS := initSecurity(t)
	nodes := startNodes(t, 3, nodeTLS...)
	m := mgr{t: t, url: startManager(t, append(vb256, "--replicas", "1", "--failover-after", "0",
		"--tls-ca", file("ca.pem"), "--tls-cert", file("node.pem"), "--tls-key", file("node-key.pem"),
		"--api-tls-cert", file("node.pem"), "--api-tls-key", file("node-key.pem"))...).URL()}
	m.waitLeader()
	// The API speaks HTTPS only, with a certificate from the cluster's CA.
	if !strings.HasPrefix(m.url, "https://") {
		t.Fatalf("manager URL %s", m.url)
	}
	host := strings.TrimPrefix(m.url, "https://")
	if resp, err := http.Get("http://" + host + "/status"); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("plain HTTP to the HTTPS API: %v %v, want 400", resp, err)
	} else {
		resp.Body.Close()
	}
	if _, err := http.Get(m.url + "/status"); err == nil {
		t.Error("the API's certificate passed without the cluster's CA")
	}
	for _, n := range nodes {
		m.addNode(n.Addr)
	}
	m.rebalance(60 * time.Second)

	// Nothing but TLS: a plain binary NOOP gets no answer.
	for _, n := range nodes {
		if err := plainNoop(n.Addr); err == nil {
			t.Fatalf("%s answered a plain TCP request", n.Addr)
		}
	}

	clientTLS, err := tlsconf.LoadClient(file("ca.pem"), "", "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := memcache.NewCluster(context.Background(), addrs(nodes), &memcache.ClusterOptions{
		RefreshInterval: 200 * time.Millisecond, MaxTries: 30, MinBackoff: 2 * time.Millisecond,
		MaxBackoff: 50 * time.Millisecond, Timeout: 3 * time.Second,
		DialContext: (&tls.Dialer{Config: clientTLS}).DialContext,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	writeKeys(t, c, keys)

	l := &load{c: c, keys: keys}
	during := &loadStats{}
	l.cur.Store(during)
	l.start(2, 1)
	waitFor(t, 30*time.Second, "500 reads before the rebalance", func() bool { return during.reads() >= 500 })
	n4 := startNodes(t, 1, nodeTLS...)[0]
	nodes = append(nodes, n4)
	m.addNode(n4.Addr)
	r := m.rebalance(2 * time.Minute)
	l.halt()
	t.Logf("grow 3→4 over TLS: %d vbuckets moved in %v; load: %v, %d acknowledged writes",
		r.Done, r.Finished.Sub(r.Started).Round(time.Millisecond), during, l.nacked.Load())
	if during.wrong.Load() > 0 {
		t.Errorf("%d wrong answers during the rebalance", during.wrong.Load())
	}
	checkAll(t, c, keys, l)
	checkReplicas(t, m)

	before := m.getMap()
	victim := nodes[0]
	if err := victim.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	victim.WaitExit(10 * time.Second)
	since := time.Now()
	m.failover(victim.Addr)
	probe := -1
	for i := range keys {
		if before.activeOn(vbmap.VBucketString(oldKey(i), smallVBuckets)) == victim.Addr {
			probe = i
			break
		}
	}
	waitFor(t, 10*time.Second, "a key of the failed node read back", func() bool {
		it, err := c.Get(oldKey(probe))
		if errors.Is(err, memcache.ErrCacheMiss) {
			t.Fatalf("%s missing after the failover: its replica was not promoted", oldKey(probe))
		}
		return err == nil && string(it.Value) == oldValue(probe)
	})
	checkAll(t, c, keys, l)
	r = m.waitRebalanceSince(since, 2*time.Minute)
	t.Logf("failover over TLS: replicas rebuilt, %d vbuckets in %v", r.Done, r.Finished.Sub(r.Started).Round(time.Millisecond))
	checkReplicas(t, m)
}

// plainNoop sends a binary NOOP over plain TCP and reads its answer.
func plainNoop(addr string) error {
	nc, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := nc.Write(protocol.AppendRequest(nil, &protocol.Request{Header: protocol.Header{Opcode: protocol.OpNoop}})); err != nil {
		return err
	}
	var hdr [protocol.HeaderLen]byte
	if _, err := bufio.NewReader(nc).Read(hdr[:]); err != nil {
		return err
	}
	var h protocol.Header
	protocol.ParseHeader(hdr[:], &h)
	if h.Magic != protocol.MagicResponse {
		return fmt.Errorf("not a response: %x", hdr)
	}
	return nil
}

// initSecurity runs ctl init-security into a new directory; it returns
// the path of a file in it, and the flags of a cluster node (vb256) that
// serves TLS with its files and asks for client certificates.
func initSecurity(t *testing.T) (file func(string) string, nodeFlags []string) {
	t.Helper()
	sec := filepath.Join(t.TempDir(), "security")
	if out, err := exec.Command(vbcacheBin, "ctl", "init-security", "--dir", sec).CombinedOutput(); err != nil {
		t.Fatalf("ctl init-security: %v\n%s", err, out)
	}
	file = func(name string) string { return filepath.Join(sec, name) }
	return file, append(slices.Clip(vb256), "-Z", "-o", fmt.Sprintf("ssl_chain_cert=%s,ssl_key=%s,ssl_ca_cert=%s,ssl_verify_mode=1",
		file("node.pem"), file("node-key.pem"), file("ca.pem")))
}

// Two managers serving their API over HTTPS: a change sent to the
// follower reaches the leader through the follower's HTTPS client, which
// trusts the cluster's CA (--tls-ca), and takes effect.
func TestManagersOverHTTPS(t *testing.T) {
	file, nodeTLS := initSecurity(t)
	nodes := startNodes(t, 1, nodeTLS...)
	procs := startManagerCluster(t, 2, "--vbuckets", fmt.Sprint(smallVBuckets), "--replicas", "0", "--failover-after", "0",
		"--tls-ca", file("ca.pem"), "--tls-cert", file("node.pem"), "--tls-key", file("node-key.pem"),
		"--api-tls-cert", file("node.pem"), "--api-tls-key", file("node-key.pem"))
	ms := []mgr{{t: t, url: procs[0].URL()}, {t: t, url: procs[1].URL()}}
	leader := waitLeading(t, ms, 30*time.Second)
	for _, m := range ms {
		if !strings.HasPrefix(m.url, "https://") || !strings.HasPrefix(m.status().Leader, "https://") {
			t.Fatalf("manager %s names leader %q: want HTTPS", m.url, m.status().Leader)
		}
	}
	ms[1-leader].addNode(nodes[0].Addr)
	if s := ms[leader].status(); len(s.Nodes) != 1 || !s.Nodes[0].Member {
		t.Fatalf("after an add through the follower: %+v", s.Nodes)
	}
	ms[1-leader].rebalance(60 * time.Second)
	if s := ms[leader].status(); s.Nodes[0].Active != smallVBuckets {
		t.Fatalf("after a rebalance through the follower: %+v", s.Nodes)
	}

	// ctl reaches the HTTPS API with the cluster's CA, and says what is
	// missing without it.
	out, err := exec.Command(vbcacheBin, "ctl", "status", "--manager", ms[1-leader].url, "--tls-ca", file("ca.pem")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), nodes[0].Addr) {
		t.Errorf("ctl status with --tls-ca: %v\n%s", err, out)
	}
	out, err = exec.Command(vbcacheBin, "ctl", "status", "--manager", ms[leader].url).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "give --tls-ca FILE") {
		t.Errorf("ctl status without --tls-ca: %v\n%s", err, out)
	}
}

// Two managers whose embedded etcd members speak TLS to each other and to
// their clients (https:// URLs: the members serve with the cluster's
// certificate and require one from its CA of peers and clients): they
// elect a leader and serve an add and a rebalance. A client of their
// etcd over plain HTTP, or over TLS without a certificate, reads nothing;
// with the managers' certificate it reads the manager's state, and with
// another certificate of the CA nothing (etcd's own auth is on).
func TestEtcdOverTLS(t *testing.T) {
	file, nodeTLS := initSecurity(t)
	nodes := startNodes(t, 1, nodeTLS...)
	procs := startManagerClusterScheme(t, 2, "https", "--vbuckets", fmt.Sprint(smallVBuckets), "--replicas", "0", "--failover-after", "0",
		"--tls-ca", file("ca.pem"), "--tls-cert", file("node.pem"), "--tls-key", file("node-key.pem"))
	ms := []mgr{{t: t, url: procs[0].URL()}, {t: t, url: procs[1].URL()}}
	leader := waitLeading(t, ms, 30*time.Second)
	ms[1-leader].addNode(nodes[0].Addr)
	ms[leader].rebalance(60 * time.Second)
	// The follower serves its status from its own copy of the state,
	// which follows etcd's watch (over TLS here): it may lag the
	// leader's rebalance by a moment on a loaded machine.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		s := ms[1-leader].status()
		if len(s.Nodes) == 1 && s.Nodes[0].Active == smallVBuckets {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the follower's status 15 s after the rebalance: %+v", s.Nodes)
		}
	}

	endpoint := procs[0].Args[slices.Index(procs[0].Args, "--etcd-client-url")+1]
	if !strings.HasPrefix(endpoint, "https://") {
		t.Fatalf("etcd client URL %s", endpoint)
	}
	get := func(endpoint string, tc *tls.Config) error {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second, TLS: tc, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err = cli.Get(ctx, "/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err
	}
	caOnly, err := tlsconf.LoadClient(file("ca.pem"), "", "")
	if err != nil {
		t.Fatal(err)
	}
	withCert, err := tlsconf.LoadClient(file("ca.pem"), file("node.pem"), file("node-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if err := get("http://"+strings.TrimPrefix(endpoint, "https://"), nil); err == nil {
		t.Error("etcd answered a plain HTTP client")
	}
	if err := get(endpoint, caOnly); err == nil {
		t.Error("etcd answered a TLS client without a certificate")
	} else {
		t.Logf("etcd to a TLS client without a certificate: %v", err)
	}
	if err := get(endpoint, withCert); err != nil {
		t.Errorf("etcd to a client with the cluster's certificate: %v", err)
	}
	// etcd's own auth is on: a certificate the CA signed for anyone but
	// the managers' user (the common name of their --tls-cert) reads
	// nothing, the administrator's ctl certificate included.
	cert, key, issue := rotatingCert(t, file, "intruder")
	issue("intruder")
	for _, c := range [][2]string{{cert, key}, {file("admin.pem"), file("admin-key.pem")}} {
		other, err := tlsconf.LoadClient(file("ca.pem"), c[0], c[1])
		if err != nil {
			t.Fatal(err)
		}
		if err := get(endpoint, other); err == nil {
			t.Errorf("etcd answered %s, a certificate of the CA that names another user", c[0])
		} else {
			t.Logf("etcd to %s: %v", filepath.Base(c[0]), err)
		}
	}
}

// The manager's certificates follow SIGHUP: a new API certificate (and
// the one it presents to nodes, the same files here) is shown to the
// next HTTPS connection, while the manager keeps driving its nodes (an
// add and a rebalance after the reload).
func TestManagerTLSRotation(t *testing.T) {
	file, nodeTLS := initSecurity(t)
	nodes := startNodes(t, 1, nodeTLS...)
	cert, key, issue := rotatingCert(t, file, "manager")
	issue("manager one")
	mp := startManager(t, append(vb256, "--replicas", "0", "--failover-after", "0",
		"--tls-ca", file("ca.pem"), "--tls-cert", cert, "--tls-key", key, "--api-tls-cert", cert, "--api-tls-key", key)...)
	m := mgr{t: t, url: mp.URL()}
	m.waitLeader()
	roots, err := tlsconf.LoadClient(file("ca.pem"), "", "")
	if err != nil {
		t.Fatal(err)
	}
	served := func() string {
		cfg := roots.Clone()
		cfg.ServerName = "127.0.0.1"
		nc, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", strings.TrimPrefix(m.url, "https://"), cfg)
		if err != nil {
			t.Errorf("a new TLS connection to the manager: %v", err)
			return ""
		}
		defer nc.Close()
		return nc.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if got := served(); got != "manager one" {
		t.Fatalf("the manager serves %q", got)
	}
	issue("manager two")
	if err := mp.(interface{ Signal(os.Signal) error }).Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "a new connection to be shown the new certificate", func() bool { return served() == "manager two" })
	m.addNode(nodes[0].Addr)
	m.rebalance(60 * time.Second)
	if s := m.status(); len(s.Nodes) != 1 || s.Nodes[0].Active != smallVBuckets {
		t.Fatalf("after the reload: %+v", s.Nodes)
	}
}

// rotatingCert names a certificate and key file for name in a new
// directory; issue (re)writes them with a new certificate from the CA of
// init-security's files (file), its common name cn, valid for 127.0.0.1
// as a server and a client. Each file is replaced whole (a rename), so a
// reload never reads half of one.
func rotatingCert(t *testing.T, file func(string) string, name string) (cert, key string, issue func(cn string)) {
	t.Helper()
	dir := t.TempDir()
	cert, key = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	ca, err := tlsconf.LoadCA(file("ca.pem"), file("ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return cert, key, func(cn string) {
		t.Helper()
		c, k, err := ca.Issue(tlsconf.Leaf{Name: cn, Hosts: []string{"127.0.0.1"}, Server: true, Client: true, NotAfter: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []struct {
			path string
			b    []byte
		}{{key, k}, {cert, c}} {
			if err := os.WriteFile(f.path+".new", f.b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(f.path+".new", f.path); err != nil {
				t.Fatal(err)
			}
		}
	}
}
