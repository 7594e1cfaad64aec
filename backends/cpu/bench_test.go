package cpu_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runner/alloc"
	"github.com/evidence-ledger/ledger/runner/quant"
)

// benchRequest is a promoted float16 request of n x k random weights of
// the given bits, group size 64.
func benchRequest(b *testing.B, n, k, bits int) *runner.QMVRequest {
	rng := rand.New(rand.NewPCG(1, 1))
	const g = 64
	q := make([]uint8, n*k)
	for i := range q {
		q[i] = uint8(rng.IntN(1 << bits))
	}
	w, err := quant.Pack(q, n, k, bits)
	if err != nil {
		b.Fatal(err)
	}
	r := &runner.QMVRequest{Variant: runner.Promoted, DType: quant.Float16, Bits: bits, GroupSize: g, N: n, K: k, W: w,
		Scales: runner.NewVec(quant.Float16, n*k/g), Biases: runner.NewVec(quant.Float16, n*k/g), X: runner.NewVec(quant.Float16, k)}
	for i := 0; i < n*k/g; i++ {
		r.Scales.Set(i, uint32(quant.F32ToF16(float32(rng.Float64()*0.01))))
		r.Biases.Set(i, uint32(quant.F32ToF16(float32(rng.Float64()-0.5))))
	}
	for i := 0; i < k; i++ {
		r.X.Set(i, uint32(quant.F32ToF16(float32(rng.NormFloat64()))))
	}
	return r
}

// BenchmarkQMV reports GB/s of packed weights read (SetBytes = weight
// bytes), 4-bit, group 64, float16 input.
func BenchmarkQMV(b *testing.B) {
	be := newBackend(b)
	for _, sz := range []int{4096, 8192} {
		r := benchRequest(b, sz, sz, 4)
		b.Run(fmt.Sprintf("%dx%d", sz, sz), func(b *testing.B) {
			b.SetBytes(int64(4 * len(r.W)))
			for i := 0; i < b.N; i++ {
				if _, err := be.QMV(context.Background(), r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBitWidths covers the other bit widths at 4096x4096, group 64,
// float16 (MB/s of packed weights): 4 bits runs the AVX2 kernel on amd64,
// the others the portable Go loops.
func BenchmarkBitWidths(b *testing.B) {
	be := newBackend(b)
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		r := benchRequest(b, 4096, 4096, bits)
		b.Run(fmt.Sprintf("b%d", bits), func(b *testing.B) {
			b.SetBytes(int64(4 * len(r.W)))
			for i := 0; i < b.N; i++ {
				if _, err := be.QMV(context.Background(), r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMemcpy is the memory bandwidth reference: copy() of a buffer of
// the same size as the packed weights (SetBytes = bytes read).
func BenchmarkMemcpy(b *testing.B) {
	for _, sz := range []int{4096, 8192} {
		n := sz * sz / 2
		src, dst := make([]byte, n), make([]byte, n)
		for i := range src {
			src[i] = byte(i)
		}
		b.Run(fmt.Sprintf("%dx%d", sz, sz), func(b *testing.B) {
			b.SetBytes(int64(n))
			for i := 0; i < b.N; i++ {
				copy(dst, src)
			}
		})
	}
}

func BenchmarkSnapshot(b *testing.B) {
	a, err := alloc.New(newBackend(b), alloc.Options{Rules: alloc.RulesCPU, MemoryLimit: 64 * alloc.MiB})
	if err != nil {
		b.Fatal(err)
	}
	buf, _ := a.Malloc(4096)
	defer a.Free(buf)
	b.Run("coherent", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			_ = a.Snapshot()
		}
	})
	b.Run("one-by-one", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			_ = a.ReadOneByOne(nil)
		}
	})
}

func BenchmarkLane(b *testing.B) {
	be := newBackend(b)
	for _, l := range runner.DefaultLanes() {
		b.Run(l.Name(), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := l.Run(context.Background(), &runner.Env{Backend: be}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
