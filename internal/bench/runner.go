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
	"context"
	"fmt"
	"io"
	"math"
	"slices"
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
	start   func(ctx context.Context, s procSpec) ([]*serverProc, error)
	stop    func(p *serverProc) error
	load    func(ctx context.Context, cfg Config) (res *Result, loadCPU time.Duration, err error)
	cpu     func(p *serverProc) (time.Duration, error) // utime+stime so far
	rss     func(p *serverProc) (int64, error)         // bytes
	items   func(ctx context.Context, p *serverProc) (uint64, error)
	cores   func() (coreTimes, error)
	now     func() time.Time
	settle  func(ctx context.Context)                // let a fresh server reach steady state
	quiesce func(ctx context.Context, p *serverProc) // wait for a loaded server's background work (hash expansion)
	cleanup func()
}

// runner runs a harness's steps over an env. It keeps the processes it
// started, so that stopAll stops them, and the command lines they started
// with, for the report.
type runner struct {
	e       *env
	log     io.Writer
	procs   []*serverProc // started and not yet stopped, in order
	started []string      // the command line of every process started, in order
}

func newRunner(e *env, log io.Writer) *runner { return &runner{e: e, log: log} }

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
	// other is the share of the two cores' capacity during the run that
	// neither the charged processes nor the load used, in percent; steal
	// is the hypervisor's steal time, in percent of the same capacity.
	other, steal float64
}

// measure runs the load cfg and measures, around it, the CPU time of each
// group in charge and the busy time of the cores.
func (r *runner) measure(ctx context.Context, cfg Config, charge ...[]*serverProc) (measurement, error) {
	cpu0, err := r.cpu(charge)
	if err != nil {
		return measurement{}, err
	}
	cores0, err := r.e.cores()
	if err != nil {
		return measurement{}, err
	}
	t0 := r.e.now()
	res, loadCPU, err := r.e.load(ctx, cfg)
	if err != nil {
		return measurement{}, err
	}
	wall := r.e.now().Sub(t0)
	cpu1, err := r.cpu(charge)
	if err != nil {
		return measurement{}, err
	}
	cores1, err := r.e.cores()
	if err != nil {
		return measurement{}, err
	}
	m := measurement{res: res, wall: wall, loadCPU: loadCPU}
	for i := range cpu0 {
		m.charged = append(m.charged, cpu1[i]-cpu0[i])
	}
	if capacity := 2 * wall.Seconds(); capacity > 0 {
		other := (cores1.Busy - cores0.Busy).Seconds()
		for _, d := range m.charged {
			other -= d.Seconds()
		}
		other -= loadCPU.Seconds()
		m.other = math.Max(0, 100*other/capacity)
		m.steal = 100 * (cores1.Steal - cores0.Steal).Seconds() / capacity
	}
	return m, nil
}

// cpu returns the CPU time so far of each group, counting a process once
// per group (the servers of a pool may be the ports of one process).
func (r *runner) cpu(groups [][]*serverProc) ([]time.Duration, error) {
	out := make([]time.Duration, len(groups))
	for i, g := range groups {
		seen := map[int]bool{}
		for _, p := range g {
			if seen[p.Pid] {
				continue
			}
			seen[p.Pid] = true
			d, err := r.e.cpu(p)
			if err != nil {
				return nil, err
			}
			out[i] += d
		}
	}
	return out, nil
}

// target is one column of a harness's rounds.
type target struct {
	name    string          // the samples' server (compare) or path (proxies)
	servers []string        // where the load goes
	clients int             // connections per server; 0 keeps the workload's
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
	Load    Config // Servers, Duration, Rate and Seed are filled in per run (target.load)
	Preload bool   // store every key of the key space before the rounds
}

// validatePlan reports a number of rounds, a run duration or workloads (by
// name, out of list) that a harness cannot run.
func validatePlan(rounds int, d time.Duration, workloads []string, list []Workload) error {
	switch {
	case rounds < 1:
		return fmt.Errorf("%w: rounds must be at least 1", ErrInvalidConfig)
	case d < 100*time.Millisecond:
		return fmt.Errorf("%w: run duration %v is too short", ErrInvalidConfig, d)
	}
	for _, w := range workloads {
		if _, ok := findWorkload(list, w); !ok {
			return fmt.Errorf("%w: unknown workload %q (have %s)", ErrInvalidConfig, w, strings.Join(workloadNames(list), ","))
		}
	}
	return nil
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

// figures are what every sample has, whatever the harness: what the
// summaries and the noise notes read.
type figures struct {
	ops, p50, p99, p999  float64
	other, steal         float64 // percent
	errors, hits, misses uint64
}

// medians summarize one workload on one target over its rounds.
type medians struct {
	rounds              int
	ops, p50, p99, p999 float64 // medians
	opsSpread           float64 // spread of ops/s, percent
	other               float64 // median, percent
	errors              uint64  // summed
	hitRatio            float64
}

// group is the samples of one workload on one target, in the order they
// ran.
type group[S any] struct {
	workload, target string
	samples          []S
}

// groups splits samples by workload × target, in the order of workloads
// and targets, leaving out the pairs without samples. key returns a
// sample's workload and target.
func groups[S any](samples []S, workloads, targets []string, key func(S) (string, string)) []group[S] {
	var out []group[S]
	for _, w := range workloads {
		for _, t := range targets {
			g := group[S]{workload: w, target: t}
			for _, s := range samples {
				if sw, st := key(s); sw == w && st == t {
					g.samples = append(g.samples, s)
				}
			}
			if len(g.samples) > 0 {
				out = append(out, g)
			}
		}
	}
	return out
}

// mediansOf summarizes the figures of a group's samples.
func mediansOf[S any](samples []S, fig func(S) figures) medians {
	var ops, p50, p99, p999, other []float64
	var m medians
	var hits, misses uint64
	for _, s := range samples {
		f := fig(s)
		ops = append(ops, f.ops)
		p50 = append(p50, f.p50)
		p99 = append(p99, f.p99)
		p999 = append(p999, f.p999)
		other = append(other, f.other)
		m.errors += f.errors
		hits += f.hits
		misses += f.misses
	}
	m.rounds = len(ops)
	m.ops, m.p50, m.p99, m.p999 = median(ops), median(p50), median(p99), median(p999)
	m.opsSpread, m.other = spread(ops), median(other)
	if hits+misses > 0 {
		m.hitRatio = float64(hits) / float64(hits+misses)
	}
	return m
}

// noise is the other CPU of a harness's runs, its mean and its worst, and
// the worst steal time, all in percent; runs is how many there were.
type noise struct {
	runs                         int
	meanOther, worstOther, steal float64
}

func noiseOf[S any](samples []S, fig func(S) figures) noise {
	var n noise
	var sum float64
	for _, s := range samples {
		f := fig(s)
		n.worstOther = math.Max(n.worstOther, f.other)
		sum += f.other
		n.steal = math.Max(n.steal, f.steal)
		n.runs++
	}
	if n.runs > 0 {
		n.meanOther = sum / float64(n.runs)
	}
	return n
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
