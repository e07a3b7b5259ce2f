package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/vbcache/vbcache/internal/server"
	"github.com/vbcache/vbcache/internal/server/cmdline"
)

// daemonEnv marks the re-executed child of -d, which must not daemonize
// again (Go cannot fork, so -d starts the same command line anew).
const daemonEnv = "VBCACHE_DAEMON_CHILD"

// runServer is "vbcache server": memcached's start-up sequence with the
// same order of checks (flags and settings, which internal/server/cmdline
// reads; then limits, user, daemon, memory lock, listen, pid file), then
// serving until SIGINT, SIGTERM or the shutdown command.
func runServer(args []string, stdout, stderr io.Writer) int {
	o, err := cmdline.Parse(args, os.Getenv)
	if err != nil {
		return report(stderr, err)
	}
	switch o.Action {
	case cmdline.ActionHelp:
		printServerHelp(stdout)
		return 0
	case cmdline.ActionVersion:
		fmt.Fprintf(stdout, "vbcache %s\n", version())
		return 0
	case cmdline.ActionLicense:
		fmt.Fprintf(stdout, "vbcache %s\n\n%s", version(), licenseText)
		return 0
	}
	for _, w := range o.Warnings {
		fmt.Fprintln(stderr, w)
	}
	printed := len(o.Warnings)
	if err := o.Finish(); err != nil {
		return report(stderr, err)
	}
	for _, w := range o.Warnings[printed:] { // from loading the TLS settings
		fmt.Fprintln(stderr, w)
	}
	o.Config.Version = version()
	if err := prepareProcess(o, stderr); err != nil {
		return report(stderr, err)
	}
	if o.Daemonize && os.Getenv(daemonEnv) == "" {
		if err := daemonize(); err != nil {
			fmt.Fprintf(stderr, "failed to daemon() in order to daemonize: %v\n", err)
			return cmdline.ExitFailure
		}
		return 0
	}
	os.Unsetenv(daemonEnv)
	if o.LockMemory {
		if err := lockMemory(); err != nil {
			fmt.Fprintf(stderr, "warning: -k invalid, mlockall() failed: %v\n", err)
		}
	}
	return serve(o, stderr)
}

// prepareProcess does what memcached does to the process before it
// daemonizes: the core file limit (-r), the open files limit (-c), and
// dropping root for -u.
func prepareProcess(o *cmdline.Options, stderr io.Writer) error {
	if o.CoreDumps {
		if err := enableCoreDumps(); err != nil {
			return fail(cmdline.ExitOSErr, "failed to ensure corefile creation")
		}
	}
	maxConns := o.Config.MaxConns
	if maxConns == 0 {
		maxConns = 1024
	}
	if err := raiseFileLimit(maxConns); err != nil {
		return fail(cmdline.ExitOSErr, "failed to set rlimit for open files. Try starting as root or requesting smaller maxconns value.")
	}
	// memcached refuses to run as root without -u; vbcache runs (containers
	// start as root), and -u only matters when started as root.
	if os.Geteuid() == 0 && o.User != "" && o.User != "root" {
		return switchUser(o.User)
	}
	return nil
}

// serve builds the node, opens its listeners, writes the pid file and
// serves until a signal or the shutdown command.
func serve(o *cmdline.Options, stderr io.Writer) int {
	srv, err := server.New(o.Config)
	if err != nil {
		code := cmdline.ExitUsage
		if errors.Is(err, server.ErrListenAddr) {
			code = cmdline.ExitOSErr
		} else if !errors.Is(err, server.ErrInvalidConfig) {
			code = cmdline.ExitFailure
		}
		fmt.Fprintln(stderr, err)
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// memcached keeps running on SIGHUP (it only flags it for logging);
	// a node with credential files or certificates reloads them.
	if o.Reloads() {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		done := make(chan struct{})
		defer close(done)
		go reloadOnHUP(o, srv, hup, done, stderr) // owned here: ends with serve
	} else {
		signal.Ignore(syscall.SIGHUP)
	}

	if err := srv.Listen(); err != nil {
		fmt.Fprintln(stderr, err)
		return cmdline.ExitOSErr
	}
	if o.MetricsListen != "" {
		hs, addr, err := metricsServer(o.MetricsListen, srv.Metrics())
		if err != nil {
			fmt.Fprintf(stderr, "failed to listen on --metrics-listen %s: %v\n", o.MetricsListen, err)
			return cmdline.ExitOSErr
		}
		defer hs.Close()
		fmt.Fprintf(stderr, "vbcache: metrics on http://%s/metrics\n", addr)
	}
	if o.PIDFile != "" {
		savePID(o.PIDFile, stderr)
		defer removePID(o.PIDFile, stderr)
	}
	if err := srv.Serve(ctx); err != nil {
		fmt.Fprintln(stderr, err)
		return cmdline.ExitFailure
	}
	return 0
}

// reloadOnHUP reloads the node's certificates (-Z, as refresh_certs does)
// and its credential files (Server.SetLogins) at each SIGHUP until done
// closes, and says on stderr what it did: a file that fails to load keeps
// the old credentials or certificate.
func reloadOnHUP(o *cmdline.Options, srv *server.Server, hup <-chan os.Signal, done <-chan struct{}, stderr io.Writer) {
	logger := log.New(stderr, "", log.LstdFlags)
	for {
		select {
		case <-done:
			return
		case <-hup:
		}
		ok, what := true, []string{}
		if o.Config.TLSReload != nil {
			what = append(what, "certificates")
			if err := o.Config.TLSReload(); err != nil {
				ok = false
				logger.Printf("vbcache: SIGHUP: certificate reload failed, keeping the old one: %v", err)
			}
		}
		pwdb, tokens, adm, err := o.ReloadLogins()
		if pwdb != nil || tokens != nil || adm != nil {
			what = append(what, "logins")
		}
		if err == nil {
			err = srv.SetLogins(pwdb, tokens, adm)
		}
		if err != nil {
			ok = false
			logger.Printf("vbcache: SIGHUP: login reload failed, keeping the old ones: %v", err)
		}
		if ok {
			logger.Printf("vbcache: SIGHUP: %s reloaded", strings.Join(what, " and "))
		}
	}
}

// fail is a start-up failure of the process (limits, user), reported as
// cmdline reports the command line's.
func fail(code int, format string, args ...any) error {
	return &cmdline.ExitError{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// report prints a start-up error and returns its exit status.
func report(stderr io.Writer, err error) int {
	var e *cmdline.ExitError
	if errors.As(err, &e) {
		fmt.Fprintln(stderr, e.Msg)
		return e.Code
	}
	fmt.Fprintln(stderr, err)
	return cmdline.ExitFailure
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
