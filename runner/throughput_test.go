package runner

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner/quant"
)

func TestThroughputCasesAndOperands(t *testing.T) {
	cs := ThroughputCases()
	if len(cs) != 162 {
		t.Fatalf("%d cases, want 162", len(cs))
	}
	controls := 0
	for _, c := range cs {
		if c.Control {
			controls++
		}
	}
	if controls != 3 {
		t.Fatalf("%d control cases, want 3 (one per batch)", controls)
	}
	c := ThroughputCase{ID: "t", Batch: 2, N: 64, K: 256, DType: quant.BFloat16, Bits: 3, GroupSize: 64}
	r, xs, err := ThroughputOperands(c)
	if err != nil || len(xs) != 2 || r.X.Len() != 256 {
		t.Fatalf("operands: %v", err)
	}
	// The reference agrees with the exact bias-sum semantics within the
	// tolerance: round it to the dtype and check it against itself, then
	// against a perturbed output.
	ref := ThroughputReference(r, xs)
	got := make([]Vec, len(ref))
	for b := range ref {
		got[b] = NewVec(c.DType, c.N)
		for n, v := range ref[b] {
			got[b].Set(n, quant.FromF32(c.DType, float32(v)))
		}
	}
	oc, err := CheckThroughputOutput(c.DType, ref, got)
	if err != nil || oc.RelL2 > 1e-2 || oc.BitExact != oc.Values || oc.Values != 128 {
		t.Fatalf("rounded reference: %+v %v", oc, err)
	}
	got[1].Set(3, quant.FromF32(c.DType, 0))
	for n := range c.N / 2 { // a kernel that skips half the rows
		got[0].Set(n, 0)
	}
	oc, _ = CheckThroughputOutput(c.DType, ref, got)
	if oc.RelL2 <= ThroughputTolerance(c.DType) {
		t.Fatalf("half the rows zero passed: %+v", oc)
	}
}

// fakeArm returns samples around mean with relative noise (log-normal).
type fakeArm struct {
	rng         *rand.Rand
	mean, noise float64
}

func (a *fakeArm) Sample(_ context.Context, n int) ([]float64, error) {
	out := make([]float64, n)
	for i := range out {
		out[i] = a.mean * math.Exp(a.noise*a.rng.NormFloat64()) // log-normal: never <= 0
	}
	return out, nil
}

func TestMeasureConvergesAndStops(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s, conv, err := Measure(context.Background(), []Arm{&fakeArm{rng, 20e-6, 0.005}, &fakeArm{rng, 21e-6, 0.005}}, MeasureOptions{})
	if err != nil || !conv || len(s[0]) != len(s[1]) || len(s[0]) > 50 {
		t.Fatalf("quiet arms: converged=%v n=%d err=%v", conv, len(s[0]), err)
	}
	tc := SummarizeThroughput(ThroughputCase{ID: "x", Batch: 1, N: 1, K: 1, DType: quant.Float16, Bits: 4, GroupSize: 64}, 1, s, conv, 0.95, ledger.OutputCheck{})
	if tc.Ratio == nil || tc.Ratio.Low > 1.05 || tc.Ratio.High < 1.05 {
		t.Fatalf("ratio %+v does not cover 1.05", tc.Ratio)
	}
	// Noisy arms stop at the sample cap, unconverged.
	s, conv, _ = Measure(context.Background(), []Arm{&fakeArm{rng, 20e-6, 0.5}, &fakeArm{rng, 20e-6, 0.5}}, MeasureOptions{MaxSamples: 40, Budget: time.Hour})
	if conv || len(s[0]) != 40 {
		t.Fatalf("noisy arms: converged=%v n=%d", conv, len(s[0]))
	}
	if ok, _ := ControlCaught(s[0], s[1], 0.95); ok {
		t.Fatal("equal noisy arms caught as a 2x slowdown")
	}
	s, _, _ = Measure(context.Background(), []Arm{&fakeArm{rng, 20e-6, 0.01}, &fakeArm{rng, 40e-6, 0.01}}, MeasureOptions{})
	if ok, iv := ControlCaught(s[0], s[1], 0.95); !ok {
		t.Fatalf("2x slowdown not caught: %+v", iv)
	}
	// Too few samples for an interval: the record claims no interval
	// narrower than the samples' range, and the control is not caught.
	few := [][]float64{{1e-3, 4e-3, 2e-3}, {2e-3, 8e-3, 4e-3}}
	tc = SummarizeThroughput(ThroughputCase{ID: "x", Batch: 1, N: 1, K: 1, DType: quant.Float16, Bits: 4, GroupSize: 64}, 1, few, false, 0.95, ledger.OutputCheck{})
	if c := tc.CandidateMedian; c.Estimate != 2e-3 || c.Low != 1e-3 || c.High != 4e-3 {
		t.Fatalf("3 samples: candidate %+v; want the median within the range", c)
	}
	if ok, iv := ControlCaught(few[0], few[1], 0.95); ok || iv.Low != 0.5 || iv.High != 0.5 {
		t.Fatalf("3 pairs: control caught %v %+v; want not caught, ratios' range", ok, iv)
	}
}

// A sample outside ledger.ValidSampleSeconds (an adapter or backend
// answering nonsense) stops the measurement with an error, so no record
// carries a ratio that overflows.
func TestMeasureRefusesImpossibleSamples(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	_, _, err := Measure(context.Background(), []Arm{&fakeArm{rng, 20e-6, 0.01}, &fakeArm{rng, 5e-324, 0}}, MeasureOptions{})
	if err == nil {
		t.Fatal("a 5e-324 s sample was measured")
	}
}

// TestThroughputDTypesAgree: the dtypes a throughput record may name
// (ledger.ThroughputDTypes) are quant's DType names, and every case id
// the lane makes passes the record's id rule.
func TestThroughputDTypesAgree(t *testing.T) {
	var names []string
	for _, d := range quant.DTypes {
		names = append(names, d.String())
	}
	if !slices.Equal(names, ledger.ThroughputDTypes) {
		t.Fatalf("quant's dtypes %v, ledger's %v", names, ledger.ThroughputDTypes)
	}
	for _, c := range ThroughputCases() {
		if c.ID != ledger.ThroughputCaseID(c.Batch, c.N, c.K, c.DType.String(), c.Bits, c.GroupSize) {
			t.Fatalf("case %s", c.ID)
		}
	}
}
