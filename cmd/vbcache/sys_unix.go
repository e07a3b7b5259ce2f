//go:build unix

package main

import (
	"errors"
	"os"
	"os/exec"
	"os/user"
	"runtime/debug"
	"strconv"
	"syscall"

	"github.com/vbcache/vbcache/internal/server/cmdline"
)

// daemonize starts this command line again as a detached process (new
// session, stdio on /dev/null) and returns once it has started; the caller
// then exits 0, as memcached's parent does after fork. The child finds
// daemonEnv set and does not daemonize again. Unlike memcached it keeps the
// working directory, so relative -P, -s and port-file paths still work.
func daemonize() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Env = append(os.Environ(), daemonEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = null, null, null
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	return cmd.Process.Release()
}

// enableCoreDumps raises the core file limit as far as allowed (-r) and
// makes a fatal Go error dump core.
func enableCoreDumps() error {
	lim := syscall.Rlimit{Cur: ^uint64(0), Max: ^uint64(0)}
	if syscall.Setrlimit(syscall.RLIMIT_CORE, &lim) != nil {
		var old syscall.Rlimit
		if syscall.Getrlimit(syscall.RLIMIT_CORE, &old) == nil {
			old.Cur = old.Max
			_ = syscall.Setrlimit(syscall.RLIMIT_CORE, &old)
		}
	}
	var got syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_CORE, &got); err != nil {
		return err
	}
	if got.Cur == 0 {
		return errors.New("core file limit is 0")
	}
	debug.SetTraceback("crash")
	return nil
}

// raiseFileLimit makes room for n connections. memcached sets the limit to
// exactly n; vbcache only raises it (Go already lifts the soft limit to the
// hard one at start-up).
func raiseFileLimit(n int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	want := uint64(n)
	if lim.Cur >= want {
		return nil
	}
	lim.Cur = want
	if lim.Max < want {
		lim.Max = want
	}
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
}

// switchUser assumes the identity of name (-u when run as root).
func switchUser(name string) error {
	u, err := user.Lookup(name)
	if err != nil {
		return fail(cmdline.ExitNoUser, "can't find the user %s to switch to", name)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return fail(cmdline.ExitNoUser, "can't find the user %s to switch to", name)
	}
	if err := syscall.Setgroups(nil); err != nil && !errors.Is(err, syscall.EPERM) {
		return fail(cmdline.ExitOSErr, "failed to drop supplementary groups: %v", err)
	}
	if syscall.Setgid(gid) != nil || syscall.Setuid(uid) != nil {
		return fail(cmdline.ExitOSErr, "failed to assume identity of user %s", name)
	}
	return nil
}

// processAlive reports whether pid names a running process.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
