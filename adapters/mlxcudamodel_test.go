package adapters_test

import (
	"fmt"
	"math"
	"math/big"

	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runner/quant"
)

// This file is an exact model of MLX's CUDA qmv kernel, which
// mlx.core.quantized_matmul(x, w, scales, biases, transpose=True) runs
// for x of shape (1, K) on the GPU stream of the mlx-cuda-13 wheel.
// Source: mlx/backend/cuda/quantized/qmm/qmv.cu of ml-explore/mlx main
// at 846d176 (the newest source at hand; the 0.32.4 wheel ships no .cu
// files, and its libmlx.so holds qmv_kernel instantiations whose template
// arguments and parameter lists are that file's:
// qmv_kernel<8, 16|8, g, true, residue, T, Q, T>(x, w, scales, biases,
// global_scale, out, n, k, broadcast_w)). Line numbers are that file's.
//
//   - qmv (:258-294): one warp of 32 threads per output row;
//     elems_per_thread E = 16 when T is 16 bits wide and bits <= 4, else
//     8 (:272-273).
//   - qmv_kernel_impl (:92-169): each thread keeps E running sums,
//     sums[E] of type float for bits >= 8 and of type T otherwise (:121,
//     since "[CUDA] Use fp16 accumulation for 4-bit quant in GEMV",
//     3b3590b, 2026-03; 3/5/6 bits since 9d03a1b). Thread t handles the
//     tiles k0 = t*E + r*32E (:135-138), then, when K % 32E != 0, the tile
//     at t*E + K - K%32E if it starts below K (:141-147). Element k0+i of a
//     tile goes to sums[i], with the tile's scale and bias
//     (scales[k0/group_size], :124-128).
//   - dequant_fma (:20-47, sums of T): w_dq = T(q) * scale + bias in T
//     (:39, CUTLASS's Array<T> operators), then
//     sums = fma(x, w_dq, sums) in T (:46; CUTLASS multiply_add: __hfma2
//     for half_t, fma.rn.bf16x2 for bfloat16_t, one rounding each).
//     The float-sums variant (:49-82, bits = 8 with T half/bfloat16)
//     dequantizes in T the same way (:69), widens x and w_dq to float
//     (:76-78) and does fma in float (:81). For T = float (:33-37) all of
//     it is float.
//   - Afterwards each thread adds its E sums in float, in order from 0
//     (:150-154), the warp adds the 32 partial sums in float
//     (cg::reduce, :155), and lane 0 stores static_cast<T>(sum) (:167).
//
// So, per output, every nonzero term x[k]*w_hat[k] is rounded to T once
// (bits 2-6, half/bfloat16) by the fma into its T running sum, or is
// exact in float (bits 8, and float32); a running sum in T holds more than
// one nonzero term only where two nonzero x lie 32E apart.
//
// Where the source leaves a choice open, the model takes both and refuses
// to predict if they differ: w_dq as two roundings (scale*q, then +bias)
// or one (the compiler may contract __hmul2 and __hadd2); the warp
// reduction order (checked against a left-to-right sum). On exact-by-
// construction lanes neither matters, and the model says so by predicting.

// cudaFMA rounds the exact value a*b+c (an fma) to format f; infinities
// propagate as IEEE does.
func cudaFMA(a, b, c float64, f fpFormat) float64 {
	if math.IsInf(a, 0) || math.IsInf(b, 0) || math.IsInf(c, 0) || math.IsNaN(a) || math.IsNaN(b) || math.IsNaN(c) {
		return a*b + c
	}
	if f == fmtF32 && a == 1 {
		// A float add of two floats: when float64's sum is exact (TwoSum's
		// error term is zero), Go's conversion rounds it to float32 once,
		// to nearest even, overflowing to infinity.
		if s := b + c; s-b == c && s-c == b {
			return float64(float32(s))
		}
	}
	r := new(big.Rat).Mul(ratOf(a), ratOf(b))
	return roundRat(r.Add(r, ratOf(c)), f)
}

// predictMLXCUDA runs the model over one request: the prediction, and
// every row's output value. With floatSums it models instead float
// running sums for every bits width (the kernel before 3b3590b: "float
// sums[elems_per_thread]", w_dq in T, x and w_dq widened, fma in float).
func predictMLXCUDA(r *runner.QMVRequest, floatSums bool) (mlxPrediction, []float64, error) {
	t := formatOf(r.DType)
	f32 := r.DType == quant.Float32
	e := 8
	if !f32 && r.Bits <= 4 {
		e = 16
	}
	acc := fmtF32
	if !floatSums && r.Bits < 8 && !f32 {
		acc = t
	}
	perWarp := 32 * e
	groups := r.K / r.GroupSize
	x := make([]float64, r.K)
	for k := range x {
		x[k] = decodeValue(r.DType, r.X.At(k))
	}
	outs := make([]float64, r.N)
	var pred *mlxPrediction
	for n := 0; n < r.N; n++ {
		var sums [32][16]float64
		why := ""
		exact := new(big.Rat)
		tile := func(lane, k0 int) error {
			g := n*groups + k0/r.GroupSize
			s, b := decodeValue(r.DType, r.Scales.At(g)), decodeValue(r.DType, r.Biases.At(g))
			for i := 0; i < e; i++ {
				k := k0 + i
				q := float64(unpackQ(r.W, r.Bits, k, n, r.K))
				if x[k] == 0 {
					// fma(±0, w_dq, sum) == sum for a finite w_dq.
					if math.Abs(s)*q+math.Abs(b) >= t.max/2 {
						return fmt.Errorf("row %d k %d: w_hat %g*%g + %g may overflow: the skip of x == 0 terms does not hold", n, k, s, q, b)
					}
					continue
				}
				two := mlxOp(mlxOp(s, q, true, t), b, false, t)
				one := cudaFMA(s, q, b, t)
				if two != one {
					return fmt.Errorf("row %d k %d: w_hat %g*%g + %g is %g with two roundings and %g with one: the model cannot tell which the kernel does", n, k, s, q, b, two, one)
				}
				whExact := new(big.Rat).Add(new(big.Rat).Mul(ratOf(s), ratOf(q)), ratOf(b))
				term := new(big.Rat).Mul(ratOf(x[k]), whExact)
				exact.Add(exact, term)
				prev := sums[lane][i]
				sums[lane][i] = cudaFMA(x[k], one, prev, acc)
				if why == "" {
					name := "float"
					if acc == t && !f32 {
						name = r.DType.String()
					}
					sumExact := new(big.Rat).Add(new(big.Rat).Mul(ratOf(x[k]), ratOf(one)), ratOf(prev))
					switch {
					case ratOf(one).Cmp(whExact) != 0:
						why = fmt.Sprintf("w_hat at k=%d: %g*%g + %g = %s rounds to %g in %v", k, s, q, b, whExact.FloatString(10), one, r.DType)
					case math.IsInf(sums[lane][i], 0):
						why = fmt.Sprintf("sums[%d] of thread %d at k=%d: %g*%g + %g overflows %s", i, lane, k, x[k], one, prev, name)
					case ratOf(sums[lane][i]).Cmp(sumExact) != 0:
						why = fmt.Sprintf("sums[%d] of thread %d at k=%d: fma(%g, %g, %g) = %s rounds to %g in %s", i, lane, k, x[k], one, prev, sumExact.FloatString(10), sums[lane][i], name)
					}
				}
			}
			return nil
		}
		for rr := 0; rr < r.K/perWarp; rr++ {
			for lane := 0; lane < 32; lane++ {
				if err := tile(lane, lane*e+rr*perWarp); err != nil {
					return mlxPrediction{}, nil, err
				}
			}
		}
		if rest := r.K % perWarp; rest != 0 {
			for lane := 0; lane < 32; lane++ {
				if k0 := lane*e + r.K - rest; k0 < r.K {
					if k0+e > r.K {
						return mlxPrediction{}, nil, fmt.Errorf("K %d: the residue tile at %d reads past K", r.K, k0)
					}
					if err := tile(lane, k0); err != nil {
						return mlxPrediction{}, nil, err
					}
				}
			}
		}
		// Each thread's float sum (:150-154), then the warp's (:155).
		var part [32]float64
		for lane := range part {
			for i := 0; i < e; i++ {
				part[lane] = cudaFMA(1, part[lane], sums[lane][i], fmtF32)
			}
		}
		seq := 0.0
		for _, v := range part {
			seq = cudaFMA(1, seq, v, fmtF32)
		}
		tree := part
		for off := 16; off >= 1; off /= 2 {
			var nx [32]float64
			for l := range tree {
				nx[l] = cudaFMA(1, tree[l], tree[l^off], fmtF32)
			}
			tree = nx
		}
		if tree[0] != seq && !(math.IsNaN(tree[0]) && math.IsNaN(seq)) {
			return mlxPrediction{}, nil, fmt.Errorf("row %d: the warp's float sum depends on its order (%g tree, %g in order)", n, tree[0], seq)
		}
		got := tree[0]
		if !math.IsNaN(got) && !math.IsInf(got, 0) {
			got = roundRat(ratOf(got), t)
		}
		if why == "" && !math.IsInf(got, 0) && !math.IsNaN(got) && ratOf(got).Cmp(exact) != 0 {
			why = fmt.Sprintf("the float sum %g rounds to %g in %v", tree[0], got, r.DType)
		}
		outs[n] = got
		want := roundRat(exact, t)
		if pred == nil && (want != got || math.Signbit(want) != math.Signbit(got)) {
			pred = &mlxPrediction{Row: n, Want: want, Got: got, Why: why}
		}
	}
	if pred == nil {
		return mlxPrediction{Exact: true}, outs, nil
	}
	return *pred, outs, nil
}
