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

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	return validatePlan(d.Rounds, d.Duration, d.Workloads, workloadList())
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
	e, info, err := newCompareEnv(ctx, &c)
	if err != nil {
		return nil, err
	}
	defer e.cleanup()
	res, err := compare(ctx, &c, e, info)
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

// compare is Compare's logic over an env that info describes. c has its
// defaults applied.
func compare(ctx context.Context, c *CompareConfig, e *env, info Info) (*CompareResult, error) {
	r := newRunner(e, c.Log)
	began := e.now()
	res := &CompareResult{Command: c.Command, Rounds: c.Rounds, RunDuration: c.Duration.String(),
		Info: info, WorkloadTitles: map[string]string{}}
	for _, name := range c.Workloads {
		w, _ := workloadByName(name)
		res.Workloads = append(res.Workloads, w)
		res.WorkloadTitles[w.Name] = w.Title
		if err := res.runWorkload(ctx, c, r, w); err != nil {
			return res, fmt.Errorf("workload %s: %w", w.Name, err)
		}
	}
	res.Summaries = summarize(res.Samples, c.Workloads)
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
	for _, k := range kinds {
		ps, err := r.start(ctx, procSpec{kind: k, cpus: c.ServerCPU})
		if err != nil {
			return err
		}
		p.targets = append(p.targets, &target{name: k, servers: []string{ps[0].Addr}, charge: [][]*serverProc{ps}})
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

func (s Sample) key() (workload, server string) { return s.Workload, s.Server }

func (s Sample) figures() figures {
	return figures{ops: s.OpsPerSec, p50: s.P50, p99: s.P99, p999: s.P999, other: s.OtherCPU, steal: s.Steal,
		errors: s.Errors, hits: s.Hits, misses: s.Misses}
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
func summarize(samples []Sample, order []string) []Summary {
	var out []Summary
	for _, g := range groups(samples, order, kinds, Sample.key) {
		m := mediansOf(g.samples, Sample.figures)
		var opc []float64
		for _, s := range g.samples {
			opc = append(opc, s.OpsPerCPUSec)
		}
		sm := Summary{Workload: g.workload, Server: g.target, Rounds: m.rounds,
			OpsPerSec: m.ops, P50: m.p50, P99: m.p99, P999: m.p999,
			OpsPerCPUSec: median(opc), Spread: spread(opc), OpsSpread: m.opsSpread,
			OtherCPU: m.other, Errors: m.errors, HitRatio: m.hitRatio}
		if sm.OpsPerCPUSec > 0 {
			sm.CPUPerOpUs = 1e6 / sm.OpsPerCPUSec
		}
		out = append(out, sm)
	}
	return out
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
