// Package nodeproc starts cache-node processes for the black-box test suites
// under test/: a real memcached (Debian's 1.6.18 is the reference) and the
// vbcache binary built from this module.
//
// Each Node is one child process listening on 127.0.0.1 on a port picked
// free at start. Start registers a t.Cleanup that stops the process, so a
// test never leaks a server. Nothing here sleeps for long: waiting for a
// server to accept is a bounded poll (10 ms steps, 10 s at most).
//
// Tools that a suite needs (memcached itself, client libraries) are looked
// up with Need: when a tool is absent the test is skipped with a message,
// except in CI (environment CI=true), where absence is a failure.
package nodeproc

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Kind names a server implementation.
type Kind string

// The two implementations the suites compare.
const (
	Memcached Kind = "memcached"
	Vbcache   Kind = "vbcache"
)

// InCI reports whether the tests run in CI (CI=true), where missing tools
// fail instead of skipping.
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v == "true" || v == "1" || v == "yes"
}

// Need returns the path of the first of names found in PATH. If none is
// found the test is skipped, or fails in CI.
func Need(tb testing.TB, why string, names ...string) string {
	tb.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	Absent(tb, fmt.Sprintf("%s not found in PATH (%s)", strings.Join(names, " or "), why))
	return ""
}

// Absent skips the test because a tool is missing, or fails it in CI.
func Absent(tb testing.TB, msg string) {
	tb.Helper()
	if InCI() {
		tb.Fatalf("CI=true and a required tool is absent: %s", msg)
	}
	tb.Skipf("skipping: %s (install it, see .ci/run)", msg)
}

// ModuleRoot returns the directory holding this module's go.mod.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside a Go module")
	}
	return filepath.Dir(mod), nil
}

var buildMu sync.Mutex

// BuildVbcache builds ./cmd/vbcache into dir and returns the binary's path.
// The output of a failed build is part of the error.
func BuildVbcache(dir string) (string, error) { return BuildVbcacheTags(dir) }

// BuildVbcacheTags is BuildVbcache with build tags (go build -tags),
// such as vbcache_nofence for a deliberately broken node
// (internal/server, lease.go). With no tags it is BuildVbcache.
func BuildVbcacheTags(dir string, tags ...string) (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "vbcache")
	args := []string{"build", "-o", bin}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command("go", append(args, "./cmd/vbcache")...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return bin, nil
}

// Node is a running server process.
type Node struct {
	Kind Kind
	Addr string // 127.0.0.1:port
	Port int
	Args []string // full argv after the program name

	cmd    *exec.Cmd
	stderr *bytes.Buffer
	done   chan struct{} // closed when the process has exited
	mu     sync.Mutex
	err    error // the process's exit status, after done
}

// Pid returns the process id.
func (n *Node) Pid() int { return n.cmd.Process.Pid }

// Exited reports whether the process has exited.
func (n *Node) Exited() bool {
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

// ExitErr returns the process's exit status (nil for exit 0) once it has
// exited.
func (n *Node) ExitErr() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err
}

// Signal sends sig to the process.
func (n *Node) Signal(sig os.Signal) error { return n.cmd.Process.Signal(sig) }

// Stderr returns what the process wrote to its stderr so far.
func (n *Node) Stderr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stderr.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.b.Len() < 1<<20 {
		w.b.Write(p)
	}
	return len(p), nil
}

// Output collects a process's output (give it as cmd.Stdout and
// cmd.Stderr) for a test that reads it while the process runs.
type Output struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

// Write appends p.
func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

// String returns everything written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
// It is drawn below the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range): a port the kernel hands out
// for ":0" is one it also gives to outgoing connections, and a CI run
// lost one that way between this check and the manager's bind ("bind:
// address already in use").
func FreePort() (int, error) {
	lo := 32768 // Linux's default start of the ephemeral range
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				lo = n
			}
		}
	}
	const base = 10000
	if lo <= base+1000 {
		return ephemeralPort()
	}
	for range 100 {
		port := base + rand.IntN(lo-base)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue // in use: draw again
		}
		l.Close()
		return port, nil
	}
	return ephemeralPort()
}

// ephemeralPort is a port the kernel picks for ":0".
func ephemeralPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Argv returns the command line that runs a server of kind on port with the
// extra memcached-style flags. vbcacheBin is the vbcache binary (ignored for
// memcached).
func Argv(kind Kind, vbcacheBin string, port int, flags []string) (string, []string) {
	base := []string{"-p", strconv.Itoa(port), "-l", "127.0.0.1"}
	switch kind {
	case Memcached:
		args := append([]string{}, base...)
		args = append(args, "-U", "0")
		if os.Geteuid() == 0 {
			args = append(args, "-u", "root") // memcached refuses to run as root otherwise
		}
		return "memcached", append(args, flags...)
	default:
		args := append([]string{"server"}, base...)
		return vbcacheBin, append(args, flags...)
	}
}

// Start starts a server and waits until it accepts connections. It tries a
// few ports in case another process takes the one picked. The node is
// stopped by t.Cleanup.
func Start(tb testing.TB, kind Kind, vbcacheBin string, flags ...string) *Node {
	tb.Helper()
	return StartEnv(tb, kind, vbcacheBin, nil, flags...)
}

// StartEnv is Start with extra environment variables ("NAME=value") for the
// server process, on top of the test's own environment.
func StartEnv(tb testing.TB, kind Kind, vbcacheBin string, env []string, flags ...string) *Node {
	tb.Helper()
	if kind == Vbcache {
		flags = withClusterAuth(tb, false, flags)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		n, err := startNoCleanup(kind, vbcacheBin, env, flags)
		if err == nil {
			tb.Cleanup(n.Stop)
			return n
		}
		lastErr = err
	}
	tb.Fatalf("start %s %v: %v", kind, flags, lastErr)
	return nil
}

// StartNoCleanup is Start for callers without a testing.TB (TestMain); the
// caller must call Stop.
func StartNoCleanup(kind Kind, vbcacheBin string, flags ...string) (*Node, error) {
	return startNoCleanup(kind, vbcacheBin, nil, flags)
}

func startNoCleanup(kind Kind, vbcacheBin string, env, flags []string) (*Node, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	prog, args := Argv(kind, vbcacheBin, port, flags)
	n := &Node{Kind: kind, Port: port, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Args: args,
		stderr: new(bytes.Buffer), done: make(chan struct{})}
	n.cmd = exec.Command(prog, args...)
	if len(env) > 0 {
		n.cmd.Env = append(os.Environ(), env...)
	}
	if kind == Vbcache {
		if err := noteTLS(n.Addr, flags); err != nil {
			return nil, err
		}
	} else {
		tlsNodes.Delete(n.Addr) // a memcached or nutcracker speaks no TLS here
	}
	if err := n.launch(); err != nil {
		return nil, err
	}
	return n, nil
}

// Restart starts n's command line again, at n's address, once n's
// process has exited (killed by the test), and waits until the new
// process accepts connections. The new Node is stopped by t.Cleanup.
func (n *Node) Restart(tb testing.TB) *Node {
	tb.Helper()
	if !n.WaitExit(10 * time.Second) {
		tb.Fatalf("restart of %s: its process %d did not exit within 10s", n.Addr, n.Pid())
	}
	r := &Node{Kind: n.Kind, Port: n.Port, Addr: n.Addr, Args: n.Args, stderr: new(bytes.Buffer), done: make(chan struct{})}
	r.cmd = exec.Command(n.cmd.Path, n.Args...)
	r.cmd.Env = n.cmd.Env
	if err := r.launch(); err != nil {
		tb.Fatalf("restart of %s: %v", n.Addr, err)
	}
	tb.Cleanup(r.Stop)
	return r
}

// launch starts n.cmd and waits until n.Addr accepts (10 s at most).
func (n *Node) launch() error {
	prog, args := n.cmd.Path, n.Args
	n.cmd.Stdout = lockedWriter{&n.mu, n.stderr}
	n.cmd.Stderr = lockedWriter{&n.mu, n.stderr}
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := n.cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", prog, err)
	}
	go func() {
		err := n.cmd.Wait()
		n.mu.Lock()
		n.err = err
		n.mu.Unlock()
		close(n.done)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", n.Addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if n.Exited() {
			return fmt.Errorf("%s %s exited before accepting: %v\n%s", prog, strings.Join(args, " "), n.ExitErr(), n.Stderr())
		}
		if time.Now().After(deadline) {
			n.Stop()
			return fmt.Errorf("%s did not accept on %s within 10s\n%s", prog, n.Addr, n.Stderr())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop terminates the process (vbcache: SIGTERM, then SIGKILL after 3 s;
// memcached: SIGKILL) and waits for it. Calling Stop twice is harmless.
func (n *Node) Stop() {
	if n.Exited() {
		return
	}
	sig := syscall.SIGTERM // vbcache: exercise its graceful shutdown
	if n.Kind == Memcached {
		sig = syscall.SIGKILL // memcached waits for its 1 s clock tick on SIGTERM
	}
	_ = n.cmd.Process.Signal(sig)
	select {
	case <-n.done:
	case <-time.After(3 * time.Second):
		_ = n.cmd.Process.Kill()
		<-n.done
	}
}

// WaitExit waits up to d for the process to exit by itself and reports
// whether it did.
func (n *Node) WaitExit(d time.Duration) bool {
	select {
	case <-n.done:
		return true
	case <-time.After(d):
		return false
	}
}

// RSS returns the process's resident set size in bytes (VmRSS from
// /proc/<pid>/status).
func (n *Node) RSS() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", n.Pid()))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err != nil {
					return 0, err
				}
				return kb * 1024, nil
			}
		}
	}
	return 0, errors.New("no VmRSS in /proc status")
}
