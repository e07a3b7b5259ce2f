package bench

// The proxies harness, a configuration of the runner (runner.go): vbcache
// proxy next to twemproxy (Debian's nutcracker) in one run, over one pool.
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
// The three paths are the runner's targets. "direct" is the baseline: the
// load generator spreads the same number of connections over the memcached
// servers itself (Clients/N to each). A path's added p99 is its p99 minus
// the direct p99 of the same round; the summary takes the median over the
// rounds. A run is charged to its proxy (nothing, for direct) and to the
// pool: proxy CPU per operation is the proxy's utime+stime
// (/proc/<pid>/stat) over the requests the load completed. As in Compare,
// whatever else kept the two cores busy is the run's "other CPU", the noise
// figure.
//
// The decisions (order of runs, pairing, medians, verdicts, the report in
// proxies_report.go) are pure functions over samples and are tested with a
// fake env; processes and /proc are touched only in env.go and
// proxies_env.go.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
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
	DefaultProxiesRounds   = DefaultRounds
	DefaultProxiesDuration = 6 * time.Second
	DefaultProxiesServers  = 2
)

// ProxiesConfig configures Proxies. Zero values mean the defaults: those
// of Harness, runs of DefaultProxiesDuration and every workload (get, set,
// mget, pipe). RTPriority is the proxies' and memcached's.
type ProxiesConfig struct {
	Harness
	Nutcracker string // "" means nutcracker from PATH
	// Servers is the number of memcached servers in the pool, the ports
	// of one memcached process. Zero means DefaultProxiesServers (2).
	Servers int
	// Clients is the number of load connections (to the proxy, or spread
	// over the servers for the direct baseline). Zero means 50.
	Clients int
	// Rate, when not zero, makes every run open loop at this many requests
	// per second (latency from the scheduled send time).
	Rate float64
	// ProxyCPU is the taskset CPU list of the proxies. Empty means "0".
	ProxyCPU string
	// MemcachedCPU is the CPU list of the memcached servers. Empty means
	// ProxyCPU: the load generator, the instrument, then has a core of its
	// own, so the time it takes to read a reply does not count against the
	// path that sent it (docs/PERFORMANCE.md); the proxies share their
	// core with the servers, under the same conditions for both. LoadCPU
	// puts memcached with the load instead, as before 2026-11-30 17:50 UTC.
	MemcachedCPU string
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
}

func (c ProxiesConfig) withDefaults() ProxiesConfig {
	c.Harness = c.Harness.withDefaults(DefaultProxiesDuration, proxyWorkloadList())
	c.Servers = cmp.Or(c.Servers, DefaultProxiesServers)
	c.Clients = cmp.Or(c.Clients, DefaultClients)
	c.ProxyCPU = cmp.Or(c.ProxyCPU, "0")
	c.MemcachedCPU = cmp.Or(c.MemcachedCPU, c.ProxyCPU)
	c.LoadRTPriority = cmp.Or(c.LoadRTPriority, c.RTPriority)
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
	case d.Rate < 0:
		return fmt.Errorf("%w: negative rate", ErrInvalidConfig)
	}
	return d.validate(proxyWorkloadList())
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
func ProxyWorkloadNames() []string { return workloadNames(proxyWorkloadList()) }

func proxyWorkloadByName(name string) (Workload, bool) {
	return findWorkload(proxyWorkloadList(), name)
}

// ProxiesInfo describes the machine and the processes of a proxies run.
type ProxiesInfo struct {
	machine
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
	Workload string `json:"workload"`
	Path     string `json:"path"`
	summaryFigures
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
	summaryChecks
}

// ProxiesResult is everything one Proxies run produced.
type ProxiesResult struct {
	runHeader
	Servers        int               `json:"servers"`
	Clients        int               `json:"clients"`
	Rate           float64           `json:"rate,omitempty"`
	Info           ProxiesInfo       `json:"info"`
	WorkloadTitles map[string]string `json:"workloads"`
	Paths          []string          `json:"paths"` // the report's columns
	workloads      []Workload        // and its rows, in order (WorkloadTitles is their JSON)
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
	res, err := inRealEnv(ctx, &c, newProxiesEnv, proxies)
	if err != nil {
		return res, err
	}
	return res, res.WriteFiles(c.OutFile, c.JSONFile)
}

// proxies is Proxies' logic over an env that info describes. c has its
// defaults applied.
func proxies(ctx context.Context, c *ProxiesConfig, e *env, info ProxiesInfo) (*ProxiesResult, error) {
	r := newRunner(e)
	defer r.stopAll()
	began := e.now()
	res := &ProxiesResult{runHeader: c.header(), Servers: c.Servers, Clients: c.Clients, Rate: c.Rate,
		Paths: proxyPaths, WorkloadTitles: map[string]string{}}
	for _, name := range c.Workloads {
		w, _ := proxyWorkloadByName(name)
		res.workloads = append(res.workloads, w)
		res.WorkloadTitles[w.Name] = w.Title
	}
	p, err := startPaths(ctx, c, r, res.workloads[0])
	if err != nil {
		return res, err
	}
	res.Info = info
	res.Info.Commands = r.started
	res.Info.PoolFile = poolYAML("127.0.0.1:PORT", p.targets[0].servers)
	for _, w := range res.workloads {
		err := r.rounds(ctx, p, w, func(t *target, round int, m measurement) {
			s := newProxySample(w, t.name, round, m)
			res.Samples = append(res.Samples, s)
			fmt.Fprintf(c.Log, "%-4s round %d %-13s %8.0f ops/s  p50 %6.1fµs  p99 %7.1fµs  p99.9 %7.1fµs  arrival p99 %7.1fµs  proxy %5.2f CPU-s %5.2f µs/op  other CPU %4.1f%%  errors %d\n",
				w.Name, round, t.name, s.OpsPerSec, s.P50, s.P99, s.P999, s.ArrivalP99, s.ProxyCPUSec, s.proxyCPUPerOp(), s.OtherCPU, s.Errors)
		})
		if err != nil {
			return res, fmt.Errorf("workload %s: %w", w.Name, err)
		}
	}
	res.Summaries = summarizeProxies(res.Samples, c.Workloads)
	res.ElapsedSec = e.now().Sub(began).Seconds()
	return res, nil
}

// startPaths starts the pool and preloads each server of it with w's key
// space, then starts each proxy in front of it and warms it up with w:
// connections to the pool, buffers, the Go heap. It returns the rounds'
// plan over the three paths, each charged to its proxy (none for direct)
// and to the pool.
func startPaths(ctx context.Context, c *ProxiesConfig, r *runner, w Workload) (*plan, error) {
	pool, err := r.start(ctx, procSpec{kind: KindMemcached, cpus: c.MemcachedCPU, ports: c.Servers})
	if err != nil {
		return nil, err
	}
	var addrs []string
	for _, p := range pool {
		addrs = append(addrs, p.Addr)
		// Every key then hits on whichever server a path sends it to.
		pr, err := r.preload(ctx, w, p.Addr)
		if err != nil {
			return nil, fmt.Errorf("preload %s: %w", p.Addr, err)
		}
		fmt.Fprintf(c.Log, "preloaded memcached %s with %d keys in %.1fs\n", p.Addr, pr.Requests, pr.ElapsedSec)
	}
	pl := &plan{rounds: c.Rounds, duration: c.Duration, rate: c.Rate, rotate: true, targets: []*target{
		{name: PathDirect, servers: addrs, clients: c.Clients / len(addrs), charge: [][]*serverProc{nil, pool}},
	}}
	for _, kind := range proxyPaths[1:] {
		ps, err := r.start(ctx, procSpec{kind: kind, cpus: c.ProxyCPU, pool: addrs})
		if err != nil {
			return nil, err
		}
		t := &target{name: kind, servers: []string{ps[0].Addr}, clients: c.Clients, charge: [][]*serverProc{ps, pool}}
		pl.targets = append(pl.targets, t)
		if _, err := r.clean(ctx, t.load(w, min(c.Duration, time.Second), c.Rate, 0)); err != nil {
			return nil, fmt.Errorf("warm-up %s: %w", kind, err)
		}
	}
	return pl, nil
}

// newProxySample is the sample of run m: workload w over path in round.
// The run was charged to the proxy, then to the pool.
func newProxySample(w Workload, path string, round int, m measurement) ProxySample {
	r := m.res
	s := ProxySample{
		Workload: w.Name, Path: path, Round: round,
		OpsPerSec: r.OpsPerSec, P50: r.Latency.P50, P99: r.Latency.P99, P999: r.Latency.P999,
		Requests: r.Requests, Hits: r.Hits, Misses: r.Misses, Errors: r.Errors, FirstError: r.FirstError,
		WallSec: m.wall.Seconds(), ProxyCPUSec: m.charged[0].Seconds(), MemcachedCPUSec: m.charged[1].Seconds(),
		LoadCPUSec: m.loadCPU.Seconds(), OtherCPU: m.other, Steal: m.steal,
	}
	if a := r.Arrival; a != nil {
		s.ArrivalP50, s.ArrivalP99 = a.P50, a.P99
	}
	return s
}

func (s ProxySample) key() (workload, path string) { return s.Workload, s.Path }

func (s ProxySample) figures() figures {
	return figures{ops: s.OpsPerSec, p50: s.P50, p99: s.P99, p999: s.P999, other: s.OtherCPU, steal: s.Steal,
		errors: s.Errors, hits: s.Hits, misses: s.Misses}
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
	for _, g := range groups(samples, order, proxyPaths, ProxySample.key) {
		var cpu, mc, added, ap50, ap99, aadded []float64
		for _, s := range g.samples {
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
		}
		sm := ProxySummary{Workload: g.workload, Path: g.target,
			CPUPerOpUs: median(cpu), CPUPerOpMin: slices.Min(cpu), CPUPerOpMax: slices.Max(cpu), MemcachedCPUPerOpUs: median(mc)}
		sm.summaryFigures, sm.summaryChecks = summarizeRounds(g.samples, ProxySample.figures)
		if len(added) > 0 {
			sm.AddedP99, sm.AddedP99Min, sm.AddedP99Max = median(added), slices.Min(added), slices.Max(added)
		}
		if len(ap99) > 0 {
			sm.ArrivalP50, sm.ArrivalP99 = median(ap50), median(ap99)
		}
		if len(aadded) > 0 {
			sm.AddedArrivalP99, sm.AddedArrivalP99Min, sm.AddedArrivalP99Max = median(aadded), slices.Min(aadded), slices.Max(aadded)
		}
		out = append(out, sm)
	}
	return out
}

func (s ProxySummary) key() (workload, path string) { return s.Workload, s.Path }

// summary returns the summary of workload w over path, or nil.
func (r *ProxiesResult) summary(w, path string) *ProxySummary {
	return find(r.Summaries, ProxySummary.key, w, path)
}
