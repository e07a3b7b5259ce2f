package lifecycle

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/test/nodeproc"
)

// freeBase returns a port p such that p … p+n-1 were all free a moment ago.
// It looks below the kernel's ephemeral range (ip_local_port_range), where
// no outgoing connection takes a port: inside it, the many connections the
// tests open leave few runs of n free ports.
func freeBase(t *testing.T, n int) int {
	t.Helper()
	low := 32768 // Linux's default start of the ephemeral range
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				low = v
			}
		}
	}
	const from = 10000
	if low-n <= from {
		low = 65536 // a range that starts low: search above it instead
	}
	for try := 0; try < 200; try++ {
		p := from + rand.IntN(low-n-from)
		ok := true
		var ls []net.Listener
		for i := 0; i < n && ok; i++ {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+i)))
			if err != nil {
				ok = false
				break
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			l.Close()
		}
		if ok {
			return p
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return 0
}

// childWithArgs returns the pid of parent's child process whose command
// line contains every one of args in a row.
func childWithArgs(t *testing.T, parent int, args ...string) int {
	t.Helper()
	// Each thread lists the children it started (a Go program starts them
	// from any of its threads).
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", parent))
	if err != nil {
		t.Skipf("cannot list child processes: %v", err)
	}
	var children []string
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", parent, task.Name()))
		if err == nil {
			children = append(children, strings.Fields(string(b))...)
		}
	}
	want := strings.Join(args, "\x00")
	for _, f := range children {
		cmdline, err := os.ReadFile("/proc/" + f + "/cmdline")
		if err == nil && strings.Contains(string(cmdline), "\x00"+want+"\x00") {
			pid, _ := strconv.Atoi(f)
			return pid
		}
	}
	t.Fatalf("no child of %d runs with %q", parent, args)
	return 0
}

// localRun is a `vbcache local` process group that a test runs.
type localRun struct {
	t              *testing.T
	base           int // its --base-port: proxy, manager, then the nodes, then the metrics
	cmd            *exec.Cmd
	stdout, stderr nodeproc.Output
	done           chan struct{} // closed when the process has exited
	err            error         // its exit status, once done
	dir            string        // its --data-dir, which holds the admin's login (admin.pwdb)
}

// creds is the cluster administrator's login that local made for its
// nodes and manager.
func (l *localRun) creds() *admin.Credentials {
	l.t.Helper()
	cr, err := admin.LoadCredentials(filepath.Join(l.dir, "admin.pwdb"))
	if err != nil {
		l.t.Fatal(err)
	}
	return cr
}

// startLocal runs `vbcache local` with args (and a free --base-port for
// its 3+2×nodes ports: proxy, manager, nodes, metrics) until it says it is ready. freeBase's ports may be taken
// by another process before local binds them; only then (its stderr says
// "address already in use" and it exited) does it start again, on other
// ports, at most three times. The process group is killed when the test
// ends unless stop ran.
func startLocal(t *testing.T, nodes int, args ...string) *localRun {
	t.Helper()
	return startLocalBin(t, bin, nodes, args...)
}

// startLocalBin is startLocal with another vbcache binary (a build with
// a vbcache_unsafe_* tag, to show that a test catches what it breaks).
func startLocalBin(t *testing.T, bin string, nodes int, args ...string) *localRun {
	t.Helper()
	for try := 1; ; try++ {
		l := &localRun{t: t, base: freeBase(t, 3+2*nodes), done: make(chan struct{}), dir: t.TempDir()}
		l.cmd = exec.Command(bin, append([]string{"local", "--nodes", strconv.Itoa(nodes), "--base-port", strconv.Itoa(l.base), "--data-dir", l.dir}, args...)...)
		l.cmd.Stdout, l.cmd.Stderr = &l.stdout, &l.stderr
		l.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := l.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { // owned by l: done says it ended
			l.err = l.cmd.Wait()
			close(l.done)
		}()
		t.Cleanup(func() {
			select {
			case <-l.done:
			default: // the whole group: local and its nodes
				syscall.Kill(-l.cmd.Process.Pid, syscall.SIGCONT)
				syscall.Kill(-l.cmd.Process.Pid, syscall.SIGKILL)
				<-l.done
			}
		})
		deadline := time.Now().Add(60 * time.Second)
		for !strings.Contains(l.stdout.String(), "ready in") {
			select {
			case <-l.done:
				if try < 3 && strings.Contains(l.stderr.String(), "address already in use") {
					t.Logf("vbcache local on ports from %d: %s; again on others", l.base, strings.TrimSpace(l.stderr.String()))
					goto again
				}
				t.Fatalf("vbcache local exited before it was ready: %v\nstderr:\n%s", l.err, l.stderr.String())
			case <-time.After(20 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("vbcache local not ready after 60 s\nstdout:\n%s\nstderr:\n%s", l.stdout.String(), l.stderr.String())
			}
		}
		return l
	again:
	}
}

// wait polls cond every 20 ms for up to d; it fails the test if local
// exits meanwhile or d passes.
func (l *localRun) wait(what string, d time.Duration, cond func() bool) {
	l.t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		select {
		case <-l.done:
			l.t.Fatalf("vbcache local exited (%v) while waiting for %s\nstderr:\n%s", l.err, what, l.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("timed out after %v waiting for %s\nstdout:\n%s\nstderr:\n%s", d, what, l.stdout.String(), l.stderr.String())
		}
	}
}

// addr is the address of the i-th node (from 0).
func (l *localRun) addr(i int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(l.base+2+i)) }

// nodePid is the pid of the i-th node's process.
func (l *localRun) nodePid(i int) int {
	return childWithArgs(l.t, l.cmd.Process.Pid, "-p", strconv.Itoa(l.base+2+i))
}

// stop sends SIGINT and requires a clean exit within 30 s.
func (l *localRun) stop() {
	l.t.Helper()
	if err := l.cmd.Process.Signal(os.Interrupt); err != nil {
		l.t.Fatal(err)
	}
	select {
	case <-l.done:
		if l.err != nil {
			l.t.Fatalf("vbcache local after SIGINT: %v\nstderr:\n%s", l.err, l.stderr.String())
		}
	case <-time.After(30 * time.Second):
		l.t.Fatalf("vbcache local still running 30 s after SIGINT\nstderr:\n%s", l.stderr.String())
	}
}

// TestLocalFailoverAfter: `vbcache local --failover-after 1s` runs its
// manager with that failover time: a node killed with SIGKILL is failed over
// within seconds, long before the default 10 s would allow, and the cluster
// then stops cleanly on SIGINT.
func TestLocalFailoverAfter(t *testing.T) {
	l := startLocal(t, 3, "--replicas", "1", "--vbuckets", "64", "-m", "16", "--failover-after", "1s")
	victim := l.addr(0)
	if err := syscall.Kill(l.nodePid(0), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	line := "manager: " + victim + " down since"
	l.wait("the manager to fail "+victim+" over", 30*time.Second, func() bool { return strings.Contains(l.stderr.String(), line) })
	took := time.Since(killed)
	t.Logf("%s failed over %v after its SIGKILL", victim, took.Round(time.Millisecond))
	// The default (10 s) could not have failed it over yet: the flag took.
	if took >= 9*time.Second {
		t.Fatalf("failover came %v after the kill with --failover-after 1s", took)
	}
	l.stop()
}
