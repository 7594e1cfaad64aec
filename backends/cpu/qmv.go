package cpu

import (
	"context"
	"fmt"
	"runtime"
	"sync"

	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runner/quant"
)

// QMV runs y = W x over packed weights (see runner.QMVRequest).
//
// Semantics, per output row n and group g (U = float32):
//
//	dot  = sum over the group of U(q[k]) * x[k]   (exact integer q)
//	bsum = sum over chunks c of P consecutive x:  bsum += chunk(c)
//	       promoted: chunk = ((U(x0)+U(x1))+U(x2))+U(x3)
//	       narrow:   chunk = U(((x0+x1)+x2)+x3), every add rounded to T
//	y   += scale*dot + bias*bsum
//
// with P = quant.ChunkSize(bits), and y rounded to T (round-to-nearest-
// even) at the end. bsum depends only on x, so it is computed once per
// group and shared by all rows. Rows are split into contiguous blocks, one
// goroutine per GOMAXPROCS; the weight words are unpacked with shifts
// (specialised loops for 2, 4 and 8 bits, a 64-bit bit-stream reader for
// 3, 5 and 6). The dot product uses several partial sums, so for inputs
// that are not exact its rounding differs from a left-to-right sum.
func (b *Backend) QMV(ctx context.Context, r *runner.QMVRequest) (runner.Vec, error) {
	if r == nil {
		return runner.Vec{}, fmt.Errorf("cpu qmv: nil request")
	}
	if err := r.Validate(); err != nil {
		return runner.Vec{}, fmt.Errorf("cpu %w", err)
	}
	K, N, G := r.K, r.N, r.GroupSize
	groups := K / G
	x := make([]float32, K)
	for k := range x {
		x[k] = quant.ToF32(r.DType, r.X.At(k))
	}
	bsum := biasSums(x, G, quant.ChunkSize(r.Bits), r.DType, r.Variant == runner.Narrow)
	scales := make([]float32, N*groups)
	biases := make([]float32, N*groups)
	for i := range scales {
		scales[i] = quant.ToF32(r.DType, r.Scales.At(i))
		biases[i] = quant.ToF32(r.DType, r.Biases.At(i))
	}
	y := make([]float32, N)
	wpr := quant.WordsPerRow(r.Bits, K)
	rowFn := func(lo, hi int) {
		for n := lo; n < hi; n++ {
			y[n] = qmvRow(r.W[n*wpr:(n+1)*wpr], x, scales[n*groups:(n+1)*groups], biases[n*groups:(n+1)*groups], bsum, r.Bits, G)
		}
	}
	workers := runtime.GOMAXPROCS(0)
	if N*K < 1<<16 || workers == 1 {
		rowFn(0, N)
	} else {
		// Blocks of rows, several per worker so that cancellation is seen
		// and uneven cores balance.
		block := max(1, N/(workers*8))
		var next int
		var mu sync.Mutex
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					mu.Lock()
					lo := next
					next += block
					mu.Unlock()
					if lo >= N {
						return
					}
					rowFn(lo, min(lo+block, N))
				}
			}()
		}
		wg.Wait()
		if err := ctx.Err(); err != nil {
			return runner.Vec{}, err
		}
	}
	out := runner.NewVec(r.DType, N)
	for n, v := range y {
		out.Set(n, quant.FromF32(r.DType, v))
	}
	return out, nil
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

// qmvRow computes one output row in float32.
func qmvRow(w []uint32, x, scales, biases, bsum []float32, bits, groupSize int) float32 {
	wpg := groupSize * bits / 32
	var y float32
	for g := range scales {
		gw := w[g*wpg : (g+1)*wpg]
		gx := x[g*groupSize : (g+1)*groupSize]
		var dot float32
		switch bits {
		case 4:
			dot = dot4(gw, gx)
		case 2:
			dot = dot2(gw, gx)
		case 8:
			dot = dot8(gw, gx)
		default:
			dot = dotStream(gw, gx, bits)
		}
		y = float32(y + float32(scales[g]*dot) + float32(biases[g]*bsum[g]))
	}
	return y
}

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
