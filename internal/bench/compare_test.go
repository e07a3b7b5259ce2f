package bench

import (
	"context"
	"encoding/xml"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeWorld is a pretend machine: servers are counters, loads advance a
// fake clock and charge CPU to the server they hit.
type fakeWorld struct {
	now     time.Time
	nextPid int
	addrs   map[string]*fakeServer // by address
	runs    []string               // "workload-ish/kind" of every measured load, in order
	started []string
}

type fakeServer struct {
	kind  string
	cpu   time.Duration
	items uint64
	rss   int64
}

func (f *fakeWorld) env() *env {
	byPid := map[int]*fakeServer{}
	return &env{
		start: func(ctx context.Context, spec procSpec) ([]*serverProc, error) {
			kind := spec.kind
			f.nextPid++
			s := &fakeServer{kind: kind, rss: 10 << 20}
			addr := fmt.Sprintf("127.0.0.1:%d", 1000+f.nextPid)
			f.addrs[addr] = s
			byPid[f.nextPid] = s
			f.started = append(f.started, kind)
			return []*serverProc{{Kind: kind, Addr: addr, Pid: f.nextPid}}, nil
		},
		stop: func(p *serverProc) error { return nil },
		load: func(ctx context.Context, c Config) (*Result, time.Duration, error) {
			s := f.addrs[c.Servers[0]]
			if c.Requests > 0 { // preload or memory fill
				s.items += c.Requests
				if s.kind == KindMemcached {
					s.rss += int64(c.Requests) * 200
				} else {
					s.rss += int64(c.Requests) * 150
				}
				return &Result{Requests: c.Requests, Sets: c.Requests}, 0, nil
			}
			// vbcache: 100k requests per CPU-second, memcached 80k, round
			// 2 is slower for both (noise); each run takes Duration.
			rate := 80_000.0
			if s.kind == KindVbcache {
				rate = 100_000
			}
			if c.Seed == 2 {
				rate *= 0.9
			}
			sec := c.Duration.Seconds()
			s.cpu += c.Duration
			f.now = f.now.Add(c.Duration)
			f.runs = append(f.runs, fmt.Sprintf("%d/%s", c.Pipeline, s.kind))
			req := uint64(rate * sec)
			return &Result{Requests: req, OpsPerSec: rate, Hits: req, Latency: Latency{P50: 50, P99: 100 + float64(c.Seed), P999: 300}},
				c.Duration / 2, nil
		},
		cpu:   func(p *serverProc) (time.Duration, error) { return byPid[p.Pid].cpu, nil },
		rss:   func(p *serverProc) (int64, error) { return byPid[p.Pid].rss, nil },
		items: func(ctx context.Context, p *serverProc) (uint64, error) { return byPid[p.Pid].items, nil },
		cores: func() (coreTimes, error) {
			// Busy: everything charged so far plus a tenth of wall time
			// for "other" processes.
			var busy time.Duration
			for _, s := range f.addrs {
				busy += s.cpu + s.cpu/2 // server + load (load CPU is half)
			}
			return coreTimes{Busy: busy + time.Duration(f.now.Sub(time.Unix(0, 0)))/10}, nil
		},
		now:     func() time.Time { return f.now },
		settle:  func(context.Context) {},
		cleanup: func() {},
	}
}

func TestCompareWithFakeEnv(t *testing.T) {
	f := &fakeWorld{now: time.Unix(0, 0), addrs: map[string]*fakeServer{}}
	c := CompareConfig{Harness: Harness{Rounds: 3, Duration: 2 * time.Second, Workloads: []string{"a", "b"}, Command: "vbcache bench compare --test"}, MemoryItems: 1000}
	c = c.withDefaults()
	res, err := compare(context.Background(), &c, f.env(), Info{machine: machine{CPU: "fake"}, RTNote: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	// Interleaved A B A B within a workload.
	want := "1/memcached 1/vbcache 1/memcached 1/vbcache 1/memcached 1/vbcache " +
		"16/memcached 16/vbcache 16/memcached 16/vbcache 16/memcached 16/vbcache"
	if got := strings.Join(f.runs, " "); got != want {
		t.Errorf("run order:\n got %s\nwant %s", got, want)
	}
	if len(res.Samples) != 12 || len(res.Summaries) != 4 {
		t.Fatalf("%d samples, %d summaries", len(res.Samples), len(res.Summaries))
	}
	s := res.summary("a", KindVbcache)
	// Rounds: 100k, 90k, 100k ops per CPU-s → median 100k, spread 10%.
	if s.OpsPerCPUSec != 100_000 || s.Spread != 10 || s.CPUPerOpUs != 10 || s.P99 != 102 {
		t.Errorf("vbcache a: %+v", s)
	}
	// Other CPU: a tenth of wall time over two cores' capacity = 5%.
	if s.OtherCPU < 4.99 || s.OtherCPU > 5.01 {
		t.Errorf("other CPU %.3f%%, want 5%%", s.OtherCPU)
	}
	if m := res.summary("a", KindMemcached); m.OpsPerCPUSec != 80_000 {
		t.Errorf("memcached a: %+v", m)
	}
	// Both servers slow down together in round 2, so each round's ratio
	// is 1.25 although the rounds' figures spread by 10%.
	if lo, hi, n := res.pairedRange("a"); n != 3 || math.Abs(lo-1.25) > 1e-9 || math.Abs(hi-1.25) > 1e-9 {
		t.Errorf("paired range of a: %.3f–%.3f over %d rounds, want 1.25–1.25 over 3", lo, hi, n)
	}
	if len(res.Memory) != 2 || res.Memory[0].BytesPerItem != 200 || res.Memory[1].BytesPerItem != 150 {
		t.Errorf("memory %+v", res.Memory)
	}
	// vbcache is cheaper per op, as slow at p99 (equal counts as met),
	// and smaller per item: every target is met.
	if tg := res.Targets(); len(tg) != 4 {
		t.Errorf("targets %+v", tg)
	} else {
		for _, x := range tg {
			if !x.Met {
				t.Errorf("target %q not met: %s", x.Name, x.Detail)
			}
		}
	}

	dir := t.TempDir()
	if err := res.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "results.md"))
	for _, want := range []string{"| a: 90% get / 10% set, 100 B, 50 conns | vbcache | 100000 |", "*vbcache / memcached*", "**1.25**",
		"150.0 vs 200.0 bytes per item", "Command: `vbcache bench compare --test`", "## Noise"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	svg, _ := os.ReadFile(filepath.Join(dir, "results.svg"))
	d := xml.NewDecoder(strings.NewReader(string(svg)))
	rects := 0
	for {
		tok, err := d.Token()
		if err != nil {
			break
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			rects++
		}
	}
	if rects != 1+4+2 { // background, 4 bars, 2 legend swatches
		t.Errorf("svg has %d rects", rects)
	}
	if _, err := os.Stat(filepath.Join(dir, "results.json")); err != nil {
		t.Error(err)
	}
}

func TestMedianSpread(t *testing.T) {
	if median([]float64{3, 1, 2}) != 2 || median([]float64{4, 1, 3, 2}) != 2.5 || median(nil) != 0 {
		t.Error("median")
	}
	if spread([]float64{90, 100, 110}) != 20 {
		t.Error("spread")
	}
}

func TestCompareConfigValidate(t *testing.T) {
	for _, c := range []CompareConfig{{Harness: Harness{Rounds: -1}}, {Harness: Harness{Workloads: []string{"z"}}}, {Harness: Harness{Duration: time.Millisecond}}} {
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	c := CompareConfig{Quick: true}
	if d := c.withDefaults(); d.Duration != time.Second || d.MemoryItems != 100_000 || len(d.Workloads) != 6 {
		t.Errorf("quick defaults %+v", d)
	}
}

func TestProcParsers(t *testing.T) {
	d, err := parseProcStat([]byte("1234 (mem cached) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 5 0 100 1000 200 ..."))
	if err != nil || d != 3*time.Second {
		t.Errorf("stat: %v %v", d, err)
	}
	n, err := parseVmRSS([]byte("Name:\tx\nVmPeak:\t 100 kB\nVmRSS:\t    2048 kB\n"))
	if err != nil || n != 2048*1024 {
		t.Errorf("rss: %d %v", n, err)
	}
	ct, err := parseCoreTimes([]byte("cpu  1 2 3 4 5 6 7 8 0 0\ncpu0 100 0 50 1000 0 10 5 3 0 0\ncpu1 200 0 0 1000 0 0 0 7 0 0\ncpu2 999 0 0 0 0 0 0 0 0 0\n"), []int{0, 1})
	if err != nil || ct.Busy != 3650*time.Millisecond || ct.Steal != 100*time.Millisecond {
		t.Errorf("cores: %+v %v", ct, err)
	}
	if l, err := parseCPUList("0,2-3"); err != nil || fmt.Sprint(l) != "[0 2 3]" {
		t.Errorf("cpu list %v %v", l, err)
	}
	if _, err := parseCPUList("x"); err == nil {
		t.Error("bad cpu list accepted")
	}
}

// TestPlaceThreads: the scaling comparison's CPU sets, for machines larger
// than this one.
func TestPlaceThreads(t *testing.T) {
	seq := func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = i
		}
		return s
	}
	for _, tc := range []struct {
		cpus             []int
		n                int
		server, load     string
		loadThreads      int
		refusedWithWords string
	}{
		{cpus: seq(16), n: 4, server: "0-3", load: "4-15", loadThreads: 12},
		{cpus: seq(2), n: 1, server: "0", load: "1", loadThreads: 1}, // this machine: today's placement
		{cpus: seq(64), n: 32, server: "0-31", load: "32-63", loadThreads: 32},
		{cpus: []int{0, 2, 3, 5, 6, 7}, n: 2, server: "0,2", load: "3,5-7", loadThreads: 4},
		{cpus: seq(2), n: 2, refusedWithWords: "--threads 2 needs 3 CPUs (2 for the servers, at least 1 for the load), and there are 2 (0-1)"},
		{cpus: seq(4), n: 4, refusedWithWords: "needs 5 CPUs"},
		{cpus: seq(4), n: 0, refusedWithWords: "needs 1 CPUs"},
	} {
		p, err := placeThreads(tc.cpus, tc.n)
		if tc.refusedWithWords != "" {
			if err == nil || !strings.Contains(err.Error(), tc.refusedWithWords) {
				t.Errorf("%d threads on %v: %v, want an error saying %q", tc.n, tc.cpus, err, tc.refusedWithWords)
			}
			continue
		}
		if err != nil || p.serverCPU != tc.server || p.loadCPU != tc.load || p.loadThreads != tc.loadThreads {
			t.Errorf("%d threads on %v: %+v %v, want servers %s, load %s with %d threads", tc.n, tc.cpus, p, err, tc.server, tc.load, tc.loadThreads)
		}
	}
}

// TestCompareThreads runs the scaling comparison on a pretend 16-CPU
// machine: both servers start with 4 threads on CPUs 0-3 and every load
// runs 12 threads on CPUs 4-15; Validate refuses what cannot run.
func TestCompareThreads(t *testing.T) {
	cpus := make([]int, 16)
	for i := range cpus {
		cpus[i] = i
	}
	f := &fakeWorld{now: time.Unix(0, 0), addrs: map[string]*fakeServer{}}
	e := f.env()
	var specs []string
	start := e.start
	e.start = func(ctx context.Context, s procSpec) ([]*serverProc, error) {
		specs = append(specs, s.kind+"@"+s.cpus)
		return start(ctx, s)
	}
	var loads []string
	load := e.load
	e.load = func(ctx context.Context, c Config) (*Result, time.Duration, error) {
		if c.Duration > 0 { // a measured run, not a preload
			loads = append(loads, fmt.Sprintf("%d×%d", c.Threads, c.Clients))
		}
		return load(ctx, c)
	}
	c := CompareConfig{Harness: Harness{Rounds: 1, Duration: time.Second, Workloads: []string{"a"}}, MemoryItems: -1, Threads: 4, CPUs: cpus}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c = c.withDefaults()
	if c.ServerCPU != "0-3" || c.LoadCPU != "4-15" {
		t.Fatalf("servers on %q, load on %q", c.ServerCPU, c.LoadCPU)
	}
	res, err := compare(context.Background(), &c, e, Info{ServerCPU: c.ServerCPU, LoadCPU: c.LoadCPU, ServerThreads: 4, LoadThreads: 12})
	if err != nil {
		t.Fatal(err)
	}
	var md strings.Builder
	if err := res.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if want := "Scaling run (--threads 4): servers on CPU 0-3 with 4 threads each (memcached -t 4, vbcache -t 4 and GOMAXPROCS=4), " +
		"load on CPU 4-15 with 12 threads"; !strings.Contains(md.String(), want) {
		t.Errorf("the report's header does not say %q:\n%s", want, md.String())
	}
	if got := strings.Join(specs, " "); got != "memcached@0-3 vbcache@0-3" {
		t.Errorf("servers started %s", got)
	}
	if got := strings.Join(loads, " "); got != "12×50 12×50" {
		t.Errorf("load threads×clients per run: %s, want 12×50 for each server", got)
	}

	re := &realEnv{vbcache: "vbcache", memcached: "memcached", threads: 4}
	for _, k := range kinds {
		argv, env := re.serverArgv(k, "-p", "1")
		if !strings.Contains(strings.Join(argv, " "), "-t 4 ") {
			t.Errorf("%s: %q has no -t 4", k, argv)
		}
		if k == KindVbcache && !slices.Contains(env, "GOMAXPROCS=4") {
			t.Errorf("vbcache's environment %q has no GOMAXPROCS=4", env)
		}
	}

	for _, bad := range []CompareConfig{
		{Threads: 2, CPUs: []int{0, 1}},
		{Threads: 2, CPUs: cpus, ServerCPU: "0-1"},
		{Threads: 2, CPUs: cpus, Harness: Harness{LoadCPU: "2"}},
		{Threads: -1},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("threads %d on %d CPUs (servers %q, load %q): accepted", bad.Threads, len(bad.CPUs), bad.ServerCPU, bad.LoadCPU)
		}
	}
	// One thread on a 2-CPU machine is today's comparison.
	one := CompareConfig{Threads: 1, CPUs: []int{0, 1}}.withDefaults()
	today := CompareConfig{}.withDefaults()
	if one.ServerCPU != today.ServerCPU || one.LoadCPU != today.LoadCPU || one.place.loadThreads != workloadList()[0].Load.Threads {
		t.Errorf("--threads 1 on 2 CPUs: servers %s load %s with %d threads; today: %s, %s, %d",
			one.ServerCPU, one.LoadCPU, one.place.loadThreads, today.ServerCPU, today.LoadCPU, workloadList()[0].Load.Threads)
	}
}

// TestOtherCPUOverTheMeasuredCores: other CPU is a share of as many cores
// as the run measures, not of two.
func TestOtherCPUOverTheMeasuredCores(t *testing.T) {
	for _, tc := range []struct {
		ncores int
		want   float64
	}{{0, 5}, {2, 5}, {4, 2.5}} {
		f := &fakeWorld{now: time.Unix(0, 0), addrs: map[string]*fakeServer{}}
		e := f.env()
		e.ncores = tc.ncores
		c := CompareConfig{Harness: Harness{Rounds: 1, Duration: time.Second, Workloads: []string{"a"}}, MemoryItems: -1}.withDefaults()
		res, err := compare(context.Background(), &c, e, Info{})
		if err != nil {
			t.Fatal(err)
		}
		// The fake's other processes use a tenth of one core.
		if got := res.Samples[0].OtherCPU; math.Abs(got-tc.want) > 0.01 {
			t.Errorf("%d cores: other CPU %.3f%%, want %.1f%%", tc.ncores, got, tc.want)
		}
	}
}
