package quant

import (
	"fmt"
	"math"
)

// quantizeEps is the floor on a group's scale magnitude (MLX uses 1e-7).
const quantizeEps = float32(1e-7)

// Quantized is an affine-quantized n x k weight matrix: Q holds the
// unpacked values (row-major, each < 2^Bits), W the packed words (n rows of
// WordsPerRow(Bits, K)), Scales and Biases n x K/GroupSize float32 values
// (cast them to the activation dtype with FromF32 before use). The
// dequantized weight is Scales*q + Biases.
type Quantized struct {
	Bits, GroupSize, N, K int
	Q                     []uint8
	W                     []uint32
	Scales, Biases        []float32
}

// Quantize affinely quantizes w (n x k, row-major) with the "edge"
// formulation of MLX's affine_quantize (mlx/ops.cpp, v0.32.x), in float32:
//
//	nbins = 2^bits - 1
//	scale = max((max-min)/nbins, 1e-7), negated unless |min| > |max|
//	edge  = min if |min| > |max| else max
//	q0    = round(edge/scale)            (ties to even)
//	scale = edge/q0 if q0 != 0;  bias = edge if q0 != 0 else 0
//	q     = clamp(round((w-bias)/scale), 0, nbins)
//
// so the group's edge value (the one of larger magnitude) is represented
// exactly by q = 0. Non-finite weights are rejected.
func Quantize(w []float32, n, k, groupSize, bits int) (*Quantized, error) {
	if err := CheckShape(bits, groupSize, n, k); err != nil {
		return nil, fmt.Errorf("quantize: %w", err)
	}
	if len(w) != n*k {
		return nil, fmt.Errorf("quantize: %d weights for a %dx%d matrix", len(w), n, k)
	}
	nbins := float32(int(1)<<bits - 1)
	groups := k / groupSize
	out := &Quantized{Bits: bits, GroupSize: groupSize, N: n, K: k,
		Q: make([]uint8, n*k), Scales: make([]float32, n*groups), Biases: make([]float32, n*groups)}
	for gi := 0; gi < n*groups; gi++ {
		vals := w[gi*groupSize : (gi+1)*groupSize]
		wmax, wmin := vals[0], vals[0]
		for i, v := range vals {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return nil, fmt.Errorf("quantize: weight %d is not finite", gi*groupSize+i)
			}
			wmax = max(wmax, v)
			wmin = min(wmin, v)
		}
		mask := abs32(wmin) > abs32(wmax)
		scale := max((wmax-wmin)/nbins, quantizeEps)
		edge := wmax
		if mask {
			edge = wmin
		} else {
			scale = -scale
		}
		q0 := float32(math.RoundToEven(float64(edge / scale)))
		bias := float32(0)
		if q0 != 0 {
			scale = edge / q0
			bias = edge
		}
		out.Scales[gi], out.Biases[gi] = scale, bias
		for i, v := range vals {
			q := math.RoundToEven(float64((v - bias) / scale))
			q = math.Min(math.Max(q, 0), float64(nbins))
			out.Q[gi*groupSize+i] = uint8(q)
		}
	}
	var err error
	if out.W, err = Pack(out.Q, n, k, bits); err != nil {
		return nil, err
	}
	return out, nil
}

func abs32(f float32) float32 { return float32(math.Abs(float64(f))) }
