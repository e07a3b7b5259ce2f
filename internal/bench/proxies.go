package bench

// The proxies harness: vbcache proxy next to twemproxy (Debian's
// nutcracker) in one run, over one pool.
//
//	start N memcached servers, the N ports of one memcached (-t 1, pinned
//	    to MemcachedCPU: by default the proxies' core, so the load has one
//	    of its own), and preload each with the whole key space, so every
//	    key hits whichever server it lands on
//	start nutcracker and vbcache proxy (pinned to ProxyCPU, GOMAXPROCS=1),
//	    both from the same twemproxy pool file (ketama, md5) but for the
//	    listen port; one warm-up run through each
//	for each workload (get, set, mget, pipe):
//	    for round 1..Rounds: run direct, nutcracker, vbcache proxy
//	        (the order rotates by one each round; load pinned to LoadCPU)
//	stop everything
//
// "direct" is the baseline: the load generator spreads the same number of
// connections over the memcached servers itself (Clients/N to each). A
// path's added p99 is its p99 minus the direct p99 of the same round; the
// summary takes the median over the rounds. Proxy CPU per operation is the
// proxy's utime+stime (/proc/<pid>/stat) over the requests the load
// completed. As in Compare, whatever else kept the two cores busy is the
// run's "other CPU", the noise figure.
//
// The decisions (order of runs, pairing, medians, verdicts, the report)
// are pure functions over samples and are tested with a fake proxiesEnv;
// processes and /proc are touched only in proxies_env.go.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// Paths a proxies run measures, in the order of the first round.
const (
	PathDirect     = "direct"
	PathNutcracker = "nutcracker"
	PathVbcache    = "vbcache-proxy"
)

var proxyPaths = []string{PathDirect, PathNutcracker, PathVbcache}

// Proxies defaults.
const (
	DefaultProxiesRounds   = 3
	DefaultProxiesDuration = 6 * time.Second
	DefaultProxiesServers  = 2
)

// ProxiesConfig configures Proxies. Zero values mean the defaults.
type ProxiesConfig struct {
	Vbcache    string // vbcache binary (proxy and load); "" means this executable
	Memcached  string // "" means memcached from PATH
	Nutcracker string // "" means nutcracker from PATH
	// Servers is the number of memcached servers in the pool, the ports
	// of one memcached process. Zero means DefaultProxiesServers (2).
	Servers int
	// Clients is the number of load connections (to the proxy, or spread
	// over the servers for the direct baseline). Zero means 50.
	Clients int
	// Rounds per workload; each round runs every path. Zero means 3.
	Rounds int
	// Duration of each run. Zero means DefaultProxiesDuration.
	Duration time.Duration
	// Rate, when not zero, makes every run open loop at this many requests
	// per second (latency from the scheduled send time).
	Rate float64
	// Workloads to run by name (get, set, mget, pipe); empty means all.
	Workloads []string
	// ProxyCPU is the taskset CPU list of the proxies; LoadCPU that of the
	// load generator. Empty means "0" and "1".
	ProxyCPU, LoadCPU string
	// MemcachedCPU is the CPU list of the memcached servers. Empty means
	// ProxyCPU: the load generator, the instrument, then has a core of its
	// own, so the time it takes to read a reply does not count against the
	// path that sent it (docs/PERFORMANCE.md); the proxies share their
	// core with the servers, under the same conditions for both. LoadCPU
	// puts memcached with the load instead, as before 2026-11-30 17:50 UTC.
	MemcachedCPU string
	// NoRealTime disables chrt -f for the proxies even when permitted.
	NoRealTime bool
	RTPriority int // zero means 50
	// LoadRTPriority is the load generator's SCHED_FIFO priority. Zero
	// means RTPriority: memcached and the load, sharing one core, take
	// turns whenever one blocks, so memcached's requests wait while the
	// generator works and reach it in batches. Below RTPriority (say 49),
	// memcached takes the core as soon as a request reaches it, as a
	// server on a machine of its own would, and the generator gets what
	// is left (docs/PERFORMANCE.md has runs of both).
	LoadRTPriority int
	// OutFile, when set, receives the markdown report as well; JSONFile,
	// when set, every sample, summary and verdict as JSON.
	OutFile, JSONFile string
	// Log receives one line per step. Nil discards them.
	Log io.Writer
	// Command is the command line recorded in the results.
	Command string
}

func (c ProxiesConfig) withDefaults() ProxiesConfig {
	if c.Servers == 0 {
		c.Servers = DefaultProxiesServers
	}
	if c.Clients == 0 {
		c.Clients = DefaultClients
	}
	if c.Rounds == 0 {
		c.Rounds = DefaultProxiesRounds
	}
	if c.Duration == 0 {
		c.Duration = DefaultProxiesDuration
	}
	if c.ProxyCPU == "" {
		c.ProxyCPU = "0"
	}
	if c.LoadCPU == "" {
		c.LoadCPU = "1"
	}
	if c.MemcachedCPU == "" {
		c.MemcachedCPU = c.ProxyCPU
	}
	if c.RTPriority == 0 {
		c.RTPriority = 50
	}
	if c.LoadRTPriority == 0 {
		c.LoadRTPriority = c.RTPriority
	}
	if len(c.Workloads) == 0 {
		c.Workloads = ProxyWorkloadNames()
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

// Validate reports an unusable configuration.
func (c *ProxiesConfig) Validate() error {
	d := c.withDefaults()
	switch {
	case d.Servers < 1:
		return fmt.Errorf("%w: servers must be at least 1", ErrInvalidConfig)
	case d.Clients < d.Servers || d.Clients%d.Servers != 0:
		return fmt.Errorf("%w: clients (%d) must be a multiple of servers (%d), so the direct baseline has as many connections",
			ErrInvalidConfig, d.Clients, d.Servers)
	case d.Rounds < 1:
		return fmt.Errorf("%w: rounds must be at least 1", ErrInvalidConfig)
	case d.Duration < 100*time.Millisecond:
		return fmt.Errorf("%w: run duration %v is too short", ErrInvalidConfig, d.Duration)
	case d.Rate < 0:
		return fmt.Errorf("%w: negative rate", ErrInvalidConfig)
	}
	for _, w := range d.Workloads {
		if _, ok := proxyWorkloadByName(w); !ok {
			return fmt.Errorf("%w: unknown workload %q (have %s)", ErrInvalidConfig, w, strings.Join(ProxyWorkloadNames(), ","))
		}
	}
	return nil
}

// proxyWorkloadList is the list: single gets of 100-byte values
// (key space prefilled), sets, 10-key multi-gets; and a pipelining
// client's mix (90% gets, 10% sets, 16 requests per write), where a proxy
// shows whether it keeps a client's requests in flight together. Servers,
// Clients, Duration, Rate and Seed are filled in per run.
func proxyWorkloadList() []Workload {
	base := Config{Threads: 1, Pipeline: 1, DataSize: 100, KeyMax: 99_999, Arrival: true}
	w := func(name, title string, mutate func(*Config)) Workload {
		c := base
		mutate(&c)
		return Workload{Name: name, Title: title, Load: c, Preload: true}
	}
	return []Workload{
		w("get", "single get, 100 B values, all hits", func(c *Config) { c.Ratio = Ratio{Get: 1} }),
		w("set", "set, 100 B values", func(c *Config) { c.Ratio = Ratio{Set: 1} }),
		w("mget", "10-key multi-get, all hits", func(c *Config) { c.Ratio = Ratio{Get: 1}; c.MultiGet = 10 }),
		w("pipe", "90% get / 10% set, pipeline 16", func(c *Config) { c.Ratio = Ratio{Set: 1, Get: 9}; c.Pipeline = 16 }),
	}
}

// ProxyWorkloadNames returns the names of the workloads Proxies knows.
func ProxyWorkloadNames() []string {
	var n []string
	for _, w := range proxyWorkloadList() {
		n = append(n, w.Name)
	}
	return n
}

func proxyWorkloadByName(name string) (Workload, bool) {
	for _, w := range proxyWorkloadList() {
		if w.Name == name {
			return w, true
		}
	}
	return Workload{}, false
}

// proxiesEnv is everything Proxies needs from the outside world; the real
// one is in proxies_env.go, tests use a fake.
type proxiesEnv struct {
	// startPool starts the memcached servers.
	startPool func(ctx context.Context, n int) ([]*serverProc, error)
	// startProxy starts a proxy (PathNutcracker or PathVbcache) in front
	// of the pool addresses.
	startProxy func(ctx context.Context, kind string, pool []string) (*serverProc, error)
	stop       func(p *serverProc) error
	load       func(ctx context.Context, cfg Config) (res *Result, loadCPU time.Duration, err error)
	cpu        func(p *serverProc) (time.Duration, error)
	cores      func() (coreTimes, error)
	now        func() time.Time
	info       func() ProxiesInfo
	cleanup    func()
}

// ProxiesInfo describes the machine and the processes of a proxies run.
type ProxiesInfo struct {
	Date       string   `json:"date"`
	Host       string   `json:"host"`
	CPU        string   `json:"cpu"`
	Kernel     string   `json:"kernel"`
	GoVersion  string   `json:"go_version"`
	Memcached  string   `json:"memcached"`
	Nutcracker string   `json:"nutcracker"`
	RTNote     string   `json:"real_time_note"`
	ProxyCPU   string   `json:"proxy_cpu"`
	LoadCPU    string   `json:"load_cpu"`
	ServerCPU  string   `json:"memcached_cpu"`
	LoadAvg    string   `json:"loadavg_at_start"`
	PoolFile   string   `json:"pool_file"`
	Commands   []string `json:"commands"` // how each process was started
}

// ProxySample is one run: one workload, one round, one path.
type ProxySample struct {
	Workload  string  `json:"workload"`
	Path      string  `json:"path"`
	Round     int     `json:"round"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P50       float64 `json:"p50_us"`
	P99       float64 `json:"p99_us"`
	P999      float64 `json:"p999_us"`
	// ArrivalP50 and ArrivalP99 are the latency to the kernel's receive
	// time of the replies (Config.Arrival); 0 when not measured.
	ArrivalP50      float64 `json:"arrival_p50_us,omitempty"`
	ArrivalP99      float64 `json:"arrival_p99_us,omitempty"`
	Requests        uint64  `json:"requests"`
	Hits            uint64  `json:"hits"`
	Misses          uint64  `json:"misses"`
	Errors          uint64  `json:"errors"`
	FirstError      string  `json:"first_error,omitempty"`
	WallSec         float64 `json:"wall_s"`
	ProxyCPUSec     float64 `json:"proxy_cpu_s"`
	MemcachedCPUSec float64 `json:"memcached_cpu_s"` // summed over the pool
	LoadCPUSec      float64 `json:"load_cpu_s"`
	// OtherCPU is the share of the two cores' capacity during the run used
	// by none of the proxy, the servers and the load generator, in percent.
	OtherCPU float64 `json:"other_cpu_pct"`
	Steal    float64 `json:"steal_pct"`
}

// proxyCPUPerOp is the proxy's CPU time per request in µs (0 for direct).
func (s ProxySample) proxyCPUPerOp() float64 {
	if s.Requests == 0 {
		return 0
	}
	return 1e6 * s.ProxyCPUSec / float64(s.Requests)
}

// ProxySummary is the medians of one workload on one path.
type ProxySummary struct {
	Workload  string  `json:"workload"`
	Path      string  `json:"path"`
	Rounds    int     `json:"rounds"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P50       float64 `json:"p50_us"`
	P99       float64 `json:"p99_us"`
	P999      float64 `json:"p999_us"`
	// CPUPerOpUs is the median over the rounds of the proxy's CPU µs per
	// request; CPUPerOpMin and Max are the extremes.
	CPUPerOpUs  float64 `json:"proxy_cpu_us_per_op"`
	CPUPerOpMin float64 `json:"proxy_cpu_us_per_op_min"`
	CPUPerOpMax float64 `json:"proxy_cpu_us_per_op_max"`
	// MemcachedCPUPerOpUs is the pool's CPU µs per request (median).
	MemcachedCPUPerOpUs float64 `json:"memcached_cpu_us_per_op"`
	// AddedP99 is the median over the rounds of this path's p99 minus the
	// direct p99 of the same round, µs; AddedP99Min and Max the extremes.
	AddedP99    float64 `json:"added_p99_us"`
	AddedP99Min float64 `json:"added_p99_us_min"`
	AddedP99Max float64 `json:"added_p99_us_max"`
	// The same at arrival: the medians of ArrivalP50 and ArrivalP99, and
	// ArrivalP99 minus the direct ArrivalP99 of the same round. Zero when
	// the load did not measure arrival.
	ArrivalP50         float64 `json:"arrival_p50_us,omitempty"`
	ArrivalP99         float64 `json:"arrival_p99_us,omitempty"`
	AddedArrivalP99    float64 `json:"added_arrival_p99_us,omitempty"`
	AddedArrivalP99Min float64 `json:"added_arrival_p99_us_min,omitempty"`
	AddedArrivalP99Max float64 `json:"added_arrival_p99_us_max,omitempty"`
	// OpsSpread is (max-min)/median of ops/s over the rounds, in percent.
	OpsSpread float64 `json:"ops_spread_pct"`
	OtherCPU  float64 `json:"other_cpu_pct"` // median over the rounds
	Errors    uint64  `json:"errors"`        // summed over the rounds
	HitRatio  float64 `json:"hit_ratio"`
}

// ProxiesResult is everything one Proxies run produced.
type ProxiesResult struct {
	Command        string            `json:"command"`
	Rounds         int               `json:"rounds"`
	RunDuration    string            `json:"run_duration"`
	Servers        int               `json:"servers"`
	Clients        int               `json:"clients"`
	Rate           float64           `json:"rate,omitempty"`
	Info           ProxiesInfo       `json:"info"`
	Workloads      []Workload        `json:"-"`
	WorkloadTitles map[string]string `json:"workloads"`
	Paths          []string          `json:"paths"`
	Samples        []ProxySample     `json:"samples"`
	Summaries      []ProxySummary    `json:"summaries"`
	ElapsedSec     float64           `json:"elapsed_s"`
}

// Proxies runs the proxy comparison on this machine (see the file
// comment). It fails early, saying so, when nutcracker is not installed.
func Proxies(ctx context.Context, cfg ProxiesConfig) (*ProxiesResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	e, err := newProxiesEnv(ctx, &c)
	if err != nil {
		return nil, err
	}
	defer e.cleanup()
	res, err := proxies(ctx, &c, e)
	if err != nil {
		return res, err
	}
	return res, res.WriteFiles(c.OutFile, c.JSONFile)
}

// proxies is Proxies' logic over an env. c has its defaults applied.
func proxies(ctx context.Context, c *ProxiesConfig, e *proxiesEnv) (*ProxiesResult, error) {
	began := e.now()
	res := &ProxiesResult{Command: c.Command, Rounds: c.Rounds, RunDuration: c.Duration.String(),
		Servers: c.Servers, Clients: c.Clients, Rate: c.Rate, Paths: proxyPaths,
		WorkloadTitles: map[string]string{}}
	for _, name := range c.Workloads {
		w, _ := proxyWorkloadByName(name)
		res.Workloads = append(res.Workloads, w)
		res.WorkloadTitles[w.Name] = w.Title
	}
	pool, err := e.startPool(ctx, c.Servers)
	var procs []*serverProc
	defer func() {
		for _, p := range procs {
			e.stop(p)
		}
	}()
	procs = append(procs, pool...)
	if err != nil {
		return res, err
	}
	var addrs []string
	for _, p := range pool {
		addrs = append(addrs, p.Addr)
	}
	// Preload every server with the whole key space: each key then hits
	// on whichever server a path sends it to.
	for _, p := range pool {
		pc := preloadConfig(res.Workloads[0])
		pc.Servers = []string{p.Addr}
		r, _, err := e.load(ctx, pc)
		if err != nil {
			return res, fmt.Errorf("preload %s: %w", p.Addr, err)
		}
		if r.Errors > 0 {
			return res, fmt.Errorf("preload %s: %d errors (%s)", p.Addr, r.Errors, r.FirstError)
		}
		fmt.Fprintf(c.Log, "preloaded memcached %s with %d keys in %.1fs\n", p.Addr, r.Requests, r.ElapsedSec)
	}
	byPath := map[string]*serverProc{}
	for _, kind := range proxyPaths[1:] {
		p, err := e.startProxy(ctx, kind, addrs)
		if err != nil {
			return res, err
		}
		procs = append(procs, p)
		byPath[kind] = p
		// Warm up: connections to the pool, buffers, the Go heap.
		wc := runConfig(c, res.Workloads[0], kind, addrs, p, 0)
		wc.Duration = min(c.Duration, time.Second)
		if r, _, err := e.load(ctx, wc); err != nil {
			return res, fmt.Errorf("warm-up %s: %w", kind, err)
		} else if r.Errors > 0 {
			return res, fmt.Errorf("warm-up %s: %d errors (%s)", kind, r.Errors, r.FirstError)
		}
	}
	res.Info = e.info()
	for _, w := range res.Workloads {
		for round := 1; round <= c.Rounds; round++ {
			for _, path := range roundOrder(round) {
				s, err := proxyRunOnce(ctx, c, e, w, path, addrs, pool, byPath[path], round)
				if err != nil {
					return res, fmt.Errorf("workload %s round %d %s: %w", w.Name, round, path, err)
				}
				res.Samples = append(res.Samples, s)
				fmt.Fprintf(c.Log, "%-4s round %d %-13s %8.0f ops/s  p50 %6.1fµs  p99 %7.1fµs  p99.9 %7.1fµs  arrival p99 %7.1fµs  proxy %5.2f CPU-s %5.2f µs/op  other CPU %4.1f%%  errors %d\n",
					w.Name, round, path, s.OpsPerSec, s.P50, s.P99, s.P999, s.ArrivalP99, s.ProxyCPUSec, s.proxyCPUPerOp(), s.OtherCPU, s.Errors)
			}
		}
	}
	res.Summaries = summarizeProxies(res.Samples, c.Workloads)
	res.ElapsedSec = e.now().Sub(began).Seconds()
	return res, nil
}

// roundOrder is the order of the paths in round r (from 1): rotated by
// one each round, so no path always runs first after a switch.
func roundOrder(r int) []string {
	n := len(proxyPaths)
	out := make([]string, n)
	for i := range out {
		out[i] = proxyPaths[(i+r-1)%n]
	}
	return out
}

// runConfig is the load of workload w over path: straight to the pool
// (Clients spread over the servers) or to the proxy p.
func runConfig(c *ProxiesConfig, w Workload, path string, pool []string, p *serverProc, round int) Config {
	lc := w.Load
	lc.Duration = c.Duration
	lc.Rate = c.Rate
	lc.Seed = uint64(round)
	if path == PathDirect {
		lc.Servers = pool
		lc.Clients = c.Clients / len(pool)
	} else {
		lc.Servers = []string{p.Addr}
		lc.Clients = c.Clients
	}
	return lc
}

// proxyRunOnce runs one load over one path and measures the CPU of the
// proxy and of the pool.
func proxyRunOnce(ctx context.Context, c *ProxiesConfig, e *proxiesEnv, w Workload, path string,
	addrs []string, pool []*serverProc, p *serverProc, round int) (ProxySample, error) {
	cpuOf := func() (proxy, mc time.Duration, err error) {
		if p != nil {
			if proxy, err = e.cpu(p); err != nil {
				return
			}
		}
		seen := map[int]bool{} // the pool's servers may be ports of one process
		for _, m := range pool {
			if seen[m.Pid] {
				continue
			}
			seen[m.Pid] = true
			d, err := e.cpu(m)
			if err != nil {
				return 0, 0, err
			}
			mc += d
		}
		return
	}
	px0, mc0, err := cpuOf()
	if err != nil {
		return ProxySample{}, err
	}
	cores0, err := e.cores()
	if err != nil {
		return ProxySample{}, err
	}
	t0 := e.now()
	r, loadCPU, err := e.load(ctx, runConfig(c, w, path, addrs, p, round))
	if err != nil {
		return ProxySample{}, err
	}
	wall := e.now().Sub(t0)
	px1, mc1, err := cpuOf()
	if err != nil {
		return ProxySample{}, err
	}
	cores1, err := e.cores()
	if err != nil {
		return ProxySample{}, err
	}
	s := ProxySample{
		Workload: w.Name, Path: path, Round: round,
		OpsPerSec: r.OpsPerSec, P50: r.Latency.P50, P99: r.Latency.P99, P999: r.Latency.P999,
		Requests: r.Requests, Hits: r.Hits, Misses: r.Misses, Errors: r.Errors, FirstError: r.FirstError,
		WallSec: wall.Seconds(), ProxyCPUSec: (px1 - px0).Seconds(), MemcachedCPUSec: (mc1 - mc0).Seconds(),
		LoadCPUSec: loadCPU.Seconds(),
	}
	if a := r.Arrival; a != nil {
		s.ArrivalP50, s.ArrivalP99 = a.P50, a.P99
	}
	if capacity := 2 * wall.Seconds(); capacity > 0 {
		other := (cores1.Busy - cores0.Busy).Seconds() - s.ProxyCPUSec - s.MemcachedCPUSec - s.LoadCPUSec
		s.OtherCPU = math.Max(0, 100*other/capacity)
		s.Steal = 100 * (cores1.Steal - cores0.Steal).Seconds() / capacity
	}
	return s, nil
}

// summarizeProxies takes the medians of each workload × path, pairing
// every proxy run with the direct run of the same round for added p99.
func summarizeProxies(samples []ProxySample, order []string) []ProxySummary {
	direct := map[[2]any]ProxySample{} // (workload, round) → the direct run
	for _, s := range samples {
		if s.Path == PathDirect {
			direct[[2]any{s.Workload, s.Round}] = s
		}
	}
	var out []ProxySummary
	for _, w := range order {
		for _, path := range proxyPaths {
			var ops, p50, p99, p999, cpu, mc, added, other []float64
			var ap50, ap99, aadded []float64
			var errs, hits, misses uint64
			for _, s := range samples {
				if s.Workload != w || s.Path != path {
					continue
				}
				ops = append(ops, s.OpsPerSec)
				p50 = append(p50, s.P50)
				p99 = append(p99, s.P99)
				p999 = append(p999, s.P999)
				cpu = append(cpu, s.proxyCPUPerOp())
				if s.Requests > 0 {
					mc = append(mc, 1e6*s.MemcachedCPUSec/float64(s.Requests))
				}
				d, ok := direct[[2]any{s.Workload, s.Round}]
				if ok {
					added = append(added, s.P99-d.P99)
				}
				if s.ArrivalP99 > 0 {
					ap50 = append(ap50, s.ArrivalP50)
					ap99 = append(ap99, s.ArrivalP99)
					if ok && d.ArrivalP99 > 0 {
						aadded = append(aadded, s.ArrivalP99-d.ArrivalP99)
					}
				}
				other = append(other, s.OtherCPU)
				errs += s.Errors
				hits += s.Hits
				misses += s.Misses
			}
			if len(ops) == 0 {
				continue
			}
			sm := ProxySummary{Workload: w, Path: path, Rounds: len(ops),
				OpsPerSec: median(ops), P50: median(p50), P99: median(p99), P999: median(p999),
				CPUPerOpUs: median(cpu), CPUPerOpMin: slices.Min(cpu), CPUPerOpMax: slices.Max(cpu),
				MemcachedCPUPerOpUs: median(mc), OpsSpread: spread(ops), OtherCPU: median(other), Errors: errs}
			if len(added) > 0 {
				sm.AddedP99, sm.AddedP99Min, sm.AddedP99Max = median(added), slices.Min(added), slices.Max(added)
			}
			if len(ap99) > 0 {
				sm.ArrivalP50, sm.ArrivalP99 = median(ap50), median(ap99)
			}
			if len(aadded) > 0 {
				sm.AddedArrivalP99, sm.AddedArrivalP99Min, sm.AddedArrivalP99Max = median(aadded), slices.Min(aadded), slices.Max(aadded)
			}
			if hits+misses > 0 {
				sm.HitRatio = float64(hits) / float64(hits+misses)
			}
			out = append(out, sm)
		}
	}
	return out
}

func (r *ProxiesResult) summary(w, path string) *ProxySummary {
	for i := range r.Summaries {
		if r.Summaries[i].Workload == w && r.Summaries[i].Path == path {
			return &r.Summaries[i]
		}
	}
	return nil
}

// ProxyVerdict is one of the two criteria on one workload.
type ProxyVerdict struct {
	Workload  string  `json:"workload"`
	Criterion string  `json:"criterion"`
	Vbcache   float64 `json:"vbcache"`
	Twem      float64 `json:"nutcracker"`
	Met       bool    `json:"met"`
	// Clear is true when every round agrees: the worst vbcache round is
	// still on the right side of the best nutcracker round (met), or the
	// best vbcache round on the wrong side of the worst nutcracker round
	// (not met). Otherwise the medians decide but the rounds overlap.
	Clear bool `json:"clear"`
	// The rounds paired: in Lower of Pairs rounds vbcache's figure was
	// below nutcracker's in the same round, in Higher above (the rest
	// tied). SignP is the two-sided sign test's p-value over the untied
	// rounds: how likely a split at least this uneven would be if
	// neither proxy were better. Pairs is 0 without samples.
	Pairs  int     `json:"pairs,omitempty"`
	Lower  int     `json:"lower,omitempty"`
	Higher int     `json:"higher,omitempty"`
	SignP  float64 `json:"sign_p,omitempty"`
}

// Verdicts checks "proxy CPU per operation ≤ twemproxy's" and "added p99 ≤
// twemproxy's" on each workload, from the medians.
func (r *ProxiesResult) Verdicts() []ProxyVerdict {
	var vs []ProxyVerdict
	for _, w := range r.Workloads {
		v, t := r.summary(w.Name, PathVbcache), r.summary(w.Name, PathNutcracker)
		if v == nil || t == nil {
			continue
		}
		// Each criterion: the medians decide, the extremes say whether the
		// rounds agree, and the rounds are paired on the sample's own
		// figure (the same direct p99 is subtracted from both proxies).
		vs = append(vs,
			r.verdict(w.Name, "proxy CPU µs/op", [3]float64{v.CPUPerOpUs, v.CPUPerOpMin, v.CPUPerOpMax},
				[3]float64{t.CPUPerOpUs, t.CPUPerOpMin, t.CPUPerOpMax}, ProxySample.proxyCPUPerOp),
			r.verdict(w.Name, "added p99 µs", [3]float64{v.AddedP99, v.AddedP99Min, v.AddedP99Max},
				[3]float64{t.AddedP99, t.AddedP99Min, t.AddedP99Max}, func(s ProxySample) float64 { return s.P99 }))
		if v.ArrivalP99 > 0 && t.ArrivalP99 > 0 {
			vs = append(vs, r.verdict(w.Name, "added p99 at arrival µs",
				[3]float64{v.AddedArrivalP99, v.AddedArrivalP99Min, v.AddedArrivalP99Max},
				[3]float64{t.AddedArrivalP99, t.AddedArrivalP99Min, t.AddedArrivalP99Max},
				func(s ProxySample) float64 { return s.ArrivalP99 }))
		}
	}
	return vs
}

// verdict is one criterion of workload w: vb and tw are vbcache's and
// nutcracker's median, minimum and maximum over the rounds (lower is
// better), f the figure paired round by round.
func (r *ProxiesResult) verdict(w, criterion string, vb, tw [3]float64, f func(ProxySample) float64) ProxyVerdict {
	v := ProxyVerdict{Workload: w, Criterion: criterion, Vbcache: vb[0], Twem: tw[0], Met: vb[0] <= tw[0]}
	v.Clear = v.Met && vb[2] <= tw[1] || !v.Met && vb[1] > tw[2]
	r.pair(&v, f)
	return v
}

// pair fills v's paired-round counts from the samples of v's workload:
// each round that ran both proxies without errors compares f of each.
func (r *ProxiesResult) pair(v *ProxyVerdict, f func(ProxySample) float64) {
	byRound := map[int][2]*ProxySample{}
	for i := range r.Samples {
		s := &r.Samples[i]
		if s.Workload != v.Workload || s.Errors > 0 || s.Requests == 0 {
			continue
		}
		p := byRound[s.Round]
		switch s.Path {
		case PathVbcache:
			p[0] = s
		case PathNutcracker:
			p[1] = s
		default:
			continue
		}
		byRound[s.Round] = p
	}
	for _, p := range byRound {
		if p[0] == nil || p[1] == nil {
			continue
		}
		v.Pairs++
		switch a, b := f(*p[0]), f(*p[1]); {
		case a < b:
			v.Lower++
		case a > b:
			v.Higher++
		}
	}
	if v.Pairs > 0 {
		v.SignP = signTest(v.Lower, v.Higher)
	}
}

// signTest is the two-sided sign test's p-value for k successes and m
// failures: the probability, with each equally likely, of a split at
// least as uneven.
func signTest(k, m int) float64 {
	n := k + m
	if n == 0 {
		return 1
	}
	lo := min(k, m)
	// P(X <= lo) for X ~ Binomial(n, 1/2), doubled.
	var tail, c float64 = 0, 1 // c = C(n, i)
	for i := 0; i <= lo; i++ {
		tail += c
		c = c * float64(n-i) / float64(i+1)
	}
	return math.Min(1, 2*tail/math.Pow(2, float64(n)))
}

func (v ProxyVerdict) String() string {
	s := "met"
	if !v.Met {
		s = "**not met**"
	}
	if !v.Clear {
		s += " (rounds overlap: within noise)"
	}
	out := fmt.Sprintf("%s: %s: vbcache %.2f vs nutcracker %.2f — %s", v.Workload, v.Criterion, v.Vbcache, v.Twem, s)
	if v.Pairs > 0 {
		out += fmt.Sprintf("; round by round vbcache lower in %d, higher in %d of %d (sign test p = %.2f)", v.Lower, v.Higher, v.Pairs, v.SignP)
	}
	return out
}

// WriteFiles writes the markdown report into the file md and the results
// with their verdicts as JSON into the file js; an empty name writes
// nothing.
func (r *ProxiesResult) WriteFiles(md, js string) error {
	if md != "" {
		var b strings.Builder
		if err := r.WriteMarkdown(&b); err != nil {
			return err
		}
		if err := os.WriteFile(md, []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	if js == "" {
		return nil
	}
	data, err := json.MarshalIndent(struct {
		*ProxiesResult
		Verdicts []ProxyVerdict `json:"verdicts"`
	}{r, r.Verdicts()}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(js, append(data, '\n'), 0o644)
}

// WriteMarkdown writes the results table, the verdicts and the noise.
func (r *ProxiesResult) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	in := r.Info
	b.WriteString("# vbcache proxy vs twemproxy (nutcracker)\n\n")
	fmt.Fprintf(&b, "Run %s on %s (%s, kernel %s); %s; %s; %s. ", in.Date, in.Host, in.CPU, in.Kernel, in.Nutcracker, in.Memcached, in.GoVersion)
	fmt.Fprintf(&b, "Pool: %d servers, the ports of one memcached (`-t 1`), ketama over md5, the same pool file for both proxies. ", r.Servers)
	if in.ServerCPU == "" || in.ServerCPU == in.LoadCPU {
		fmt.Fprintf(&b, "Proxies pinned to CPU %s (GOMAXPROCS=1 for vbcache); memcached and the load generator on CPU %s; real-time scheduling: %s. ",
			in.ProxyCPU, in.LoadCPU, in.RTNote)
	} else {
		fmt.Fprintf(&b, "Proxies pinned to CPU %s (GOMAXPROCS=1 for vbcache); memcached on CPU %s; the load generator on CPU %s; real-time scheduling: %s. ",
			in.ProxyCPU, in.ServerCPU, in.LoadCPU, in.RTNote)
	}
	mode := "closed loop"
	if r.Rate > 0 {
		mode = fmt.Sprintf("open loop at %.0f requests/s", r.Rate)
	}
	fmt.Fprintf(&b, "Load: %d connections, pipeline 1 (16 for pipe), %s; direct spreads them over the servers. ", r.Clients, mode)
	fmt.Fprintf(&b, "%d rounds of %s per path and workload, order rotated each round; figures are medians over the rounds. ", r.Rounds, r.RunDuration)
	fmt.Fprintf(&b, "Load average at start: %s. Whole run: %.0f s.\n\n", in.LoadAvg, r.ElapsedSec)
	if r.Command != "" {
		fmt.Fprintf(&b, "Command: `%s`\n\n", r.Command)
	}
	b.WriteString("| workload | path | ops/s | p50 µs | p99 µs | p99.9 µs | added p99 µs (min–max) | proxy CPU µs/op (min–max) | memcached CPU µs/op | ops/s spread % | other CPU % | errors |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, wl := range r.Workloads {
		for _, path := range r.Paths {
			s := r.summary(wl.Name, path)
			if s == nil {
				continue
			}
			added, cpu := "–", "–"
			if path != PathDirect {
				added = fmt.Sprintf("%.1f (%.1f–%.1f)", s.AddedP99, s.AddedP99Min, s.AddedP99Max)
				cpu = fmt.Sprintf("%.2f (%.2f–%.2f)", s.CPUPerOpUs, s.CPUPerOpMin, s.CPUPerOpMax)
			}
			fmt.Fprintf(&b, "| %s: %s | %s | %.0f | %.1f | %.1f | %.1f | %s | %s | %.2f | %.1f | %.1f | %d |\n",
				wl.Name, wl.Title, path, s.OpsPerSec, s.P50, s.P99, s.P999, added, cpu, s.MemcachedCPUPerOpUs, s.OpsSpread, s.OtherCPU, s.Errors)
		}
		v, t := r.summary(wl.Name, PathVbcache), r.summary(wl.Name, PathNutcracker)
		if v != nil && t != nil {
			fmt.Fprintf(&b, "| %s | *vbcache / nutcracker* | %s | %s | %s | %s | | **%s** | | | | |\n",
				wl.Name, ratio(v.OpsPerSec, t.OpsPerSec), ratio(v.P50, t.P50), ratio(v.P99, t.P99), ratio(v.P999, t.P999),
				ratio(v.CPUPerOpUs, t.CPUPerOpUs))
		}
	}
	b.WriteString(r.arrivalTable())
	b.WriteString("\n*added p99*: the path's p99 minus the direct p99 of the same round, median (and extremes) over the rounds. ")
	b.WriteString("*proxy CPU µs/op*: the proxy's utime+stime from /proc over the requests completed (a multi-get is one request of 10 keys). ")
	b.WriteString("*other CPU*: share of the two cores' time used by none of the proxy, memcached and the load generator; the noise figure ")
	b.WriteString("(for direct runs the proxy core is idle as far as the run goes, so other processes' use of it counts here).\n\n")
	b.WriteString("## Criteria\n\n")
	for _, v := range r.Verdicts() {
		fmt.Fprintf(&b, "- %s\n", v)
	}
	b.WriteString("\n## Noise\n\n")
	b.WriteString(r.noiseNote())
	_, err := io.WriteString(w, b.String())
	return err
}

// arrivalTable is the latency to the kernel's receive time of the replies,
// when the load measured it: "" otherwise.
func (r *ProxiesResult) arrivalTable() string {
	var b strings.Builder
	b.WriteString("\nThe same runs, latency measured to the kernel's receive time of each reply (SO_TIMESTAMPNS) ")
	b.WriteString("instead of to the generator's parse of it; this leaves out the time replies waited in the socket buffers ")
	b.WriteString("for the generator to read them:\n\n")
	b.WriteString("| workload | path | p50 µs at arrival | p99 µs at arrival | added p99 µs at arrival (min–max) |\n")
	b.WriteString("|---|---|--:|--:|--:|\n")
	rows := 0
	for _, wl := range r.Workloads {
		for _, path := range r.Paths {
			s := r.summary(wl.Name, path)
			if s == nil || s.ArrivalP99 == 0 {
				continue
			}
			added := "–"
			if path != PathDirect {
				added = fmt.Sprintf("%.1f (%.1f–%.1f)", s.AddedArrivalP99, s.AddedArrivalP99Min, s.AddedArrivalP99Max)
			}
			fmt.Fprintf(&b, "| %s | %s | %.1f | %.1f | %s |\n", wl.Name, path, s.ArrivalP50, s.ArrivalP99, added)
			rows++
		}
	}
	if rows == 0 {
		return ""
	}
	return b.String()
}

func (r *ProxiesResult) noiseNote() string {
	var worstSpread, worstOther, sumOther, steal float64
	var errs uint64
	for _, s := range r.Summaries {
		worstSpread = math.Max(worstSpread, s.OpsSpread)
		errs += s.Errors
	}
	for _, s := range r.Samples {
		worstOther = math.Max(worstOther, s.OtherCPU)
		sumOther += s.OtherCPU
		steal = math.Max(steal, s.Steal)
	}
	n := len(r.Samples)
	if n == 0 {
		return "No runs.\n"
	}
	least := math.Inf(1)
	for _, s := range r.Samples {
		if s.Path != PathDirect && s.ProxyCPUSec > 0 {
			least = math.Min(least, s.ProxyCPUSec)
		}
	}
	note := fmt.Sprintf("Largest spread of ops/s across rounds: %.1f%%. Other CPU on the two cores: mean %.1f%%, worst run %.1f%%. "+
		"Worst steal time: %.1f%%. Errors over all runs: %d.",
		worstSpread, sumOther/float64(n), worstOther, steal, errs)
	if !math.IsInf(least, 1) {
		note += fmt.Sprintf(" /proc CPU times tick every 10 ms: at most %.1f%% of the smallest proxy CPU time of a run (%.2f s).",
			100*0.01/least, least)
	}
	return note + "\n"
}
