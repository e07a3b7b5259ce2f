package bench

// The hit-ratio harness: at equal -m, how much of the same request
// sequence each server answers from its cache.
//
//	for each workload (zipf-0.8, zipf-1.0, zipf-1.2, scan-mixed):
//	    start memcached and vbcache, fresh, with the same flags
//	        (-t 1 -m MemoryMB -U 0 -c 4096, pinned to ServerCPU)
//	    for each server in turn (memcached, vbcache): the cache-aside
//	        driver (cacheaside.go) sends Warmup gets, then Requests gets
//	        that are counted, each miss followed by a set of the key, the
//	        same gets to both (same seed)
//	    read each server's stats (curr_items, evictions, bytes); stop both
//
// Requests, not durations, decide the phases, and every phase ends by
// itself. The driver runs in this process, which the real environment pins
// to LoadCPU (env.go); the figures are counts, not times, so no CPU is
// accounted. One thing is not a function of the requests alone:
// memcached's LRU maintainer is a thread that runs on its own schedule
// (vbcache moves items between its LRU segments inline), so memcached's
// figures can move a little with the machine's speed.
//
// The decisions (the workloads, the order, the arithmetic, the verdict,
// the report) are pure functions over the runs, tested with a fake env;
// sockets and processes are touched only by the env (env.go, cacheaside.go).

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Hit-ratio defaults.
const (
	// DefaultHitMemoryMB is both servers' -m: 16 MiB holds about 87,000
	// items of 100-byte values (memcached's 192-byte chunks), under a
	// tenth of the default key space. At -m 64 (about 350,000 items)
	// Zipf α 1.2 over the default keys asks for only 203,826 distinct
	// keys in 4 million gets, so nothing is ever evicted and both servers
	// show the same first-time misses, whatever their eviction.
	DefaultHitMemoryMB = 16
	// DefaultHitKeys is the size of the key space.
	DefaultHitKeys = 1_000_000
	// DefaultHitWarmup is the number of gets before the counted ones: two
	// cycles of the scan-mixed workload at the default key space.
	DefaultHitWarmup = 2_000_000
	// DefaultHitRequests is the number of counted gets.
	DefaultHitRequests = 2_000_000
)

// HitRatioConfig configures HitRatio. Zero values mean the defaults.
type HitRatioConfig struct {
	// Vbcache is the vbcache binary of the node; "" means this
	// executable. Memcached is the memcached binary; "" means memcached
	// from PATH.
	Vbcache, Memcached string
	// MemoryMB is both servers' -m in MiB. Zero means DefaultHitMemoryMB
	// (16).
	MemoryMB int
	// Keys is the number of keys, "key:000000" up (as many digits as the
	// largest needs). Zero means DefaultHitKeys (1,000,000).
	Keys uint64
	// Warmup is the number of gets (and their sets) before counting
	// starts; zero means DefaultHitWarmup. Requests is the number of
	// counted gets; zero means DefaultHitRequests.
	Warmup, Requests uint64
	// DataSize is the value size in bytes; zero means 100. DataSizeMin
	// and DataSizeMax, when DataSizeMax > 0, spread sizes over that range
	// by a hash of the key instead.
	DataSize, DataSizeMin, DataSizeMax int
	// ScanLength and ScanEvery shape the scan-mixed workload (Config's
	// fields of the same names, with their defaults: scans of a quarter
	// of the keys, a quarter of the gets). At the harness's defaults a
	// cycle is 750,000 Zipf gets then a scan of 250,000 keys (about three
	// times what the cache holds), and the warm-up and the counted phase
	// are two cycles each.
	ScanLength, ScanEvery uint64
	// Batch is the number of gets the driver pipelines together; zero
	// means DefaultHitBatch (64).
	Batch int
	// Seed seeds the Zipf draws; zero means 1.
	Seed uint64
	// Workloads to run, by name; empty means all (HitWorkloadNames).
	Workloads []string
	// ServerCPU is the taskset CPU list of the servers; empty means "0".
	// LoadCPU is that of the harness and its driver; empty means "1".
	ServerCPU, LoadCPU string
	// NoRealTime disables chrt -f for the servers even when permitted;
	// RTPriority is their SCHED_FIFO priority (zero means 50).
	NoRealTime bool
	RTPriority int
	// OutDir, when set, receives results.md and results.json.
	OutDir string
	// Log receives one line per step; nil discards them.
	Log io.Writer
	// Command is the command line recorded in the results.
	Command string
}

func (c HitRatioConfig) withDefaults() HitRatioConfig {
	c.MemoryMB = cmp.Or(c.MemoryMB, DefaultHitMemoryMB)
	c.Keys = cmp.Or(c.Keys, DefaultHitKeys)
	c.Warmup = cmp.Or(c.Warmup, DefaultHitWarmup)
	c.Requests = cmp.Or(c.Requests, DefaultHitRequests)
	if c.DataSizeMax == 0 {
		c.DataSize = cmp.Or(c.DataSize, DefaultDataSize)
	}
	c.Batch = cmp.Or(c.Batch, DefaultHitBatch)
	c.Seed = cmp.Or(c.Seed, 1)
	if len(c.Workloads) == 0 {
		c.Workloads = workloadNames(c.workloadList())
	}
	c.ServerCPU = cmp.Or(c.ServerCPU, "0")
	c.LoadCPU = cmp.Or(c.LoadCPU, "1")
	c.RTPriority = cmp.Or(c.RTPriority, 50)
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

// Validate reports an unusable configuration.
func (c *HitRatioConfig) Validate() error {
	d := c.withDefaults()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case d.MemoryMB < 1:
		return bad("-m must be at least 1 MiB")
	case d.Keys < 2:
		return bad("at least two keys")
	case d.Batch < 1:
		return bad("batch must be at least 1")
	}
	for _, name := range d.Workloads {
		w, ok := findWorkload(d.workloadList(), name)
		if !ok {
			return bad("unknown workload %q (have %s)", name, strings.Join(HitWorkloadNames(), ","))
		}
		lc := w.Load
		lc.Servers = []string{"127.0.0.1:1"}
		if err := lc.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// workloadList is the list: Zipf with α 0.8, 1.0 and 1.2, and
// Zipf (α 1.0) with periodic scans, over Keys keys of c's values.
func (c *HitRatioConfig) workloadList() []Workload {
	base := Config{KeyPrefix: DefaultPrefix, KeyMax: c.Keys - 1, DataSize: c.DataSize,
		DataSizeMin: c.DataSizeMin, DataSizeMax: c.DataSizeMax, Seed: c.Seed}
	zipf := func(alpha float64) Workload {
		l := base
		l.Pattern, l.ZipfAlpha = Zipf, alpha
		name := "zipf-" + strconv.FormatFloat(alpha, 'f', 1, 64)
		return Workload{Name: name, Title: "Zipf α " + strconv.FormatFloat(alpha, 'f', 1, 64), Load: l}
	}
	scan := base
	scan.Pattern, scan.ZipfAlpha, scan.ScanLength, scan.ScanEvery = Scan, 1.0, c.ScanLength, c.ScanEvery
	sd := scan.withDefaults()
	return []Workload{zipf(0.8), zipf(1.0), zipf(1.2),
		{Name: "scan-mixed", Title: fmt.Sprintf("Zipf α 1.0, a scan of %d keys ending every %d gets", sd.ScanLength, sd.ScanEvery), Load: scan}}
}

// HitWorkloadNames returns the names of the workloads HitRatio knows.
func HitWorkloadNames() []string { return HitRatioConfig{}.withDefaults().Workloads }

// HitRatio runs the hit-ratio comparison on this machine (see the file
// comment).
func HitRatio(ctx context.Context, cfg HitRatioConfig) (*HitRatioResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	res, err := inRealEnv(ctx, &c, newHitRatioEnv, hitRatio)
	if err != nil || c.OutDir == "" {
		return res, err
	}
	if err := res.WriteFiles(c.OutDir); err != nil {
		return res, err
	}
	fmt.Fprintf(c.Log, "wrote %s/results.{md,json}\n", c.OutDir)
	return res, nil
}

// hitRatio is HitRatio's logic over an env that info describes. c has its
// defaults applied.
func hitRatio(ctx context.Context, c *HitRatioConfig, e *env, info HitRatioInfo) (*HitRatioResult, error) {
	began := e.now()
	res := &HitRatioResult{Command: c.Command, Info: info, MemoryMB: c.MemoryMB, Keys: c.Keys,
		Warmup: c.Warmup, Requests: c.Requests, Batch: c.Batch, Seed: c.Seed,
		WorkloadTitles: map[string]string{}}
	res.DataSize = strconv.Itoa(c.DataSize)
	if c.DataSizeMax > 0 {
		res.DataSize = fmt.Sprintf("%d-%d", c.DataSizeMin, c.DataSizeMax)
	}
	r := newRunner(e)
	for _, name := range c.Workloads {
		w, _ := findWorkload(c.workloadList(), name)
		res.workloads = append(res.workloads, w)
		res.WorkloadTitles[w.Name] = w.Title
		if err := res.runWorkload(ctx, c, r, w); err != nil {
			return res, fmt.Errorf("workload %s: %w", w.Name, err)
		}
	}
	res.ElapsedSec = e.now().Sub(began).Seconds()
	return res, nil
}

// runWorkload starts both servers fresh, drives each with w's requests in
// turn, reads their stats and stops them, adding a run per server to res.
func (res *HitRatioResult) runWorkload(ctx context.Context, c *HitRatioConfig, r *runner, w Workload) (err error) {
	defer func() {
		if serr := r.stopAll(); serr != nil && err == nil {
			err = serr
		}
	}()
	procs := map[string]*serverProc{}
	for _, k := range kinds {
		ps, err := r.start(ctx, procSpec{kind: k, cpus: c.ServerCPU})
		if err != nil {
			return err
		}
		procs[k] = ps[0]
	}
	plan := asidePlan{load: w.Load, warmup: c.Warmup, counted: c.Requests, batch: c.Batch}
	var first *HitRun
	for _, k := range kinds {
		p := procs[k]
		t0 := r.e.now()
		hc, err := r.e.cacheAside(ctx, p.Addr, plan)
		if err != nil {
			return fmt.Errorf("%s: %w", k, err)
		}
		st, err := r.e.stats(ctx, p)
		if err != nil {
			return fmt.Errorf("%s: stats: %w", k, err)
		}
		run := HitRun{Workload: w.Name, Server: k, hitCounts: hc, ElapsedSec: r.e.now().Sub(t0).Seconds()}
		if run.Requests > 0 {
			run.HitRatio = float64(run.Hits) / float64(run.Requests)
		}
		if run.ZipfRequests > 0 {
			run.ZipfHitRatio = float64(run.ZipfHits) / float64(run.ZipfRequests)
		}
		for name, dst := range map[string]*uint64{"curr_items": &run.CurrItems, "evictions": &run.Evictions, "bytes": &run.Bytes} {
			if *dst, err = strconv.ParseUint(st[name], 10, 64); err != nil {
				return fmt.Errorf("%s: stats %s %q: %w", k, name, st[name], err)
			}
		}
		if first != nil && (first.Requests != run.Requests || first.KeysDigest != run.KeysDigest) {
			return fmt.Errorf("%s was asked %d gets (digest %s), %s %d (digest %s): not the same sequence",
				first.Server, first.Requests, first.KeysDigest, k, run.Requests, run.KeysDigest)
		}
		res.Runs = append(res.Runs, run)
		first = &res.Runs[len(res.Runs)-1]
		fmt.Fprintf(c.Log, "workload %s %-9s %d gets: %d hits, hit ratio %.4f%s; %d sets (%d refused); curr_items %d, evictions %d; %.1fs\n",
			w.Name, k, run.Requests, run.Hits, run.HitRatio, run.zipfNote(), run.Sets, run.RefusedSets, run.CurrItems, run.Evictions, run.ElapsedSec)
	}
	return nil
}

// zipfNote is the Zipf part's hit ratio of a scan-mixed run for the log,
// or "".
func (h *HitRun) zipfNote() string {
	if h.ZipfRequests == 0 {
		return ""
	}
	return fmt.Sprintf(" (Zipf part %.4f)", h.ZipfHitRatio)
}

// HitRun is one server's run of one workload.
type HitRun struct {
	Workload string `json:"workload"`
	Server   string `json:"server"`
	hitCounts
	HitRatio     float64 `json:"hit_ratio"`                // Hits / Requests
	ZipfHitRatio float64 `json:"zipf_hit_ratio,omitempty"` // ZipfHits / ZipfRequests
	// From the server's stats at the end.
	CurrItems  uint64  `json:"curr_items"`
	Evictions  uint64  `json:"evictions"`
	Bytes      uint64  `json:"bytes"`
	ElapsedSec float64 `json:"elapsed_s"`
}

// HitRatioInfo describes the machine and the servers of a hit-ratio run.
type HitRatioInfo struct {
	machine
	RTNote     string            `json:"real_time_note"`
	ServerCPU  string            `json:"server_cpu"`
	LoadCPU    string            `json:"load_cpu"` // the harness's, which runs the driver
	LoadAvg    string            `json:"loadavg_at_start"`
	ServerCmds map[string]string `json:"server_commands"`
}

// HitRatioResult is everything one HitRatio produced.
type HitRatioResult struct {
	Command        string            `json:"command"`
	Info           HitRatioInfo      `json:"info"`
	MemoryMB       int               `json:"memory_mb"`
	Keys           uint64            `json:"keys"`
	Warmup         uint64            `json:"warmup_gets"`
	Requests       uint64            `json:"counted_gets"`
	DataSize       string            `json:"data_size"` // bytes, "n" or "min-max"
	Batch          int               `json:"batch"`
	Seed           uint64            `json:"seed"`
	workloads      []Workload        // the report's rows, in order (WorkloadTitles is their JSON)
	WorkloadTitles map[string]string `json:"workloads"`
	Runs           []HitRun          `json:"runs"`
	ElapsedSec     float64           `json:"elapsed_s"`
}

// run returns the run of workload w on server k, or nil.
func (r *HitRatioResult) run(w, k string) *HitRun {
	return find(r.Runs, func(h HitRun) (string, string) { return h.Workload, h.Server }, w, k)
}

// Targets checks the target against the runs: vbcache's hit ratio
// at least memcached's on every workload.
func (r *HitRatioResult) Targets() []Target {
	var parts []string
	ok, any := true, false
	for _, w := range r.workloads {
		m, v := r.run(w.Name, KindMemcached), r.run(w.Name, KindVbcache)
		if m == nil || v == nil {
			continue
		}
		any = true
		ok = ok && v.HitRatio >= m.HitRatio
		parts = append(parts, fmt.Sprintf("%s %.4f/%.4f", w.Name, v.HitRatio, m.HitRatio))
	}
	if !any {
		return nil
	}
	return []Target{{Name: "hit ratio at equal -m ≥ memcached's on every workload", Met: ok,
		Detail: verdict(ok) + " (vbcache/memcached: " + strings.Join(parts, ", ") + ")"}}
}

// WriteMarkdown writes the report: how it was run, the table, the target.
func (r *HitRatioResult) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	in := r.Info
	b.WriteString("# Hit ratio at equal -m: vbcache vs memcached\n\n")
	fmt.Fprintf(&b, "Run %s on %s (%s, kernel %s), %s; %s. ", in.Date, in.Host, in.CPU, in.Kernel, in.Memcached, in.GoVersion)
	fmt.Fprintf(&b, "Both servers fresh for each workload, `-m %d` and the same flags, on CPU %s; the cache-aside driver "+
		"on CPU %s; real-time scheduling: %s. ", r.MemoryMB, in.ServerCPU, in.LoadCPU, in.RTNote)
	fmt.Fprintf(&b, "%d keys, %s-byte values; per server %d gets of warm-up, then %d counted gets, the same sequence to both "+
		"(seed %d), each miss followed by a set of its key; gets pipelined %d at a time. ",
		r.Keys, r.DataSize, r.Warmup, r.Requests, r.Seed, r.Batch)
	writeProvenance(&b, in.LoadAvg, r.ElapsedSec, r.Command)
	b.WriteString("| workload | server | gets | hits | hit ratio | Zipf part | sets | curr_items | evictions | MiB in items |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, wl := range r.workloads {
		for _, k := range kinds {
			h := r.run(wl.Name, k)
			if h == nil {
				continue
			}
			zipfPart := ""
			if h.ZipfRequests > 0 {
				zipfPart = fmt.Sprintf("%.4f", h.ZipfHitRatio)
			}
			fmt.Fprintf(&b, "| %s: %s | %s | %d | %d | %.4f | %s | %d | %d | %d | %.1f |\n", wl.Name, wl.Title, k,
				h.Requests, h.Hits, h.HitRatio, zipfPart, h.Sets, h.CurrItems, h.Evictions, float64(h.Bytes)/(1<<20))
		}
		m, v := r.run(wl.Name, KindMemcached), r.run(wl.Name, KindVbcache)
		if m != nil && v != nil {
			zipfPart := ""
			if m.ZipfRequests > 0 {
				zipfPart = ratio3(v.ZipfHitRatio, m.ZipfHitRatio)
			}
			fmt.Fprintf(&b, "| %s | *vbcache / memcached* | | | **%s** | %s | | %s | %s | |\n", wl.Name,
				ratio3(v.HitRatio, m.HitRatio), zipfPart, ratio3(float64(v.CurrItems), float64(m.CurrItems)),
				ratio3(float64(v.Evictions), float64(m.Evictions)))
		}
	}
	b.WriteString("\n*hit ratio*: hits / counted gets. *Zipf part*: the same over the gets drawn from the Zipf " +
		"distribution, leaving out the scans'. *curr_items*, *evictions* (over both phases) and *MiB in items* (`bytes`) " +
		"from `stats` at the end.\n\n")
	b.WriteString("## Target\n\n")
	for _, t := range r.Targets() {
		fmt.Fprintf(&b, "- %s: %s\n", t.Name, t.Detail)
	}
	if note := r.scanNote(); note != "" {
		b.WriteString("\n" + note)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// scanNote warns when the scan-mixed workload's scans were not longer than
// the cache held items (curr_items), the condition under which a scan
// flushes a plain LRU; "" when they were or there was no such run.
func (r *HitRatioResult) scanNote() string {
	for _, wl := range r.workloads {
		if wl.Load.Pattern != Scan {
			continue
		}
		scan := wl.Load.withDefaults().ScanLength
		for _, k := range kinds {
			if h := r.run(wl.Name, k); h != nil && h.CurrItems >= scan {
				return fmt.Sprintf("Note: %s held %d items, at least a scan's %d keys: a scan did not flush a plain LRU in this run.\n",
					k, h.CurrItems, scan)
			}
		}
	}
	return ""
}

// ratio3 is a/b with three decimals, "–" when b is 0: hit ratios differ
// in the third.
func ratio3(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.3f", a/b)
}

// WriteFiles writes results.md and results.json into dir.
func (r *HitRatioResult) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var md strings.Builder
	if err := r.WriteMarkdown(&md); err != nil {
		return err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return errors.Join(os.WriteFile(filepath.Join(dir, "results.md"), []byte(md.String()), 0o644),
		os.WriteFile(filepath.Join(dir, "results.json"), append(js, '\n'), 0o644))
}
