package bench

// The Zipf sampler of the zipf and scan key patterns. Go's math/rand Zipf
// takes only exponents s > 1, and the workloads that matter for hit ratios
// (α 0.8 and 1.0 among them) are at or below 1, so this file draws Zipf
// ranks for any s > 0 by rejection-inversion, the method of W. Hörmann and
// G. Derflinger, "Rejection-inversion to generate variates from monotone
// discrete distributions", ACM TOMACS 6(3), 1996. It is written here from
// the mathematics below.
//
// Ranks are k = 1..n with P(k) = k^-s / Σ_j j^-s. Let h(x) = x^-s, positive,
// decreasing and convex for x > 0, and H an antiderivative of it:
//
//	H(x) = (x^(1-s) - 1) / (1-s)    (ln x when s = 1)
//	H⁻¹(y) = (1 + (1-s)·y)^(1/(1-s))   (e^y when s = 1)
//
// Because h is convex, the area under it over [k-½, k+½] is at least h(k)
// (the value at the centre times the width 1). So rank k can be given the
// right-hand part [b_k, k+½] of that strip whose area is exactly h(k):
// b_k = H⁻¹(H(k+½) - h(k)) ≥ k-½. These pieces lie in order and do not
// overlap. Draw x with density ∝ h on [b_1, n+½] by inversion (u uniform
// between H(b_1) = H(3/2) - 1 and H(n+½), x = H⁻¹(u)), and let k be x
// rounded to the nearest integer: x lies in rank k's piece exactly when
// u ≥ H(k+½) - h(k). Accept k then, else draw again. Every rank is accepted
// with probability proportional to its piece's area, h(k): the draw is
// exact, not an approximation. Rank 1's piece is the whole of [b_1, 3/2],
// and what is rejected is the slivers [k-½, b_k) of the other strips, a few
// percent of the area for the exponents used here, so a draw takes about
// one try.
//
// Near s = 1 the closed forms lose precision (0/0), so H and H⁻¹ are
// computed as ln x · expm1(t)/t with t = (1-s)·ln x, and as
// exp(y · log1p(t)/t) with t = (1-s)·y, whose factors tend to 1 as t → 0.

import (
	"math"
	"math/rand/v2"
)

// zipf draws Zipf ranks 1..n with exponent s > 0. It is immutable once
// built; the caller's generator is the only state a draw changes.
type zipf struct {
	s    float64 // the exponent (α)
	n    float64 // the number of ranks
	hLow float64 // H(b_1) = H(3/2) - h(1), the start of the sampled range
	hTop float64 // H(n+½), its end
}

// newZipf returns the sampler of ranks 1..n with exponent s (s > 0, n ≥ 1).
func newZipf(s float64, n uint64) zipf {
	z := zipf{s: s, n: float64(n)}
	z.hLow = z.hInt(1.5) - 1
	z.hTop = z.hInt(z.n + 0.5)
	return z
}

// rank draws one rank, using r for the uniform variates.
func (z *zipf) rank(r *rand.Rand) uint64 {
	for {
		// u in (hLow, hTop]: Float64 is in [0, 1).
		u := z.hTop - r.Float64()*(z.hTop-z.hLow)
		x := z.hIntInv(u)
		k := math.Floor(x + 0.5)
		if k < 1 {
			k = 1
		} else if k > z.n {
			k = z.n
		}
		if u >= z.hInt(k+0.5)-z.h(k) {
			return uint64(k)
		}
	}
}

// h is x^-s.
func (z *zipf) h(x float64) float64 { return math.Exp(-z.s * math.Log(x)) }

// hInt is H(x) = (x^(1-s) - 1)/(1-s), or ln x for s = 1.
func (z *zipf) hInt(x float64) float64 {
	lx := math.Log(x)
	return expm1Over((1-z.s)*lx) * lx
}

// hIntInv is H⁻¹(y). (1-s)·y > -1 for every y between H(b_1) and H(n+½),
// the only arguments it is given.
func (z *zipf) hIntInv(y float64) float64 {
	return math.Exp(log1pOver((1-z.s)*y) * y)
}

// expm1Over is (e^t - 1)/t, 1 at t = 0.
func expm1Over(t float64) float64 {
	if math.Abs(t) < 1e-8 {
		return 1 + t/2
	}
	return math.Expm1(t) / t
}

// log1pOver is ln(1+t)/t, 1 at t = 0.
func log1pOver(t float64) float64 {
	if math.Abs(t) < 1e-8 {
		return 1 - t/2
	}
	return math.Log1p(t) / t
}
