package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/internal/proxy"
)

func TestRoundOrder(t *testing.T) {
	for r, want := range map[int][]string{
		1: {PathDirect, PathNutcracker, PathVbcache},
		2: {PathNutcracker, PathVbcache, PathDirect},
		3: {PathVbcache, PathDirect, PathNutcracker},
		4: {PathDirect, PathNutcracker, PathVbcache},
	} {
		if got := rotate(proxyPaths, r); !slices.Equal(got, want) {
			t.Errorf("rotate(proxyPaths, %d) = %v, want %v", r, got, want)
		}
	}
}

func TestSummarizeProxiesPairsRounds(t *testing.T) {
	// Added p99 pairs each proxy run with the direct run of its round:
	// 150-100, 260-200, 310-300 → 50, 60, 10; median 50.
	var ss []ProxySample
	for i, d := range []float64{100, 200, 300} {
		ss = append(ss,
			ProxySample{Workload: "get", Path: PathDirect, Round: i + 1, P99: d, Requests: 1000, Hits: 1000},
			ProxySample{Workload: "get", Path: PathVbcache, Round: i + 1, P99: []float64{150, 260, 310}[i],
				Requests: 1000, Hits: 1000, ProxyCPUSec: []float64{0.02, 0.03, 0.025}[i]})
	}
	sum := summarizeProxies(ss, []string{"get"})
	if len(sum) != 2 {
		t.Fatalf("got %d summaries, want 2 (no nutcracker samples)", len(sum))
	}
	v := sum[1]
	if v.Path != PathVbcache || v.AddedP99 != 50 || v.AddedP99Min != 10 || v.AddedP99Max != 60 {
		t.Errorf("added p99 = %v (%v–%v) on %s, want 50 (10–60) on %s", v.AddedP99, v.AddedP99Min, v.AddedP99Max, v.Path, PathVbcache)
	}
	// CPU per op: 20, 30, 25 µs → median 25.
	if v.CPUPerOpUs != 25 || v.CPUPerOpMin != 20 || v.CPUPerOpMax != 30 {
		t.Errorf("cpu/op = %v (%v–%v), want 25 (20–30)", v.CPUPerOpUs, v.CPUPerOpMin, v.CPUPerOpMax)
	}
	if v.HitRatio != 1 {
		t.Errorf("hit ratio %v", v.HitRatio)
	}
}

func TestProxyVerdicts(t *testing.T) {
	r := &ProxiesResult{workloads: []Workload{{Name: "get"}, {Name: "set"}}, Summaries: []ProxySummary{
		// get: vbcache clearly cheaper; added p99 better on the median
		// but the rounds overlap.
		{Workload: "get", Path: PathNutcracker, CPUPerOpUs: 20, CPUPerOpMin: 19, CPUPerOpMax: 21, AddedP99: 100, AddedP99Min: 50, AddedP99Max: 150},
		{Workload: "get", Path: PathVbcache, CPUPerOpUs: 15, CPUPerOpMin: 14, CPUPerOpMax: 16, AddedP99: 90, AddedP99Min: 60, AddedP99Max: 120},
		// set: vbcache clearly dearer; added p99 worse within noise.
		{Workload: "set", Path: PathNutcracker, CPUPerOpUs: 20, CPUPerOpMin: 19, CPUPerOpMax: 21, AddedP99: 100, AddedP99Min: 50, AddedP99Max: 150},
		{Workload: "set", Path: PathVbcache, CPUPerOpUs: 30, CPUPerOpMin: 28, CPUPerOpMax: 32, AddedP99: 110, AddedP99Min: 60, AddedP99Max: 160},
	}}
	got := r.Verdicts()
	want := []struct{ met, clear bool }{{true, true}, {true, false}, {false, true}, {false, false}}
	if len(got) != len(want) {
		t.Fatalf("got %d verdicts, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].Met != w.met || got[i].Clear != w.clear {
			t.Errorf("verdict %d (%s) = met %v clear %v, want %v %v", i, got[i], got[i].Met, got[i].Clear, w.met, w.clear)
		}
	}
	if s := got[1].String(); !strings.Contains(s, "met (rounds overlap") {
		t.Errorf("overlapping verdict reads %q", s)
	}
}

// TestProxyVerdictsPairRounds: the verdicts count, round by round, where
// vbcache's figure was below and above nutcracker's, skipping rounds with
// errors or without both proxies, and give the sign test's p-value.
func TestProxyVerdictsPairRounds(t *testing.T) {
	r := &ProxiesResult{workloads: []Workload{{Name: "get"}}}
	// p99 vbcache / nutcracker per round; CPU seconds per 1000 requests.
	for i, p := range [][2]float64{{100, 200}, {150, 140}, {90, 300}, {120, 120}, {80, 500}, {70, 600}} {
		round := i + 1
		r.Samples = append(r.Samples,
			ProxySample{Workload: "get", Path: PathVbcache, Round: round, P99: p[0], Requests: 1000, ProxyCPUSec: 0.01},
			ProxySample{Workload: "get", Path: PathNutcracker, Round: round, P99: p[1], Requests: 1000, ProxyCPUSec: 0.02})
	}
	// Round 7 had errors, round 8 lacks nutcracker: neither counts.
	r.Samples = append(r.Samples,
		ProxySample{Workload: "get", Path: PathVbcache, Round: 7, P99: 1, Requests: 1000, ProxyCPUSec: 0.01},
		ProxySample{Workload: "get", Path: PathNutcracker, Round: 7, P99: 9, Requests: 1000, Errors: 3, ProxyCPUSec: 0.02},
		ProxySample{Workload: "get", Path: PathVbcache, Round: 8, P99: 1, Requests: 1000, ProxyCPUSec: 0.01})
	r.Summaries = summarizeProxies(r.Samples, []string{"get"})
	got := r.Verdicts()
	if len(got) != 2 {
		t.Fatalf("got %d verdicts, want 2", len(got))
	}
	cpu, lat := got[0], got[1]
	// CPU lower in all 6: p = 2/64.
	if cpu.Pairs != 6 || cpu.Lower != 6 || cpu.Higher != 0 || math.Abs(cpu.SignP-2.0/64) > 1e-12 {
		t.Errorf("cpu pairs %d lower %d higher %d p %v, want 6 6 0 %v", cpu.Pairs, cpu.Lower, cpu.Higher, cpu.SignP, 2.0/64)
	}
	// p99: lower in 4, higher in 1, tied in 1; over 5: 2*(1+5)/32.
	if lat.Pairs != 6 || lat.Lower != 4 || lat.Higher != 1 || math.Abs(lat.SignP-12.0/32) > 1e-12 {
		t.Errorf("p99 pairs %d lower %d higher %d p %v, want 6 4 1 %v", lat.Pairs, lat.Lower, lat.Higher, lat.SignP, 12.0/32)
	}
	if s := lat.String(); !strings.Contains(s, "vbcache lower in 4, higher in 1 of 6 (sign test p = 0.38)") {
		t.Errorf("verdict reads %q", s)
	}
}

// TestProxyArrivalVerdict: the arrival p99 of each proxy run is paired
// with the direct run's arrival p99 of the same round, apart from the
// parse p99, and gives a verdict of its own; the report adds its table.
func TestProxyArrivalVerdict(t *testing.T) {
	r := &ProxiesResult{workloads: []Workload{{Name: "set"}}, Paths: proxyPaths}
	// direct, nutcracker, vbcache arrival p99 per round; parse p99s differ.
	for i, a := range [][3]float64{{20, 900, 300}, {30, 1100, 400}, {25, 1000, 1200}} {
		round := i + 1
		r.Samples = append(r.Samples,
			ProxySample{Workload: "set", Path: PathDirect, Round: round, P99: 60, ArrivalP50: 10, ArrivalP99: a[0], Requests: 1000},
			ProxySample{Workload: "set", Path: PathNutcracker, Round: round, P99: 3000, ArrivalP50: 500, ArrivalP99: a[1], Requests: 1000, ProxyCPUSec: 0.02},
			ProxySample{Workload: "set", Path: PathVbcache, Round: round, P99: 4000, ArrivalP50: 60, ArrivalP99: a[2], Requests: 1000, ProxyCPUSec: 0.02})
	}
	r.Summaries = summarizeProxies(r.Samples, []string{"set"})
	v := r.summary("set", PathVbcache)
	// vbcache: 300-20, 400-30, 1200-25 → median 370, extremes 280 and 1175.
	if v.ArrivalP99 != 400 || v.AddedArrivalP99 != 370 || v.AddedArrivalP99Min != 280 || v.AddedArrivalP99Max != 1175 || v.ArrivalP50 != 60 {
		t.Errorf("vbcache summary %+v", *v)
	}
	if d := r.summary("set", PathDirect); d.ArrivalP99 != 25 || d.AddedArrivalP99 != 0 {
		t.Errorf("direct summary %+v", *d)
	}
	got := r.Verdicts()
	if len(got) != 3 {
		t.Fatalf("got %d verdicts, want 3", len(got))
	}
	lat, arr := got[1], got[2]
	if lat.Met || arr.Criterion != "added p99 at arrival µs" || !arr.Met || arr.Clear || arr.Lower != 2 || arr.Higher != 1 {
		t.Errorf("verdicts %+v and %+v", lat, arr)
	}
	var b strings.Builder
	if err := r.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| set | vbcache-proxy | 60.0 | 400.0 | 370.0 (280.0–1175.0) |") {
		t.Errorf("report lacks the arrival row:\n%s", b.String())
	}
}

func TestSignTest(t *testing.T) {
	for _, c := range []struct {
		k, m int
		p    float64
	}{{0, 0, 1}, {1, 0, 1}, {4, 4, 1}, {8, 0, 2.0 / 256}, {1, 7, 18.0 / 256}, {3, 5, 186.0 / 256}} {
		if got := signTest(c.k, c.m); math.Abs(got-c.p) > 1e-12 {
			t.Errorf("signTest(%d, %d) = %v, want %v", c.k, c.m, got, c.p)
		}
	}
}

func TestProxiesValidate(t *testing.T) {
	for _, c := range []ProxiesConfig{
		{Servers: 3, Clients: 50},
		{Harness: Harness{Workloads: []string{"nope"}}},
		{Harness: Harness{Duration: time.Millisecond}},
		{Rate: -1},
	} {
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalidConfig", c, err)
		}
	}
	if err := (&ProxiesConfig{Servers: 3, Clients: 51}).Validate(); err != nil {
		t.Errorf("3 servers, 51 clients: %v", err)
	}
}

// TestPoolYAML checks that the pool file both proxies read is one vbcache
// proxy understands as a twemproxy pool: ketama over md5, weight 1 each.
func TestPoolYAML(t *testing.T) {
	y := poolYAML("127.0.0.1:22121", []string{"127.0.0.1:11211", "127.0.0.1:11212"})
	want := "bench:\n" +
		"  listen: 127.0.0.1:22121\n" +
		"  hash: md5\n" +
		"  distribution: ketama\n" +
		"  auto_eject_hosts: false\n" +
		"  timeout: 2000\n" +
		"  servers:\n" +
		"    - 127.0.0.1:11211:1\n" +
		"    - 127.0.0.1:11212:1\n"
	if y != want {
		t.Fatalf("poolYAML:\n%s\nwant:\n%s", y, want)
	}
	c, err := proxy.ParseConfig([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:22121" || c.Distribution != "ketama" || c.Hash != "md5" || len(c.Servers) != 2 {
		t.Errorf("parsed %+v", c)
	}
}

// fakeProxies is a pretend machine for proxies(): each path has a cost per
// request, runs take Duration of a fake clock.
type fakeProxies struct {
	now    time.Time
	pids   int
	byAddr map[string]*fakeProc
	byPid  map[int]*fakeProc
	runs   []string // "workload/path/seed" of measured loads
	loads  []Config
	// sharedPool makes the pool's servers ports of one process, as the
	// real environment starts them; pool is that (or the first) process,
	// which spends 5 µs per request of every measured run.
	sharedPool bool
	pool       *fakeProc
}

type fakeProc struct {
	kind string
	cpu  time.Duration
}

func (f *fakeProxies) env() *env {
	f.byAddr, f.byPid = map[string]*fakeProc{}, map[int]*fakeProc{}
	start := func(kind string) *serverProc {
		f.pids++
		p := &fakeProc{kind: kind}
		addr := fmt.Sprintf("127.0.0.1:%d", 2000+f.pids)
		f.byAddr[addr], f.byPid[f.pids] = p, p
		return &serverProc{Kind: kind, Addr: addr, Pid: f.pids}
	}
	return &env{
		start: func(ctx context.Context, spec procSpec) ([]*serverProc, error) {
			if spec.kind != KindMemcached {
				return []*serverProc{start(spec.kind)}, nil
			}
			var ps []*serverProc
			for i := range spec.ports {
				if f.sharedPool && i > 0 {
					addr := fmt.Sprintf("127.0.0.1:%d", 3000+i)
					f.byAddr[addr] = f.pool
					ps = append(ps, &serverProc{Kind: "memcached", Addr: addr, Pid: ps[0].Pid})
					continue
				}
				ps = append(ps, start("memcached"))
				if i == 0 {
					f.pool = f.byPid[f.pids]
				}
			}
			return ps, nil
		},
		stop: func(p *serverProc) error { return nil },
		load: func(ctx context.Context, c Config) (*Result, time.Duration, error) {
			f.loads = append(f.loads, c)
			if c.Requests > 0 { // preload
				return &Result{Requests: c.Requests}, 0, nil
			}
			first := f.byAddr[c.Servers[0]]
			path := PathDirect
			if first.kind != "memcached" {
				path = first.kind
			}
			// nutcracker: 20 µs of proxy CPU per request, 50k ops/s, p99
			// 1100 µs; vbcache 25 µs, 40k ops/s, p99 1050; direct p99 1000.
			// Every run takes its Duration and adds round-dependent noise.
			ops, p99 := 60_000.0, 1000.0+float64(c.Seed)
			if path == PathNutcracker {
				ops, p99 = 50_000, 1100+2*float64(c.Seed)
				first.cpu += time.Duration(20 * ops * c.Duration.Seconds() * float64(time.Microsecond))
			} else if path == PathVbcache {
				ops, p99 = 40_000, 1050
				first.cpu += time.Duration(25 * ops * c.Duration.Seconds() * float64(time.Microsecond))
			}
			f.now = f.now.Add(c.Duration)
			if c.Seed > 0 {
				f.runs = append(f.runs, fmt.Sprintf("%d/%s/%d", c.MultiGet, path, c.Seed))
			}
			f.pool.cpu += time.Duration(5 * ops * c.Duration.Seconds() * float64(time.Microsecond))
			req := uint64(ops * c.Duration.Seconds())
			return &Result{Requests: req, OpsPerSec: ops, Hits: req, Latency: Latency{P50: 500, P99: p99, P999: 2000}}, c.Duration / 2, nil
		},
		cpu:     func(p *serverProc) (time.Duration, error) { return f.byPid[p.Pid].cpu, nil },
		cores:   func() (coreTimes, error) { return coreTimes{}, nil },
		now:     func() time.Time { return f.now },
		cleanup: func() {},
	}
}

// TestProxiesPoolOfOneProcess: when the pool's servers are ports of one
// memcached, its CPU time counts once.
func TestProxiesPoolOfOneProcess(t *testing.T) {
	for _, shared := range []bool{false, true} {
		f := &fakeProxies{now: time.Unix(0, 0), sharedPool: shared}
		c := ProxiesConfig{Harness: Harness{Rounds: 1, Duration: time.Second, Workloads: []string{"get"}}}.withDefaults()
		res, err := proxies(context.Background(), &c, f.env(), ProxiesInfo{ProxyCPU: "0", LoadCPU: "1"})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range res.Summaries {
			if math.Abs(s.MemcachedCPUPerOpUs-5) > 0.01 {
				t.Errorf("shared %v, %s: memcached %.2f µs/op, want 5", shared, s.Path, s.MemcachedCPUPerOpUs)
			}
		}
	}
}

func TestProxiesFake(t *testing.T) {
	f := &fakeProxies{now: time.Unix(0, 0)}
	c := ProxiesConfig{Harness: Harness{Rounds: 2, Duration: 2 * time.Second, Workloads: []string{"get", "mget"}, Command: "vbcache bench proxies"}}.withDefaults()
	res, err := proxies(context.Background(), &c, f.env(), ProxiesInfo{ProxyCPU: "0", LoadCPU: "1"})
	if err != nil {
		t.Fatal(err)
	}
	wantRuns := []string{
		"0/direct/1", "0/nutcracker/1", "0/vbcache-proxy/1", "0/nutcracker/2", "0/vbcache-proxy/2", "0/direct/2",
		"10/direct/1", "10/nutcracker/1", "10/vbcache-proxy/1", "10/nutcracker/2", "10/vbcache-proxy/2", "10/direct/2",
	}
	if !slices.Equal(f.runs, wantRuns) {
		t.Errorf("runs:\n%v\nwant\n%v", f.runs, wantRuns)
	}
	// Two preloads (one per server), then two warm-ups.
	for i, l := range f.loads[:2] {
		if l.Requests != 100_000 || len(l.Servers) != 1 {
			t.Errorf("load %d is not a preload of one server: %+v", i, l)
		}
	}
	// Direct runs spread the 50 connections over the two servers.
	for _, l := range f.loads {
		if l.Seed > 0 && len(l.Servers) == 2 && l.Clients != 25 {
			t.Errorf("direct run with %d clients per server, want 25", l.Clients)
		}
		if l.Seed > 0 && len(l.Servers) == 1 && l.Clients != 50 {
			t.Errorf("proxy run with %d clients, want 50", l.Clients)
		}
	}
	n := res.summary("get", PathNutcracker)
	v := res.summary("get", PathVbcache)
	if n == nil || v == nil {
		t.Fatal("missing summaries")
	}
	if !near(n.CPUPerOpUs, 20) || !near(v.CPUPerOpUs, 25) {
		t.Errorf("cpu/op nutcracker %v vbcache %v, want 20 and 25", n.CPUPerOpUs, v.CPUPerOpUs)
	}
	// nutcracker: 1102-1001=101, 1104-1002=102 → 101.5; vbcache: 49, 48 → 48.5.
	if n.AddedP99 != 101.5 || v.AddedP99 != 48.5 {
		t.Errorf("added p99 nutcracker %v vbcache %v, want 101.5 and 48.5", n.AddedP99, v.AddedP99)
	}
	if res.ElapsedSec != 26 { // 12 runs of 2 s and 2 warm-ups of 1 s
		t.Errorf("elapsed %v s, want 26", res.ElapsedSec)
	}
	var md strings.Builder
	if err := res.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Command: `vbcache bench proxies`",
		"| get: single get, 100 B values, all hits | vbcache-proxy | 40000 |",
		"| get | *vbcache / nutcracker* | 0.80 |",
		"get: proxy CPU µs/op: vbcache 25.00 vs nutcracker 20.00 — **not met**",
		"get: added p99 µs: vbcache 48.50 vs nutcracker 101.50 — met",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
}

func near(a, b float64) bool { return a > b*0.999 && a < b*1.001 }
