package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/vbcache/vbcache/internal/server"
)

// daemonEnv marks the re-executed child of -d, which must not daemonize
// again (Go cannot fork, so -d starts the same command line anew).
const daemonEnv = "VBCACHE_DAEMON_CHILD"

// runServer is "vbcache server": memcached's start-up sequence with the
// same order of checks (flags, settings, limits, user, daemon, memory
// lock, listen, pid file), then serving until SIGINT, SIGTERM or the
// shutdown command.
func runServer(args []string, stdout, stderr io.Writer) int {
	o, err := parseServerFlags(args, os.Getenv)
	if err != nil {
		return report(stderr, err)
	}
	switch o.action {
	case actHelp:
		printServerHelp(stdout)
		return 0
	case actVersion:
		fmt.Fprintf(stdout, "vbcache %s\n", version())
		return 0
	case actLicense:
		fmt.Fprintf(stdout, "vbcache %s\n\n%s", version(), licenseText)
		return 0
	}
	for _, w := range o.warnings {
		fmt.Fprintln(stderr, w)
	}
	printed := len(o.warnings)
	if err := o.finish(); err != nil {
		return report(stderr, err)
	}
	for _, w := range o.warnings[printed:] { // from loading the TLS settings
		fmt.Fprintln(stderr, w)
	}
	o.cfg.Version = version()
	if err := o.prepareProcess(stderr); err != nil {
		return report(stderr, err)
	}
	if o.daemonize && os.Getenv(daemonEnv) == "" {
		if err := daemonize(); err != nil {
			fmt.Fprintf(stderr, "failed to daemon() in order to daemonize: %v\n", err)
			return exitFailure
		}
		return 0
	}
	os.Unsetenv(daemonEnv)
	if o.lockMemory {
		if err := lockMemory(); err != nil {
			fmt.Fprintf(stderr, "warning: -k invalid, mlockall() failed: %v\n", err)
		}
	}
	return serve(o, stderr)
}

// prepareProcess does what memcached does to the process before it
// daemonizes: the core file limit (-r), the open files limit (-c), and
// dropping root for -u.
func (o *serverOptions) prepareProcess(stderr io.Writer) error {
	if o.coreDumps {
		if err := enableCoreDumps(); err != nil {
			return fail(exitOSErr, "failed to ensure corefile creation")
		}
	}
	maxConns := o.cfg.MaxConns
	if maxConns == 0 {
		maxConns = 1024
	}
	if err := raiseFileLimit(maxConns); err != nil {
		return fail(exitOSErr, "failed to set rlimit for open files. Try starting as root or requesting smaller maxconns value.")
	}
	// memcached refuses to run as root without -u; vbcache runs (containers
	// start as root), and -u only matters when started as root.
	if os.Geteuid() == 0 && o.user != "" && o.user != "root" {
		return switchUser(o.user)
	}
	return nil
}

// serve builds the node, opens its listeners, writes the pid file and
// serves until a signal or the shutdown command.
func serve(o *serverOptions, stderr io.Writer) int {
	srv, err := server.New(o.cfg)
	if err != nil {
		code := exitUsage
		if errors.Is(err, server.ErrListenAddr) {
			code = exitOSErr
		} else if !errors.Is(err, server.ErrInvalidConfig) {
			code = exitFailure
		}
		fmt.Fprintln(stderr, err)
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// memcached keeps running on SIGHUP (it only flags it for logging).
	signal.Ignore(syscall.SIGHUP)

	if err := srv.Listen(); err != nil {
		fmt.Fprintln(stderr, err)
		return exitOSErr
	}
	if o.pidFile != "" {
		savePID(o.pidFile, stderr)
		defer removePID(o.pidFile, stderr)
	}
	if err := srv.Serve(ctx); err != nil {
		fmt.Fprintln(stderr, err)
		return exitFailure
	}
	return 0
}

// report prints a start-up error and returns its exit status.
func report(stderr io.Writer, err error) int {
	var e *exitError
	if errors.As(err, &e) {
		fmt.Fprintln(stderr, e.msg)
		return e.code
	}
	fmt.Fprintln(stderr, err)
	return exitFailure
}

// savePID writes the pid file through a temporary name and a rename, as
// memcached does, warning when the old file names a running process.
// Failures are reported, not fatal (memcached's behaviour).
func savePID(name string, stderr io.Writer) {
	if b, err := os.ReadFile(name); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 && processAlive(pid) {
			fmt.Fprintf(stderr, "WARNING: The pid file contained the following (running) pid: %d\n", pid)
		}
	}
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		fmt.Fprintf(stderr, "Could not open the pid file %s for writing: %v\n", tmp, err)
		return
	}
	if err := os.Rename(tmp, name); err != nil {
		fmt.Fprintf(stderr, "Could not rename the pid file from %s to %s: %v\n", tmp, name, err)
	}
}

func removePID(name string, stderr io.Writer) {
	if err := os.Remove(name); err != nil {
		fmt.Fprintf(stderr, "Could not remove the pid file %s: %v\n", name, err)
	}
}
