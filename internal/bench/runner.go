package bench

// The runner. Both harnesses are configurations of it: compare (a vbcache
// node against memcached, compare.go) and proxies (vbcache proxy against
// twemproxy in front of a memcached pool, proxies.go). A harness
//
//	starts the processes under test (runner.start: memcached, a vbcache
//	    node, a memcached pool, nutcracker, vbcache proxy), each pinned
//	    where its config says, and preloads and warms them up
//	for each workload: runner.rounds
//	    for round 1..Rounds: for each target in the round's order
//	        (the same every round, or rotated by one each round):
//	        one measured run (runner.measure)
//	stops them all (runner.stopAll)
//
// A target is where a run's load goes (one server, the pool itself or a
// proxy in front of it) and whose CPU the run is charged to: groups of
// processes, such as {proxy} and {the pool}. A measured run reads each
// group's CPU time (utime+stime from /proc/<pid>/stat, a process counted
// once however many ports it serves) and the busy time of the cores
// (/proc/stat) before and after the load; whatever else kept those cores
// busy (other processes, or the kernel on their behalf) is the run's "other
// CPU", the noise figure reported beside the spread of the rounds. The load
// is a child "vbcache bench --json" pinned to its own core; its CPU time is
// its rusage.
//
// Everything that touches processes or /proc goes through env: realEnv
// (env.go) in a real run, a fake in the tests. So the order of runs, the
// arithmetic, the summaries and the reports are pure functions over samples,
// tested without starting anything. The runner, its env and its processes
// belong to the goroutine that runs the harness.

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// serverProc is a running process under test, one per port it serves: the
// ports of one memcached share a Pid.
type serverProc struct {
	Kind string
	Addr string
	Pid  int
	Cmd  string // how it was started; "" when the env does not say
}

// procSpec is a process a harness asks env.start for.
type procSpec struct {
	// kind is KindMemcached or KindVbcache for a server, PathNutcracker or
	// PathVbcache for a proxy.
	kind string
	// cpus is the taskset CPU list the process is pinned to.
	cpus string
	// ports, when not zero, makes a memcached serve that many ports, each
	// one server of a pool (-l a,b,…); zero is one server (-p).
	ports int
	// pool is a proxy's servers.
	pool []string
}

// coreTimes is the busy and steal time of the cores a run is measured on.
type coreTimes struct {
	Busy  time.Duration // user+nice+system+irq+softirq, summed over the cores
	Steal time.Duration
}

// env is everything a harness needs from the outside world. realEnv
// (env.go) uses processes and /proc; tests use a fake.
type env struct {
	// start starts s and waits until it accepts connections: one
	// serverProc per port.
	start func(ctx context.Context, s procSpec) ([]*serverProc, error)
	stop  func(p *serverProc) error
	load  func(ctx context.Context, cfg Config) (res *Result, loadCPU time.Duration, err error)
	cpu   func(p *serverProc) (time.Duration, error) // utime+stime so far
	rss   func(p *serverProc) (int64, error)         // bytes
	items func(ctx context.Context, p *serverProc) (uint64, error)
	cores func() (coreTimes, error) // of the measured cores
	// ncores is how many cores cores measures; 0 means 2.
	ncores int
	now    func() time.Time
	stats  func(ctx context.Context, p *serverProc) (map[string]string, error) // "stats", name to value
	// cacheAside drives the server at addr with the cache-aside plan
	// (cacheaside.go) and returns what it counted.
	cacheAside func(ctx context.Context, addr string, plan asidePlan) (hitCounts, error)
	settle     func(ctx context.Context)                // let a fresh server reach steady state
	quiesce    func(ctx context.Context, p *serverProc) // wait for a loaded server's background work (hash expansion)
	cleanup    func()
}

// DefaultRounds is the number of rounds per workload of either harness.
const DefaultRounds = 3

// Harness is the configuration both harnesses share, the runner's: the
// binaries, the rounds, where the load runs and how everything is
// scheduled. CompareConfig and ProxiesConfig embed it. Zero values mean
// the defaults.
type Harness struct {
	// Vbcache is the vbcache binary of the node or proxy under test and of
	// the load; "" means this executable.
	Vbcache string
	// Memcached is the memcached binary; "" means memcached from PATH.
	Memcached string
	// Rounds per workload; each round runs every target once. Zero means
	// DefaultRounds (3).
	Rounds int
	// Duration of each run. Zero means the harness's default.
	Duration time.Duration
	// Workloads to run, by name; empty means all of the harness's.
	Workloads []string
	// LoadCPU is the taskset CPU list of the load generator, and of the
	// harness itself, which mostly waits. Empty means "1".
	LoadCPU string
	// NoRealTime disables chrt -f even when it is permitted.
	NoRealTime bool
	// RTPriority is the SCHED_FIFO priority of the processes under test
	// (and of the load, unless the harness sets that apart). Zero means 50.
	RTPriority int
	// Log receives one line per step. Nil discards them.
	Log io.Writer
	// Command is the command line recorded in the results.
	Command string
}

// withDefaults returns h with its zero fields replaced by their defaults:
// d is the harness's run duration, list its workloads.
func (h Harness) withDefaults(d time.Duration, list []Workload) Harness {
	h.Rounds = cmp.Or(h.Rounds, DefaultRounds)
	h.Duration = cmp.Or(h.Duration, d)
	h.LoadCPU = cmp.Or(h.LoadCPU, "1")
	h.RTPriority = cmp.Or(h.RTPriority, 50)
	if len(h.Workloads) == 0 {
		h.Workloads = workloadNames(list)
	}
	if h.Log == nil {
		h.Log = io.Discard
	}
	return h
}

// validate reports rounds, a run duration or workloads (by name, out of
// list) that the runner cannot run. h has its defaults applied.
func (h *Harness) validate(list []Workload) error {
	switch {
	case h.Rounds < 1:
		return fmt.Errorf("%w: rounds must be at least 1", ErrInvalidConfig)
	case h.Duration < 100*time.Millisecond:
		return fmt.Errorf("%w: run duration %v is too short", ErrInvalidConfig, h.Duration)
	}
	for _, w := range h.Workloads {
		if _, ok := findWorkload(list, w); !ok {
			return fmt.Errorf("%w: unknown workload %q (have %s)", ErrInvalidConfig, w, strings.Join(workloadNames(list), ","))
		}
	}
	return nil
}

// runHeader opens a harness's results (CompareResult, ProxiesResult):
// how it was run.
type runHeader struct {
	Command     string `json:"command"`
	Rounds      int    `json:"rounds"`
	RunDuration string `json:"run_duration"` // of each run
}

func (h *Harness) header() runHeader {
	return runHeader{Command: h.Command, Rounds: h.Rounds, RunDuration: h.Duration.String()}
}

// realConfig is what h asks of the real environment, measured on the cores
// of cpus (the load's among them), the load at SCHED_FIFO priority
// loadPrio.
func (h *Harness) realConfig(cpus []string, loadPrio int) realConfig {
	return realConfig{vbcache: h.Vbcache, memcached: h.Memcached, cpus: cpus, loadCPU: h.LoadCPU,
		realTime: !h.NoRealTime, prio: h.RTPriority, loadPrio: loadPrio, log: h.Log}
}

// inRealEnv runs a harness's logic with its config c in the real
// environment that setUp creates and describes, and cleans that up after:
// every process it started stops, its scratch files go.
func inRealEnv[C, I, R any](ctx context.Context, c *C, setUp func(context.Context, *C) (*env, I, error),
	logic func(context.Context, *C, *env, I) (R, error)) (R, error) {
	e, info, err := setUp(ctx, c)
	if err != nil {
		var none R
		return none, err
	}
	defer e.cleanup()
	return logic(ctx, c, e, info)
}

// runner runs a harness's steps over an env. It keeps the processes it
// started, so that stopAll stops them, and the command lines they started
// with, for the report.
type runner struct {
	e       *env
	procs   []*serverProc // started and not yet stopped, in order
	started []string      // the command line of every process started, in order
}

func newRunner(e *env) *runner { return &runner{e: e} }

// start starts the process s describes; stopAll stops it.
func (r *runner) start(ctx context.Context, s procSpec) ([]*serverProc, error) {
	ps, err := r.e.start(ctx, s)
	if err != nil {
		return nil, err
	}
	r.procs = append(r.procs, ps...)
	if ps[0].Cmd != "" {
		r.started = append(r.started, ps[0].Cmd)
	}
	return ps, nil
}

// stopAll stops every process start started, in the order they started,
// and returns the first error.
func (r *runner) stopAll() error {
	var first error
	for _, p := range r.procs {
		if err := r.e.stop(p); err != nil && first == nil {
			first = err
		}
	}
	r.procs = nil
	return first
}

// clean runs a load that is not measured and must not fail: a preload or
// a warm-up. An error reply fails it too.
func (r *runner) clean(ctx context.Context, cfg Config) (*Result, error) {
	res, _, err := r.e.load(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if res.Errors > 0 {
		return nil, fmt.Errorf("%d errors (%s)", res.Errors, res.FirstError)
	}
	return res, nil
}

// preload stores every key of w's key space once on addr (preloadConfig).
func (r *runner) preload(ctx context.Context, w Workload, addr string) (*Result, error) {
	pc := preloadConfig(w)
	pc.Servers = []string{addr}
	return r.clean(ctx, pc)
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

// measurement is one measured run.
type measurement struct {
	res  *Result
	wall time.Duration
	// charged is the CPU time of each group of processes the run was
	// charged to, in the order measure was given them; loadCPU is the
	// load generator's.
	charged []time.Duration
	loadCPU time.Duration
	// other is the share of the measured cores' capacity during the run
	// that neither the charged processes nor the load used, in percent;
	// steal is the hypervisor's steal time, in percent of the same
	// capacity.
	other, steal float64
}

// measure runs the load cfg and measures, around it, the CPU time of each
// group in charge and the busy time of the cores.
func (r *runner) measure(ctx context.Context, cfg Config, charge ...[]*serverProc) (measurement, error) {
	before, err := r.usage(charge)
	if err != nil {
		return measurement{}, err
	}
	t0 := r.e.now()
	res, loadCPU, err := r.e.load(ctx, cfg)
	if err != nil {
		return measurement{}, err
	}
	wall := r.e.now().Sub(t0)
	after, err := r.usage(charge)
	if err != nil {
		return measurement{}, err
	}
	m := measurement{res: res, wall: wall, loadCPU: loadCPU}
	for i := range before.cpu {
		m.charged = append(m.charged, after.cpu[i]-before.cpu[i])
	}
	if capacity := float64(cmp.Or(r.e.ncores, 2)) * wall.Seconds(); capacity > 0 {
		other := (after.cores.Busy - before.cores.Busy).Seconds()
		for _, d := range m.charged {
			other -= d.Seconds()
		}
		other -= loadCPU.Seconds()
		m.other = math.Max(0, 100*other/capacity)
		m.steal = 100 * (after.cores.Steal - before.cores.Steal).Seconds() / capacity
	}
	return m, nil
}

// usage is what measure reads before and after a run: the CPU time so far
// of each group in charge and the cores' times.
type usage struct {
	cpu   []time.Duration
	cores coreTimes
}

// usage reads the CPU time of each group, counting a process once per
// group (the servers of a pool may be the ports of one process), then the
// cores' times.
func (r *runner) usage(groups [][]*serverProc) (usage, error) {
	u := usage{cpu: make([]time.Duration, len(groups))}
	for i, g := range groups {
		seen := map[int]bool{}
		for _, p := range g {
			if seen[p.Pid] {
				continue
			}
			seen[p.Pid] = true
			d, err := r.e.cpu(p)
			if err != nil {
				return usage{}, err
			}
			u.cpu[i] += d
		}
	}
	var err error
	u.cores, err = r.e.cores()
	return u, err
}

// target is one column of a harness's rounds.
type target struct {
	name    string          // the samples' server (compare) or path (proxies)
	servers []string        // where the load goes
	clients int             // connections per thread per server; 0 keeps the workload's
	threads int             // the load's threads; 0 keeps the workload's
	charge  [][]*serverProc // the groups of processes a run's CPU is read from
}

// load is workload w's load on t for d at rate (requests/s; 0: closed loop)
// in round (0 for a warm-up): the seed is the round, so that the targets of
// a round see the same requests.
func (t *target) load(w Workload, d time.Duration, rate float64, round int) Config {
	lc := w.Load
	lc.Servers = t.servers
	if t.clients > 0 {
		lc.Clients = t.clients
	}
	if t.threads > 0 {
		lc.Threads = t.threads
	}
	lc.Duration = d
	lc.Rate = rate
	lc.Seed = uint64(round)
	return lc
}

// plan is how a harness's rounds run.
type plan struct {
	rounds   int
	duration time.Duration // of each run
	rate     float64       // of each run: requests/s, 0 for closed loop
	targets  []*target     // in the first round's order
	// rotate starts each round one target later than the one before, so
	// that no target always runs first; otherwise every round runs the
	// targets in order.
	rotate bool
}

// rounds runs rounds 1..p.rounds of workload w and hands each measured
// run to record, with its target and round.
func (r *runner) rounds(ctx context.Context, p *plan, w Workload, record func(t *target, round int, m measurement)) error {
	for round := 1; round <= p.rounds; round++ {
		order := p.targets
		if p.rotate {
			order = rotate(p.targets, round)
		}
		for _, t := range order {
			m, err := r.measure(ctx, t.load(w, p.duration, p.rate, round), t.charge...)
			if err != nil {
				return fmt.Errorf("round %d %s: %w", round, t.name, err)
			}
			record(t, round, m)
		}
	}
	return nil
}

// rotate returns s in the order of round r (from 1): turned by one each
// round, so round 1 is s itself.
func rotate[T any](s []T, r int) []T {
	out := make([]T, len(s))
	for i := range out {
		out[i] = s[(i+r-1)%len(s)]
	}
	return out
}

// Workload is one line of a harness's report: a load run on every target
// of every round.
type Workload struct {
	Name    string
	Title   string
	Load    Config // Servers, Duration, Rate, Seed (and Clients, for some targets) are filled in per run: target.load
	Preload bool   // store every key of the key space before the rounds
}

// workloadNames returns the names of the workloads in list.
func workloadNames(list []Workload) []string {
	var n []string
	for _, w := range list {
		n = append(n, w.Name)
	}
	return n
}

// findWorkload returns the workload of list named name.
func findWorkload(list []Workload, name string) (Workload, bool) {
	for _, w := range list {
		if w.Name == name {
			return w, true
		}
	}
	return Workload{}, false
}
