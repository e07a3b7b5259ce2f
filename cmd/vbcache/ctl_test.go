package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/vbmap"
	"github.com/vbcache/vbcache/internal/vbucket"
	"github.com/vbcache/vbcache/test/nodeproc"
)

// ctlRun runs "vbcache ctl args..." in process and returns its exit
// status and outputs.
func ctlRun(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	st := runCtl(args, &out, &errb)
	return st, out.String(), errb.String()
}

// TestCtlAgainstNodes runs the ctl subcommands against real nodes: get and
// set a state, replicate, streams, and move a vbucket with its items.
func TestCtlAgainstNodes(t *testing.T) {
	bin, err := nodeproc.BuildVbcache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const nvb, vb = 16, 6
	na := nodeproc.Start(t, nodeproc.Vbcache, bin, "--vbuckets", strconv.Itoa(nvb))
	nb := nodeproc.Start(t, nodeproc.Vbcache, bin, "--vbuckets", strconv.Itoa(nvb))
	vbs := strconv.Itoa(vb)
	auth := nodeproc.ClusterAuthFile(t)

	// Without the administrator's credentials the node refuses, and ctl
	// says what to give it.
	t.Setenv("VBCACHE_CLUSTER_AUTH", "")
	st, out, errs := ctlRun("vbucket", "--node", na.Addr, "--vbucket", vbs)
	if st != 1 || out != "" || !strings.Contains(errs, "Auth failure") || !strings.Contains(errs, "give --cluster-auth FILE") {
		t.Fatalf("get without credentials: %d %q %q", st, out, errs)
	}
	st, out, errs = ctlRun("vbucket", "--node", na.Addr, "--vbucket", vbs, "--cluster-auth", auth)
	if st != 0 || out != fmt.Sprintf("vbucket %d on %s: dead\n", vb, na.Addr) {
		t.Fatalf("get: %d %q %q", st, out, errs)
	}
	// A wrong password is refused at login.
	bad := filepath.Join(t.TempDir(), "bad.pwdb")
	if err := os.WriteFile(bad, []byte("admin:wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if st, out, errs = ctlRun("vbucket", "--node", na.Addr, "--vbucket", vbs, "--cluster-auth", bad); st != 1 || out != "" || !strings.Contains(errs, "Auth failure") {
		t.Fatalf("get with a wrong password: %d %q %q", st, out, errs)
	}
	// The rest find the file in $VBCACHE_CLUSTER_AUTH.
	t.Setenv("VBCACHE_CLUSTER_AUTH", auth)
	st, out, errs = ctlRun("vbucket", "--node", na.Addr, "--vbucket", vbs, "--set", "active")
	if st != 0 || out != fmt.Sprintf("vbucket %d on %s: active (was dead)\n", vb, na.Addr) {
		t.Fatalf("set: %d %q %q", st, out, errs)
	}

	c, err := nodeproc.DialAdmin(context.Background(), na.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var keys []string
	for i := 0; len(keys) < 500; i++ {
		if k := fmt.Sprintf("ctl-%d", i); vbmap.VBucketString(k, nvb) == vb {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		if _, err := c.Do(protocol.OpSet, vb, make([]byte, 8), []byte(k), []byte(k)); err != nil {
			t.Fatal(err)
		}
	}

	// Replication B ← A, seen in "streams" on A, then stopped.
	if st, out, errs = ctlRun("replicate", "--vbucket", vbs, "--from", na.Addr, "--to", nb.Addr); st != 0 {
		t.Fatalf("replicate: %d %q %q", st, out, errs)
	}
	if st, out, errs = ctlRun("streams", "--node", na.Addr); st != 0 || !strings.Contains(out, "log_ring_bytes ") {
		t.Fatalf("streams: %d %q %q", st, out, errs)
	}
	if st, out, errs = ctlRun("stop-replication", "--node", nb.Addr, "--vbucket", vbs); st != 0 {
		t.Fatalf("stop-replication: %d %q %q", st, out, errs)
	}

	st, out, errs = ctlRun("move-vbucket", "--vbucket", vbs, "--from", na.Addr, "--to", nb.Addr, "--timeout", "30s")
	t.Logf("move-vbucket:\n%s%s", out, errs)
	if st != 0 || !strings.HasPrefix(out, fmt.Sprintf("moved vbucket %d from %s to %s", vb, na.Addr, nb.Addr)) ||
		!strings.Contains(out, "no node holds a cluster map") || !strings.Contains(out, "takeover ") {
		t.Fatalf("move-vbucket: %d %q %q", st, out, errs)
	}
	cb, err := nodeproc.DialAdmin(context.Background(), nb.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close()
	for _, k := range keys {
		if v, err := cb.Do(protocol.OpGet, vb, nil, []byte(k), nil); err != nil || string(v) != k {
			t.Fatalf("%s on the target: %q %v", k, v, err)
		}
	}
	if st, out, _ = ctlRun("vbucket", "--node", na.Addr, "--vbucket", vbs); out != fmt.Sprintf("vbucket %d on %s: dead\n", vb, na.Addr) {
		t.Fatalf("source after the move: %d %q", st, out)
	}

	// Moving it again from A fails the preflight: exit 1, nothing on stdout.
	st, out, errs = ctlRun("move-vbucket", "--vbucket", vbs, "--from", na.Addr, "--to", nb.Addr)
	if st != 1 || out != "" || !strings.Contains(errs, "not active") {
		t.Fatalf("move from a dead source: %d %q %q", st, out, errs)
	}
	if s, err := cb.GetVBucket(vb); err != nil || s != vbucket.Active {
		t.Fatalf("target after the refused move: %v %v", s, err)
	}
	// A node that is not there: exit 1 with the reason.
	st, _, errs = ctlRun("vbucket", "--node", "127.0.0.1:1", "--vbucket", "0")
	if st != 1 || !strings.Contains(errs, "refused") {
		t.Fatalf("no node: %d %q", st, errs)
	}
}

// TestCtlFlagErrors: usage errors exit 2 with a message on stderr and
// nothing on stdout; help exits 0.
func TestCtlFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in stderr
	}{
		{nil, "Usage: vbcache ctl"},
		{[]string{"frobnicate"}, `unknown subcommand "frobnicate"`},
		{[]string{"move-vbucket", "--from", "a:1", "--to", "b:2"}, "--vbucket N is required"},
		{[]string{"move-vbucket", "--vbucket", "1", "--to", "b:2"}, "--from HOST:PORT is required"},
		{[]string{"move-vbucket", "--vbucket", "1", "--from", "a:1", "--to", "b"}, `--to "b" is not HOST:PORT`},
		{[]string{"move-vbucket", "--vbucket", "70000", "--from", "a:1", "--to", "b:2"}, "--vbucket 70000 out of range"},
		{[]string{"move-vbucket", "--vbucket", "x", "--from", "a:1", "--to", "b:2"}, "invalid value"},
		{[]string{"move-vbucket", "--vbucket", "1", "--from", "a:1", "--to", "b:2", "--timeout", "0s"}, "--timeout must be positive"},
		{[]string{"move-vbucket", "--vbucket", "1", "--from", "a:1", "--to", "b:2", "--nodes", "c"}, `--nodes "c" is not HOST:PORT`},
		{[]string{"move-vbucket", "--vbucket", "1", "--from", "a:1", "--to", "b:2", "extra"}, `unexpected argument "extra"`},
		{[]string{"move-vbucket", "--bucket", "1"}, "flag provided but not defined: -bucket"},
		{[]string{"vbucket", "--vbucket", "1"}, "--node HOST:PORT is required"},
		{[]string{"vbucket", "--node", "a:1"}, "--vbucket N is required"},
		{[]string{"vbucket", "--node", "a:1", "--vbucket", "1", "--set", "alive"}, `--set "alive" is not active, replica, pending or dead`},
		{[]string{"replicate", "--vbucket", "1", "--from", "a:1"}, "--to HOST:PORT is required"},
		{[]string{"stop-replication", "--node", "a:1"}, "--vbucket N is required"},
		{[]string{"streams"}, "--node HOST:PORT is required"},
	} {
		st, out, errs := ctlRun(tc.args...)
		if st != 2 || out != "" || !strings.Contains(errs, tc.want) {
			t.Errorf("%q: status %d, stdout %q, stderr %q (want %q)", tc.args, st, out, errs, tc.want)
		}
	}
	for _, h := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		st, out, _ := ctlRun(h...)
		if st != 0 {
			t.Errorf("%q: status %d", h, st)
		}
		for _, name := range []string{"move-vbucket", "vbucket", "replicate", "stop-replication", "streams", "help"} {
			if !strings.Contains(out, "\n  "+name+" ") {
				t.Errorf("%q does not list %s:\n%s", h, name, out)
			}
		}
	}
	if st, _, errs := ctlRun("move-vbucket", "-h"); st != 0 || !strings.Contains(errs, "-timeout") {
		t.Errorf("move-vbucket -h: %d %q", st, errs)
	}
}

// TestCtlManagerNeedsAdmin: against a manager run with --cluster-auth,
// ctl's changes need --cluster-auth (or $VBCACHE_CLUSTER_AUTH): without
// it the manager's 401 is printed with what to give, a read is served
// without it, and with it the change is made.
func TestCtlManagerNeedsAdmin(t *testing.T) {
	bin, err := nodeproc.BuildVbcache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var ports [2]int
	for i := range ports {
		if ports[i], err = nodeproc.FreePort(); err != nil {
			t.Fatal(err)
		}
	}
	n := nodeproc.Start(t, nodeproc.Vbcache, bin, "--vbuckets", "16")
	m := nodeproc.StartManager(t, bin, nil, "--vbuckets", "16", "--replicas", "0", "--failover-after", "0",
		"--data-dir", t.TempDir(), "--etcd-client-url", fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		"--etcd-peer-url", fmt.Sprintf("http://127.0.0.1:%d", ports[1]))
	// Changes wait for a leader; wait for one, so that a refusal below
	// is the login's.
	mc := nodeproc.ManagerClient(m.URL(), 5*time.Second)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if s, err := mc.Status(context.Background()); err == nil && s.Leading {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the manager never leads: %+v, %v", s, err)
		}
	}
	t.Setenv("VBCACHE_CLUSTER_AUTH", "")
	st, out, errs := ctlRun("add-node", "--manager", m.URL(), n.Addr)
	if st != 1 || out != "" || !strings.Contains(errs, "administrator's login") || !strings.Contains(errs, "give --cluster-auth FILE") {
		t.Fatalf("add-node without credentials: %d %q %q", st, out, errs)
	}
	if st, out, errs = ctlRun("status", "--manager", m.URL()); st != 0 || strings.Contains(out, n.Addr) {
		t.Fatalf("status without credentials: %d %q %q (want served, the node not a member)", st, out, errs)
	}
	if st, out, errs = ctlRun("add-node", "--manager", m.URL(), "--cluster-auth", nodeproc.ClusterAuthFile(t), n.Addr); st != 0 {
		t.Fatalf("add-node: %d %q %q", st, out, errs)
	}
	if st, out, errs = ctlRun("status", "--manager", m.URL()); st != 0 || !strings.Contains(out, n.Addr) {
		t.Fatalf("status after the add: %d %q %q", st, out, errs)
	}
}

// TestCtlOverTLS runs ctl against a node with -Z that asks for client
// certificates (ssl_verify_mode=1), with the files ctl init-security
// writes: plain TCP gets no answer and a hint, the CA alone reaches the
// node but not its control plane, the CA with the admin's certificate or
// with --cluster-auth does; a client certificate without --tls-ca is a
// usage error.
func TestCtlOverTLS(t *testing.T) {
	bin, err := nodeproc.BuildVbcache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sec := filepath.Join(t.TempDir(), "security")
	if st, out, errs := ctlRun("init-security", "--dir", sec); st != 0 {
		t.Fatalf("init-security: %d %q %q", st, out, errs)
	}
	f := func(name string) string { return filepath.Join(sec, name) }
	n := nodeproc.Start(t, nodeproc.Vbcache, bin, "--vbuckets", "16", "-Z", "-o",
		"ssl_chain_cert="+f("node.pem")+",ssl_key="+f("node-key.pem")+",ssl_ca_cert="+f("ca.pem")+",ssl_verify_mode=1")
	for _, e := range []string{"VBCACHE_CLUSTER_AUTH", "VBCACHE_TLS_CA", "VBCACHE_TLS_CERT", "VBCACHE_TLS_KEY"} {
		t.Setenv(e, "")
	}
	get := func(args ...string) (int, string, string) {
		return ctlRun(append([]string{"vbucket", "--node", n.Addr, "--vbucket", "3"}, args...)...)
	}
	want := fmt.Sprintf("vbucket 3 on %s: dead\n", n.Addr)
	if st, out, errs := get(); st != 1 || out != "" || !strings.Contains(errs, "give --tls-ca FILE") {
		t.Errorf("plain TCP to a TLS node: %d %q %q", st, out, errs)
	}
	if st, out, errs := get("--tls-ca", f("ca.pem")); st != 1 || !strings.Contains(errs, "Auth failure") {
		t.Errorf("TLS without a login: %d %q %q", st, out, errs)
	}
	if st, out, errs := get("--tls-ca", f("ca.pem"), "--tls-cert", f("admin.pem"), "--tls-key", f("admin-key.pem")); st != 0 || out != want {
		t.Errorf("TLS with the admin's certificate: %d %q %q", st, out, errs)
	}
	if st, out, errs := get("--tls-ca", f("ca.pem"), "--cluster-auth", nodeproc.ClusterAuthFile(t)); st != 0 || out != want {
		t.Errorf("TLS with --cluster-auth: %d %q %q", st, out, errs)
	}
	t.Setenv("VBCACHE_TLS_CA", f("ca.pem"))
	t.Setenv("VBCACHE_TLS_CERT", f("admin.pem"))
	t.Setenv("VBCACHE_TLS_KEY", f("admin-key.pem"))
	if st, out, errs := get(); st != 0 || out != want {
		t.Errorf("TLS from the environment: %d %q %q", st, out, errs)
	}
	t.Setenv("VBCACHE_TLS_CA", "")
	if st, out, errs := get(); st != 1 || !strings.Contains(errs, "needs the cluster's CA") {
		t.Errorf("a client certificate without --tls-ca: %d %q %q", st, out, errs)
	}
}
