package bench

// The compare harness. Compare runs every workload against both servers:
//
//	for each workload:
//	    start memcached and vbcache (fresh, pinned to ServerCPU)
//	    preload both (hit workloads)
//	    for round 1..Rounds: run A, run B      (A B A B …, load pinned to LoadCPU)
//	    stop both
//	memory: for each server, a fresh process, RSS idle, store N items, RSS again
//
// A run reads the server's CPU time (utime+stime from /proc/<pid>/stat) and
// the busy time of the two cores (/proc/stat) before and after; the server's
// share is its delta, and whatever else kept those cores busy (other
// processes, or the kernel on their behalf) is the run's "other CPU", the
// noise figure reported beside the spread of the rounds.
//
// Everything that touches processes or /proc goes through env, so that the
// order of runs, the arithmetic and the report are tested with a fake.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// Server kinds, in the order each round runs them.
const (
	KindMemcached = "memcached"
	KindVbcache   = "vbcache"
)

var kinds = []string{KindMemcached, KindVbcache}

// Compare defaults.
const (
	DefaultRounds      = 3
	DefaultRunDuration = 10 * time.Second
	DefaultMemoryItems = 1_000_000
)

// CompareConfig configures Compare. Zero values mean the defaults.
type CompareConfig struct {
	Vbcache   string // vbcache binary (server and load); "" means this executable
	Memcached string // memcached binary; "" means "memcached" from PATH
	// Rounds per workload; each round runs memcached then vbcache. Zero
	// means DefaultRounds (3).
	Rounds int
	// Duration of each run. Zero means DefaultRunDuration (10 s), or 1 s
	// with Quick.
	Duration time.Duration
	// Quick is a smoke run: 1-second runs and a 100,000-item memory test.
	Quick bool
	// Workloads to run, by name ("a".."f"); empty means all.
	Workloads []string
	// MemoryItems is the number of 100-byte items the memory test stores.
	// Zero means DefaultMemoryItems (100,000 with Quick); negative skips
	// the memory test.
	MemoryItems int
	// ServerCPU and LoadCPU are taskset CPU lists. Empty means "0" and "1".
	ServerCPU, LoadCPU string
	// NoRealTime disables chrt -f even when it is permitted.
	NoRealTime bool
	// RTPriority is the SCHED_FIFO priority. Zero means 50.
	RTPriority int
	// OutDir, when set, receives results.md, results.svg and results.json.
	OutDir string
	// Log receives one line per step. Nil discards them.
	Log io.Writer
	// Command is the command line recorded in the results.
	Command string
}

func (c CompareConfig) withDefaults() CompareConfig {
	if c.Rounds == 0 {
		c.Rounds = DefaultRounds
	}
	if c.Duration == 0 {
		c.Duration = DefaultRunDuration
		if c.Quick {
			c.Duration = time.Second
		}
	}
	if c.MemoryItems == 0 {
		c.MemoryItems = DefaultMemoryItems
		if c.Quick {
			c.MemoryItems = 100_000
		}
	}
	if c.ServerCPU == "" {
		c.ServerCPU = "0"
	}
	if c.LoadCPU == "" {
		c.LoadCPU = "1"
	}
	if c.RTPriority == 0 {
		c.RTPriority = 50
	}
	if len(c.Workloads) == 0 {
		c.Workloads = WorkloadNames()
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

// Validate reports an unusable configuration.
func (c *CompareConfig) Validate() error {
	d := c.withDefaults()
	if d.Rounds < 1 {
		return fmt.Errorf("%w: rounds must be at least 1", ErrInvalidConfig)
	}
	if d.Duration < 100*time.Millisecond {
		return fmt.Errorf("%w: run duration %v is too short", ErrInvalidConfig, d.Duration)
	}
	for _, w := range d.Workloads {
		if _, ok := workloadByName(w); !ok {
			return fmt.Errorf("%w: unknown workload %q (have %s)", ErrInvalidConfig, w, strings.Join(WorkloadNames(), ","))
		}
	}
	return nil
}

// Workload is one line of the comparison.
type Workload struct {
	Name    string
	Title   string
	Load    Config // Servers and Duration are filled in per run
	Preload bool   // store every key of the key space before the rounds
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
func WorkloadNames() []string {
	var n []string
	for _, w := range workloadList() {
		n = append(n, w.Name)
	}
	return n
}

func workloadByName(name string) (Workload, bool) {
	for _, w := range workloadList() {
		if w.Name == name {
			return w, true
		}
	}
	return Workload{}, false
}

// preloadConfig stores every key of w's key space once.
func preloadConfig(w Workload) Config {
	c := w.Load
	c.Protocol = Text
	c.Ratio = Ratio{Set: 1}
	c.MultiGet = 0
	c.Pattern = Sequential
	c.Pipeline = 16
	c.Clients = 10
	c.Requests = c.KeyMax - c.KeyMin + 1
	c.Duration = 0
	return c
}

// memoryConfig stores n 100-byte items under "key:%07d".
func memoryConfig(n int) Config {
	return Config{Threads: 1, Clients: 10, Pipeline: 16, Ratio: Ratio{Set: 1}, DataSize: 100,
		KeyPrefix: "key:", KeyMax: uint64(n - 1), KeyWidth: 7, Pattern: Sequential, Requests: uint64(n)}
}

// serverProc is a running server as env sees it.
type serverProc struct {
	Kind string
	Addr string
	Pid  int
}

// coreTimes is the busy and steal time of the server and load cores.
type coreTimes struct {
	Busy  time.Duration // user+nice+system+irq+softirq, summed over the cores
	Steal time.Duration
}

// env is everything Compare needs from the outside world. realEnv (env.go)
// uses processes and /proc; tests use a fake.
type env struct {
	start   func(ctx context.Context, kind string) (*serverProc, error)
	stop    func(p *serverProc) error
	load    func(ctx context.Context, cfg Config) (res *Result, loadCPU time.Duration, err error)
	cpu     func(p *serverProc) (time.Duration, error) // utime+stime so far
	rss     func(p *serverProc) (int64, error)         // bytes
	items   func(ctx context.Context, p *serverProc) (uint64, error)
	cores   func() (coreTimes, error)
	now     func() time.Time
	settle  func(ctx context.Context)                // let a fresh server reach steady state
	quiesce func(ctx context.Context, p *serverProc) // wait for a loaded server's background work (hash expansion)
	info    func() Info
	cleanup func()
}

// Info describes the machine and how the runs were isolated.
type Info struct {
	Date       string            `json:"date"`
	Host       string            `json:"host"`
	CPU        string            `json:"cpu"`
	Kernel     string            `json:"kernel"`
	GoVersion  string            `json:"go_version"`
	Memcached  string            `json:"memcached"`
	RealTime   bool              `json:"real_time"`
	RTNote     string            `json:"real_time_note"`
	ServerCPU  string            `json:"server_cpu"`
	LoadCPU    string            `json:"load_cpu"`
	LoadAvg    string            `json:"loadavg_at_start"`
	ServerCmds map[string]string `json:"server_commands"`
	LoadCmd    string            `json:"load_command_example"`
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
	// OtherCPU is the share of the two cores' capacity during the run that
	// neither the server nor the load generator used (other processes,
	// interrupts), in percent. Steal is the hypervisor's steal time, in
	// percent of the same capacity.
	OtherCPU float64 `json:"other_cpu_pct"`
	Steal    float64 `json:"steal_pct"`
}

// Summary is the medians of one workload on one server.
type Summary struct {
	Workload     string  `json:"workload"`
	Server       string  `json:"server"`
	Rounds       int     `json:"rounds"`
	OpsPerSec    float64 `json:"ops_per_sec"`
	P50          float64 `json:"p50_us"`
	P99          float64 `json:"p99_us"`
	P999         float64 `json:"p999_us"`
	OpsPerCPUSec float64 `json:"ops_per_server_cpu_s"`
	CPUPerOpUs   float64 `json:"server_cpu_us_per_op"`
	// Spread is (max-min)/median of ops per server CPU-second over the
	// rounds, in percent: how much the rounds disagreed.
	Spread float64 `json:"spread_pct"`
	// OpsSpread is the same for ops/s.
	OpsSpread float64 `json:"ops_spread_pct"`
	OtherCPU  float64 `json:"other_cpu_pct"` // median over the rounds
	Errors    uint64  `json:"errors"`        // summed over the rounds
	HitRatio  float64 `json:"hit_ratio"`
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
	Command        string            `json:"command"`
	Rounds         int               `json:"rounds"`
	RunDuration    string            `json:"run_duration"`
	Info           Info              `json:"info"`
	Workloads      []Workload        `json:"-"`
	WorkloadTitles map[string]string `json:"workloads"`
	Samples        []Sample          `json:"samples"`
	Summaries      []Summary         `json:"summaries"`
	Memory         []Memory          `json:"memory,omitempty"`
	ElapsedSec     float64           `json:"elapsed_s"`
}

// Compare runs the comparison on this machine (see the file comment).
func Compare(ctx context.Context, cfg CompareConfig) (*CompareResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	e, err := newRealEnv(ctx, &c)
	if err != nil {
		return nil, err
	}
	defer e.cleanup()
	res, err := compare(ctx, &c, e)
	if err != nil {
		return res, err
	}
	if c.OutDir != "" {
		if err := res.WriteFiles(c.OutDir); err != nil {
			return res, err
		}
		fmt.Fprintf(c.Log, "wrote %s/results.{md,svg,json}\n", c.OutDir)
	}
	return res, nil
}

// compare is Compare's logic over an env. c has its defaults applied.
func compare(ctx context.Context, c *CompareConfig, e *env) (*CompareResult, error) {
	began := e.now()
	res := &CompareResult{Command: c.Command, Rounds: c.Rounds, RunDuration: c.Duration.String(),
		Info: e.info(), WorkloadTitles: map[string]string{}}
	for _, name := range c.Workloads {
		w, _ := workloadByName(name)
		res.Workloads = append(res.Workloads, w)
		res.WorkloadTitles[w.Name] = w.Title
		samples, err := runWorkload(ctx, c, e, w)
		res.Samples = append(res.Samples, samples...)
		if err != nil {
			return res, fmt.Errorf("workload %s: %w", w.Name, err)
		}
	}
	res.Summaries = summarize(res.Samples, c.Workloads)
	if c.MemoryItems > 0 {
		for _, k := range kinds {
			m, err := memoryTest(ctx, c, e, k)
			if err != nil {
				return res, fmt.Errorf("memory test (%s): %w", k, err)
			}
			res.Memory = append(res.Memory, m)
		}
	}
	res.ElapsedSec = e.now().Sub(began).Seconds()
	return res, nil
}

// runWorkload starts both servers, preloads them and runs the rounds.
func runWorkload(ctx context.Context, c *CompareConfig, e *env, w Workload) (samples []Sample, err error) {
	procs := map[string]*serverProc{}
	defer func() {
		for _, k := range kinds {
			if p := procs[k]; p != nil {
				if serr := e.stop(p); serr != nil && err == nil {
					err = serr
				}
			}
		}
	}()
	for _, k := range kinds {
		p, err := e.start(ctx, k)
		if err != nil {
			return nil, err
		}
		procs[k] = p
		if w.Preload {
			pc := preloadConfig(w)
			pc.Servers = []string{p.Addr}
			r, _, err := e.load(ctx, pc)
			if err != nil {
				return nil, fmt.Errorf("preload %s: %w", k, err)
			}
			if r.Errors > 0 {
				return nil, fmt.Errorf("preload %s: %d errors (%s)", k, r.Errors, r.FirstError)
			}
			fmt.Fprintf(c.Log, "workload %s: preloaded %s with %d keys in %.1fs\n", w.Name, k, r.Requests, r.ElapsedSec)
		}
	}
	for round := 1; round <= c.Rounds; round++ {
		for _, k := range kinds {
			s, err := runOnce(ctx, c, e, w, procs[k], round)
			if err != nil {
				return samples, fmt.Errorf("round %d %s: %w", round, k, err)
			}
			samples = append(samples, s)
			fmt.Fprintf(c.Log, "workload %s round %d %-9s %9.0f ops/s  p50 %6.1fµs  p99 %7.1fµs  p99.9 %7.1fµs  server %.2f CPU-s  %9.0f ops/CPU-s  other CPU %4.1f%%  errors %d\n",
				w.Name, round, k, s.OpsPerSec, s.P50, s.P99, s.P999, s.ServerCPUSec, s.OpsPerCPUSec, s.OtherCPU, s.Errors)
		}
	}
	return samples, nil
}

// runOnce runs one load against one server and measures the server's CPU.
func runOnce(ctx context.Context, c *CompareConfig, e *env, w Workload, p *serverProc, round int) (Sample, error) {
	lc := w.Load
	lc.Servers = []string{p.Addr}
	lc.Duration = c.Duration
	lc.Seed = uint64(round)
	cpu0, err := e.cpu(p)
	if err != nil {
		return Sample{}, err
	}
	cores0, err := e.cores()
	if err != nil {
		return Sample{}, err
	}
	t0 := e.now()
	r, loadCPU, err := e.load(ctx, lc)
	if err != nil {
		return Sample{}, err
	}
	wall := e.now().Sub(t0)
	cpu1, err := e.cpu(p)
	if err != nil {
		return Sample{}, err
	}
	cores1, err := e.cores()
	if err != nil {
		return Sample{}, err
	}
	s := Sample{
		Workload: w.Name, Server: p.Kind, Round: round,
		OpsPerSec: r.OpsPerSec, P50: r.Latency.P50, P99: r.Latency.P99, P999: r.Latency.P999,
		Requests: r.Requests, Hits: r.Hits, Misses: r.Misses, Errors: r.Errors,
		WallSec: wall.Seconds(), ServerCPUSec: (cpu1 - cpu0).Seconds(), LoadCPUSec: loadCPU.Seconds(),
	}
	if s.ServerCPUSec > 0 {
		s.OpsPerCPUSec = float64(r.Requests) / s.ServerCPUSec
	}
	if capacity := 2 * wall.Seconds(); capacity > 0 {
		other := (cores1.Busy - cores0.Busy).Seconds() - s.ServerCPUSec - s.LoadCPUSec
		s.OtherCPU = math.Max(0, 100*other/capacity)
		s.Steal = 100 * (cores1.Steal - cores0.Steal).Seconds() / capacity
	}
	return s, nil
}

// memoryTest stores c.MemoryItems items into a fresh server and reports the
// growth of its resident set per item.
func memoryTest(ctx context.Context, c *CompareConfig, e *env, kind string) (m Memory, err error) {
	p, err := e.start(ctx, kind)
	if err != nil {
		return m, err
	}
	defer func() {
		if serr := e.stop(p); serr != nil && err == nil {
			err = serr
		}
	}()
	e.settle(ctx)
	idle, err := e.rss(p)
	if err != nil {
		return m, err
	}
	lc := memoryConfig(c.MemoryItems)
	lc.Servers = []string{p.Addr}
	r, _, err := e.load(ctx, lc)
	if err != nil {
		return m, err
	}
	if r.Errors > 0 {
		return m, fmt.Errorf("%d errors storing items (%s)", r.Errors, r.FirstError)
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
func summarize(samples []Sample, order []string) []Summary {
	var out []Summary
	for _, w := range order {
		for _, k := range kinds {
			var ops, p50, p99, p999, opc, other []float64
			var errs, hits, misses uint64
			for _, s := range samples {
				if s.Workload != w || s.Server != k {
					continue
				}
				ops = append(ops, s.OpsPerSec)
				p50 = append(p50, s.P50)
				p99 = append(p99, s.P99)
				p999 = append(p999, s.P999)
				opc = append(opc, s.OpsPerCPUSec)
				other = append(other, s.OtherCPU)
				errs += s.Errors
				hits += s.Hits
				misses += s.Misses
			}
			if len(ops) == 0 {
				continue
			}
			sm := Summary{Workload: w, Server: k, Rounds: len(ops),
				OpsPerSec: median(ops), P50: median(p50), P99: median(p99), P999: median(p999),
				OpsPerCPUSec: median(opc), Spread: spread(opc), OpsSpread: spread(ops),
				OtherCPU: median(other), Errors: errs}
			if sm.OpsPerCPUSec > 0 {
				sm.CPUPerOpUs = 1e6 / sm.OpsPerCPUSec
			}
			if hits+misses > 0 {
				sm.HitRatio = float64(hits) / float64(hits+misses)
			}
			out = append(out, sm)
		}
	}
	return out
}

// median returns the median of v (the mean of the middle two for an even
// count), or 0 for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// spread returns (max-min)/median in percent.
func spread(v []float64) float64 {
	m := median(v)
	if m == 0 {
		return 0
	}
	return 100 * (slices.Max(v) - slices.Min(v)) / m
}

// summary returns the summary of workload w on server k, or nil.
func (r *CompareResult) summary(w, k string) *Summary {
	for i := range r.Summaries {
		if r.Summaries[i].Workload == w && r.Summaries[i].Server == k {
			return &r.Summaries[i]
		}
	}
	return nil
}

func (r *CompareResult) memory(k string) *Memory {
	for i := range r.Memory {
		if r.Memory[i].Server == k {
			return &r.Memory[i]
		}
	}
	return nil
}
