package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// zipfProbs returns P(k) = k^-s / Σ j^-s for k = 1..n (index 0 unused).
func zipfProbs(s float64, n int) []float64 {
	p := make([]float64, n+1)
	var sum float64
	for k := n; k >= 1; k-- { // smallest terms first
		p[k] = math.Pow(float64(k), -s)
		sum += p[k]
	}
	for k := 1; k <= n; k++ {
		p[k] /= sum
	}
	return p
}

// zipfBins are the bins of the chi-square test over ranks 1..n: each of
// the first 50 ranks alone, then ranges growing by 30% up to n.
func zipfBins(n int) [][2]int {
	var bins [][2]int
	for k := 1; k <= min(50, n); k++ {
		bins = append(bins, [2]int{k, k})
	}
	for lo := 51; lo <= n; {
		hi := min(n, max(lo, int(float64(lo)*1.3)))
		bins = append(bins, [2]int{lo, hi})
		lo = hi + 1
	}
	return bins
}

// chiSquare is Σ (observed-expected)²/expected over the bins, for n draws
// whose counts by rank are count and whose expected probabilities are p.
func chiSquare(count []uint64, p []float64, draws int, bins [][2]int) float64 {
	var chi float64
	for _, b := range bins {
		var obs, exp float64
		for k := b[0]; k <= b[1]; k++ {
			obs += float64(count[k])
			exp += p[k] * float64(draws)
		}
		chi += (obs - exp) * (obs - exp) / exp
	}
	return chi
}

// TestZipfMatchesTheory draws a large deterministic sample for each
// exponent and compares it with the theoretical rank frequencies: the
// share of each of the top ranks and of the top 1% within five standard
// errors, and a chi-square over ~80 bins below its 99.99th percentile. It
// also checks that the same test tells the sample from a Zipf of an
// exponent 0.02 away, so that it can fail.
func TestZipfMatchesTheory(t *testing.T) {
	const n, draws = 10_000, 1_000_000
	bins := zipfBins(n)
	df := float64(len(bins) - 1)
	// Wilson-Hilferty: the chi-square quantile at z standard normal
	// deviations; z = 3.72 is the 99.99th percentile.
	limit := df * math.Pow(1-2/(9*df)+3.72*math.Sqrt(2/(9*df)), 3)
	for _, s := range []float64{0.5, 0.8, 1.0, 1.2, 2.5} {
		t.Run(fmt.Sprint(s), func(t *testing.T) {
			z := newZipf(s, n)
			rng := rand.New(rand.NewPCG(7, uint64(s*1000)))
			count := make([]uint64, n+1)
			for range draws {
				k := z.rank(rng)
				if k < 1 || k > n {
					t.Fatalf("rank %d out of [1, %d]", k, n)
				}
				count[k]++
			}
			p := zipfProbs(s, n)
			share := func(name string, lo, hi int) {
				var obs, want float64
				for k := lo; k <= hi; k++ {
					obs += float64(count[k]) / draws
					want += p[k]
				}
				if se := math.Sqrt(want * (1 - want) / draws); math.Abs(obs-want) > 5*se {
					t.Errorf("%s: share %.5f, want %.5f ± %.5f", name, obs, want, 5*se)
				}
			}
			for k := 1; k <= 10; k++ {
				share(fmt.Sprintf("rank %d", k), k, k)
			}
			share("top 1%", 1, n/100)
			share("bottom half", n/2+1, n)
			if chi := chiSquare(count, p, draws, bins); chi > limit {
				t.Errorf("chi-square %.1f over %d bins, above %.1f (p < 0.0001)", chi, len(bins), limit)
			}
			if chi := chiSquare(count, zipfProbs(s+0.02, n), draws, bins); chi <= limit {
				t.Errorf("the sample passes as a Zipf of exponent %.2f too (chi-square %.1f): the test has no power", s+0.02, chi)
			}
		})
	}
}

// TestZipfEdges: one rank is always rank 1; a huge key space stays in
// range; the exponent 1 and its neighbours agree (H is continuous in s).
func TestZipfEdges(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	one := newZipf(0.8, 1)
	for range 1000 {
		if k := one.rank(rng); k != 1 {
			t.Fatalf("one rank: drew %d", k)
		}
	}
	big := newZipf(1.0, 1<<40)
	for range 10_000 {
		if k := big.rank(rng); k < 1 || k > 1<<40 {
			t.Fatalf("rank %d out of range", k)
		}
	}
	a, b := newZipf(1, 1000), newZipf(1+1e-9, 1000)
	for _, x := range []float64{0.7, 1.5, 10, 1000.5} {
		if d := math.Abs(a.hInt(x) - b.hInt(x)); d > 1e-6 {
			t.Errorf("H(%g) at s=1 and s=1+1e-9 differ by %g", x, d)
		}
		if y := a.hInt(x); math.Abs(a.hIntInv(y)-x) > 1e-9*x {
			t.Errorf("H⁻¹(H(%g)) = %g", x, a.hIntInv(y))
		}
		if y := b.hInt(x); math.Abs(b.hIntInv(y)-x) > 1e-9*x {
			t.Errorf("s=1+1e-9: H⁻¹(H(%g)) = %g", x, b.hIntInv(y))
		}
	}
}
