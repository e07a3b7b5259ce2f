package bench

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/clock"
	"github.com/vbcache/vbcache/internal/server"
	"github.com/vbcache/vbcache/internal/server/servertest"
	"github.com/vbcache/vbcache/internal/tlsconf"
)

// TestRunOverTLS: with TLSCA every connection is TLS, verified against
// the CA (a node serving only TLS answers every request; a CA that did not
// sign its certificate fails the run before it starts), and Args passes
// the file on to the child load of the harnesses.
func TestRunOverTLS(t *testing.T) {
	re := &realEnv{}
	if err := re.makeTLS(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(re.dir) })
	opts := map[string]string{}
	for _, kv := range strings.Split(re.tlsOpt, ",") {
		k, v, _ := strings.Cut(kv, "=")
		opts[k] = v
	}
	srvTLS, err := tlsconf.Build(tlsconf.Options{ChainCert: opts["ssl_chain_cert"], Key: opts["ssl_key"]})
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.Config{MaxConnsFast: true, Version: "bench-test", TLS: srvTLS}
	cfg.Store.Clock = clock.NewFake(time.Unix(1700000000, 0))
	addr := servertest.Start(t, cfg)

	c := Config{Servers: []string{addr}, Clients: 2, Requests: 400, KeyMax: 9, Ratio: Ratio{Set: 1, Get: 1}, TLSCA: re.tlsCA, Timeout: 10 * time.Second}
	if r := mustRun(t, c); r.Requests != 400 || r.Hits == 0 {
		t.Errorf("over TLS: %d requests, %d hits", r.Requests, r.Hits)
	}
	if a := c.Args(); !slices.Contains(a, "--tls-ca") || a[slices.Index(a, "--tls-ca")+1] != re.tlsCA {
		t.Errorf("Args %q do not pass --tls-ca", a)
	}
	if argv := re.loadArgv(Config{Servers: []string{addr}}); !slices.Contains(argv, re.tlsCA) {
		t.Errorf("a TLS harness's load %q has no --tls-ca", argv)
	}
	if argv, _ := re.serverArgv(KindMemcached, "-p", "1"); !slices.Contains(argv, "-Z") || !slices.Contains(argv, re.tlsOpt) {
		t.Errorf("a TLS harness's memcached %q is not started with -Z", argv)
	}

	other := &realEnv{}
	if err := other.makeTLS(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(other.dir) })
	c.TLSCA = filepath.Join(other.dir, "ca.pem")
	if _, err := Run(context.Background(), c); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a run trusting another CA: %v, want a certificate error", err)
	}
}
