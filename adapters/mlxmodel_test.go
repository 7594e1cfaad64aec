package adapters_test

import (
	"fmt"
	"math"
	"math/big"

	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runner/quant"
)

// This file is an exact model of the arithmetic of MLX 0.32.4's CPU
// backend for mlx.core.quantized_matmul(x, w, scales, biases,
// transpose=True) with x of shape (1, K), as built in the Linux x86-64
// wheel (mlx-cpu). It shares nothing with the ledger's reference or
// kernels: it decodes the raw request itself and computes with big.Rat
// and its own rounding. Facts, from ml-explore/mlx (main at 846d176, the
// newest source at hand: it has no v0.32.4 tag; the wheel ships the
// headers named here, byte-identical to that commit's, and its libmlx.so
// symbols show the path):
//
//   - QuantizedMatmul::eval_cpu (mlx/backend/cpu/quantized.cpp:924-951)
//     calls _qmm_dispatch, which picks T = float, float16_t or bfloat16_t
//     by x's dtype (:430-441); _qmm_dispatch_transpose (:297-303) takes
//     _qmm_t_simd (float accumulator) only when
//     simd::max_size<T> % (32/bits) == 0, else _qmm_t. On Linux x86-64
//     simd/type.h includes only base_simd.h (accelerate_simd.h is Apple
//     and NEON only), whose max_size<T> is 1 (base_simd.h:24), so every
//     bits width takes _qmm_t; libmlx.so holds _qmm_t<_MLX_Float16, 4, 64>
//     and its siblings for 1, 2 and 4 bits as functions of their own.
//   - _qmm_t (quantized.cpp:154-212): per output n, T sum = 0, then for k
//     in increasing order sum += x[k] * (scale * T(q[k]) + bias), every
//     operand of type T (:188 for 3/5/6 bits, :197-198 for 2/4/8 bits),
//     and the result is sum itself (:206): no float accumulator.
//   - T = float16_t/bfloat16_t is the struct _MLX_Float16/_MLX_BFloat16
//     on x86 (types/half_types.h: no __ARM_FEATURE_FP16_SCALAR_ARITHMETIC
//     or __ARM_FEATURE_BF16). Each binary operator on two halves computes
//     in float and returns a half (types/fp16.h:133-135, bf16.h:86-88);
//     `half += half` is `lhs = float(lhs) + float(rhs)` rounded back
//     (fp16.h:177-187). So each of the four operations of a term is
//     rounded to float, then to T, round-to-nearest-even (fp16.h:42-85,
//     bf16.h:42-58), overflow to infinity.
//
// Terms with x[k] == 0 are skipped: their w_hat is finite (checked), so
// the term is ±0, and sum + ±0 == sum for every sum the loop can hold (sum
// starts at +0 and +0 + -0 == +0, so sum is never -0).

// fpFormat is a binary floating-point format: p significand bits
// (with the implicit one), emin the smallest normal exponent, max the
// largest finite value.
type fpFormat struct {
	p, emin int
	max     float64
}

var (
	fmtF16  = fpFormat{11, -14, 65504}
	fmtBF16 = fpFormat{8, -126, math.Ldexp(255, 120)}
	fmtF32  = fpFormat{24, -126, math.MaxFloat32}
)

func formatOf(d quant.DType) fpFormat {
	switch d {
	case quant.Float16:
		return fmtF16
	case quant.BFloat16:
		return fmtBF16
	}
	return fmtF32
}

// roundRat rounds r to format f, to nearest, ties to even, with
// subnormals and overflow to ±Inf; the result is exact in a float64.
func roundRat(r *big.Rat, f fpFormat) float64 {
	if r.Sign() == 0 {
		return 0
	}
	a := new(big.Rat).Abs(r)
	// e = floor(log2 a).
	e := a.Num().BitLen() - a.Denom().BitLen()
	if a.Cmp(pow2(e)) < 0 {
		e--
	}
	u := max(e, f.emin) - (f.p - 1) // exponent of one unit in the last place
	s := new(big.Rat).Mul(a, pow2(-u))
	n, rem := new(big.Int).QuoRem(s.Num(), s.Denom(), new(big.Int))
	// Compare the remainder with half the denominator.
	switch c := new(big.Int).Lsh(rem, 1).Cmp(s.Denom()); {
	case c > 0, c == 0 && n.Bit(0) == 1:
		n.Add(n, big.NewInt(1))
	}
	v, _ := new(big.Float).SetInt(n).Float64() // n <= 2^p: exact
	v = math.Ldexp(v, u)
	if v > f.max {
		v = math.Inf(1)
	}
	if r.Sign() < 0 {
		v = -v
	}
	return v
}

func pow2(e int) *big.Rat {
	if e >= 0 {
		return new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), uint(e)))
	}
	return new(big.Rat).SetFrac(big.NewInt(1), new(big.Int).Lsh(big.NewInt(1), uint(-e)))
}

func ratOf(v float64) *big.Rat { return new(big.Rat).SetFloat64(v) }

// mlxOp is one MLX CPU operation on two values of T: exact result, rounded
// to float, then to T; infinities propagate (NaN where IEEE gives NaN).
func mlxOp(a, b float64, mul bool, t fpFormat) float64 {
	if math.IsInf(a, 0) || math.IsInf(b, 0) || math.IsNaN(a) || math.IsNaN(b) {
		if mul {
			return a * b
		}
		return a + b
	}
	var r *big.Rat
	if mul {
		r = new(big.Rat).Mul(ratOf(a), ratOf(b))
	} else {
		r = new(big.Rat).Add(ratOf(a), ratOf(b))
	}
	return roundRat(ratOf(roundRat(r, fmtF32)), t)
}

// decodeValue is the value of raw bits of dtype d.
func decodeValue(d quant.DType, b uint32) float64 {
	switch d {
	case quant.Float16:
		sign := 1.0
		if b&0x8000 != 0 {
			sign = -1
		}
		e, m := int(b>>10&0x1f), float64(b&0x3ff)
		switch e {
		case 0:
			return sign * math.Ldexp(m, -24)
		case 0x1f:
			if m != 0 {
				return math.NaN()
			}
			return math.Inf(int(sign))
		}
		return sign * math.Ldexp(1024+m, e-25)
	case quant.BFloat16:
		return float64(math.Float32frombits(b << 16))
	}
	return float64(math.Float32frombits(b))
}

// unpackQ reads element k of row n: bits [k*bits, (k+1)*bits) of the row's
// little-endian bit stream of uint32 words (WORKLOADS.md section 1).
func unpackQ(w []uint32, bits, k, n, kk int) uint32 {
	words := kk * bits / 32
	off := k * bits
	var v uint64
	for i := 0; i < 2 && off/32+i < words; i++ {
		v |= uint64(w[n*words+off/32+i]) << (32 * i)
	}
	return uint32(v>>(off%32)) & (1<<bits - 1)
}

// mlxPrediction is the model's prediction for one case.
type mlxPrediction struct {
	Exact bool
	// Row is the first row whose output differs from the exact value
	// (when not Exact), Want the exact value rounded to T, Got MLX's.
	Row       int
	Want, Got float64
	// Why names the first inexact operation of that row.
	Why string
}

// predictMLXCPU runs the model over one request.
func predictMLXCPU(r *runner.QMVRequest) (mlxPrediction, error) {
	return predictMLX(r, false)
}

// predictMLX runs the model; with floatAcc it models instead a float
// accumulator for 2, 4 and 8 bits (w_hat, products and sum in float, one
// rounding to T at the end, as _qmm_t_simd does where simd::max_size<T>
// allows it: quantized.cpp:239-284), the hypothesis the lanes must tell
// from the x86 build's behaviour.
func predictMLX(r *runner.QMVRequest, floatAcc bool) (mlxPrediction, error) {
	t := formatOf(r.DType)
	acc := t
	if floatAcc && (r.Bits == 2 || r.Bits == 4 || r.Bits == 8) {
		acc = fmtF32
	}
	groups := r.K / r.GroupSize
	x := make([]float64, r.K)
	for k := range x {
		x[k] = decodeValue(r.DType, r.X.At(k))
	}
	for n := 0; n < r.N; n++ {
		sum := 0.0
		exact := new(big.Rat)
		why := ""
		for k := 0; k < r.K; k++ {
			g := n*groups + k/r.GroupSize
			s, b := decodeValue(r.DType, r.Scales.At(g)), decodeValue(r.DType, r.Biases.At(g))
			q := float64(unpackQ(r.W, r.Bits, k, n, r.K))
			if x[k] == 0 {
				// w_hat, however rounded, stays below this bound: finite.
				if math.Abs(s)*q+math.Abs(b) >= t.max/2 {
					return mlxPrediction{}, fmt.Errorf("row %d k %d: w_hat %g*%g + %g may overflow: the skip of x == 0 terms does not hold", n, k, s, q, b)
				}
				continue
			}
			sq := mlxOp(s, q, true, acc)
			wh := mlxOp(sq, b, false, acc)
			whExact := new(big.Rat).Add(new(big.Rat).Mul(ratOf(s), ratOf(q)), ratOf(b))
			term := new(big.Rat).Mul(ratOf(x[k]), whExact)
			exact.Add(exact, term)
			pr := mlxOp(x[k], wh, true, acc)
			prev := sum
			sum = mlxOp(sum, pr, false, acc)
			if why == "" {
				switch {
				case sq != s*q || ratOf(wh).Cmp(whExact) != 0:
					why = fmt.Sprintf("w_hat at k=%d: %g*%g + %g = %s rounds to %g in %v", k, s, q, b, whExact.FloatString(10), wh, r.DType)
				case math.IsInf(pr, 0) || ratOf(pr).Cmp(term) != 0:
					why = fmt.Sprintf("x*w_hat at k=%d: %g*%g rounds to %g in %v", k, x[k], wh, pr, r.DType)
				case math.IsInf(sum, 0):
					why = fmt.Sprintf("running sum at k=%d: %g + %g overflows %v", k, prev, pr, r.DType)
				case new(big.Rat).Add(ratOf(prev), ratOf(pr)).Cmp(ratOf(sum)) != 0:
					why = fmt.Sprintf("running sum at k=%d: %g + %g rounds to %g in %v", k, prev, pr, sum, r.DType)
				}
			}
		}
		if acc != t {
			sum = roundRat(ratOf(sum), t)
		}
		want := roundRat(exact, t)
		if want != sum || math.Signbit(want) != math.Signbit(sum) {
			return mlxPrediction{Row: n, Want: want, Got: sum, Why: why}, nil
		}
	}
	return mlxPrediction{Exact: true}, nil
}
