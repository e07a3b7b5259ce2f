package nodeproc

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/manager/mgrclient"
	"github.com/vbcache/vbcache/internal/tlsconf"
)

// Cluster nodes refuse control requests unless they come from the cluster
// administrator (--cluster-auth) or the node runs with --insecure-cluster.
// The tests' clusters are secured as a deployment is: Start gives every
// cluster-mode vbcache node (flags with --vbuckets) and StartManager every
// manager a --cluster-auth file, unless the flags already choose
// (--cluster-auth or --insecure-cluster); the test reaches the nodes'
// control plane with DialAdmin. One administrator password, random, serves
// the whole test binary, so that a node and a manager started by different
// subtests still belong to one cluster.

// ClusterCredentials is the test binary's cluster administrator.
var ClusterCredentials = sync.OnceValue(func() *admin.Credentials {
	return &admin.Credentials{User: "admin", Password: rand.Text()}
})

// ClusterAuthFile writes ClusterCredentials as a --cluster-auth file in a
// directory tb's cleanup removes, and returns its path.
func ClusterAuthFile(tb testing.TB) string {
	tb.Helper()
	cr := ClusterCredentials()
	p := filepath.Join(tb.TempDir(), "admin.pwdb")
	if err := os.WriteFile(p, []byte(cr.User+":"+cr.Password+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	return p
}

// DialAdmin opens a control connection to a node, logged in as
// ClusterCredentials, over TLS when the node was started with -Z (see
// NodeTLS).
func DialAdmin(ctx context.Context, addr string) (*admin.Conn, error) {
	cr := ClusterCredentials()
	if tc := NodeTLS(addr); tc != nil {
		c := *cr
		c.TLS = tc
		cr = &c
	}
	return admin.DialWith(ctx, addr, cr)
}

// tlsNodes maps the address of each vbcache node started with -Z and
// -o ssl_ca_cert=FILE to a client configuration trusting FILE.
var tlsNodes sync.Map // string -> *tls.Config

// NodeTLS is the TLS configuration to reach the node at addr with: nil
// for a node that does not speak TLS. A node speaks TLS when Start gave
// it -Z; the client trusts the node's ssl_ca_cert and presents no
// certificate of its own.
func NodeTLS(addr string) *tls.Config {
	v, ok := tlsNodes.Load(addr)
	if !ok {
		return nil
	}
	return v.(*tls.Config)
}

// noteTLS records the TLS configuration of a node started with flags at
// addr, or that it speaks no TLS: a port is used again by the tests that
// run after (FreePort), and a plain node must not be dialled with the
// configuration of an earlier test's TLS node at the same address.
func noteTLS(addr string, flags []string) error {
	if !slices.Contains(flags, "-Z") && !slices.Contains(flags, "--enable-ssl") {
		tlsNodes.Delete(addr)
		return nil
	}
	for _, f := range flags {
		for _, opt := range strings.Split(f, ",") {
			if ca, ok := strings.CutPrefix(opt, "ssl_ca_cert="); ok {
				cfg, err := tlsconf.LoadClient(ca, "", "")
				if err != nil {
					return err
				}
				tlsNodes.Store(addr, cfg)
				return nil
			}
		}
	}
	return fmt.Errorf("nodeproc: a node with -Z needs -o ssl_ca_cert for the tests to reach it")
}

// withClusterAuth adds --cluster-auth to a cluster node's or a manager's
// flags that do not choose already.
func withClusterAuth(tb testing.TB, manager bool, flags []string) []string {
	if !manager && !slices.ContainsFunc(flags, func(f string) bool { return f == "--vbuckets" || len(f) > 11 && f[:11] == "--vbuckets=" }) {
		return flags
	}
	if slices.ContainsFunc(flags, func(f string) bool {
		return f == "--cluster-auth" || f == "--insecure-cluster" || len(f) > 15 && f[:15] == "--cluster-auth="
	}) {
		return flags
	}
	return append(slices.Clip(flags), "--cluster-auth", ClusterAuthFile(tb))
}

// ManagerClient is a client of the manager at url, logged in as
// ClusterCredentials (which StartManager's managers require for every
// change); each request may take timeout.
func ManagerClient(url string, timeout time.Duration) *mgrclient.Client {
	cr := ClusterCredentials()
	hc := &http.Client{Timeout: timeout}
	if host, ok := strings.CutPrefix(url, "https://"); ok {
		if v, ok := managerTLS.Load(strings.TrimRight(host, "/")); ok {
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.TLSClientConfig = v.(*tls.Config)
			hc.Transport = tr
		}
	}
	return &mgrclient.Client{Base: url, HTTP: hc, User: cr.User, Password: cr.Password}
}

// managerTLS maps the HTTP address of each manager started with
// --api-tls-cert to a client configuration trusting its --tls-ca.
var managerTLS sync.Map // string -> *tls.Config

// noteManagerTLS records the API's TLS configuration of a manager
// started with args.
func noteManagerTLS(addr string, args []string) error {
	if !slices.Contains(args, "--api-tls-cert") {
		return nil
	}
	i := slices.Index(args, "--tls-ca")
	if i < 0 || i+1 >= len(args) {
		return fmt.Errorf("nodeproc: a manager with --api-tls-cert needs --tls-ca for the tests to reach it")
	}
	cfg, err := tlsconf.LoadClient(args[i+1], "", "")
	if err != nil {
		return err
	}
	managerTLS.Store(addr, cfg)
	return nil
}
