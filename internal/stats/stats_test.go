package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Known ranks: for n = 6..10 at 95 % the interval is [x_(1), x_(n)] up to
// n = 8 and [x_(2), x_(n-1)] at 9 and 10 (Conover, table A3); n = 5 has
// none.
func TestOrderRankKnownValues(t *testing.T) {
	for n, want := range map[int]int{5: 0, 6: 1, 7: 1, 8: 1, 9: 2, 10: 2, 11: 2, 12: 3, 20: 6, 100: 40} {
		if got := orderRank(n, 0.95); got != want {
			t.Errorf("orderRank(%d, 0.95) = %d, want %d", n, got, want)
		}
	}
}

func TestMedianCI(t *testing.T) {
	if _, ok := MedianCI([]float64{1, 2, 3, 4, 5}, 0.95); ok {
		t.Fatal("five samples gave a 95 % interval")
	}
	iv, ok := MedianCI([]float64{5, 1, 4, 2, 3, 6, 9, 8, 7, 10}, 0.95)
	if !ok || iv.Estimate != 5.5 || iv.Low != 2 || iv.High != 9 {
		t.Fatalf("MedianCI = %+v %v, want 5.5 in [2, 9]", iv, ok)
	}
	if _, ok := MedianCI([]float64{1, 2, 3, 4, 5, math.NaN()}, 0.95); ok {
		t.Fatal("NaN sample accepted")
	}
}

// The interval's coverage is what it claims: over many sample sets of a
// skewed distribution, the true median lies inside about 95 % of the time
// (at least 95 % minus sampling error).
func TestMedianCICoverage(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	trueMedian := math.Ln2 // of Exp(1)
	for _, n := range []int{10, 31, 200} {
		hits, trials := 0, 4000
		for range trials {
			xs := make([]float64, n)
			for i := range xs {
				xs[i] = rng.ExpFloat64()
			}
			iv, ok := MedianCI(xs, 0.95)
			if !ok {
				t.Fatalf("n=%d: no interval", n)
			}
			if iv.Low <= trueMedian && trueMedian <= iv.High {
				hits++
			}
		}
		if cov := float64(hits) / float64(trials); cov < 0.94 {
			t.Errorf("n=%d: coverage %.3f, want >= 0.95", n, cov)
		}
	}
}

func TestRatios(t *testing.T) {
	r := Ratios([]float64{2, 3, 4}, []float64{1, 1})
	if len(r) != 2 || r[0] != 2 || r[1] != 3 {
		t.Fatalf("Ratios = %v", r)
	}
	if w := (Interval{Estimate: 2, Low: 1.9, High: 2.1}).RelHalfWidth(); math.Abs(w-0.05) > 1e-12 {
		t.Fatalf("RelHalfWidth = %v", w)
	}
}
