package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/vbcache/vbcache/internal/movecheck"
)

// runMovecheck is "vbcache movecheck": flags into a movecheck.Config, one
// call to movecheck.Run, the report on stdout. Exit status 0 when the run
// found no violation, 1 when it found one or could not run, 2 for bad
// flags.
func runMovecheck(args []string, stdout, stderr io.Writer) int {
	cfg, init, numVB, code := parseMovecheckFlags(args, stdout, stderr)
	if code >= 0 {
		return code
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if init {
		done, err := movecheck.Init(ctx, cfg.Nodes, numVB, cfg.Credentials)
		if err != nil {
			fmt.Fprintf(stderr, "vbcache movecheck: --init: %v\n", err)
			return 1
		}
		if done {
			fmt.Fprintf(stdout, "init: %d vbuckets spread over %d nodes, map rev 1 published\n", numVB, len(cfg.Nodes))
		} else {
			fmt.Fprintf(stdout, "init: a node already has a cluster config; left as it is\n")
		}
	}
	rep, err := movecheck.Run(ctx, cfg)
	if rep != nil {
		if werr := rep.WriteText(stdout); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "vbcache movecheck: %v\n", err)
		return 1
	}
	if !rep.OK() {
		return 1
	}
	return 0
}

// parseMovecheckFlags turns the flags into a Config; code is -1 when the
// run should go ahead, else the exit status.
func parseMovecheckFlags(args []string, stdout, stderr io.Writer) (cfg movecheck.Config, init bool, numVB, code int) {
	fs := flag.NewFlagSet("vbcache movecheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: vbcache movecheck --nodes a,b[,c…] --vbucket N [flags]

Moves vbucket N round the nodes (A → B → A …) --moves times while writers
and readers hammer keys of that vbucket through the vbucket-aware client,
and checks: every acknowledged write is readable afterwards; no read
returns a value older than the last acknowledged write when it began;
GET_VBUCKET polling never sees two actives. Prints a report; exits 1 on
any violation.

The nodes must run in cluster mode (vbcache server --vbuckets N). With
--init, a cluster where no node has a config yet is set up first: the
vbuckets spread over the nodes, each active on its node, map rev 1.

Flags:
`)
		fs.PrintDefaults()
	}
	var nodes, mover string
	var verbose bool
	fs.StringVar(&nodes, "nodes", "", "the cluster's nodes, `host:port,host:port[,…]` as in the map's serverList")
	fs.IntVar(&cfg.VBucket, "vbucket", -1, "the vbucket to move")
	fs.IntVar(&cfg.Moves, "moves", 20, "number of moves")
	fs.DurationVar(&cfg.Duration, "duration", 0, "spread the moves over this time (0: back to back)")
	fs.DurationVar(&cfg.Pause, "pause", 0, "least time between moves")
	fs.IntVar(&cfg.Writers, "writers", 4, "writer clients (each owns --keys keys)")
	fs.IntVar(&cfg.Readers, "readers", 2, "reader clients (-1: none)")
	fs.IntVar(&cfg.Keys, "keys", 16, "keys per writer")
	fs.IntVar(&cfg.ValueSize, "value-size", 32, "value padding in bytes")
	fs.StringVar(&cfg.KeyPrefix, "key-prefix", "", "key prefix (default: movecheck:<random>:, new for each run; keys must not exist yet)")
	fs.StringVar(&mover, "mover", "managed", "managed (internal/move, with its recovery rules) or takeover (TAKEOVER, publish, delete; no recovery)")
	fs.BoolVar(&init, "init", false, "first set up a cluster that has no config (see above)")
	fs.IntVar(&numVB, "num-vbuckets", 1024, "with --init: the nodes' --vbuckets")
	fs.BoolVar(&verbose, "v", false, "print a line per move")
	authFile := ctlAuthFlag(fs)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return cfg, false, 0, 0
		}
		return cfg, false, 0, 2
	}
	bad := func(format string, a ...any) (movecheck.Config, bool, int, int) {
		fmt.Fprintf(stderr, "vbcache movecheck: "+format+"\n", a...)
		return cfg, false, 0, 2
	}
	if fs.NArg() > 0 {
		return bad("unexpected argument %q", fs.Arg(0))
	}
	cfg.Nodes = splitList(nodes)
	switch {
	case len(cfg.Nodes) < 2:
		return bad("--nodes needs at least two nodes")
	case cfg.VBucket < 0:
		return bad("--vbucket is required")
	case cfg.Moves <= 0:
		return bad("--moves must be positive")
	case cfg.Writers <= 0 || cfg.Keys <= 0:
		return bad("--writers and --keys must be positive")
	case init && (numVB <= 0 || numVB&(numVB-1) != 0):
		return bad("--num-vbuckets %d is not a power of two", numVB)
	case init && cfg.VBucket >= numVB:
		return bad("--vbucket %d out of range for --num-vbuckets %d", cfg.VBucket, numVB)
	}
	cr, err := authFile.credentials()
	if err != nil {
		return bad("--cluster-auth: %v", err)
	}
	cfg.Credentials = cr
	switch mover {
	case "managed":
		cfg.Move = movecheck.ManagedMove
	case "takeover":
		cfg.Move = movecheck.TakeoverMove
	default:
		return bad("--mover %q (managed or takeover)", mover)
	}
	if verbose {
		cfg.Log = stdout
	}
	cfg.ClientTimeout = 5 * time.Second
	return cfg, init, numVB, -1
}
