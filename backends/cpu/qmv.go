package cpu

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runner/quant"
)

// QMV runs y = W x over packed weights (see runner.QMVRequest): W is N x K
// (r.W holds N rows of quant.WordsPerRow(bits, K) uint32 words), x has K
// values, scales and biases are N x K/GroupSize, all of r.DType; the
// result has N values of r.DType.
//
// Semantics, per output row n and group g (U = float32):
//
//	dot  = sum over the group of U(q[k]) * x[k]   (exact integer q)
//	bsum = sum over chunks c of P consecutive x:  bsum += chunk(c)
//	       promoted: chunk = ((U(x0)+U(x1))+U(x2))+U(x3)
//	       narrow:   chunk = U(((x0+x1)+x2)+x3), every add rounded to T
//	y    = sum over g of scale*dot  +  sum over g of bias*bsum
//
// with P = quant.ChunkSize(bits), and y rounded to T (round-to-nearest-
// even) at the end. The chunked bias sums are computed exactly as above
// (their grouping is what the lanes test); the dot products and the two
// sums over groups use several partial sums and fused multiply-adds, so
// for inputs that are not exact by construction the rounding differs from
// a left-to-right evaluation (WORKLOADS.md section 2 compares bit for bit
// only on exact inputs).
//
// Work per call: x is widened to float32 once, the bias sums of every
// group are computed once (they depend only on x), and for 4 and 8 bits x
// is permuted once into the SIMD layout (see permuteX). Rows are split into
// GOMAXPROCS contiguous blocks, one goroutine each; every goroutine widens
// its row's scales and biases into its own scratch and runs the row
// kernel: AVX2/FMA assembly for 4 and 8 bits on amd64 with AVX2, FMA and
// F16C (qmv_amd64.s), unrolled Go loops for 2 bits (and for 4 and 8
// elsewhere), and a 64-bit bit-stream reader for 3, 5 and 6 bits. ctx is checked every 64 rows; it is safe for concurrent use (the
// request is only read).
func (b *Backend) QMV(ctx context.Context, r *runner.QMVRequest) (runner.Vec, error) {
	if r == nil {
		return runner.Vec{}, fmt.Errorf("cpu qmv: nil request")
	}
	if err := r.Validate(); err != nil {
		return runner.Vec{}, fmt.Errorf("cpu %w", err)
	}
	return qmv(ctx, r, haveSIMD)
}

// qmv is QMV on a validated request; simd selects the amd64 assembly
// kernels (tests compare both settings).
func qmv(ctx context.Context, r *runner.QMVRequest, simd bool) (runner.Vec, error) {
	p := newQMVPlan(r, simd)
	y := make([]float32, r.N)
	workers := runtime.GOMAXPROCS(0)
	if r.N*r.K < 1<<16 || workers == 1 || r.N < 2 {
		if err := p.rows(ctx, y, 0, r.N); err != nil {
			return runner.Vec{}, err
		}
	} else {
		workers = min(workers, r.N)
		errs := make([]error, workers)
		var wg sync.WaitGroup
		for w := range workers {
			lo, hi := w*r.N/workers, (w+1)*r.N/workers
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[w] = p.rows(ctx, y, lo, hi)
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return runner.Vec{}, err
			}
		}
	}
	out := runner.NewVec(r.DType, r.N)
	for n, v := range y {
		out.Set(n, quant.FromF32(r.DType, v))
	}
	return out, nil
}

// qmvPlan is the row-independent part of one QMV call, shared read-only by
// the row goroutines.
type qmvPlan struct {
	r       *runner.QMVRequest
	bits    int       // bits per weight
	g       int       // group size
	groups  int       // K / g
	wpr     int       // packed words per row
	x       []float32 // x widened to float32, len K
	bsum    []float32 // chunked bias sum of each group, len groups
	simd    bool      // use the amd64 AVX2/FMA/F16C kernels
	simdEnd int       // groups 0..simdEnd-1 run in assembly (4 and 8 bits), the rest in Go
	xp      []float32 // x[:simdEnd*g] in the assembly layout (see permuteX)
}

func newQMVPlan(r *runner.QMVRequest, simd bool) *qmvPlan {
	K, G := r.K, r.GroupSize
	p := &qmvPlan{r: r, simd: simd, bits: r.Bits, g: G, groups: K / G, wpr: quant.WordsPerRow(r.Bits, K)}
	p.x = make([]float32, K)
	toF32(p.x, r.X, simd)
	p.bsum = biasSums(p.x, G, quant.ChunkSize(r.Bits), r.DType, r.Variant == runner.Narrow)
	switch {
	case !simd:
	case r.Bits == 8:
		p.simdEnd = p.groups
	case r.Bits == 4 && G%64 == 0:
		p.simdEnd = p.groups
	case r.Bits == 4 && G == 32:
		p.simdEnd = p.groups &^ 1 // pairs of groups; an odd last group runs in Go
	}
	if p.simdEnd > 0 {
		p.xp = permuteX(p.x[:p.simdEnd*G], 32/r.Bits)
	}
	return p
}

// permuteX returns x in the layout of the assembly kernels, for per values
// per packed word (8 for 4 bits, 4 for 8 bits): x is cut into blocks of
// 8*per values (the weights of 8 words, one YMM register; len(x) is a
// multiple of it), and within a block xp[8j+i] = x[per*i+j], so that the 8
// values multiplied by field j of the 8 words are contiguous.
func permuteX(x []float32, per int) []float32 {
	xp := make([]float32, len(x))
	bs := 8 * per
	for b := 0; b < len(x); b += bs {
		src, dst := x[b:b+bs:b+bs], xp[b:b+bs:b+bs]
		for i := range 8 {
			for j := range per {
				dst[8*j+i] = src[per*i+j]
			}
		}
	}
	return xp
}

// toF32 widens the raw values of v into dst (len v.Len()); float16 uses
// VCVTPH2PS when simd is set (bit-identical to quant.ToF32, see the tests).
func toF32(dst []float32, v runner.Vec, simd bool) {
	switch v.DType {
	case quant.Float16:
		i := 0
		if simd {
			i = len(dst) &^ 7
			f16ToF32AVX(dst[:i], v.B16)
		}
		for ; i < len(dst); i++ {
			dst[i] = quant.F16ToF32(v.B16[i])
		}
	case quant.BFloat16:
		for i, b := range v.B16[:len(dst)] {
			dst[i] = math.Float32frombits(uint32(b) << 16)
		}
	default:
		for i, b := range v.B32[:len(dst)] {
			dst[i] = math.Float32frombits(b)
		}
	}
}

// sliceVec returns values [lo, hi) of v.
func sliceVec(v runner.Vec, lo, hi int) runner.Vec {
	if v.DType == quant.Float32 {
		return runner.Vec{DType: v.DType, B32: v.B32[lo:hi]}
	}
	return runner.Vec{DType: v.DType, B16: v.B16[lo:hi]}
}

// rows computes y[lo:hi] in float32, checking ctx every 64 rows.
func (p *qmvPlan) rows(ctx context.Context, y []float32, lo, hi int) error {
	scales := make([]float32, p.groups)
	biases := make([]float32, p.groups)
	for n := lo; n < hi; n++ {
		if (n-lo)%64 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		toF32(scales, sliceVec(p.r.Scales, n*p.groups, (n+1)*p.groups), p.simd)
		toF32(biases, sliceVec(p.r.Biases, n*p.groups, (n+1)*p.groups), p.simd)
		y[n] = p.row(p.r.W[n*p.wpr:(n+1)*p.wpr], scales, biases)
	}
	return nil
}

// row computes one output row in float32: w is the row's packed words,
// scales and biases its per-group values (len groups).
func (p *qmvPlan) row(w []uint32, scales, biases []float32) float32 {
	var ys float32 // sum of scale*dot
	wpg := p.g * p.bits / 32
	g0 := p.simdEnd
	switch {
	case g0 == 0:
	case p.bits == 8:
		ys = dot8AVX2(w[:g0*wpg], p.xp, scales[:g0], p.g/32)
	case p.g == 32:
		ys = dot4G32AVX2(w[:g0*wpg], p.xp, scales[:g0])
	default:
		ys = dot4G64AVX2(w[:g0*wpg], p.xp, scales[:g0], p.g/64)
	}
	for g := g0; g < p.groups; g++ {
		gw := w[g*wpg : (g+1)*wpg]
		gx := p.x[g*p.g : (g+1)*p.g]
		var dot float32
		switch p.bits {
		case 4:
			dot = dot4(gw, gx)
		case 2:
			dot = dot2(gw, gx)
		case 8:
			dot = dot8(gw, gx)
		default:
			dot = dotStream(gw, gx, p.bits)
		}
		ys = float32(ys + float32(scales[g]*dot))
	}
	return float32(ys + biasDot(biases, p.bsum))
}

// biasDot returns sum over g of biases[g]*bsum[g] (len(bsum) >= len(biases))
// with four partial sums.
func biasDot(biases, bsum []float32) float32 {
	bsum = bsum[:len(biases)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(biases); i += 4 {
		s0 += biases[i] * bsum[i]
		s1 += biases[i+1] * bsum[i+1]
		s2 += biases[i+2] * bsum[i+2]
		s3 += biases[i+3] * bsum[i+3]
	}
	for ; i < len(biases); i++ {
		s0 += biases[i] * bsum[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// biasSums returns the bias sum of every group of x: chunks of p values
// added left to right, in float32 (promoted) or with every add rounded to
// the dtype (narrow); chunk results are added to the group's sum in order.
func biasSums(x []float32, groupSize, p int, d quant.DType, narrow bool) []float32 {
	out := make([]float32, len(x)/groupSize)
	for g := range out {
		var sum float32
		for c := g * groupSize; c < (g+1)*groupSize; c += p {
			s := x[c]
			for i := 1; i < p; i++ {
				if narrow {
					s = quant.RoundTo(d, s+x[c+i])
				} else {
					s = float32(s + x[c+i])
				}
			}
			sum = float32(sum + s)
		}
		out[g] = sum
	}
	return out
}

// dot4 returns the dot product of the 4-bit values in w with x (len 8*len(w)).
func dot4(w []uint32, x []float32) float32 {
	var d0, d1, d2, d3 float32
	for i, v := range w {
		xs := x[i*8 : i*8+8 : i*8+8]
		d0 += float32(v&15)*xs[0] + float32(v>>4&15)*xs[1]
		d1 += float32(v>>8&15)*xs[2] + float32(v>>12&15)*xs[3]
		d2 += float32(v>>16&15)*xs[4] + float32(v>>20&15)*xs[5]
		d3 += float32(v>>24&15)*xs[6] + float32(v>>28)*xs[7]
	}
	return (d0 + d1) + (d2 + d3)
}

// dot2 returns the dot product of the 2-bit values in w with x (len 16*len(w)).
func dot2(w []uint32, x []float32) float32 {
	var d0, d1, d2, d3 float32
	for i, v := range w {
		xs := x[i*16 : i*16+16 : i*16+16]
		d0 += float32(v&3)*xs[0] + float32(v>>2&3)*xs[1] + float32(v>>4&3)*xs[2] + float32(v>>6&3)*xs[3]
		d1 += float32(v>>8&3)*xs[4] + float32(v>>10&3)*xs[5] + float32(v>>12&3)*xs[6] + float32(v>>14&3)*xs[7]
		d2 += float32(v>>16&3)*xs[8] + float32(v>>18&3)*xs[9] + float32(v>>20&3)*xs[10] + float32(v>>22&3)*xs[11]
		d3 += float32(v>>24&3)*xs[12] + float32(v>>26&3)*xs[13] + float32(v>>28&3)*xs[14] + float32(v>>30)*xs[15]
	}
	return (d0 + d1) + (d2 + d3)
}

// dot8 returns the dot product of the 8-bit values in w with x (len 4*len(w)).
func dot8(w []uint32, x []float32) float32 {
	var d0, d1, d2, d3 float32
	for i, v := range w {
		xs := x[i*4 : i*4+4 : i*4+4]
		d0 += float32(v&255) * xs[0]
		d1 += float32(v>>8&255) * xs[1]
		d2 += float32(v>>16&255) * xs[2]
		d3 += float32(v>>24) * xs[3]
	}
	return (d0 + d1) + (d2 + d3)
}

// dotStream reads values of bits bits from the little-endian stream w with
// a 64-bit buffer (values of 3, 5 and 6 bits straddle words).
func dotStream(w []uint32, x []float32, bits int) float32 {
	mask := uint64(1)<<bits - 1
	var buf uint64
	var have, wi int
	var d0, d1 float32
	for j := 0; j+1 < len(x); j += 2 {
		if have < 2*bits {
			buf |= uint64(w[wi]) << have
			wi++
			have += 32
		}
		d0 += float32(buf&mask) * x[j]
		d1 += float32(buf>>bits&mask) * x[j+1]
		buf >>= 2 * bits
		have -= 2 * bits
	}
	return d0 + d1
}
