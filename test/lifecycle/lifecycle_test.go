// Package lifecycle checks how vbcache processes start and stop: SIGTERM
// and SIGINT shut a node down cleanly (exit status 0) while clients are
// connected, as memcached's do; `vbcache local` runs its manager with the
// --failover-after it is given and stops its whole cluster on SIGINT.
package lifecycle

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/vbcache/vbcache/test/nodeproc"
)

var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vbcache-lifecycle")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin, err = nodeproc.BuildVbcache(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestSignalsShutDownCleanly(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			n := nodeproc.Start(t, nodeproc.Vbcache, bin)
			// A connected client mid-session must not hold the shutdown up.
			c, err := net.Dial("tcp", n.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fmt.Fprintf(c, "set k 0 0 1\r\nx\r\n")
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "STORED\r\n" {
				t.Fatalf("set: %q %v", line, err)
			}
			if err := n.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if !n.WaitExit(10 * time.Second) {
				t.Fatalf("still running 10s after %v", sig)
			}
			if err := n.ExitErr(); err != nil {
				t.Fatalf("exit after %v: %v\n%s", sig, err, n.Stderr())
			}
		})
	}
}
