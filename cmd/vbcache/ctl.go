package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"syscall"
	"time"

	"github.com/vbcache/vbcache/internal/admin"
	"github.com/vbcache/vbcache/internal/move"
	"github.com/vbcache/vbcache/internal/protocol"
	"github.com/vbcache/vbcache/internal/vbucket"
)

// "vbcache ctl" drives a cluster by hand through the nodes' control
// requests (internal/admin). Each subcommand is one entry of ctlCommands;
// the manager's subcommands (status, add-node, remove-node, rebalance,
// failover, map, stop-rebalance) are to join the table.
//
// Exit status: 0 when the request did what was asked, 1 when a node
// refused or the move did not end "moved", 2 for a usage error.

// ctlCommand is one "vbcache ctl" subcommand.
type ctlCommand struct {
	name    string
	usage   string // the flags, for help
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

var ctlCommands []ctlCommand

func init() {
	ctlCommands = []ctlCommand{
		{"move-vbucket", "--vbucket N --from HOST:PORT --to HOST:PORT [--nodes a,b,c] [--timeout D]",
			"move a vbucket between nodes, publish the new map, settle any failure", ctlMoveVBucket},
		{"vbucket", "--node HOST:PORT --vbucket N [--set active|replica|pending|dead]",
			"show a vbucket's state on a node, or set it", ctlVBucket},
		{"replicate", "--vbucket N --from A --to B",
			"make the vbucket a replica on B fed from A", ctlReplicate},
		{"stop-replication", "--node B --vbucket N",
			"stop feeding the vbucket's replica on B (it keeps its items)", ctlStopReplication},
		{"streams", "--node A",
			"print the node's \"stats streams\": every stream with its lag", ctlStreams},
		{"help", "", "list these subcommands", nil}, // run set below (it reads the table)
	}
	ctlCommands[len(ctlCommands)-1].run = ctlHelp
}

// runCtl is "vbcache ctl SUBCOMMAND [flags]".
func runCtl(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		ctlUsage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		ctlUsage(stdout)
		return 0
	}
	// "vbcache ctl --manager URL SUBCOMMAND …": the manager's URL may come
	// before the subcommand too.
	if a := args[0]; a == "--manager" || a == "-manager" || strings.HasPrefix(a, "--manager=") || strings.HasPrefix(a, "-manager=") {
		var url string
		if _, v, ok := strings.Cut(a, "="); ok {
			url, args = v, args[1:]
		} else if len(args) >= 2 {
			url, args = args[1], args[2:]
		} else {
			fmt.Fprintln(stderr, "vbcache ctl: --manager needs a URL")
			return 2
		}
		ctlManagerDefault = url
		if len(args) == 0 {
			ctlUsage(stderr)
			return 2
		}
	}
	for _, c := range ctlCommands {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "vbcache ctl: unknown subcommand %q\n\n", args[0])
	ctlUsage(stderr)
	return 2
}

func ctlHelp(args []string, stdout, stderr io.Writer) int {
	ctlUsage(stdout)
	return 0
}

func ctlUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: vbcache ctl SUBCOMMAND [flags]\n\nSubcommands:\n")
	for _, c := range ctlCommands {
		fmt.Fprintf(w, "  %-17s %s\n", c.name, c.summary)
		if c.usage != "" {
			fmt.Fprintf(w, "  %-17s   %s\n", "", c.usage)
		}
	}
	fmt.Fprintf(w, "\n\"vbcache ctl SUBCOMMAND -h\" shows a subcommand's flags.\n")
}

// ctlFlags returns a flag set for subcommand name that reports to stderr.
func ctlFlags(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("vbcache ctl "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: vbcache ctl %s %s\n\nFlags:\n", name, usage)
		fs.PrintDefaults()
	}
	return fs
}

// parseCtl parses args; done is true with the exit status when the
// command ends here (help, or a usage error).
func parseCtl(fs *flag.FlagSet, args []string, stderr io.Writer) (status int, done bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, true
		}
		return 2, true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return 2, true
	}
	return 0, false
}

// ctlUsageErr reports a usage error and returns status 2.
func ctlUsageErr(stderr io.Writer, fs *flag.FlagSet, format string, args ...any) int {
	fmt.Fprintf(stderr, "%s: %s\n", fs.Name(), fmt.Sprintf(format, args...))
	return 2
}

// ctlFail reports a failure and returns status 1.
func ctlFail(stderr io.Writer, fs *flag.FlagSet, err error) int {
	fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
	if admin.IsStatus(err, protocol.StatusAuthError) {
		fmt.Fprintf(stderr, "%s: the node takes control requests only from the cluster administrator: give --cluster-auth FILE (or set VBCACHE_CLUSTER_AUTH) with the user:password file its --cluster-auth names, or over TLS the admin's certificate (--tls-cert, --tls-key)\n", fs.Name())
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		fmt.Fprintf(stderr, "%s: the node closed the connection: if it runs with -Z it speaks only TLS: give --tls-ca FILE (or set VBCACHE_TLS_CA) with the cluster's CA\n", fs.Name())
	}
	return 1
}

// ctlAddr checks a HOST:PORT flag.
func ctlAddr(name, v string) error {
	if v == "" {
		return fmt.Errorf("--%s HOST:PORT is required", name)
	}
	if i := strings.LastIndexByte(v, ':'); i <= 0 || i == len(v)-1 {
		return fmt.Errorf("--%s %q is not HOST:PORT", name, v)
	}
	return nil
}

// ctlVBucketFlag checks a --vbucket flag (-1: not given).
func ctlVBucketFlag(vb int) error {
	if vb < 0 || vb > 0xffff {
		if vb == -1 {
			return errors.New("--vbucket N is required")
		}
		return fmt.Errorf("--vbucket %d out of range", vb)
	}
	return nil
}

// ctlAuthFlag registers --cluster-auth and the --tls-* flags on a
// subcommand that sends nodes control requests.
func ctlAuthFlag(fs *flag.FlagSet) clusterAuthFlags { return addClusterAuthFlags(fs, true) }

// ctlWithNode runs f on a control connection to addr, logged in with the
// credentials auth names (none when it names none).
func ctlWithNode(auth clusterAuthFlags, addr string, f func(c *admin.Conn) error) error {
	cr, err := auth.credentials()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := admin.DialWith(ctx, addr, cr)
	if err != nil {
		return err
	}
	defer c.Close()
	return f(c)
}

func ctlMoveVBucket(args []string, stdout, stderr io.Writer) int {
	const name, usage = "move-vbucket", "--vbucket N --from HOST:PORT --to HOST:PORT [--nodes a,b,c] [--timeout D] [--cluster-auth FILE]"
	fs := ctlFlags(name, usage, stderr)
	auth := ctlAuthFlag(fs)
	vb := fs.Int("vbucket", -1, "the vbucket to move")
	from := fs.String("from", "", "the node that holds it active (HOST:PORT)")
	to := fs.String("to", "", "the node to move it to (HOST:PORT)")
	nodes := fs.String("nodes", "", "further nodes to read the cluster map from and publish it to, comma-separated")
	timeout := fs.Duration("timeout", move.DefaultMoveTimeout, "bound on the takeover itself (recovery after it takes at most 5 s more)")
	if st, done := parseCtl(fs, args, stderr); done {
		return st
	}
	if err := ctlVBucketFlag(*vb); err != nil {
		return ctlUsageErr(stderr, fs, "%v", err)
	}
	for _, f := range []struct{ name, v string }{{"from", *from}, {"to", *to}} {
		if err := ctlAddr(f.name, f.v); err != nil {
			return ctlUsageErr(stderr, fs, "%v", err)
		}
	}
	if *timeout <= 0 {
		return ctlUsageErr(stderr, fs, "--timeout must be positive")
	}
	var extra []string
	for _, n := range strings.Split(*nodes, ",") {
		if n = strings.TrimSpace(n); n != "" {
			if err := ctlAddr("nodes", n); err != nil {
				return ctlUsageErr(stderr, fs, "%v", err)
			}
			extra = append(extra, n)
		}
	}
	cr, err := auth.credentials()
	if err != nil {
		return ctlFail(stderr, fs, err)
	}
	res, err := move.Move(context.Background(), *vb, *from, *to, move.Options{Nodes: extra, MoveTimeout: *timeout, Credentials: cr})
	if res.Outcome != move.NotStarted {
		fmt.Fprintln(stdout, res.String())
		fmt.Fprintln(stdout, res.Timings())
		if res.Detail != "" {
			fmt.Fprintf(stdout, "recovery: %s\n", res.Detail)
		}
		for n, why := range res.PublishFailed {
			fmt.Fprintf(stdout, "warning: %s did not take the new map: %s\n", n, why)
		}
		if res.DeleteErr != nil {
			fmt.Fprintf(stdout, "warning: old copy on %s not deleted: %v\n", res.From, res.DeleteErr)
		}
	}
	if err != nil {
		return ctlFail(stderr, fs, err)
	}
	if res.Outcome != move.Moved {
		return 1
	}
	return 0
}

// ctlParseState parses a vbucket state name.
func ctlParseState(s string) (vbucket.State, bool) {
	for st := vbucket.Active; st <= vbucket.Dead; st++ {
		if st.String() == s {
			return st, true
		}
	}
	return 0, false
}

func ctlVBucket(args []string, stdout, stderr io.Writer) int {
	const name, usage = "vbucket", "--node HOST:PORT --vbucket N [--set active|replica|pending|dead] [--cluster-auth FILE]"
	fs := ctlFlags(name, usage, stderr)
	auth := ctlAuthFlag(fs)
	node := fs.String("node", "", "the node (HOST:PORT)")
	vb := fs.Int("vbucket", -1, "the vbucket")
	set := fs.String("set", "", "set the state: active, replica, pending or dead")
	if st, done := parseCtl(fs, args, stderr); done {
		return st
	}
	if err := ctlAddr("node", *node); err != nil {
		return ctlUsageErr(stderr, fs, "%v", err)
	}
	if err := ctlVBucketFlag(*vb); err != nil {
		return ctlUsageErr(stderr, fs, "%v", err)
	}
	var want vbucket.State
	if *set != "" {
		var ok bool
		if want, ok = ctlParseState(*set); !ok {
			return ctlUsageErr(stderr, fs, "--set %q is not active, replica, pending or dead", *set)
		}
	}
	err := ctlWithNode(auth, *node, func(c *admin.Conn) error {
		old, err := c.GetVBucket(*vb)
		if err != nil {
			return err
		}
		if *set == "" {
			fmt.Fprintf(stdout, "vbucket %d on %s: %s\n", *vb, *node, old)
			return nil
		}
		if err := c.SetVBucket(*vb, want); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "vbucket %d on %s: %s (was %s)\n", *vb, *node, want, old)
		return nil
	})
	if err != nil {
		return ctlFail(stderr, fs, err)
	}
	return 0
}

func ctlReplicate(args []string, stdout, stderr io.Writer) int {
	const name, usage = "replicate", "--vbucket N --from A --to B [--cluster-auth FILE]"
	fs := ctlFlags(name, usage, stderr)
	auth := ctlAuthFlag(fs)
	vb := fs.Int("vbucket", -1, "the vbucket")
	from := fs.String("from", "", "the node to replicate from: the active, or a replica for a chain (HOST:PORT)")
	to := fs.String("to", "", "the node that holds the replica (HOST:PORT)")
	if st, done := parseCtl(fs, args, stderr); done {
		return st
	}
	if err := ctlVBucketFlag(*vb); err != nil {
		return ctlUsageErr(stderr, fs, "%v", err)
	}
	for _, f := range []struct{ name, v string }{{"from", *from}, {"to", *to}} {
		if err := ctlAddr(f.name, f.v); err != nil {
			return ctlUsageErr(stderr, fs, "%v", err)
		}
	}
	if err := ctlWithNode(auth, *to, func(c *admin.Conn) error { return c.Replicate(*vb, *from) }); err != nil {
		return ctlFail(stderr, fs, err)
	}
	fmt.Fprintf(stdout, "vbucket %d on %s: replica fed from %s\n", *vb, *to, *from)
	return 0
}

func ctlStopReplication(args []string, stdout, stderr io.Writer) int {
	const name, usage = "stop-replication", "--node B --vbucket N [--cluster-auth FILE]"
	fs := ctlFlags(name, usage, stderr)
	auth := ctlAuthFlag(fs)
	node := fs.String("node", "", "the node holding the replica (HOST:PORT)")
	vb := fs.Int("vbucket", -1, "the vbucket")
	if st, done := parseCtl(fs, args, stderr); done {
		return st
	}
	if err := ctlAddr("node", *node); err != nil {
		return ctlUsageErr(stderr, fs, "%v", err)
	}
	if err := ctlVBucketFlag(*vb); err != nil {
		return ctlUsageErr(stderr, fs, "%v", err)
	}
	if err := ctlWithNode(auth, *node, func(c *admin.Conn) error { return c.StopReplication(*vb) }); err != nil {
		return ctlFail(stderr, fs, err)
	}
	fmt.Fprintf(stdout, "vbucket %d on %s: replication stopped\n", *vb, *node)
	return 0
}

func ctlStreams(args []string, stdout, stderr io.Writer) int {
	const name, usage = "streams", "--node A [--cluster-auth FILE]"
	fs := ctlFlags(name, usage, stderr)
	auth := ctlAuthFlag(fs)
	node := fs.String("node", "", "the node (HOST:PORT)")
	if st, done := parseCtl(fs, args, stderr); done {
		return st
	}
	if err := ctlAddr("node", *node); err != nil {
		return ctlUsageErr(stderr, fs, "%v", err)
	}
	err := ctlWithNode(auth, *node, func(c *admin.Conn) error {
		lines, err := c.Stats("streams")
		if err != nil {
			return err
		}
		for _, kv := range lines {
			fmt.Fprintf(stdout, "%s %s\n", kv[0], kv[1])
		}
		return nil
	})
	if err != nil {
		return ctlFail(stderr, fs, err)
	}
	return 0
}
