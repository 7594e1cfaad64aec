package ledger

import (
	"math"
	"testing"
)

// TestValidSampleSeconds: a sample is a time per product of 1 ps to
// 10,000 s, so every ratio of two samples is finite.
func TestValidSampleSeconds(t *testing.T) {
	for _, x := range []float64{1e-12, 18.6e-6, 1, 1e4} {
		if !ValidSampleSeconds(x) {
			t.Errorf("%v refused", x)
		}
	}
	for _, x := range []float64{0, -1, 5e-324, 1e-13, 1e4 + 1, 1e308, math.Inf(1), math.NaN()} {
		if ValidSampleSeconds(x) {
			t.Errorf("%v accepted", x)
		}
	}
	if r := MaxSampleSeconds / MinSampleSeconds; math.IsInf(r, 0) {
		t.Fatal("the extreme ratio overflows")
	}
	if err := CheckThroughputDetails([]byte(`{"cases":[]}`)); err != nil {
		t.Fatalf("details without throughput: %v", err)
	}
	err := CheckThroughputDetails([]byte(`{"throughput":{"clock":"c","candidate":"p","confidence":0.95,"cases":[{"id":"a","batch":1,"n":1,"k":1,"bits":4,"group_size":64,"launches_per_sample":1,"candidate_s":[1e300]}]}}`))
	if e, ok := err.(*Error); !ok || e.Field != "details.throughput.cases[0].candidate_s[0]" {
		t.Fatalf("1e300 s: %v; want refused naming the sample", err)
	}
}
