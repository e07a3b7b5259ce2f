package bench

// The proxies harness's report: the verdicts on the criteria, the
// markdown and the files.

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
)

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
	for _, w := range r.workloads {
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
	writeProvenance(&b, in.LoadAvg, r.ElapsedSec, r.Command)
	b.WriteString("| workload | path | ops/s | p50 µs | p99 µs | p99.9 µs | added p99 µs (min–max) | proxy CPU µs/op (min–max) | memcached CPU µs/op | ops/s spread % | other CPU % | errors |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, wl := range r.workloads {
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
	for _, wl := range r.workloads {
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

// noiseNote says how noisy the run was, from the spread of the rounds and
// the other processes' use of the two cores.
func (r *ProxiesResult) noiseNote() string {
	var worstSpread float64
	var errs uint64
	for _, s := range r.Summaries {
		worstSpread = math.Max(worstSpread, s.OpsSpread)
		errs += s.Errors
	}
	n := noiseOf(r.Samples, ProxySample.figures)
	if n.runs == 0 {
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
		worstSpread, n.meanOther, n.worstOther, n.steal, errs)
	if !math.IsInf(least, 1) {
		note += fmt.Sprintf(" /proc CPU times tick every 10 ms: at most %.1f%% of the smallest proxy CPU time of a run (%.2f s).",
			100*0.01/least, least)
	}
	return note + "\n"
}
