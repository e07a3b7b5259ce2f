package nodeproc

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Manager is the Kind of a "vbcache manager" process.
const Manager Kind = "manager"

// StartManager runs "vbcache manager --listen 127.0.0.1:PORT flags…" with
// a free port and waits until its HTTP API accepts (embedded etcd start
// included, so up to 60 s). Addr is the HTTP address; the URL is
// "http://" + Addr. A t.Cleanup stops it.
func StartManager(tb testing.TB, vbcacheBin string, env []string, flags ...string) *Node {
	tb.Helper()
	port, err := FreePort()
	if err != nil {
		tb.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := append([]string{"manager", "--listen", addr}, withClusterAuth(tb, true, flags)...)
	n := &Node{Kind: Manager, Port: port, Addr: addr, Args: args, stderr: new(bytes.Buffer), done: make(chan struct{})}
	if err := noteManagerTLS(addr, args); err != nil {
		tb.Fatal(err)
	}
	n.cmd = exec.Command(vbcacheBin, args...)
	if len(env) > 0 {
		n.cmd.Env = append(os.Environ(), env...)
	}
	n.cmd.Stdout = lockedWriter{&n.mu, n.stderr}
	n.cmd.Stderr = lockedWriter{&n.mu, n.stderr}
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() {
		err := n.cmd.Wait()
		n.mu.Lock()
		n.err = err
		n.mu.Unlock()
		close(n.done)
	}()
	tb.Cleanup(n.Stop)
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return n
		}
		if n.Exited() {
			tb.Fatalf("vbcache %s exited before serving: %v\n%s", strings.Join(args, " "), n.ExitErr(), n.Stderr())
		}
		if time.Now().After(deadline) {
			tb.Fatalf("vbcache manager did not serve on %s within 60s\n%s", addr, n.Stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// URL returns "http://" + Addr, or "https://" + Addr for a manager
// started with --api-tls-cert.
func (n *Node) URL() string {
	if _, ok := managerTLS.Load(n.Addr); ok {
		return "https://" + n.Addr
	}
	return fmt.Sprintf("http://%s", n.Addr)
}
