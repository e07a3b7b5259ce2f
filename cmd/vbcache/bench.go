package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/vbcache/vbcache/internal/bench"
)

// runBench is "vbcache bench": flags into a bench.Config (or, for "vbcache
// bench compare", a bench.CompareConfig), then one call into package bench.
func runBench(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "compare" {
		return runBenchCompare(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "proxies" {
		return bench.ProxiesMain(args[1:], stdout, stderr)
	}
	cfg, asJSON, code := parseBenchFlags(args, stdout, stderr)
	if code >= 0 {
		return code
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	res, err := bench.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "vbcache bench: %v\n", err)
		return 1
	}
	if asJSON {
		err = res.WriteJSON(stdout)
	} else {
		err = res.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "vbcache bench: %v\n", err)
		return 1
	}
	return 0
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// parseBenchFlags turns "vbcache bench" flags into a Config. code is -1 when
// the run should go ahead, else the exit status.
func parseBenchFlags(args []string, stdout, stderr io.Writer) (cfg bench.Config, asJSON bool, code int) {
	fs := flag.NewFlagSet("vbcache bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		servers   stringList
		proto     = fs.String("protocol", "text", "text, meta or binary")
		ratio     = fs.String("ratio", bench.DefaultRatio.String(), "set:get ratio")
		sizeRange = fs.String("data-size-range", "", "value sizes spread over `min-max` bytes (by key)")
		pattern   = fs.String("key-pattern", "uniform", "uniform, gaussian or sequential (R, G, S)")
		progress  = fs.Bool("progress", false, "print a progress line every second (default: when stderr is a terminal)")
		quiet     = fs.Bool("no-progress", false, "never print the progress line")
	)
	fs.Var(&servers, "s", "server `host:port` (repeatable)")
	fs.Var(&servers, "server", "same as -s")
	fs.IntVar(&cfg.Threads, "threads", 0, "OS threads running the load (GOMAXPROCS during the run; 0: unchanged)")
	fs.IntVar(&cfg.Threads, "t", 0, "same as --threads")
	fs.IntVar(&cfg.Clients, "clients", bench.DefaultClients, "connections per thread per server")
	fs.IntVar(&cfg.Clients, "c", bench.DefaultClients, "same as --clients")
	fs.IntVar(&cfg.Pipeline, "pipeline", 1, "requests in flight per connection")
	fs.IntVar(&cfg.DataSize, "data-size", bench.DefaultDataSize, "value size in bytes")
	fs.IntVar(&cfg.DataSize, "d", bench.DefaultDataSize, "same as --data-size")
	fs.StringVar(&cfg.KeyPrefix, "key-prefix", bench.DefaultPrefix, "key prefix")
	fs.Uint64Var(&cfg.KeyMin, "key-minimum", 0, "smallest key index")
	fs.Uint64Var(&cfg.KeyMax, "key-maximum", bench.DefaultKeyMax, "largest key index")
	fs.IntVar(&cfg.KeyWidth, "key-width", 0, "zero-pad key indexes to this many digits (0: digits of --key-maximum)")
	fs.Float64Var(&cfg.KeyStddev, "key-stddev", 0, "gaussian pattern's standard deviation in keys (0: range/6)")
	fs.IntVar(&cfg.MultiGet, "multi-get", 1, "keys per get request")
	fs.DurationVar(&cfg.Duration, "test-time", bench.DefaultDuration, "run time (when --requests is 0)")
	fs.Uint64Var(&cfg.Requests, "requests", 0, "total requests over all connections (0: run for --test-time)")
	fs.Uint64Var(&cfg.Requests, "n", 0, "same as --requests")
	fs.Float64Var(&cfg.Rate, "rate", 0, "open loop: total requests per second, latency from the scheduled send time (0: closed loop)")
	fs.BoolVar(&cfg.Arrival, "arrival", false, "also measure latency to the kernel's receive time of each reply (SO_TIMESTAMPNS; Linux), leaving out the time replies wait for this generator")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "seed of the key and operation choices")
	fs.DurationVar(&cfg.Timeout, "timeout", bench.DefaultTimeout, "give up on a connection with no reply for this long")
	fs.BoolVar(&asJSON, "json", false, "print the result as JSON")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: vbcache bench -s host:port [flags]\n"+
			"       vbcache bench compare [flags]   (vbcache against memcached; see vbcache bench compare -h)\n"+
			"       vbcache bench proxies [flags]   (vbcache proxy against twemproxy; see vbcache bench proxies -h)\n\n"+
			"A load generator for memcached's text, meta and binary protocols.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return cfg, false, 0
		}
		return cfg, false, 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "vbcache bench: unexpected argument %q\n", fs.Arg(0))
		return cfg, false, 2
	}
	cfg.Servers = servers
	var err error
	if cfg.Protocol, err = bench.ParseProtocol(*proto); err != nil {
		fmt.Fprintln(stderr, err)
		return cfg, false, 2
	}
	if cfg.Ratio, err = bench.ParseRatio(*ratio); err != nil {
		fmt.Fprintln(stderr, err)
		return cfg, false, 2
	}
	if cfg.Pattern, err = bench.ParsePattern(*pattern); err != nil {
		fmt.Fprintln(stderr, err)
		return cfg, false, 2
	}
	if *sizeRange != "" {
		lo, hi, ok := strings.Cut(*sizeRange, "-")
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if !ok || err1 != nil || err2 != nil {
			fmt.Fprintf(stderr, "vbcache bench: bad --data-size-range %q (want min-max)\n", *sizeRange)
			return cfg, false, 2
		}
		cfg.DataSizeMin, cfg.DataSizeMax = a, b
	}
	if cfg.Requests > 0 {
		cfg.Duration = 0
	}
	if !*quiet && (*progress || isTerminal(os.Stderr)) {
		cfg.Progress = stderr
		cfg.ProgressTTY = isTerminal(os.Stderr)
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "vbcache bench: %v\n", err)
		return cfg, false, 2
	}
	return cfg, asJSON, -1
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// runBenchCompare is "vbcache bench compare".
func runBenchCompare(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("vbcache bench compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg bench.CompareConfig
	workloads := fs.String("workloads", "", "comma-separated workloads to run (default all: "+strings.Join(bench.WorkloadNames(), ",")+")")
	noRT := fs.Bool("no-rt", false, "do not use real-time scheduling (chrt -f) even when permitted")
	fs.StringVar(&cfg.Vbcache, "vbcache", "", "vbcache binary for the server and the load (default: this binary)")
	fs.StringVar(&cfg.Memcached, "memcached", "", "memcached binary (default: memcached in PATH)")
	fs.IntVar(&cfg.Rounds, "rounds", bench.DefaultRounds, "rounds per workload (each runs both servers)")
	fs.DurationVar(&cfg.Duration, "duration", 0, "length of each run (0: 10s, or 1s with --quick)")
	fs.BoolVar(&cfg.Quick, "quick", false, "smoke run: 1 s runs, 100k items for the memory test (under a minute)")
	fs.IntVar(&cfg.MemoryItems, "memory-items", 0, "items stored for the memory test (0: 1,000,000; -1: skip)")
	fs.StringVar(&cfg.ServerCPU, "server-cpu", "0", "CPU list the servers are pinned to (taskset -c)")
	fs.StringVar(&cfg.LoadCPU, "load-cpu", "1", "CPU list the load generator is pinned to (taskset -c)")
	fs.IntVar(&cfg.RTPriority, "rt-priority", 50, "SCHED_FIFO priority for chrt -f")
	fs.StringVar(&cfg.OutDir, "out", "", "write results.md, results.svg and results.json into this directory (e.g. docs/bench)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: vbcache bench compare [flags]\n\n"+
			"Runs vbcache and memcached side by side (each pinned to --server-cpu, the load on --load-cpu,\n"+
			"rounds interleaved A B A B) and reports medians per workload.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "vbcache bench compare: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *workloads != "" {
		cfg.Workloads = strings.Split(*workloads, ",")
	}
	cfg.NoRealTime = *noRT
	cfg.Log = stderr
	cfg.Command = "vbcache bench compare " + strings.Join(args, " ")
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "vbcache bench compare: %v\n", err)
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	res, err := bench.Compare(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "vbcache bench compare: %v\n", err)
		return 1
	}
	if err := res.WriteMarkdown(stdout); err != nil {
		fmt.Fprintf(stderr, "vbcache bench compare: %v\n", err)
		return 1
	}
	return 0
}
