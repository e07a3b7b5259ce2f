package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/vbcache/vbcache/internal/bench"
)

// runBench is "vbcache bench": flags into a bench.Config, then one call into
// package bench. "vbcache bench compare", "vbcache bench proxies" and
// "vbcache bench hitratio", the harnesses, take the shape of runHarness.
func runBench(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "compare" {
		return runBenchCompare(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "proxies" {
		return runBenchProxies(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "hitratio" {
		return runBenchHitRatio(args[1:], stdout, stderr)
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
	fs := newFlagSet("vbcache bench", stderr, "Usage: vbcache bench -s host:port [flags]\n"+
		"       vbcache bench compare [flags]   (vbcache against memcached; see vbcache bench compare -h)\n"+
		"       vbcache bench proxies [flags]   (vbcache proxy against twemproxy; see vbcache bench proxies -h)\n"+
		"       vbcache bench hitratio [flags]  (hit ratios at equal -m, vbcache against memcached; see vbcache bench hitratio -h)\n\n"+
		"A load generator for memcached's text, meta and binary protocols.\n\nFlags:\n")
	var (
		servers   stringList
		proto     = fs.String("protocol", "text", "text, meta or binary")
		ratio     = fs.String("ratio", bench.DefaultRatio.String(), "set:get ratio")
		sizeRange = fs.String("data-size-range", "", "value sizes spread over `min-max` bytes (by key)")
		pattern   = fs.String("key-pattern", "uniform", "uniform, gaussian, sequential (R, G, S), zipf (key-minimum most popular, exponent --zipf-alpha) or scan (zipf with a sequential scan of --scan-length keys ending every --scan-every requests)")
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
	fs.Float64Var(&cfg.ZipfAlpha, "zipf-alpha", bench.DefaultZipfAlpha, "exponent α of the zipf and scan patterns (any α > 0)")
	fs.Uint64Var(&cfg.ScanLength, "scan-length", 0, "scan pattern: consecutive keys per scan (0: a quarter of the key range)")
	fs.Uint64Var(&cfg.ScanEvery, "scan-every", 0, "scan pattern: a scan ends every this many requests of a connection (0: 4 × --scan-length)")
	fs.IntVar(&cfg.MultiGet, "multi-get", 1, "keys per get request")
	fs.DurationVar(&cfg.Duration, "test-time", bench.DefaultDuration, "run time (when --requests is 0)")
	fs.Uint64Var(&cfg.Requests, "requests", 0, "total requests over all connections (0: run for --test-time)")
	fs.Uint64Var(&cfg.Requests, "n", 0, "same as --requests")
	fs.Float64Var(&cfg.Rate, "rate", 0, "open loop: total requests per second, latency from the scheduled send time (0: closed loop)")
	fs.BoolVar(&cfg.Arrival, "arrival", false, "also measure latency to the kernel's receive time of each reply (SO_TIMESTAMPNS; Linux), leaving out the time replies wait for this generator")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "seed of the key and operation choices")
	fs.DurationVar(&cfg.Timeout, "timeout", bench.DefaultTimeout, "give up on a connection with no reply for this long")
	fs.StringVar(&cfg.TLSCA, "tls-ca", "", "connect over TLS, verifying the servers against this CA file (servers run with -Z)")
	fs.BoolVar(&asJSON, "json", false, "print the result as JSON")
	if code := parseFlags(fs, args, stdout); code >= 0 {
		return cfg, false, code
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

// runBenchCompare is "vbcache bench compare": flags into a
// bench.CompareConfig, then runHarness. "vbcache bench compare --hit-ratio
// …" is "vbcache bench hitratio …".
func runBenchCompare(args []string, stdout, stderr io.Writer) int {
	for i, a := range args {
		if a == "--hit-ratio" || a == "-hit-ratio" {
			return runBenchHitRatio(append(slices.Clip(args[:i]), args[i+1:]...), stdout, stderr)
		}
	}
	var cfg bench.CompareConfig
	fs := newFlagSet("vbcache bench compare", stderr, "Usage: vbcache bench compare [flags]\n\n"+
		"Runs vbcache and memcached side by side (each pinned to --server-cpu, the load on --load-cpu,\n"+
		"rounds interleaved A B A B) and reports medians per workload. --threads N compares them with N\n"+
		"worker threads each, the load on the remaining CPUs. --hit-ratio runs \"vbcache bench hitratio\".\n\nFlags:\n")
	workloads := fs.String("workloads", "", "comma-separated workloads to run (default all: "+strings.Join(bench.WorkloadNames(), ",")+")")
	fs.BoolVar(&cfg.NoRealTime, "no-rt", false, "do not use real-time scheduling (chrt -f) even when permitted")
	fs.StringVar(&cfg.Vbcache, "vbcache", "", "vbcache binary for the server and the load (default: this binary)")
	fs.StringVar(&cfg.Memcached, "memcached", "", "memcached binary (default: memcached in PATH)")
	fs.IntVar(&cfg.Rounds, "rounds", bench.DefaultRounds, "rounds per workload (each runs both servers)")
	fs.DurationVar(&cfg.Duration, "duration", 0, "length of each run (0: 10s, or 1s with --quick)")
	fs.BoolVar(&cfg.Quick, "quick", false, "smoke run: 1 s runs, 100k items for the memory test (under a minute)")
	fs.IntVar(&cfg.MemoryItems, "memory-items", 0, "items stored for the memory test (0: 1,000,000; -1: skip)")
	fs.BoolVar(&cfg.TLS, "tls", false, "TLS on both sides: both servers with -Z and a certificate from a CA made for the run, the load over TLS (the memory test is skipped)")
	fs.BoolVar(&cfg.Metrics, "metrics", false, "add a third server: vbcache with --metrics-listen, scraped once a second through every run (what serving Prometheus metrics costs, against vbcache without)")
	fs.IntVar(&cfg.Threads, "threads", 0, "scaling run: memcached -t N and vbcache -t N (GOMAXPROCS=N), both pinned to the first N CPUs, "+
		"the load on all the others with a thread and 50 connections per CPU; needs N+1 CPUs (0: one server thread on --server-cpu, the load on --load-cpu)")
	fs.StringVar(&cfg.ServerCPU, "server-cpu", "", "CPU list the servers are pinned to (taskset -c; default 0, or with --threads N the first N CPUs)")
	fs.StringVar(&cfg.LoadCPU, "load-cpu", "", "CPU list the load generator is pinned to (taskset -c; default 1, or with --threads N the CPUs after the servers')")
	fs.IntVar(&cfg.RTPriority, "rt-priority", 50, "SCHED_FIFO priority for chrt -f")
	fs.StringVar(&cfg.OutDir, "out", "", "write results.md, results.svg and results.json into this directory (e.g. docs/bench)")
	return runHarness(fs, args, stdout, func() error {
		if *workloads != "" {
			cfg.Workloads = strings.Split(*workloads, ",")
		}
		cfg.Log = stderr
		cfg.Command = "vbcache bench compare " + strings.Join(args, " ")
		return cfg.Validate()
	}, func(ctx context.Context) (harnessReport, error) {
		res, err := bench.Compare(ctx, cfg)
		return res, err
	})
}

// runBenchHitRatio is "vbcache bench hitratio" (also "vbcache bench compare
// --hit-ratio"): flags into a bench.HitRatioConfig, then runHarness.
func runBenchHitRatio(args []string, stdout, stderr io.Writer) int {
	var cfg bench.HitRatioConfig
	fs := newFlagSet("vbcache bench hitratio", stderr, "Usage: vbcache bench hitratio [flags]\n"+
		"       vbcache bench compare --hit-ratio [flags]   (the same)\n\n"+
		"Starts a fresh memcached and a fresh vbcache node with the same -m and flags for each workload\n"+
		"(Zipf α 0.8, 1.0, 1.2, and Zipf with periodic scans), sends both the same gets (same seed) as a\n"+
		"cache-aside client would, a set after every miss, and reports each server's hit ratio over the\n"+
		"counted gets after a warm-up, with curr_items and evictions. Requests, not time, bound every phase.\n\nFlags:\n")
	workloads := fs.String("workloads", "", "comma-separated workloads (default all: "+strings.Join(bench.HitWorkloadNames(), ",")+")")
	sizeRange := fs.String("data-size-range", "", "value sizes spread over `min-max` bytes (by key) instead of --data-size")
	fs.IntVar(&cfg.MemoryMB, "m", bench.DefaultHitMemoryMB, "both servers' -m (MiB)")
	fs.Uint64Var(&cfg.Keys, "keys", bench.DefaultHitKeys, "number of keys (key:000000 up); Zipf rank 1 is the first")
	fs.Uint64Var(&cfg.Warmup, "warmup", bench.DefaultHitWarmup, "gets (and their sets) before counting starts")
	fs.Uint64Var(&cfg.Requests, "requests", bench.DefaultHitRequests, "counted gets per server and workload")
	fs.IntVar(&cfg.DataSize, "data-size", bench.DefaultDataSize, "value size in bytes")
	fs.Uint64Var(&cfg.ScanLength, "scan-length", 0, "scan-mixed: consecutive keys per scan (0: a quarter of --keys)")
	fs.Uint64Var(&cfg.ScanEvery, "scan-every", 0, "scan-mixed: a scan ends every this many gets (0: 4 × --scan-length)")
	fs.IntVar(&cfg.Batch, "batch", bench.DefaultHitBatch, "gets pipelined together (their misses' sets follow the batch)")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the Zipf draws")
	fs.StringVar(&cfg.Vbcache, "vbcache", "", "vbcache binary for the server (default: this binary)")
	fs.StringVar(&cfg.Memcached, "memcached", "", "memcached binary (default: memcached in PATH)")
	fs.StringVar(&cfg.ServerCPU, "server-cpu", "0", "CPU list the servers are pinned to (taskset -c)")
	fs.StringVar(&cfg.LoadCPU, "load-cpu", "1", "CPU list of this process, which drives the servers (taskset -c)")
	fs.BoolVar(&cfg.NoRealTime, "no-rt", false, "do not use real-time scheduling (chrt -f) for the servers even when permitted")
	fs.IntVar(&cfg.RTPriority, "rt-priority", 50, "SCHED_FIFO priority for chrt -f")
	fs.StringVar(&cfg.OutDir, "out", "", "write results.md and results.json into this directory (e.g. docs/bench-hitratio)")
	return runHarness(fs, args, stdout, func() error {
		if *workloads != "" {
			cfg.Workloads = strings.Split(*workloads, ",")
		}
		if *sizeRange != "" {
			lo, hi, ok := strings.Cut(*sizeRange, "-")
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if !ok || err1 != nil || err2 != nil {
				return fmt.Errorf("bad --data-size-range %q (want min-max)", *sizeRange)
			}
			cfg.DataSizeMin, cfg.DataSizeMax = a, b
		}
		cfg.Log = stderr
		cfg.Command = strings.TrimSpace("vbcache bench hitratio " + strings.Join(args, " "))
		return cfg.Validate()
	}, func(ctx context.Context) (harnessReport, error) {
		res, err := bench.HitRatio(ctx, cfg)
		return res, err
	})
}

// runBenchProxies is "vbcache bench proxies": flags into a
// bench.ProxiesConfig, then runHarness.
func runBenchProxies(args []string, stdout, stderr io.Writer) int {
	var cfg bench.ProxiesConfig
	fs := newFlagSet("vbcache bench proxies", stderr, "Usage: vbcache bench proxies [flags]\n\n"+
		"Runs the same load straight to a memcached pool, through twemproxy (nutcracker) and through\n"+
		"vbcache proxy (each proxy pinned to --proxy-cpu, memcached and the load on --load-cpu, rounds\n"+
		"interleaved) and reports proxy CPU per operation and added p99 per workload.\n\nFlags:\n")
	workloads := fs.String("workloads", "", "comma-separated workloads (default all: "+strings.Join(bench.ProxyWorkloadNames(), ",")+")")
	fs.StringVar(&cfg.OutFile, "out", "", "also write the markdown to this file")
	fs.StringVar(&cfg.JSONFile, "json", "", "write every sample and summary as JSON to this file")
	fs.StringVar(&cfg.Vbcache, "vbcache", "", "vbcache binary for the proxy and the load (default: this binary)")
	fs.StringVar(&cfg.Memcached, "memcached", "", "memcached binary (default: memcached in PATH)")
	fs.StringVar(&cfg.Nutcracker, "nutcracker", "", "twemproxy binary (default: nutcracker in PATH)")
	fs.IntVar(&cfg.Servers, "servers", bench.DefaultProxiesServers, "memcached processes in the pool")
	fs.IntVar(&cfg.Clients, "clients", bench.DefaultClients, "load connections (a multiple of --servers)")
	fs.IntVar(&cfg.Rounds, "rounds", bench.DefaultProxiesRounds, "rounds per workload (each runs every path)")
	fs.DurationVar(&cfg.Duration, "duration", bench.DefaultProxiesDuration, "length of each run")
	fs.Float64Var(&cfg.Rate, "rate", 0, "open loop at this many requests/s in every run (0: closed loop)")
	fs.StringVar(&cfg.ProxyCPU, "proxy-cpu", "0", "CPU list the proxies are pinned to (taskset -c)")
	fs.StringVar(&cfg.LoadCPU, "load-cpu", "1", "CPU list of the load generator (taskset -c)")
	fs.StringVar(&cfg.MemcachedCPU, "memcached-cpu", "", "CPU list of memcached (default: --proxy-cpu's, so the load has a core of its own; --load-cpu's puts memcached with the load)")
	fs.BoolVar(&cfg.NoRealTime, "no-rt", false, "do not use real-time scheduling (chrt -f) even when permitted")
	fs.IntVar(&cfg.RTPriority, "rt-priority", 50, "SCHED_FIFO priority for chrt -f of the proxies and memcached")
	fs.IntVar(&cfg.LoadRTPriority, "load-rt-priority", 0, "SCHED_FIFO priority of the load generator (0: --rt-priority; lower lets memcached preempt it on their shared core)")
	return runHarness(fs, args, stdout, func() error {
		if *workloads != "" {
			cfg.Workloads = strings.Split(*workloads, ",")
		}
		cfg.Log = stderr
		cfg.Command = strings.TrimSpace("vbcache bench proxies " + strings.Join(args, " "))
		return cfg.Validate()
	}, func(ctx context.Context) (harnessReport, error) {
		res, err := bench.Proxies(ctx, cfg)
		return res, err
	})
}

// harnessReport is what a harness run returns: a bench.CompareResult or a
// bench.ProxiesResult.
type harnessReport interface {
	WriteMarkdown(w io.Writer) error
}

// newFlagSet is the flag set of a bench command: errors go to stderr, and
// its usage is the text usage, then the flags.
func newFlagSet(name string, stderr io.Writer, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	return fs
}

// runHarness is the shape of both harness subcommands: parse the flags,
// let configure finish and validate the config (exit 2 when it is
// unusable), run the harness until it ends or a signal stops it (exit 1 on
// failure, the harness's own output files written by then) and print its
// markdown report on stdout.
func runHarness(fs *flag.FlagSet, args []string, stdout io.Writer, configure func() error, run func(context.Context) (harnessReport, error)) int {
	if code := parseFlags(fs, args, stdout); code >= 0 {
		return code
	}
	if err := configure(); err != nil {
		fmt.Fprintf(fs.Output(), "%s: %v\n", fs.Name(), err)
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	res, err := run(ctx)
	if err == nil {
		err = res.WriteMarkdown(stdout)
	}
	if err != nil {
		fmt.Fprintf(fs.Output(), "%s: %v\n", fs.Name(), err)
		return 1
	}
	return 0
}

// parseFlags parses args into fs. It returns -1 when the command should go
// on, else its exit status: 0 after -h (usage on stdout), 2 for a bad flag or
// a stray argument.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) int {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return 2
	}
	return -1
}
