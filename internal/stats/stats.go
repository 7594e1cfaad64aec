// Package stats holds the order statistics the throughput lanes and the
// throughput gate share: the median of a sample set and a distribution-free
// confidence interval for it, and the paired ratios of two interleaved
// sample sets.
//
// The interval of the median is the classical one from order statistics
// (for example Conover, Practical Nonparametric Statistics, 3rd ed., section
// 3.2): with the n samples sorted, the interval [x_(j), x_(n+1-j)] covers the
// population median with probability 1 - 2*P(B < j), B ~ Binomial(n, 1/2),
// whatever the samples' distribution. It needs no resampling, so the gate
// recomputes exactly the interval the runner wrote. Every function is pure
// and safe for concurrent use.
package stats

import (
	"math"
	"slices"
)

// Interval is an estimate with a confidence interval, in the unit of the
// samples it was computed from: Low <= Estimate <= High.
type Interval struct {
	Estimate float64 `json:"estimate"`
	Low      float64 `json:"low"`
	High     float64 `json:"high"`
}

// RelHalfWidth is the interval's half-width relative to its estimate
// ((High-Low)/2/|Estimate|); +Inf when the estimate is 0.
func (iv Interval) RelHalfWidth() float64 {
	if iv.Estimate == 0 {
		return math.Inf(1)
	}
	return (iv.High - iv.Low) / 2 / math.Abs(iv.Estimate)
}

// Median returns the median of xs (the mean of the two middle values for
// an even count); NaN for no samples. xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return median(s)
}

func median(s []float64) float64 {
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// MinSamples is the fewest samples for which a 95 % interval of the median
// exists (1 - 2*0.5^6 = 0.969 >= 0.95; five give 0.9375).
const MinSamples = 6

// MedianCI returns the median of xs with a distribution-free confidence
// interval of at least conf (0 < conf < 1) coverage: the order statistics
// x_(j) and x_(n+1-j) for the largest j whose coverage
// 1 - 2*P(Binomial(n, 1/2) < j) is still >= conf. ok is false when xs has
// too few samples for that coverage (fewer than MinSamples at 0.95) or
// holds a value that is not finite. xs is not modified.
func MedianCI(xs []float64, conf float64) (iv Interval, ok bool) {
	n := len(xs)
	if n == 0 || conf <= 0 || conf >= 1 {
		return Interval{}, false
	}
	for _, x := range xs {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return Interval{}, false
		}
	}
	j := orderRank(n, conf)
	if j < 1 {
		return Interval{}, false
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return Interval{Estimate: median(s), Low: s[j-1], High: s[n-j]}, true
}

// orderRank returns the largest j >= 1 with 1 - 2*P(B <= j-1) >= conf for
// B ~ Binomial(n, 1/2), or 0 when even j = 1 falls short. The binomial
// terms are summed in log space, so n in the millions stays exact enough.
func orderRank(n int, conf float64) int {
	alpha := (1 - conf) / 2
	lnHalfN := float64(n) * math.Log(0.5)
	lg := func(x int) float64 { v, _ := math.Lgamma(float64(x) + 1); return v }
	lnN := lg(n)
	cdf := 0.0 // P(B <= i)
	j := 0
	for i := 0; i <= n/2; i++ {
		cdf += math.Exp(lnN - lg(i) - lg(n-i) + lnHalfN)
		// j = i+1 has tail P(B <= i) = cdf.
		if cdf > alpha {
			break
		}
		j = i + 1
	}
	return j
}

// Ratios returns num[i]/den[i] for the pairs of two interleaved sample sets
// (sample i of each taken side by side in time), over the shorter length.
// Pairing cancels the drift both sides share (clocks, temperature, other
// load), which unpaired intervals would add to the ratio's width.
func Ratios(num, den []float64) []float64 {
	n := min(len(num), len(den))
	out := make([]float64, n)
	for i := range n {
		out[i] = num[i] / den[i]
	}
	return out
}
