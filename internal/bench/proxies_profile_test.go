package bench

import (
	"context"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/proxy"
)

// TestProxyProfile is not a test: it is a way to CPU-profile vbcache proxy
// under load with pprof (the proxy command has no profiling flag). It runs
// only when VBCACHE_PROXY_PROFILE names the output file:
//
//	go test -c -o /tmp/bench.test ./internal/bench
//	VBCACHE_PROXY_PROFILE=/tmp/proxy.pprof VBCACHE_PROXY_POOL=127.0.0.1:21001,127.0.0.1:21002 \
//	VBCACHE_PROXY_LISTEN=127.0.0.1:22201 VBCACHE_PROXY_SECONDS=10 GOMAXPROCS=1 \
//	    taskset -c 0 /tmp/bench.test -test.run TestProxyProfile
//	# meanwhile: vbcache bench -s 127.0.0.1:22201 --ratio 0:1 … on the other core
//	go tool pprof -top /tmp/bench.test /tmp/proxy.pprof
//
// The proxy is built from the same pool as "vbcache bench proxies" uses
// (ketama over md5), in this process, which does nothing else.
func TestProxyProfile(t *testing.T) {
	out := os.Getenv("VBCACHE_PROXY_PROFILE")
	if out == "" {
		t.Skip("set VBCACHE_PROXY_PROFILE (and VBCACHE_PROXY_POOL, VBCACHE_PROXY_LISTEN) to profile the proxy")
	}
	secs, _ := strconv.Atoi(os.Getenv("VBCACHE_PROXY_SECONDS"))
	if secs <= 0 {
		secs = 10
	}
	cfg := &proxy.Config{Listen: os.Getenv("VBCACHE_PROXY_LISTEN"), Servers: strings.Split(os.Getenv("VBCACHE_PROXY_POOL"), ","),
		Distribution: "ketama", Hash: "md5"}
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	p, err := proxy.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := p.Listen()
	if err != nil {
		t.Fatal(err)
	}
	go p.Serve(ln) // ended by p.Close below
	defer p.Close()
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Duration(secs) * time.Second)
	pprof.StopCPUProfile()
}
