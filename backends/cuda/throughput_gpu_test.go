package cuda

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/evidence-ledger/ledger/backends/cpu"
	"github.com/evidence-ledger/ledger/internal/stats"
	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runner/quant"
)

// The tests in this file need a GPU and skip without the driver.

// exactBatch returns a request and batch vectors whose products are exact
// in float32 whatever the summation order (small integer x, power-of-two
// scales and biases; see TestMatchesCPU).
func exactBatch(t *testing.T, rng *rand.Rand, d quant.DType, bits, g, n, k, batch int) (*runner.QMVRequest, []runner.Vec) {
	t.Helper()
	q := make([]uint8, n*k)
	for i := range q {
		q[i] = uint8(rng.IntN(1 << bits))
	}
	w, err := quant.Pack(q, n, k, bits)
	if err != nil {
		t.Fatal(err)
	}
	groups := n * k / g
	r := &runner.QMVRequest{Variant: runner.Promoted, DType: d, Bits: bits, GroupSize: g, N: n, K: k, W: w,
		Scales: runner.NewVec(d, groups), Biases: runner.NewVec(d, groups)}
	for i := 0; i < groups; i++ {
		r.Scales.Set(i, quant.FromF32(d, float32(math.Ldexp(1, -rng.IntN(4)))))
		r.Biases.Set(i, quant.FromF32(d, float32(math.Ldexp(float64(1-2*rng.IntN(2)), -rng.IntN(3)))))
	}
	xs := make([]runner.Vec, batch)
	for b := range xs {
		xs[b] = runner.NewVec(d, k)
		for i := 0; i < k; i++ {
			xs[b].Set(i, quant.FromF32(d, float32(rng.IntN(9)-4)))
		}
	}
	r.X = xs[0]
	return r, xs
}

// checkRowsMatch compares each output row of p (variant v) with want(b),
// the expected output of vector b, bit for bit.
func checkRowsMatch(t *testing.T, name string, p runner.PreparedQMV, v runner.Variant, batch int, want func(b int) runner.Vec) {
	t.Helper()
	rows, err := p.Output(context.Background(), v)
	if err != nil {
		t.Fatalf("%s %v: %v", name, v, err)
	}
	if len(rows) != batch {
		t.Fatalf("%s %v: %d rows, want %d", name, v, len(rows), batch)
	}
	for b, row := range rows {
		w := want(b)
		if row.Len() != w.Len() || row.DType != w.DType {
			t.Fatalf("%s %v row %d: %d values of %v, want %d of %v", name, v, b, row.Len(), row.DType, w.Len(), w.DType)
		}
		for i := 0; i < w.Len(); i++ {
			if row.At(i) != w.At(i) {
				t.Fatalf("%s %v vector %d row %d: gpu %#x, want %#x", name, v, b, i, row.At(i), w.At(i))
			}
		}
	}
}

// kernelsFor returns the vectors per block row of every kernel that can
// run a batch: 1 (the single-vector kernel, gridDim.y = batch) and the
// multi-vector kernels whose NB divides it.
func kernelsFor(batch int) []int {
	nbs := []int{1}
	for _, nb := range []int{2, 4} {
		if batch%nb == 0 {
			nbs = append(nbs, nb)
		}
	}
	return nbs
}

// TestThroughputMatchesCPU: the batched product of every vector equals
// the CPU backend's QMV of that vector bit for bit, in both variants and
// with every kernel that runs the batch, on exact-by-construction inputs:
// 1024 x 4096 float16 4-bit at batch 1, 3 and 4, and every dtype, width
// and group size at 37 x 384 (N not a multiple of the rows per block) at
// batch 4.
func TestThroughputMatchesCPU(t *testing.T) {
	be := gpu(t)
	c, err := cpu.New()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rng := rand.New(rand.NewPCG(5, 6))
	type tc struct {
		d                    quant.DType
		bits, g, n, k, batch int
	}
	cases := []tc{{quant.Float16, 4, 64, 1024, 4096, 1}, {quant.Float16, 4, 64, 1024, 4096, 3}, {quant.Float16, 4, 64, 1024, 4096, 4}}
	for _, d := range quant.DTypes {
		for _, bits := range quant.Bits {
			for _, g := range quant.GroupSizes {
				cases = append(cases, tc{d, bits, g, 37, 384, 4})
			}
		}
	}
	for _, cs := range cases {
		r, xs := exactBatch(t, rng, cs.d, cs.bits, cs.g, cs.n, cs.k, cs.batch)
		want := map[[2]int]runner.Vec{} // (variant, vector)
		for _, v := range []runner.Variant{runner.Promoted, runner.Narrow} {
			for b := range xs {
				rr := *r
				rr.X, rr.Variant = xs[b], v
				y, err := c.QMV(context.Background(), &rr)
				if err != nil {
					t.Fatal(err)
				}
				want[[2]int{int(v), b}] = y
			}
		}
		for _, nb := range kernelsFor(cs.batch) {
			name := fmt.Sprintf("%dx%d %v b%d g%d batch %d nb %d", cs.n, cs.k, cs.d, cs.bits, cs.g, cs.batch, nb)
			p, err := be.prepareQMV(context.Background(), r, xs, nb)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			for _, v := range []runner.Variant{runner.Promoted, runner.Narrow} {
				checkRowsMatch(t, name, p, v, cs.batch, func(b int) runner.Vec { return want[[2]int{int(v), b}] })
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestThroughputBatchMatchesSingle: on the lane's random operands (not
// exact, so the summation order shows) every batched row equals QMV of its
// vector alone bit for bit, with every kernel (at K = 4096 the
// multi-vector kernels' blocks have the single-vector kernel's threads,
// so the order is the same), and the output is within the lane's
// tolerance of the float64 reference.
func TestThroughputBatchMatchesSingle(t *testing.T) {
	be := gpu(t)
	for _, d := range quant.DTypes {
		cs := runner.ThroughputCase{ID: "test", Batch: 4, N: 1024, K: 4096, DType: d, Bits: 4, GroupSize: 64}
		r, xs, err := runner.ThroughputOperands(cs)
		if err != nil {
			t.Fatal(err)
		}
		ref := runner.ThroughputReference(r, xs)
		for _, nb := range kernelsFor(cs.Batch) {
			p, err := be.prepareQMV(context.Background(), r, xs, nb)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range []runner.Variant{runner.Promoted, runner.Narrow} {
				checkRowsMatch(t, fmt.Sprintf("%v nb %d", d, nb), p, v, cs.Batch, func(b int) runner.Vec {
					rr := *r
					rr.X, rr.Variant = xs[b], v
					want, err := be.QMV(context.Background(), &rr)
					if err != nil {
						t.Fatal(err)
					}
					return want
				})
			}
			rows, err := p.Output(context.Background(), runner.Promoted)
			if err != nil {
				t.Fatal(err)
			}
			oc, err := runner.CheckThroughputOutput(d, ref, rows)
			if err != nil || !(oc.RelL2 <= oc.Tolerance) {
				t.Fatalf("%v nb %d: output check %+v, %v", d, nb, oc, err)
			}
			t.Logf("%v nb %d: relative L2 %.3g (tolerance %g), %d/%d values equal to the rounded reference", d, nb, oc.RelL2, oc.Tolerance, oc.BitExact, oc.Values)
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestThroughputSample: samples are positive, the arm that launches the
// kernel twice per product measures about twice as slow (the negative
// control's interval inside [0.4, 0.6]), for 1024 x 4096 and 8192 x 8192
// float16 4-bit at batch 1, 2 and 4, at 8192 x 8192 with every kernel
// (times and bandwidths are logged: they decide multiVector).
func TestThroughputSample(t *testing.T) {
	be := gpu(t)
	t.Logf("clock %s; device state %v", be.Clock(), be.DeviceState())
	for _, shape := range [][2]int{{1024, 4096}, {8192, 8192}} {
		for _, batch := range []int{1, 2, 4} {
			nbs := []int{1}
			if shape[0] == 8192 {
				nbs = kernelsFor(batch)
			}
			for _, nb := range nbs {
				sampleCase(t, be, shape, batch, nb)
			}
		}
	}
}

// sampleCase measures one float16 4-bit case with the nb-vector kernel
// (see TestThroughputSample).
func sampleCase(t *testing.T, be *Backend, shape [2]int, batch, nb int) {
	cs := runner.ThroughputCase{ID: "test", Batch: batch, N: shape[0], K: shape[1], DType: quant.Float16, Bits: 4, GroupSize: 64}
	r, xs, err := runner.ThroughputOperands(cs)
	if err != nil {
		t.Fatal(err)
	}
	p, err := be.prepareQMV(context.Background(), r, xs, nb)
	if err != nil {
		t.Fatal(err)
	}
	l := p.LaunchesPerSample()
	if l < 1 || l > tpMaxLaunches {
		t.Fatalf("L = %d", l)
	}
	arms := []runner.Arm{p.Arm(runner.Promoted, 1), p.Arm(runner.Promoted, 2), p.Arm(runner.Narrow, 1)}
	samples, converged, err := runner.Measure(context.Background(), arms, runner.MeasureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for j, s := range samples {
		for _, v := range s {
			if !(v > 0) || math.IsInf(v, 0) {
				t.Fatalf("arm %d sample %g", j, v)
			}
		}
	}
	caught, iv := runner.ControlCaught(samples[0], samples[1], 0.95)
	med := stats.Median(samples[0])
	bytes := float64(4*len(r.W) + 2*2*r.Scales.Len() + 2*batch*(r.K+r.N))
	t.Logf("%dx%d batch %d nb %d: L %d, n %d, converged %v: promoted %.2f µs/product (%.0f GB/s), narrow %.2f µs, twice-launched ratio %.3f [%.3f, %.3f]",
		shape[0], shape[1], batch, nb, l, len(samples[0]), converged, med*1e6, bytes/med/1e9, stats.Median(samples[2])*1e6, iv.Estimate, iv.Low, iv.High)
	if !caught {
		t.Errorf("%dx%d batch %d nb %d: twice-launched ratio %+v not inside [%g, %g]", shape[0], shape[1], batch, nb, iv, runner.ControlLow, runner.ControlHigh)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestThroughputCancelAndClose: a cancelled context stops Sample and
// Output, a closed case refuses them, and closing twice is harmless.
func TestThroughputCancelAndClose(t *testing.T) {
	be := gpu(t)
	cs := runner.ThroughputCase{ID: "test", Batch: 2, N: 256, K: 1024, DType: quant.BFloat16, Bits: 3, GroupSize: 64}
	r, xs, err := runner.ThroughputOperands(cs)
	if err != nil {
		t.Fatal(err)
	}
	p, err := be.PrepareQMV(context.Background(), r, xs)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Arm(runner.Promoted, 1).Sample(ctx, 3); err == nil {
		t.Fatal("Sample with a cancelled context succeeded")
	}
	if _, err := p.Output(ctx, runner.Promoted); err == nil {
		t.Fatal("Output with a cancelled context succeeded")
	}
	if s, err := p.Arm(runner.Narrow, 1).Sample(context.Background(), 2); err != nil || len(s) != 2 {
		t.Fatalf("after a cancelled call: %v, %v", s, err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := p.Arm(runner.Promoted, 1).Sample(context.Background(), 1); err == nil {
		t.Fatal("Sample after Close succeeded")
	}
	if _, err := p.Output(context.Background(), runner.Promoted); err == nil {
		t.Fatal("Output after Close succeeded")
	}
}

// BenchmarkThroughputQMV reports the median of 21 event-timed samples of
// PrepareQMV's timer (gpu-us/product, and gpu-GB/s of the bytes one
// product must move) for promoted float16 4-bit group-64 products at
// 8192 x 8192 and 16384 x 16384, batch 1, 2 and 4, with every kernel
// (nb 1: gridDim.y batching; nb 2, 4: the multi-vector kernels). b.N is
// not used: each run of a sub-benchmark prepares and samples once (run
// with -benchtime 1x).
func BenchmarkThroughputQMV(b *testing.B) {
	be := gpu(b)
	for _, sz := range []int{8192, 16384} {
		for _, batch := range []int{1, 2, 4} {
			cs := runner.ThroughputCase{ID: "bench", Batch: batch, N: sz, K: sz, DType: quant.Float16, Bits: 4, GroupSize: 64}
			r, xs, err := runner.ThroughputOperands(cs)
			if err != nil {
				b.Fatal(err)
			}
			for _, nb := range kernelsFor(batch) {
				b.Run(fmt.Sprintf("%dx%d/batch%d/nb%d", sz, sz, batch, nb), func(b *testing.B) {
					p, err := be.prepareQMV(context.Background(), r, xs, nb)
					if err != nil {
						b.Fatal(err)
					}
					defer p.Close()
					s, err := p.Arm(runner.Promoted, 1).Sample(context.Background(), 21)
					if err != nil {
						b.Fatal(err)
					}
					med := stats.Median(s)
					bytes := float64(4*len(r.W) + 2*2*r.Scales.Len() + 2*batch*(r.K+r.N))
					b.ReportMetric(med*1e6, "gpu-us/product")
					b.ReportMetric(bytes/med/1e9, "gpu-GB/s")
					b.ReportMetric(float64(p.LaunchesPerSample()), "L")
				})
			}
		}
	}
}
