package bench

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// WriteFiles writes results.md, results.svg and results.json into dir.
func (r *CompareResult) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var md, svg strings.Builder
	if err := r.WriteMarkdown(&md); err != nil {
		return err
	}
	r.WriteSVG(&svg)
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"results.md":   []byte(md.String()),
		"results.svg":  []byte(svg.String()),
		"results.json": append(js, '\n'),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func ratio(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

// WriteMarkdown writes the results as markdown: the table, the targets and
// the memory test.
func (r *CompareResult) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	in := r.Info
	fmt.Fprintf(&b, "# vbcache vs memcached\n\n")
	fmt.Fprintf(&b, "Run %s on %s (%s, kernel %s), %s; %s. ", in.Date, in.Host, in.CPU, in.Kernel, in.Memcached, in.GoVersion)
	if in.ServerThreads > 0 {
		fmt.Fprintf(&b, "Scaling run (--threads %d): servers on CPU %s with %s each (memcached -t %d, vbcache -t %d and GOMAXPROCS=%d), "+
			"load on CPU %s with %s; real-time scheduling: %s. ", in.ServerThreads, in.ServerCPU, threadsWord(in.ServerThreads),
			in.ServerThreads, in.ServerThreads, in.ServerThreads, in.LoadCPU, threadsWord(in.LoadThreads), in.RTNote)
	} else {
		fmt.Fprintf(&b, "Servers on CPU %s, load on CPU %s; real-time scheduling: %s. ", in.ServerCPU, in.LoadCPU, in.RTNote)
	}
	order := strings.Join(r.servers(), ", ")
	fmt.Fprintf(&b, "%d rounds of %s per server and workload, interleaved %s, %s…; figures are medians over the rounds. ", r.Rounds, r.RunDuration, order, order)
	writeProvenance(&b, in.LoadAvg, r.ElapsedSec, r.Command)
	b.WriteString("| workload | server | ops/s | p50 µs | p99 µs | p99.9 µs | server CPU µs/op | ops per server CPU-s | spread % | other CPU % | errors |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, wl := range r.workloads {
		for _, k := range r.servers() {
			s := r.summary(wl.Name, k)
			if s == nil {
				continue
			}
			fmt.Fprintf(&b, "| %s: %s | %s | %.0f | %.1f | %.1f | %.1f | %.2f | %.0f | %.1f | %.1f | %d |\n",
				wl.Name, wl.Title, k, s.OpsPerSec, s.P50, s.P99, s.P999, s.CPUPerOpUs, s.OpsPerCPUSec, s.Spread, s.OtherCPU, s.Errors)
		}
		m, v := r.summary(wl.Name, KindMemcached), r.summary(wl.Name, KindVbcache)
		if m != nil && v != nil {
			fmt.Fprintf(&b, "| %s | *vbcache / memcached* | %s | %s | %s | %s | %s | **%s** | | | |\n",
				wl.Name, ratio(v.OpsPerSec, m.OpsPerSec), ratio(v.P50, m.P50), ratio(v.P99, m.P99), ratio(v.P999, m.P999),
				ratio(v.CPUPerOpUs, m.CPUPerOpUs), ratio(v.OpsPerCPUSec, m.OpsPerCPUSec))
		}
		if mv := r.summary(wl.Name, KindVbcacheMetrics); mv != nil && v != nil {
			fmt.Fprintf(&b, "| %s | *vbcache+metrics / vbcache* | %s | %s | %s | %s | %s | **%s** | | | |\n",
				wl.Name, ratio(mv.OpsPerSec, v.OpsPerSec), ratio(mv.P50, v.P50), ratio(mv.P99, v.P99), ratio(mv.P999, v.P999),
				ratio(mv.CPUPerOpUs, v.CPUPerOpUs), ratio(mv.OpsPerCPUSec, v.OpsPerCPUSec))
		}
	}
	b.WriteString("\n*spread*: (max − min) / median of ops per server CPU-second over the rounds. ")
	b.WriteString("*other CPU*: share of the measured cores' time (the servers' and the load's), during a run, used by neither the server nor the load generator (other processes, interrupts); the noise figure.\n\n")

	if len(r.Memory) > 0 {
		b.WriteString("## Memory\n\n| server | items | idle RSS | loaded RSS | bytes per item |\n|---|--:|--:|--:|--:|\n")
		for _, m := range r.Memory {
			fmt.Fprintf(&b, "| %s | %d | %.1f MiB | %.1f MiB | %.1f |\n", m.Server, m.Items,
				float64(m.IdleRSS)/(1<<20), float64(m.LoadedRSS)/(1<<20), m.BytesPerItem)
		}
		b.WriteString("\n")
	}

	b.WriteString("## Targets\n\n")
	for _, t := range r.Targets() {
		fmt.Fprintf(&b, "- %s: %s\n", t.Name, t.Detail)
	}
	b.WriteString("\n## Noise\n\n")
	b.WriteString(r.noiseNote())
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// threadsWord is "1 thread", "4 threads".
func threadsWord(n int) string {
	if n == 1 {
		return "1 thread"
	}
	return fmt.Sprintf("%d threads", n)
}

// Target is one of the performance targets and whether the run met
// it.
type Target struct {
	Name   string
	Met    bool
	Detail string
}

// Targets checks the targets against the medians.
func (r *CompareResult) Targets() []Target {
	var ts []Target
	var cpuParts, p99Parts []string
	cpuOK, p99OK, any := true, true, false
	for _, wl := range r.workloads {
		m, v := r.summary(wl.Name, KindMemcached), r.summary(wl.Name, KindVbcache)
		if m == nil || v == nil {
			continue
		}
		any = true
		ok := v.OpsPerCPUSec >= m.OpsPerCPUSec
		cpuOK = cpuOK && ok
		part := fmt.Sprintf("%s %s", wl.Name, ratio(v.OpsPerCPUSec, m.OpsPerCPUSec))
		if lo, hi, n := r.pairedRange(wl.Name); n > 1 {
			part += fmt.Sprintf(" [rounds %.2f–%.2f]", lo, hi)
		}
		cpuParts = append(cpuParts, part)
		ok = v.P99 <= m.P99
		p99OK = p99OK && ok
		p99Parts = append(p99Parts, fmt.Sprintf("%s %.0f/%.0f µs", wl.Name, v.P99, m.P99))
	}
	if any {
		ts = append(ts,
			Target{"ops per server CPU-second ≥ memcached's on every workload", cpuOK,
				verdict(cpuOK) + " (vbcache/memcached, medians [and the ratio within each round, " +
					"whose two runs are adjacent in time]: " + strings.Join(cpuParts, ", ") + ")"},
			Target{"p99 no higher than memcached's", p99OK,
				verdict(p99OK) + " (vbcache/memcached: " + strings.Join(p99Parts, ", ") + ")"})
	}
	if m, v := r.summary("b", KindMemcached), r.summary("b", KindVbcache); m != nil && v != nil {
		ok := v.P999 <= 2*m.P999
		ts = append(ts, Target{"pipelined p99.9 within 2× memcached's", ok,
			fmt.Sprintf("%s (workload b: %.0f µs vs %.0f µs, ×%s)", verdict(ok), v.P999, m.P999, ratio(v.P999, m.P999))})
	}
	if m, v := r.memory(KindMemcached), r.memory(KindVbcache); m != nil && v != nil {
		ok := v.BytesPerItem <= m.BytesPerItem
		ts = append(ts, Target{"resident memory per 100-byte item ≤ memcached's", ok,
			fmt.Sprintf("%s (%.1f vs %.1f bytes per item)", verdict(ok), v.BytesPerItem, m.BytesPerItem)})
	}
	return ts
}

// pairedRange returns the smallest and largest ratio, vbcache over
// memcached, of ops per server CPU-second within one round of workload wl
// (the two runs of a round are adjacent in time, so slow drifts of the
// machine cancel), and how many rounds had both.
func (r *CompareResult) pairedRange(wl string) (lo, hi float64, n int) {
	mc := map[int]float64{}
	for _, s := range r.Samples {
		if s.Workload == wl && s.Server == KindMemcached && s.OpsPerCPUSec > 0 {
			mc[s.Round] = s.OpsPerCPUSec
		}
	}
	for _, s := range r.Samples {
		m, ok := mc[s.Round]
		if s.Workload != wl || s.Server != KindVbcache || !ok {
			continue
		}
		q := s.OpsPerCPUSec / m
		if n == 0 || q < lo {
			lo = q
		}
		if n == 0 || q > hi {
			hi = q
		}
		n++
	}
	return lo, hi, n
}

// noiseNote says how noisy the run was, from the spread of the rounds and
// the other processes' use of the measured cores.
func (r *CompareResult) noiseNote() string {
	var worstSpread float64
	for _, s := range r.Summaries {
		worstSpread = math.Max(worstSpread, s.Spread)
	}
	n := noiseOf(r.Samples, Sample.figures)
	if n.runs == 0 {
		return "No runs.\n"
	}
	level := "quiet"
	switch {
	case worstSpread > 15 || n.meanOther > 10:
		level = "noisy: treat differences below the spread as noise"
	case worstSpread > 5 || n.meanOther > 3:
		level = "somewhat noisy"
	}
	return fmt.Sprintf("The run was %s. Largest spread of ops per server CPU-second across rounds: %.1f%%. "+
		"Other CPU on the measured cores: mean %.1f%%, worst run %.1f%%. Worst steal time: %.1f%%.\n",
		level, worstSpread, n.meanOther, n.worstOther, n.steal)
}

// WriteSVG writes a grouped bar chart of ops per server CPU-second per
// workload, one colour per server.
func (r *CompareResult) WriteSVG(w io.Writer) {
	const (
		width, height = 760, 420
		left, right   = 90, 20
		top, bottom   = 50, 90
	)
	colors := map[string]string{KindMemcached: "#4878a8", KindVbcache: "#e08a2c", KindVbcacheMetrics: "#6a9f58"}
	var top1 float64
	for _, s := range r.Summaries {
		top1 = math.Max(top1, s.OpsPerCPUSec)
	}
	step := niceStep(top1 / 5)
	ymax := math.Max(step, math.Ceil(top1/step)*step)
	plotW, plotH := float64(width-left-right), float64(height-top-bottom)
	y := func(v float64) float64 { return float64(top) + plotH*(1-v/ymax) }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="24" text-anchor="middle" font-size="15">Ops per server CPU-second (median of %d rounds; higher is better)</text>`+"\n", width/2, r.Rounds)
	for v := 0.0; v <= ymax+step/2; v += step {
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, width-right, y(v), y(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", left-6, y(v), humanCount(v))
	}
	fmt.Fprintf(&b, `<text transform="translate(18 %.1f) rotate(-90)" text-anchor="middle">ops per server CPU-second</text>`+"\n", float64(top)+plotH/2)
	nw := len(r.workloads)
	if nw > 0 {
		group := plotW / float64(nw)
		bar := group * 0.8 / float64(len(r.servers()))
		for i, wl := range r.workloads {
			x0 := float64(left) + group*float64(i) + group*0.1
			for j, k := range r.servers() {
				s := r.summary(wl.Name, k)
				if s == nil {
					continue
				}
				x := x0 + bar*float64(j)
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %.0f</title></rect>`+"\n",
					x, y(s.OpsPerCPUSec), bar-2, float64(top)+plotH-y(s.OpsPerCPUSec), colors[k], wl.Name, k, s.OpsPerCPUSec)
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10">%s</text>`+"\n",
					x+bar/2-1, y(s.OpsPerCPUSec)-4, humanCount(s.OpsPerCPUSec))
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-weight="bold">%s</text>`+"\n", x0+group*0.4, float64(top)+plotH+16, wl.Name)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="9">%s</text>`+"\n", x0+group*0.4, float64(top)+plotH+30, html.EscapeString(shortTitle(wl.Title)))
		}
	}
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="black"/>`+"\n", left, width-right, float64(top)+plotH, float64(top)+plotH)
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%.1f" stroke="black"/>`+"\n", left, left, top, float64(top)+plotH)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">workload</text>`+"\n", float64(left)+plotW/2, height-36)
	for j, k := range r.servers() {
		x := left + 200*j + (width-left-400)/2
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="14" height="14" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", x, height-22, colors[k], x+20, height-10, k)
	}
	b.WriteString("</svg>\n")
	io.WriteString(w, b.String())
}

func shortTitle(t string) string {
	if len(t) > 26 {
		return t[:25] + "…"
	}
	return t
}

// niceStep rounds v up to 1, 2 or 5 times a power of ten.
func niceStep(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func humanCount(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.0fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}
