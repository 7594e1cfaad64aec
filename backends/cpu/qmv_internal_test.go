package cpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runner/quant"
)

// TestF16ToF32AVX checks the VCVTPH2PS widening against x448/float16 (via
// quant.F16ToF32) for all 65536 bit patterns, NaN payloads included.
func TestF16ToF32AVX(t *testing.T) {
	if !haveSIMD {
		t.Skip("no AVX2/FMA/F16C on this machine")
	}
	src := make([]uint16, 1<<16)
	for i := range src {
		src[i] = uint16(i)
	}
	dst := make([]float32, len(src))
	f16ToF32AVX(dst, src)
	for i, b := range src {
		if got, want := math.Float32bits(dst[i]), math.Float32bits(quant.F16ToF32(b)); got != want {
			t.Fatalf("f16 %#04x: got %#08x, want %#08x", b, got, want)
		}
	}
}

// exactRequest builds a request whose every float32 step is exact in any
// order (WORKLOADS.md section 2, "Inputs that make comparison exact"):
// x small integers, scales and biases powers of two, so the SIMD and the
// portable paths must agree bit for bit.
func exactRequest(t *testing.T, rng *rand.Rand, d quant.DType, v runner.Variant, bits, g, n, k int) *runner.QMVRequest {
	t.Helper()
	q := make([]uint8, n*k)
	for i := range q {
		q[i] = uint8(rng.IntN(1 << bits))
	}
	w, err := quant.Pack(q, n, k, bits)
	if err != nil {
		t.Fatal(err)
	}
	ng := n * k / g
	r := &runner.QMVRequest{Variant: v, DType: d, Bits: bits, GroupSize: g, N: n, K: k, W: w,
		Scales: runner.NewVec(d, ng), Biases: runner.NewVec(d, ng), X: runner.NewVec(d, k)}
	pow2 := func() float32 {
		f := float32(math.Ldexp(1, rng.IntN(5)-2))
		if rng.IntN(2) == 0 {
			f = -f
		}
		return f
	}
	for i := 0; i < ng; i++ {
		r.Scales.Set(i, quant.FromF32(d, pow2()))
		r.Biases.Set(i, quant.FromF32(d, pow2()))
	}
	for i := 0; i < k; i++ {
		r.X.Set(i, quant.FromF32(d, float32(rng.IntN(17)-8)))
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestQMVSIMDMatchesPortable runs the assembly path and the portable Go
// path on exact inputs over every group size, unaligned K (96, 160: an odd
// group count at group size 32), every dtype and both variants, and on the
// bits that do not use assembly (they must still take the same result).
func TestQMVSIMDMatchesPortable(t *testing.T) {
	if !haveSIMD {
		t.Skip("no AVX2/FMA/F16C on this machine")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, d := range []quant.DType{quant.Float16, quant.BFloat16, quant.Float32} {
		for _, v := range []runner.Variant{runner.Promoted, runner.Narrow} {
			for _, bits := range []int{2, 3, 4, 5, 6, 8} {
				for _, g := range []int{32, 64, 128} {
					for _, k := range []int{g, 3 * g, 1024, 4096} {
						for _, n := range []int{1, 5, 67} {
							r := exactRequest(t, rng, d, v, bits, g, n, k)
							name := fmt.Sprintf("%v/%v/b%d/g%d/k%d/n%d", d, v, bits, g, k, n)
							a, err := qmv(context.Background(), r, true)
							if err != nil {
								t.Fatal(name, err)
							}
							b, err := qmv(context.Background(), r, false)
							if err != nil {
								t.Fatal(name, err)
							}
							for i := 0; i < n; i++ {
								if a.At(i) != b.At(i) {
									t.Fatalf("%s row %d: simd %#x, portable %#x", name, i, a.At(i), b.At(i))
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestQMVSIMDRandom compares the assembly and portable paths on random
// (inexact) float16 data: they may differ by rounding only.
func TestQMVSIMDRandom(t *testing.T) {
	if !haveSIMD {
		t.Skip("no AVX2/FMA/F16C on this machine")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, g := range []int{32, 64, 128} {
		const n, k = 16, 1024 + 128
		q := make([]uint8, n*k)
		for i := range q {
			q[i] = uint8(rng.IntN(16))
		}
		w, err := quant.Pack(q, n, k, 4)
		if err != nil {
			t.Fatal(err)
		}
		d := quant.Float32
		r := &runner.QMVRequest{Variant: runner.Promoted, DType: d, Bits: 4, GroupSize: g, N: n, K: k, W: w,
			Scales: runner.NewVec(d, n*k/g), Biases: runner.NewVec(d, n*k/g), X: runner.NewVec(d, k)}
		for i := 0; i < n*k/g; i++ {
			r.Scales.Set(i, math.Float32bits(float32(rng.Float64()*0.01)))
			r.Biases.Set(i, math.Float32bits(float32(rng.Float64()-0.5)))
		}
		x := make([]float64, k)
		for i := range x {
			x[i] = float64(float32(rng.NormFloat64()))
			r.X.Set(i, math.Float32bits(float32(x[i])))
		}
		a, err := qmv(context.Background(), r, true)
		if err != nil {
			t.Fatal(err)
		}
		for row := 0; row < n; row++ {
			// float64 reference from the unpacked values.
			var want, mag float64
			for c := 0; c < k; c++ {
				gi := row*(k/g) + c/g
				wv := float64(math.Float32frombits(r.Scales.At(gi)))*float64(q[row*k+c]) + float64(math.Float32frombits(r.Biases.At(gi)))
				want += wv * x[c]
				mag += math.Abs(wv * x[c])
			}
			got := float64(math.Float32frombits(a.At(row)))
			if math.Abs(got-want) > 1e-5*mag {
				t.Fatalf("g%d row %d: got %v, want %v (magnitude %v)", g, row, got, want, mag)
			}
		}
	}
}

func TestQMVCancel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	r := exactRequest(t, rng, quant.Float16, runner.Promoted, 4, 64, 512, 1024)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := qmv(ctx, r, haveSIMD); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled context: err = %v", err)
	}
}
