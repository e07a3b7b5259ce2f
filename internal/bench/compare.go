package bench

// The compare harness, a configuration of the runner (runner.go):
//
//	for each workload:
//	    start memcached and vbcache (fresh, pinned to ServerCPU)
//	    preload both (hit workloads)
//	    for round 1..Rounds: run A, run B      (A B A B …, load pinned to LoadCPU)
//	    stop both
//	memory: for each server, a fresh process, RSS idle, store N items, RSS again
//
// Each run is charged to the one server it loads: its CPU time is the
// server's, and the cores' other CPU is whatever neither it nor the load
// used.
//
// With Threads N (the scaling comparison) both servers run N worker
// threads (memcached -t N; vbcache -t N and GOMAXPROCS=N, its event loops)
// pinned to the first N CPUs, and the load runs on every other CPU with a
// thread per CPU and Clients connections per thread; the runs and the
// report are otherwise the same.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"
)

// Server kinds, in the order each round runs them.
const (
	KindMemcached = "memcached"
	KindVbcache   = "vbcache"
	// KindVbcacheMetrics is vbcache with --metrics-listen, scraped once a
	// second through the run (CompareConfig.Metrics): what serving
	// Prometheus metrics costs, against the same vbcache without.
	KindVbcacheMetrics = "vbcache+metrics"
)

var kinds = []string{KindMemcached, KindVbcache}

// kindsOf is the servers a run compares, in the order each round runs
// them.
func kindsOf(metrics bool) []string {
	if metrics {
		return []string{KindMemcached, KindVbcache, KindVbcacheMetrics}
	}
	return kinds
}

// Compare defaults.
const (
	DefaultRunDuration = 10 * time.Second
	DefaultMemoryItems = 1_000_000
)

// CompareConfig configures Compare. Zero values mean the defaults: those
// of Harness, runs of DefaultRunDuration (10 s, or 1 s with Quick) and
// every workload ("a".."f"). RTPriority is the servers' and the load's.
type CompareConfig struct {
	Harness
	// Quick is a smoke run: 1-second runs and a 100,000-item memory test.
	Quick bool
	// MemoryItems is the number of 100-byte items the memory test stores.
	// Zero means DefaultMemoryItems (100,000 with Quick); negative skips
	// the memory test.
	MemoryItems int
	// ServerCPU is the taskset CPU list of the servers. Empty means "0".
	ServerCPU string
	// OutDir, when set, receives results.md, results.svg and results.json.
	OutDir string
	// TLS runs both servers with -Z and a certificate from a CA made for
	// the run, and the load over TLS verifying it: the cost of TLS,
	// memcached's against vbcache's. The memory test is skipped (TLS does
	// not change what an item costs).
	TLS bool
	// Metrics adds a third server, vbcache serving its Prometheus
	// metrics and scraped every second (KindVbcacheMetrics).
	Metrics bool
	// Threads, when not zero, is the scaling comparison's N: memcached
	// runs with -t N and vbcache with -t N and GOMAXPROCS=N, both pinned
	// to the first N of CPUs, and the load to all the others, with a
	// thread (and Clients connections) per CPU (placeThreads). It chooses
	// ServerCPU and LoadCPU, which must then be left empty, and needs N+1
	// CPUs at least. Zero is one server thread on ServerCPU and a
	// one-thread load on LoadCPU; on a 2-CPU machine that is what
	// Threads 1 gives too.
	Threads int
	// CPUs are the CPUs Threads places the processes on, ascending; nil
	// means the machine's online CPUs.
	CPUs []int

	// place is where Threads put the processes (withDefaults); zero
	// without Threads, or when they do not fit (Validate says so).
	place threadPlacement
}

// threadPlacement is where a scaling comparison runs: the servers on
// serverCPU, the load on loadCPU with loadThreads threads.
type threadPlacement struct {
	serverCPU, loadCPU string
	loadThreads        int
}

// placeThreads puts n server threads on the first n of cpus (ascending)
// and the load on the rest, a thread per CPU. It refuses when fewer than
// n+1 CPUs are there: the load needs one of its own.
func placeThreads(cpus []int, n int) (threadPlacement, error) {
	if n < 1 || len(cpus) < n+1 {
		return threadPlacement{}, fmt.Errorf("%w: --threads %d needs %d CPUs (%d for the servers, at least 1 for the load), "+
			"and there are %d (%s)", ErrInvalidConfig, n, n+1, n, len(cpus), formatCPUList(cpus))
	}
	return threadPlacement{serverCPU: formatCPUList(cpus[:n]), loadCPU: formatCPUList(cpus[n:]), loadThreads: len(cpus) - n}, nil
}

func (c CompareConfig) withDefaults() CompareConfig {
	d := DefaultRunDuration
	if c.Quick {
		d = time.Second
	}
	if c.Threads > 0 && c.ServerCPU == "" && c.LoadCPU == "" {
		cpus := c.CPUs
		if cpus == nil {
			cpus = onlineCPUs()
		}
		if p, err := placeThreads(cpus, c.Threads); err == nil {
			c.place = p
			c.ServerCPU, c.LoadCPU = p.serverCPU, p.loadCPU
		}
	}
	c.Harness = c.Harness.withDefaults(d, workloadList())
	if c.MemoryItems == 0 {
		c.MemoryItems = DefaultMemoryItems
		if c.Quick {
			c.MemoryItems = 100_000
		}
	}
	c.ServerCPU = cmp.Or(c.ServerCPU, "0")
	if c.TLS {
		c.MemoryItems = -1
	}
	return c
}

// Validate reports an unusable configuration.
func (c *CompareConfig) Validate() error {
	d := c.withDefaults()
	switch {
	case c.Threads < 0:
		return fmt.Errorf("%w: threads must not be negative", ErrInvalidConfig)
	case c.Threads > 0 && (c.ServerCPU != "" || c.LoadCPU != ""):
		return fmt.Errorf("%w: --threads chooses the CPUs of the servers and of the load; leave out --server-cpu and --load-cpu", ErrInvalidConfig)
	case c.Threads > 0:
		cpus := c.CPUs
		if cpus == nil {
			cpus = onlineCPUs()
		}
		if _, err := placeThreads(cpus, c.Threads); err != nil {
			return err
		}
	}
	return d.validate(workloadList())
}

// Compare runs the comparison on this machine (see the file comment).
func Compare(ctx context.Context, cfg CompareConfig) (*CompareResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	res, err := inRealEnv(ctx, &c, newCompareEnv, compare)
	if err != nil || c.OutDir == "" {
		return res, err
	}
	if err := res.WriteFiles(c.OutDir); err != nil {
		return res, err
	}
	fmt.Fprintf(c.Log, "wrote %s/results.{md,svg,json}\n", c.OutDir)
	return res, nil
}

// compare is Compare's logic over an env that info describes. c has its
// defaults applied.
func compare(ctx context.Context, c *CompareConfig, e *env, info Info) (*CompareResult, error) {
	r := newRunner(e)
	began := e.now()
	res := &CompareResult{runHeader: c.header(), Info: info, WorkloadTitles: map[string]string{}, Kinds: kindsOf(c.Metrics)}
	for _, name := range c.Workloads {
		w, _ := workloadByName(name)
		res.workloads = append(res.workloads, w)
		res.WorkloadTitles[w.Name] = w.Title
		if err := res.runWorkload(ctx, c, r, w); err != nil {
			return res, fmt.Errorf("workload %s: %w", w.Name, err)
		}
	}
	res.Summaries = summarize(res.Samples, c.Workloads, res.Kinds)
	if c.MemoryItems > 0 {
		for _, k := range kinds {
			m, err := memoryTest(ctx, c, r, k)
			if err != nil {
				return res, fmt.Errorf("memory test (%s): %w", k, err)
			}
			res.Memory = append(res.Memory, m)
		}
	}
	res.ElapsedSec = e.now().Sub(began).Seconds()
	return res, nil
}

// runWorkload starts both servers, preloads them and runs w's rounds over
// them, each server a target, adding the samples to res.
func (res *CompareResult) runWorkload(ctx context.Context, c *CompareConfig, r *runner, w Workload) (err error) {
	defer func() {
		if serr := r.stopAll(); serr != nil && err == nil {
			err = serr
		}
	}()
	p := &plan{rounds: c.Rounds, duration: c.Duration}
	for _, k := range kindsOf(c.Metrics) {
		ps, err := r.start(ctx, procSpec{kind: k, cpus: c.ServerCPU})
		if err != nil {
			return err
		}
		p.targets = append(p.targets, &target{name: k, servers: []string{ps[0].Addr}, threads: c.place.loadThreads,
			charge: [][]*serverProc{ps}})
		if w.Preload {
			pr, err := r.preload(ctx, w, ps[0].Addr)
			if err != nil {
				return fmt.Errorf("preload %s: %w", k, err)
			}
			fmt.Fprintf(c.Log, "workload %s: preloaded %s with %d keys in %.1fs\n", w.Name, k, pr.Requests, pr.ElapsedSec)
		}
	}
	return r.rounds(ctx, p, w, func(t *target, round int, m measurement) {
		s := newSample(w, t.name, round, m)
		res.Samples = append(res.Samples, s)
		fmt.Fprintf(c.Log, "workload %s round %d %-9s %9.0f ops/s  p50 %6.1fµs  p99 %7.1fµs  p99.9 %7.1fµs  server %.2f CPU-s  %9.0f ops/CPU-s  other CPU %4.1f%%  errors %d\n",
			w.Name, round, t.name, s.OpsPerSec, s.P50, s.P99, s.P999, s.ServerCPUSec, s.OpsPerCPUSec, s.OtherCPU, s.Errors)
	})
}

// newSample is the sample of run m: workload w on server k in round.
func newSample(w Workload, k string, round int, m measurement) Sample {
	r := m.res
	s := Sample{
		Workload: w.Name, Server: k, Round: round,
		OpsPerSec: r.OpsPerSec, P50: r.Latency.P50, P99: r.Latency.P99, P999: r.Latency.P999,
		Requests: r.Requests, Hits: r.Hits, Misses: r.Misses, Errors: r.Errors,
		WallSec: m.wall.Seconds(), ServerCPUSec: m.charged[0].Seconds(), LoadCPUSec: m.loadCPU.Seconds(),
		OtherCPU: m.other, Steal: m.steal,
	}
	if s.ServerCPUSec > 0 {
		s.OpsPerCPUSec = float64(r.Requests) / s.ServerCPUSec
	}
	return s
}

// memoryTest stores c.MemoryItems items into a fresh server and reports the
// growth of its resident set per item.
func memoryTest(ctx context.Context, c *CompareConfig, r *runner, kind string) (m Memory, err error) {
	ps, err := r.start(ctx, procSpec{kind: kind, cpus: c.ServerCPU})
	if err != nil {
		return m, err
	}
	defer func() {
		if serr := r.stopAll(); serr != nil && err == nil {
			err = serr
		}
	}()
	p, e := ps[0], r.e
	e.settle(ctx)
	idle, err := e.rss(p)
	if err != nil {
		return m, err
	}
	lc := memoryConfig(c.MemoryItems)
	lc.Servers = []string{p.Addr}
	res, _, err := e.load(ctx, lc)
	if err != nil {
		return m, err
	}
	if res.Errors > 0 {
		return m, fmt.Errorf("%d errors storing items (%s)", res.Errors, res.FirstError)
	}
	if e.quiesce != nil {
		e.quiesce(ctx, p)
	}
	e.settle(ctx)
	loaded, err := e.rss(p)
	if err != nil {
		return m, err
	}
	n, err := e.items(ctx, p)
	if err != nil {
		return m, err
	}
	if n == 0 {
		return m, errors.New("no items stored")
	}
	m = Memory{Server: kind, Items: n, IdleRSS: idle, LoadedRSS: loaded,
		BytesPerItem: float64(loaded-idle) / float64(n)}
	fmt.Fprintf(c.Log, "memory %-9s %d items: RSS %d → %d bytes, %.1f bytes/item\n", kind, n, idle, loaded, m.BytesPerItem)
	return m, nil
}

// summarize takes the medians of each workload × server.
func summarize(samples []Sample, order, servers []string) []Summary {
	var out []Summary
	for _, g := range groups(samples, order, servers, Sample.key) {
		var opc []float64
		for _, s := range g.samples {
			opc = append(opc, s.OpsPerCPUSec)
		}
		sm := Summary{Workload: g.workload, Server: g.target, OpsPerCPUSec: median(opc), Spread: spread(opc)}
		sm.summaryFigures, sm.summaryChecks = summarizeRounds(g.samples, Sample.figures)
		if sm.OpsPerCPUSec > 0 {
			sm.CPUPerOpUs = 1e6 / sm.OpsPerCPUSec
		}
		out = append(out, sm)
	}
	return out
}

// workloadList is the list: (a) 90% get / 10% set, 100-byte
// values, 100k keys, 50 connections; (b) pipeline 16; (c) 1 KB values;
// (d) all misses; (e) 10-key multi-gets; (f) (a) over the binary protocol.
func workloadList() []Workload {
	base := Config{Threads: 1, Clients: 50, Pipeline: 1, Ratio: Ratio{Set: 1, Get: 9},
		DataSize: 100, KeyMax: 99_999, Seed: 1}
	w := func(name, title string, preload bool, mutate func(*Config)) Workload {
		c := base
		if mutate != nil {
			mutate(&c)
		}
		return Workload{Name: name, Title: title, Load: c, Preload: preload}
	}
	return []Workload{
		w("a", "90% get / 10% set, 100 B, 50 conns", true, nil),
		w("b", "(a) with pipeline 16", true, func(c *Config) { c.Pipeline = 16 }),
		w("c", "(a) with 1 KB values", true, func(c *Config) { c.DataSize = 1024 }),
		w("d", "100% get misses", false, func(c *Config) { c.Ratio = Ratio{Get: 1}; c.KeyPrefix = "miss:" }),
		w("e", "10-key multi-get (90/10)", true, func(c *Config) { c.MultiGet = 10 }),
		w("f", "(a) over the binary protocol", true, func(c *Config) { c.Protocol = Binary }),
	}
}

// WorkloadNames returns the names of the workloads Compare knows.
func WorkloadNames() []string { return workloadNames(workloadList()) }

func workloadByName(name string) (Workload, bool) { return findWorkload(workloadList(), name) }

// memoryConfig stores n 100-byte items under "key:%07d".
func memoryConfig(n int) Config {
	return Config{Threads: 1, Clients: 10, Pipeline: 16, Ratio: Ratio{Set: 1}, DataSize: 100,
		KeyPrefix: "key:", KeyMax: uint64(n - 1), KeyWidth: 7, Pattern: Sequential, Requests: uint64(n)}
}

// Info describes the machine and how the runs were isolated.
type Info struct {
	machine
	RealTime  bool   `json:"real_time"`
	RTNote    string `json:"real_time_note"`
	ServerCPU string `json:"server_cpu"`
	LoadCPU   string `json:"load_cpu"`
	// ServerThreads and LoadThreads are a scaling comparison's
	// (CompareConfig.Threads): each server's threads, the load's
	// threads. Zero in other runs: one each.
	ServerThreads int               `json:"server_threads,omitempty"`
	LoadThreads   int               `json:"load_threads,omitempty"`
	LoadAvg       string            `json:"loadavg_at_start"`
	ServerCmds    map[string]string `json:"server_commands"`
	LoadCmd       string            `json:"load_command_example"`
}

// Sample is one run: one workload, one round, one server.
type Sample struct {
	Workload     string  `json:"workload"`
	Server       string  `json:"server"`
	Round        int     `json:"round"`
	OpsPerSec    float64 `json:"ops_per_sec"`
	P50          float64 `json:"p50_us"`
	P99          float64 `json:"p99_us"`
	P999         float64 `json:"p999_us"`
	Requests     uint64  `json:"requests"`
	Hits         uint64  `json:"hits"`
	Misses       uint64  `json:"misses"`
	Errors       uint64  `json:"errors"`
	WallSec      float64 `json:"wall_s"`
	ServerCPUSec float64 `json:"server_cpu_s"`
	LoadCPUSec   float64 `json:"load_cpu_s"`
	OpsPerCPUSec float64 `json:"ops_per_server_cpu_s"`
	// OtherCPU is the share of the measured cores' capacity (the
	// servers' and the load's) during the run that neither the server nor
	// the load generator used (other processes, interrupts), in percent.
	// Steal is the hypervisor's steal time, in percent of the same
	// capacity.
	OtherCPU float64 `json:"other_cpu_pct"`
	Steal    float64 `json:"steal_pct"`
}

func (s Sample) key() (workload, server string) { return s.Workload, s.Server }

func (s Sample) figures() figures {
	return figures{ops: s.OpsPerSec, p50: s.P50, p99: s.P99, p999: s.P999, other: s.OtherCPU, steal: s.Steal,
		errors: s.Errors, hits: s.Hits, misses: s.Misses}
}

// Summary is the medians of one workload on one server.
type Summary struct {
	Workload string `json:"workload"`
	Server   string `json:"server"`
	summaryFigures
	OpsPerCPUSec float64 `json:"ops_per_server_cpu_s"`
	CPUPerOpUs   float64 `json:"server_cpu_us_per_op"`
	// Spread is (max-min)/median of ops per server CPU-second over the
	// rounds, in percent: how much the rounds disagreed.
	Spread float64 `json:"spread_pct"`
	summaryChecks
}

// Memory is the memory test's result for one server.
type Memory struct {
	Server       string  `json:"server"`
	Items        uint64  `json:"items"` // curr_items after the load
	IdleRSS      int64   `json:"idle_rss_bytes"`
	LoadedRSS    int64   `json:"loaded_rss_bytes"`
	BytesPerItem float64 `json:"bytes_per_item"`
}

// CompareResult is everything one Compare produced.
type CompareResult struct {
	runHeader
	Info           Info              `json:"info"`
	workloads      []Workload        // the report's rows, in order (WorkloadTitles is their JSON)
	WorkloadTitles map[string]string `json:"workloads"`
	Samples        []Sample          `json:"samples"`
	Summaries      []Summary         `json:"summaries"`
	Memory         []Memory          `json:"memory,omitempty"`
	ElapsedSec     float64           `json:"elapsed_s"`
	// Kinds are the servers compared, in the order each round ran them
	// (empty in results from before KindVbcacheMetrics: memcached and
	// vbcache).
	Kinds []string `json:"servers,omitempty"`
}

// servers is r.Kinds, or the two of older results.
func (r *CompareResult) servers() []string {
	if len(r.Kinds) == 0 {
		return kinds
	}
	return r.Kinds
}

func (s Summary) key() (workload, server string) { return s.Workload, s.Server }

// summary returns the summary of workload w on server k, or nil.
func (r *CompareResult) summary(w, k string) *Summary { return find(r.Summaries, Summary.key, w, k) }

func (r *CompareResult) memory(k string) *Memory {
	for i := range r.Memory {
		if r.Memory[i].Server == k {
			return &r.Memory[i]
		}
	}
	return nil
}
