// Package security tests vbcache's SASL SCRAM mechanisms with a client-side
// SCRAM written here from RFC 5802 (memcached offers no SCRAM, so these are
// vbcache-only), and TLS (-Z) with real TLS clients (pymemcache with an
// ssl.SSLContext, openssl s_client) against vbcache and, since Debian's
// memcached 1.6.18 is built with TLS, against memcached too.
package security

import (
	"fmt"
	"os"
	"testing"

	"github.com/vbcache/vbcache/test/nodeproc"
)

var (
	vbcacheBin string
	buildErr   error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vbcache-security-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	vbcacheBin, buildErr = nodeproc.BuildVbcache(dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
