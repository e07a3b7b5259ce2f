package lifecycle

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vbcache/vbcache/memcache"
	"github.com/vbcache/vbcache/test/nodeproc"
)

// `vbcache local --tls`, used as its output says: every link on TLS (the
// nodes -Z, their streams and the manager's control connections TLS and
// logged in as the administrator, the manager's API HTTPS, its etcd
// member TLS with client certificates, the proxy TLS
// to clients and to nodes). Through the proxy a TLS client writes keys;
// a fourth node started with the printed flags joins with ctl add-node
// and rebalance under a read load, then a node is killed and failed over
// with ctl: no read sees a wrong value, and every key reads back. The
// security files are 0600, and plain TCP gets no answer from the proxy or
// a node.
func TestLocalTLS(t *testing.T) {
	l := startLocal(t, 3, "--tls", "--replicas", "1", "--vbuckets", "64", "-m", "16", "--failover-after", "0")
	sec := func(name string) string { return filepath.Join(l.dir, "security", name) }
	out := l.stdout.String()
	mgrURL := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(l.base+1))
	exports := "export VBCACHE_CLUSTER_AUTH=" + sec("admin.pwdb") + " VBCACHE_TLS_CA=" + sec("ca.pem") +
		" VBCACHE_TLS_CERT=" + sec("admin.pem") + " VBCACHE_TLS_KEY=" + sec("admin-key.pem")
	for _, want := range []string{"manager (HTTP API):           " + mgrURL, exports, "openssl s_client -connect 127.0.0.1:" + strconv.Itoa(l.base)} {
		if !strings.Contains(out, want) {
			t.Fatalf("vbcache local --tls does not print %q:\n%s", want, out)
		}
	}
	if e := l.stderr.String(); !strings.Contains(e, ", etcd https://127.0.0.1:") {
		t.Errorf("the manager's etcd is not on TLS:\n%s", e)
	}
	for _, name := range []string{"ca.pem", "ca-key.pem", "node.pem", "node-key.pem", "admin.pem", "admin-key.pem", "admin.pwdb"} {
		if fi, err := os.Stat(sec(name)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want mode 0600", name, fi.Mode(), err)
		}
	}
	ctlEnv := append(os.Environ(), "VBCACHE_MANAGER="+mgrURL, "VBCACHE_CLUSTER_AUTH="+sec("admin.pwdb"),
		"VBCACHE_TLS_CA="+sec("ca.pem"), "VBCACHE_TLS_CERT="+sec("admin.pem"), "VBCACHE_TLS_KEY="+sec("admin-key.pem"))
	ctl := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"ctl"}, args...)...)
		cmd.Env = ctlEnv
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("vbcache ctl %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		return string(b)
	}

	for _, addr := range []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(l.base)), l.addr(0)} {
		if line, err := plainVersion(addr); strings.HasPrefix(line, "VERSION") {
			t.Errorf("plain TCP to %s answered %q", addr, line)
		} else {
			t.Logf("plain TCP to %s: %q, %v", addr, line, err)
		}
	}

	pem, err := os.ReadFile(sec("ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	proxyAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(l.base))
	client := func() *memcache.Client {
		c := memcache.New(proxyAddr)
		c.DialContext = (&tls.Dialer{Config: &tls.Config{RootCAs: roots}}).DialContext
		c.Timeout = 5 * time.Second
		return c
	}
	const keys = 2000
	key := func(i int) string { return fmt.Sprintf("k-%d", i) }
	value := func(i int) string { return fmt.Sprintf("v-%d-%s", i, strings.Repeat("x", i%50)) }
	w := client()
	for i := range keys {
		if err := w.Set(&memcache.Item{Key: key(i), Value: []byte(value(i))}); err != nil {
			t.Fatalf("set through the TLS proxy: %v", err)
		}
	}

	// A read load through the proxy for the grow and the failover,
	// bounded in count and time. A failover loses the killed node's
	// replicas' unreplicated tail at most, and these keys were written
	// before: every read must hit with the key's value.
	var reads, wrong, misses, errs atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			c := client()
			deadline := time.Now().Add(90 * time.Second)
			for i := r; i < 500_000 && time.Now().Before(deadline); i += 2 {
				select {
				case <-stop:
					return
				default:
				}
				k := i % keys
				it, err := c.Get(key(k))
				reads.Add(1)
				switch {
				case err == memcache.ErrCacheMiss:
					misses.Add(1)
				case err != nil:
					errs.Add(1)
				case string(it.Value) != value(k):
					wrong.Add(1)
				}
			}
		})
	}

	// A fourth node, with the flags local printed.
	port, err := nodeproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	fourth := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := []string{"server", "--vbuckets", "64", "--cluster-auth", sec("admin.pwdb"), "-Z", "-o",
		fmt.Sprintf("ssl_chain_cert=%s,ssl_key=%s,ssl_ca_cert=%s,ssl_verify_mode=1", sec("node.pem"), sec("node-key.pem"), sec("ca.pem")),
		"-p", strconv.Itoa(port), "-l", "127.0.0.1", "-U", "0", "-m", "16"}
	if os.Geteuid() == 0 {
		args = append(args, "-u", "root")
	}
	n4 := exec.Command(bin, args...)
	var n4out nodeproc.Output
	n4.Stdout, n4.Stderr = &n4out, &n4out
	n4.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := n4.Start(); err != nil {
		t.Fatal(err)
	}
	n4done := make(chan struct{})
	go func() { n4.Wait(); close(n4done) }() // owned by the test: the cleanup waits
	t.Cleanup(func() {
		n4.Process.Kill()
		<-n4done
		if t.Failed() {
			t.Logf("fourth node:\n%s", n4out.String())
		}
	})
	l.wait("the fourth node to listen", 10*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", fourth, 100*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	ctl("add-node", fourth)
	grew := time.Now()
	t.Logf("grow 3→4: %s (%v)", strings.TrimSpace(lastLine(ctl("rebalance", "--wait"))), time.Since(grew).Round(time.Millisecond))
	if st := ctl("status"); !strings.Contains(st, fourth) {
		t.Fatalf("after the grow:\n%s", st)
	}
	grownReads := reads.Load()

	victim := l.addr(0)
	if err := syscall.Kill(l.nodePid(0), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t.Logf("failover: %s", strings.TrimSpace(lastLine(ctl("failover", victim))))
	// The load keeps reading for a moment on the promoted replicas.
	l.wait("reads after the failover", 30*time.Second, func() bool { return reads.Load() > grownReads+500 })
	close(stop)
	wg.Wait()
	t.Logf("load through the TLS proxy: %d reads, %d wrong, %d misses, %d errors", reads.Load(), wrong.Load(), misses.Load(), errs.Load())
	if wrong.Load() != 0 {
		t.Errorf("%d reads saw a wrong value", wrong.Load())
	}
	for i := range keys {
		it, err := w.Get(key(i))
		if err != nil || string(it.Value) != value(i) {
			t.Fatalf("after the failover: get %s: %v %v", key(i), it, err)
		}
	}
	l.stop()
}

// plainVersion sends "version" over plain TCP and returns the first line
// of the answer (none from a TLS listener).
func plainVersion(addr string) (string, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(15 * time.Second))
	fmt.Fprintf(nc, "version\r\n")
	return bufio.NewReader(nc).ReadString('\n')
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
