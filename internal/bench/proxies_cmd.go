package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// ProxiesMain is "vbcache bench proxies": flags into a ProxiesConfig, the
// run, and the markdown on stdout (and in --out, --json). It returns the
// exit status.
func ProxiesMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("vbcache bench proxies", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg ProxiesConfig
	workloads := fs.String("workloads", "", "comma-separated workloads (default all: "+strings.Join(ProxyWorkloadNames(), ",")+")")
	out := fs.String("out", "", "also write the markdown to this file")
	jsonOut := fs.String("json", "", "write every sample and summary as JSON to this file")
	fs.StringVar(&cfg.Vbcache, "vbcache", "", "vbcache binary for the proxy and the load (default: this binary)")
	fs.StringVar(&cfg.Memcached, "memcached", "", "memcached binary (default: memcached in PATH)")
	fs.StringVar(&cfg.Nutcracker, "nutcracker", "", "twemproxy binary (default: nutcracker in PATH)")
	fs.IntVar(&cfg.Servers, "servers", DefaultProxiesServers, "memcached processes in the pool")
	fs.IntVar(&cfg.Clients, "clients", DefaultClients, "load connections (a multiple of --servers)")
	fs.IntVar(&cfg.Rounds, "rounds", DefaultProxiesRounds, "rounds per workload (each runs every path)")
	fs.DurationVar(&cfg.Duration, "duration", DefaultProxiesDuration, "length of each run")
	fs.Float64Var(&cfg.Rate, "rate", 0, "open loop at this many requests/s in every run (0: closed loop)")
	fs.StringVar(&cfg.ProxyCPU, "proxy-cpu", "0", "CPU list the proxies are pinned to (taskset -c)")
	fs.StringVar(&cfg.LoadCPU, "load-cpu", "1", "CPU list of the load generator (taskset -c)")
	fs.StringVar(&cfg.MemcachedCPU, "memcached-cpu", "", "CPU list of memcached (default: --proxy-cpu's, so the load has a core of its own; --load-cpu's puts memcached with the load)")
	fs.BoolVar(&cfg.NoRealTime, "no-rt", false, "do not use real-time scheduling (chrt -f) even when permitted")
	fs.IntVar(&cfg.RTPriority, "rt-priority", 50, "SCHED_FIFO priority for chrt -f of the proxies and memcached")
	fs.IntVar(&cfg.LoadRTPriority, "load-rt-priority", 0, "SCHED_FIFO priority of the load generator (0: --rt-priority; lower lets memcached preempt it on their shared core)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: vbcache bench proxies [flags]\n\n"+
			"Runs the same load straight to a memcached pool, through twemproxy (nutcracker) and through\n"+
			"vbcache proxy (each proxy pinned to --proxy-cpu, memcached and the load on --load-cpu, rounds\n"+
			"interleaved) and reports proxy CPU per operation and added p99 per workload.\n\nFlags:\n")
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
		fmt.Fprintf(stderr, "vbcache bench proxies: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *workloads != "" {
		cfg.Workloads = strings.Split(*workloads, ",")
	}
	cfg.Log = stderr
	cfg.Command = strings.TrimSpace("vbcache bench proxies " + strings.Join(args, " "))
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "vbcache bench proxies: %v\n", err)
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	res, err := Proxies(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "vbcache bench proxies: %v\n", err)
		return 1
	}
	var md strings.Builder
	res.WriteMarkdown(&md)
	io.WriteString(stdout, md.String())
	if *out != "" {
		if err := os.WriteFile(*out, []byte(md.String()), 0o644); err != nil {
			fmt.Fprintf(stderr, "vbcache bench proxies: %v\n", err)
			return 1
		}
	}
	if *jsonOut != "" {
		js, err := json.MarshalIndent(struct {
			*ProxiesResult
			Verdicts []ProxyVerdict `json:"verdicts"`
		}{res, res.Verdicts()}, "", "  ")
		if err == nil {
			err = os.WriteFile(*jsonOut, append(js, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintf(stderr, "vbcache bench proxies: %v\n", err)
			return 1
		}
	}
	return 0
}
