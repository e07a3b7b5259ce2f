package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// exactPercentile is the reference: the smallest sample with at least p% of
// the samples at or below it.
func exactPercentile(sorted []int64, p float64) int64 {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

func TestHistogramPercentilesAgainstSortedSamples(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name string
		gen  func() int64
		n    int
	}{
		{"small-exact", func() int64 { return rng.Int64N(256) }, 1000},
		{"lognormal-µs", func() int64 { return int64(math.Exp(rng.NormFloat64()*1.5 + 10)) }, 100_000},
		{"uniform-wide", func() int64 { return rng.Int64N(int64(time.Minute)) }, 50_000},
		{"one", func() int64 { return 12345 }, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHistogram()
			s := make([]int64, tc.n)
			for i := range s {
				s[i] = tc.gen()
				h.Record(time.Duration(s[i]))
			}
			slices.Sort(s)
			for _, p := range []float64{1, 50, 90, 99, 99.9, 99.99, 100} {
				want := exactPercentile(s, p)
				got := int64(h.Percentile(p))
				// Never below the exact value, at most one bucket (1/128) above.
				if got < want || float64(got) > float64(want)*(1+1.0/128)+1 {
					t.Errorf("p%v = %d, exact %d", p, got, want)
				}
			}
			if int64(h.Max()) != s[len(s)-1] || int64(h.Min()) != s[0] {
				t.Errorf("min/max = %d/%d, want %d/%d", h.Min(), h.Max(), s[0], s[len(s)-1])
			}
			if h.Count() != uint64(tc.n) {
				t.Errorf("count %d", h.Count())
			}
		})
	}
}

func TestHistogramMerge(t *testing.T) {
	a, b, all := NewHistogram(), NewHistogram(), NewHistogram()
	for i := range 10_000 {
		d := time.Duration(i*i) * time.Nanosecond
		all.Record(d)
		if i%3 == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	a.Merge(b)
	for _, p := range []float64{50, 99, 99.9} {
		if a.Percentile(p) != all.Percentile(p) {
			t.Errorf("p%v merged %v, want %v", p, a.Percentile(p), all.Percentile(p))
		}
	}
	if a.Count() != all.Count() || a.Max() != all.Max() || a.Min() != all.Min() || a.Mean() != all.Mean() {
		t.Errorf("merged summary differs")
	}
}

func TestHistogramEdges(t *testing.T) {
	h := NewHistogram()
	if h.Percentile(50) != 0 || h.Max() != 0 || h.Mean() != 0 {
		t.Fatal("empty histogram not zero")
	}
	h.Record(-5)
	h.Record(100 * time.Hour) // beyond the range: counted in the last bucket
	if h.Min() != 0 || h.Max() != 100*time.Hour {
		t.Errorf("min %v max %v", h.Min(), h.Max())
	}
	if got := h.Percentile(100); got != 100*time.Hour && got > time.Duration(histMaxValue) {
		t.Errorf("p100 %v", got)
	}
	// Every bucket's top maps back to the bucket, and the next value to the next.
	for i := 0; i < histBuckets-1; i++ {
		hi := bucketHigh(i)
		if bucketOf(hi) != i || bucketOf(hi+1) != i+1 {
			t.Fatalf("bucket %d: high %d maps to %d, high+1 to %d", i, hi, bucketOf(hi), bucketOf(hi+1))
		}
	}
}
