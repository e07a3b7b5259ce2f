// Command vbcache is the one binary of vbcache: "vbcache server" runs a
// memcached-compatible cache node, and later subcommands (manager, proxy,
// local, bench, ctl, rehash) run the other pieces. Each subcommand turns
// its flags into its package's Config and does nothing else (STYLE.md,
// habit 15): "vbcache server" has internal/server/cmdline read memcached's
// command line, and the manager's subcommands of "vbcache ctl" talk to the
// manager through internal/manager/mgrclient.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
)

// versionOverride is set at link time: -ldflags "-X main.versionOverride=1.2.3".
var versionOverride string

// version returns the build's version: the link-time value, else the
// module version recorded by "go install", else "devel".
func version() string {
	if versionOverride != "" {
		return versionOverride
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// command is one subcommand. run gets the arguments after the subcommand's
// name and returns the exit status.
type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

// commands is the dispatch table; adding a subcommand is one line here.
var commands []command

func init() {
	commands = []command{
		{"server", "run a cache node (takes memcached's flags; see vbcache server -h)", runServer},
		{"bench", "load generator for the memcached protocols; \"bench compare\" compares vbcache with memcached, \"bench hitratio\" their hit ratios", runBench},
		{"locate", "print the server of each key under a distribution (ketama, modulo, vbucket, …)", runLocate},
		{"rehash", "the add-a-server experiment: which keys stay, per distribution, next to the theory", runRehash},
		{"manager", "run the cluster manager: the map in etcd, rebalance, failover, the HTTP API", runManagerCmd},
		{"proxy", "memcached-protocol proxy to a vbcache cluster or a static pool (ketama, modulo, …), twemproxy-style config", runProxy},
		{"local", "a whole cluster on this machine: embedded etcd, a manager and N nodes", runLocal},
		{"ctl", "drive a cluster: status, add-node, rebalance, failover, map; move-vbucket and vbucket states by hand", runCtl},
		{"movecheck", "the takeover correctness checker: moves a vbucket back and forth under load and checks every answer", runMovecheck},
		{"version", "print the version", runVersion},
		{"help", "list subcommands, or show a subcommand's help", runHelp},
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(stdout)
		return 0
	case "-V", "-version", "--version":
		return runVersion(nil, stdout, stderr)
	}
	if c := lookupCommand(args[0]); c != nil {
		return c.run(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "vbcache: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

// splitList splits a comma-separated flag value, dropping blanks around
// and between the items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func lookupCommand(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "vbcache %s: a memcached-compatible distributed cache\n\n", version())
	fmt.Fprintf(w, "Usage: vbcache <command> [arguments]\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun \"vbcache help <command>\" for a command's flags.\n")
}

func runVersion(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintf(stderr, "vbcache version: unexpected argument %q\n", args[0])
		return 2
	}
	fmt.Fprintf(stdout, "vbcache %s\n", version())
	return 0
}

func runHelp(args []string, stdout, stderr io.Writer) int {
	switch len(args) {
	case 0:
		usage(stdout)
		return 0
	case 1:
		switch c := lookupCommand(args[0]); {
		case c == nil:
			fmt.Fprintf(stderr, "vbcache help: unknown command %q\n", args[0])
			return 2
		case c.name == "help" || c.name == "version":
			usage(stdout)
			return 0
		default:
			return c.run([]string{"-h"}, stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "vbcache help: too many arguments\n")
	return 2
}
