package lifecycle

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vbcache/vbcache/test/nodeproc"
)

// freeBase returns a port p such that p … p+n-1 were all free a moment ago.
func freeBase(t *testing.T, n int) int {
	t.Helper()
	for try := 0; try < 20; try++ {
		p, err := nodeproc.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if p+n > 65535 {
			continue
		}
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

// TestLocalFailoverAfter: `vbcache local --failover-after 1s` runs its
// manager with that failover time: a node killed with SIGKILL is failed over
// within seconds, long before the default 10 s would allow, and the cluster
// then stops cleanly on SIGINT.
func TestLocalFailoverAfter(t *testing.T) {
	const nodes = 3
	base := freeBase(t, 2+nodes)
	var stdout, stderr nodeproc.Output
	cmd := exec.Command(bin, "local", "--nodes", strconv.Itoa(nodes), "--replicas", "1", "--vbuckets", "64",
		"-m", "16", "--base-port", strconv.Itoa(base), "--failover-after", "1s")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped { // the whole group: local and its nodes
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}()
	wait := func(what string, d time.Duration, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out after %v waiting for %s\nstdout:\n%s\nstderr:\n%s", d, what, stdout.String(), stderr.String())
			}
		}
	}
	wait("the cluster to be ready", 60*time.Second, func() bool { return strings.Contains(stdout.String(), "ready in") })

	victim := net.JoinHostPort("127.0.0.1", strconv.Itoa(base+2))
	pid := childWithArgs(t, cmd.Process.Pid, "-p", strconv.Itoa(base+2))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	line := "manager: " + victim + " down since"
	wait("the manager to fail "+victim+" over", 30*time.Second, func() bool { return strings.Contains(stderr.String(), line) })
	took := time.Since(killed)
	t.Logf("%s failed over %v after its SIGKILL", victim, took.Round(time.Millisecond))
	// The default (10 s) could not have failed it over yet: the flag took.
	if took >= 9*time.Second {
		t.Fatalf("failover came %v after the kill with --failover-after 1s", took)
	}

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Fatalf("vbcache local after SIGINT: %v\nstderr:\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("vbcache local still running 30 s after SIGINT\nstderr:\n%s", stderr.String())
	}
}
