package bench

import (
	"math"
	"math/bits"
	"time"
)

// Histogram records durations with a relative error below 1% (two
// significant digits) from 1 ns to about 73 minutes, in the log-linear layout
// of HdrHistogram: values below 256 ns have a counter each, and every further
// power of two [2^k, 2^(k+1)) is split into 128 linear sub-buckets, so a
// bucket is never wider than 1/128 of its lower bound. Longer durations are
// counted in the last bucket; the exact minimum and maximum are kept apart.
//
// The zero value is not usable: call NewHistogram. A Histogram is not safe for
// concurrent use; each connection owns one and Run merges them.
type Histogram struct {
	counts []uint64
	total  uint64
	sum    float64 // nanoseconds, for the mean
	min    int64
	max    int64
}

const (
	histSubBits  = 7                // 128 sub-buckets per power of two
	histSub      = 1 << histSubBits // 128
	histLinear   = 2 * histSub      // values below 256 are exact
	histMaxShift = 35               // covers values below 2^(8+35) ns
	histBuckets  = histLinear + histMaxShift*histSub
	histMaxValue = int64(1)<<(histSubBits+1+histMaxShift) - 1
)

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram {
	return &Histogram{counts: make([]uint64, histBuckets), min: math.MaxInt64}
}

// bucketOf returns the index of the bucket holding v (v >= 0).
func bucketOf(v int64) int {
	if v < histLinear {
		return int(v)
	}
	if v > histMaxValue {
		v = histMaxValue
	}
	shift := bits.Len64(uint64(v)) - (histSubBits + 1) // ≥ 1
	return histLinear + (shift-1)*histSub + int(v>>shift) - histSub
}

// bucketHigh returns the largest value that falls in bucket i.
func bucketHigh(i int) int64 {
	if i < histLinear {
		return int64(i)
	}
	shift := (i-histLinear)/histSub + 1
	sub := int64((i-histLinear)%histSub + histSub)
	return (sub+1)<<shift - 1
}

// Record adds one duration. Negative durations count as zero.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	h.counts[bucketOf(v)]++
	h.total++
	h.sum += float64(v)
	if v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
}

// Merge adds o's counts into h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.sum += o.sum
	h.min = min(h.min, o.min)
	h.max = max(h.max, o.max)
}

// Count returns the number of recorded values.
func (h *Histogram) Count() uint64 { return h.total }

// Max returns the largest recorded value (exact), or 0 when empty.
func (h *Histogram) Max() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.max)
}

// Min returns the smallest recorded value (exact), or 0 when empty.
func (h *Histogram) Min() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.min)
}

// Mean returns the mean of the recorded values, or 0 when empty.
func (h *Histogram) Mean() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.total))
}

// Percentile returns the value at percentile p (0 < p ≤ 100): the smallest
// recorded value v such that at least p% of the values are ≤ v, reported as
// the top of its bucket (HdrHistogram's "highest equivalent value"), so it is
// never below the exact answer and at most 1/128 above it. It never exceeds
// Max. It returns 0 when the histogram is empty.
func (h *Histogram) Percentile(p float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(p / 100 * float64(h.total)))
	rank = min(max(rank, 1), h.total)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(bucketHigh(i), h.max))
		}
	}
	return time.Duration(h.max)
}
