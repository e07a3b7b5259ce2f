package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vbcache/vbcache/test/nodeproc"
)

// asideModel replays p's gets against a cache that never evicts, with the
// driver's batching: a key that misses is stored after its batch. It
// returns the hits of the counted phase.
func asideModel(p asidePlan) (hits uint64) {
	c := p.load.withDefaults()
	pick := newPicker(&c, 0, 1)
	stored := map[uint64]bool{}
	var pending []uint64
	for i := uint64(0); i < p.warmup+p.counted; i++ {
		k := pick.key()
		if stored[k] && i >= p.warmup {
			hits++
		}
		if !stored[k] {
			pending = append(pending, k)
		}
		if (i+1)%uint64(p.batch) == 0 || i+1 == p.warmup+p.counted {
			for _, k := range pending {
				stored[k] = true
			}
			pending = pending[:0]
		}
	}
	return hits
}

// TestCacheAsideAgainstNode drives in-process nodes large enough to evict
// nothing: the counted hits are exactly those of a cache that keeps
// everything, two nodes driven with the same plan are asked the same gets
// (equal digests), and the last value set reads back intact.
func TestCacheAsideAgainstNode(t *testing.T) {
	for _, tc := range []struct {
		name string
		load Config
	}{
		{"zipf", Config{KeyMax: 4999, Pattern: Zipf, ZipfAlpha: 0.8, Seed: 5}},
		{"scan", Config{KeyMax: 4999, Pattern: Scan, ScanLength: 700, ScanEvery: 2000, DataSizeMin: 1, DataSizeMax: 300, Seed: 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := asidePlan{load: tc.load, warmup: 3000, counted: 5000, batch: 16}
			plan.load.Timeout = 10 * time.Second
			var digests []string
			for range 2 {
				hc, err := cacheAside(context.Background(), startNode(t), plan)
				if err != nil {
					t.Fatal(err)
				}
				if hc.Requests != 5000 || hc.WarmupRequests != 3000 || hc.RefusedSets != 0 {
					t.Fatalf("%+v", hc)
				}
				if want := asideModel(plan); hc.Hits != want {
					t.Errorf("%d hits, want %d (a cache that keeps everything)", hc.Hits, want)
				}
				if hc.Sets != hc.Requests-hc.Hits {
					t.Errorf("%d sets for %d misses", hc.Sets, hc.Requests-hc.Hits)
				}
				if tc.load.Pattern == Scan && (hc.ZipfRequests == 0 || hc.ZipfRequests >= hc.Requests || hc.ZipfHits > hc.Hits) {
					t.Errorf("scan: Zipf part %d of %d gets, %d of %d hits", hc.ZipfRequests, hc.Requests, hc.ZipfHits, hc.Hits)
				}
				if !strings.HasSuffix(hc.ReadBack, "identical") {
					t.Errorf("read back %q", hc.ReadBack)
				}
				digests = append(digests, hc.KeysDigest)
			}
			if digests[0] != digests[1] || digests[0] == "" {
				t.Errorf("two runs of one plan asked different gets: digests %v", digests)
			}
			other := plan
			other.load.Seed++
			hc, err := cacheAside(context.Background(), startNode(t), other)
			if err != nil {
				t.Fatal(err)
			}
			if hc.KeysDigest == digests[0] {
				t.Errorf("another seed gave the same digest %s", hc.KeysDigest)
			}
		})
	}
}

// TestReadBack: the read back passes only for the value the driver stores:
// not for a missing key, nor for other bytes of the same length.
func TestReadBack(t *testing.T) {
	c := (&Config{KeyMax: 99, DataSize: 100}).withDefaults()
	w := newWire(Text, newKeyspace(&c))
	nc, err := net.Dial("tcp", startNode(t))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	r := bufio.NewReader(nc)
	set := func(req []byte) {
		t.Helper()
		if _, err := nc.Write(req); err != nil {
			t.Fatal(err)
		}
		if line, err := r.ReadString('\n'); err != nil || line != "STORED\r\n" {
			t.Fatalf("set: %q %v", line, err)
		}
	}
	if err := readBack(nc, r, w, 7, 5*time.Second); err == nil || !strings.Contains(err.Error(), "instead of its value") {
		t.Errorf("read back of a missing key: %v", err)
	}
	set(w.appendSet(nil, 7))
	if err := readBack(nc, r, w, 7, 5*time.Second); err != nil {
		t.Errorf("read back of the stored value: %v", err)
	}
	set([]byte("set key:07 0 0 100\r\n" + strings.Repeat("z", 100) + "\r\n"))
	if err := readBack(nc, r, w, 7, 5*time.Second); err == nil || !strings.Contains(err.Error(), "differs") {
		t.Errorf("read back of other bytes: %v", err)
	}
}

// fakeHitWorld is a pretend machine for the hit-ratio harness: each
// server kind answers a fixed share of the counted gets.
type fakeHitWorld struct {
	share   map[string]float64 // by kind
	digest  map[string]string  // by kind; "" means "same"
	started []string
	driven  []string // "workload-ish/kind" of every cacheAside, in order
	stopped int
}

func (f *fakeHitWorld) env() *env {
	byAddr := map[string]string{}
	n := 0
	now := time.Unix(0, 0)
	return &env{
		start: func(ctx context.Context, spec procSpec) ([]*serverProc, error) {
			n++
			addr := fmt.Sprintf("127.0.0.1:%d", 2000+n)
			byAddr[addr] = spec.kind
			f.started = append(f.started, spec.kind)
			return []*serverProc{{Kind: spec.kind, Addr: addr, Pid: n}}, nil
		},
		stop: func(p *serverProc) error { f.stopped++; return nil },
		cacheAside: func(ctx context.Context, addr string, p asidePlan) (hitCounts, error) {
			k := byAddr[addr]
			now = now.Add(time.Second)
			f.driven = append(f.driven, fmt.Sprintf("%s α%.1f/%s", p.load.Pattern, p.load.ZipfAlpha, k))
			hits := uint64(f.share[k] * float64(p.counted))
			hc := hitCounts{WarmupRequests: p.warmup, Requests: p.counted, Hits: hits, Sets: p.counted - hits,
				KeysDigest: "d1", ReadBack: "key:1 (100 bytes) identical"}
			if f.digest[k] != "" {
				hc.KeysDigest = f.digest[k]
			}
			if p.load.Pattern == Scan {
				hc.ZipfRequests, hc.ZipfHits = p.counted/2, hits/2+1
			}
			return hc, nil
		},
		stats: func(ctx context.Context, p *serverProc) (map[string]string, error) {
			return map[string]string{"curr_items": "1000", "evictions": "5", "bytes": "1048576"}, nil
		},
		now:     func() time.Time { return now },
		cleanup: func() {},
	}
}

func TestHitRatioWithFakeEnv(t *testing.T) {
	f := &fakeHitWorld{share: map[string]float64{KindMemcached: 0.5, KindVbcache: 0.6}}
	c := HitRatioConfig{Warmup: 100, Requests: 1000, Command: "vbcache bench hitratio --test"}.withDefaults()
	res, err := hitRatio(context.Background(), &c, f.env(), HitRatioInfo{machine: machine{CPU: "fake"}})
	if err != nil {
		t.Fatal(err)
	}
	// Two fresh servers per workload, driven memcached first.
	want := "zipf α0.8/memcached zipf α0.8/vbcache zipf α1.0/memcached zipf α1.0/vbcache " +
		"zipf α1.2/memcached zipf α1.2/vbcache scan α1.0/memcached scan α1.0/vbcache"
	if got := strings.Join(f.driven, " "); got != want {
		t.Errorf("runs:\n got %s\nwant %s", got, want)
	}
	if len(f.started) != 8 || f.stopped != 8 {
		t.Errorf("%d servers started, %d stopped, want 8 and 8", len(f.started), f.stopped)
	}
	if len(res.Runs) != 8 {
		t.Fatalf("%d runs", len(res.Runs))
	}
	v := res.run("scan-mixed", KindVbcache)
	if v.HitRatio != 0.6 || v.ZipfHitRatio != float64(301)/500 || v.CurrItems != 1000 || v.Evictions != 5 {
		t.Errorf("scan-mixed vbcache: %+v", v)
	}
	ts := res.Targets()
	if len(ts) != 1 || !ts[0].Met {
		t.Errorf("targets %+v", ts)
	}
	var md strings.Builder
	if err := res.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"| zipf-0.8: Zipf α 0.8 | memcached | 1000 | 500 | 0.5000 |  | 500 | 1000 | 5 | 1.0 |",
		"| zipf-0.8 | *vbcache / memcached* | | | **1.200** |", "| scan-mixed | *vbcache / memcached* | | | **1.200** | 1.199 | | 1.000 | 1.000 | |",
		"`-m 16`", "1000000 keys", "met (vbcache/memcached: zipf-0.8 0.6000/0.5000",
		"Command: `vbcache bench hitratio --test`"} {
		if !strings.Contains(md.String(), s) {
			t.Errorf("markdown lacks %q:\n%s", s, md.String())
		}
	}
	dir := t.TempDir()
	if err := res.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back HitRatioResult
	if err := json.Unmarshal(b, &back); err != nil || len(back.Runs) != 8 || back.Runs[7].ZipfHits != 301 || back.MemoryMB != 16 {
		t.Errorf("results.json read back: %v, %+v", err, back.Runs)
	}

	// vbcache below memcached on one workload: not met.
	f = &fakeHitWorld{share: map[string]float64{KindMemcached: 0.5, KindVbcache: 0.4}}
	c.Workloads = []string{"zipf-1.2"}
	res, err = hitRatio(context.Background(), &c, f.env(), HitRatioInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if ts := res.Targets(); len(ts) != 1 || ts[0].Met {
		t.Errorf("vbcache at 0.4 against 0.5: targets %+v", ts)
	}

	// Two servers asked different gets: the harness says so and stops.
	f = &fakeHitWorld{share: map[string]float64{KindMemcached: 0.5, KindVbcache: 0.5}, digest: map[string]string{KindVbcache: "d2"}}
	if _, err := hitRatio(context.Background(), &c, f.env(), HitRatioInfo{}); err == nil || !strings.Contains(err.Error(), "not the same sequence") {
		t.Errorf("different digests: %v", err)
	}
	if f.stopped != 2 {
		t.Errorf("after a failure %d servers stopped, want 2", f.stopped)
	}
}

func TestHitRatioValidate(t *testing.T) {
	for _, c := range []HitRatioConfig{
		{Workloads: []string{"zipf-9"}},
		{Keys: 1},
		{Batch: -1},
		{ScanLength: 10, ScanEvery: 10},
		{DataSizeMin: 5, DataSizeMax: 2},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: valid", c)
		}
	}
	if err := (&HitRatioConfig{}).Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	if got := strings.Join(HitWorkloadNames(), ","); got != "zipf-0.8,zipf-1.0,zipf-1.2,scan-mixed" {
		t.Errorf("workloads %s", got)
	}
}

// TestHitRatioAgainstMemcached runs the harness, small, against the real
// memcached and a vbcache node built from this module, both at -m 4
// (about 22,000 items fit) under 100,000 keys: every figure is in range,
// both servers were asked the same gets, each evicted, and each read its
// last value back.
func TestHitRatioAgainstMemcached(t *testing.T) {
	if _, err := exec.LookPath("memcached"); err != nil {
		nodeproc.Absent(t, "memcached not found in PATH (the reference)")
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		nodeproc.Absent(t, "taskset not found in PATH (util-linux)")
	}
	bin, err := nodeproc.BuildVbcache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	out := t.TempDir()
	cfg := HitRatioConfig{Vbcache: bin, MemoryMB: 4, Keys: 100_000, Warmup: 30_000, Requests: 30_000,
		Workloads: []string{"zipf-0.8", "scan-mixed"}, ScanLength: 30_000, ScanEvery: 40_000,
		ServerCPU: "0", LoadCPU: formatCPUList(onlineCPUs()), NoRealTime: true, OutDir: out, Log: &log}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := HitRatio(ctx, cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if len(res.Runs) != 4 {
		t.Fatalf("%d runs", len(res.Runs))
	}
	for _, w := range cfg.Workloads {
		m, v := res.run(w, KindMemcached), res.run(w, KindVbcache)
		for _, h := range []*HitRun{m, v} {
			if h == nil {
				t.Fatalf("%s: a server's run is missing", w)
			}
			if h.Requests != 30_000 || h.WarmupRequests != 30_000 {
				t.Errorf("%s %s: %d counted gets after %d, want 30000 after 30000", w, h.Server, h.Requests, h.WarmupRequests)
			}
			if !(h.HitRatio > 0 && h.HitRatio < 1) || h.Sets != h.Requests-h.Hits || h.RefusedSets != 0 {
				t.Errorf("%s %s: hit ratio %.4f, %d sets for %d misses, %d refused", w, h.Server, h.HitRatio, h.Sets, h.Requests-h.Hits, h.RefusedSets)
			}
			if h.Evictions == 0 || h.CurrItems == 0 || h.CurrItems >= cfg.Keys/2 {
				t.Errorf("%s %s: %d items, %d evictions: the key space fitted", w, h.Server, h.CurrItems, h.Evictions)
			}
			if !strings.HasSuffix(h.ReadBack, "identical") {
				t.Errorf("%s %s: read back %q", w, h.Server, h.ReadBack)
			}
		}
		if m.KeysDigest != v.KeysDigest {
			t.Errorf("%s: the servers were asked different gets (%s, %s)", w, m.KeysDigest, v.KeysDigest)
		}
		if w == "scan-mixed" && (m.ZipfRequests == 0 || m.ZipfRequests != v.ZipfRequests) {
			t.Errorf("scan-mixed: Zipf parts of %d and %d gets", m.ZipfRequests, v.ZipfRequests)
		}
	}
	if !strings.Contains(res.Info.ServerCmds[KindMemcached], "-m 4 ") || !strings.Contains(res.Info.ServerCmds[KindVbcache], "-m 4 ") {
		t.Errorf("server commands %v: not both at -m 4", res.Info.ServerCmds)
	}
	for _, f := range []string{"results.md", "results.json"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	t.Logf("\n%s", log.String())
}

// TestNoTestBinaryAsVbcache: a harness left to use "this executable" as
// vbcache refuses when that is a test binary (this one), before it starts
// anything: such a binary, started as a server, would run its tests again.
func TestNoTestBinaryAsVbcache(t *testing.T) {
	_, err := newRealEnv(context.Background(), realConfig{loadCPU: "0"})
	if err == nil || !strings.Contains(err.Error(), "is a test binary") {
		t.Errorf("newRealEnv with this test binary as vbcache: %v", err)
	}
}
