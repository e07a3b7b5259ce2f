package bench

// What the two harnesses' summaries and reports share: the figures every
// sample has, the medians over the rounds that open every summary and the
// checks that close it, the noise of a whole run, and the line that says
// where a report's figures come from.

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// figures are what every sample has, whatever the harness.
type figures struct {
	ops, p50, p99, p999  float64
	other, steal         float64 // percent
	errors, hits, misses uint64
}

// summaryFigures open every summary: the medians of one workload on one
// target over the rounds.
type summaryFigures struct {
	Rounds    int     `json:"rounds"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P50       float64 `json:"p50_us"`
	P99       float64 `json:"p99_us"`
	P999      float64 `json:"p999_us"`
}

// summaryChecks close every summary: how far its medians can be trusted.
type summaryChecks struct {
	// OpsSpread is (max-min)/median of ops/s over the rounds, in percent.
	OpsSpread float64 `json:"ops_spread_pct"`
	OtherCPU  float64 `json:"other_cpu_pct"` // median over the rounds
	Errors    uint64  `json:"errors"`        // summed over the rounds
	HitRatio  float64 `json:"hit_ratio"`
}

// summarizeRounds takes the figures of one workload's samples on one
// target.
func summarizeRounds[S any](samples []S, fig func(S) figures) (summaryFigures, summaryChecks) {
	var ops, p50, p99, p999, other []float64
	var k summaryChecks
	var hits, misses uint64
	for _, s := range samples {
		f := fig(s)
		ops = append(ops, f.ops)
		p50 = append(p50, f.p50)
		p99 = append(p99, f.p99)
		p999 = append(p999, f.p999)
		other = append(other, f.other)
		k.Errors += f.errors
		hits += f.hits
		misses += f.misses
	}
	k.OpsSpread, k.OtherCPU = spread(ops), median(other)
	if hits+misses > 0 {
		k.HitRatio = float64(hits) / float64(hits+misses)
	}
	return summaryFigures{Rounds: len(ops), OpsPerSec: median(ops), P50: median(p50), P99: median(p99), P999: median(p999)}, k
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

// find returns the element of ss that key says is workload w on target t,
// or nil.
func find[S any](ss []S, key func(S) (string, string), w, t string) *S {
	for i := range ss {
		if sw, st := key(ss[i]); sw == w && st == t {
			return &ss[i]
		}
	}
	return nil
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

// writeProvenance ends a report's opening paragraph with the load average
// at the start and the length of the whole run, and adds the command line
// that ran it.
func writeProvenance(b *strings.Builder, loadAvg string, elapsedSec float64, command string) {
	fmt.Fprintf(b, "Load average at start: %s. Whole run: %.0f s.\n\n", loadAvg, elapsedSec)
	if command != "" {
		fmt.Fprintf(b, "Command: `%s`\n\n", command)
	}
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
