package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runner/quant"
)

// benchCopies returns how many operand sets of total bytes each fill at
// least 256 MiB, so the working set is several times the L2 cache (60 MB
// on an H200) and every launch reads its weights from device memory.
func benchCopies(total uint64) int { return max(2, int((256<<20+total-1)/total)) }

// benchSetup puts copies of one random 4-bit, group-64, float16 product of
// n x k on the device and returns their operand addresses and the packed
// weight bytes of one product. The caller holds enter().
func benchSetup(b *testing.B, be *Backend, n, k int) (sets []qmvBuffers, weightBytes int64, free func()) {
	rng := rand.New(rand.NewPCG(1, 1))
	const bits, g = 4, 64
	q := make([]uint8, n*k)
	for i := range q {
		q[i] = uint8(rng.IntN(16))
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
	off, total := layout(r)
	d := be.d
	var bases []uint64
	free = func() {
		for _, p := range bases {
			d.cuMemFree(p)
		}
	}
	for c := 0; c < benchCopies(total); c++ {
		var base uint64
		if err := d.check("cuMemAlloc", d.cuMemAlloc(&base, total)); err != nil {
			free()
			b.Fatal(err)
		}
		bases = append(bases, base)
		buf := off.add(base)
		for _, cp := range []struct {
			dst uint64
			src []byte
		}{
			{buf.w, unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), 4*len(w))},
			{buf.scales, vecBytes(r.Scales)}, {buf.biases, vecBytes(r.Biases)}, {buf.x, vecBytes(r.X)},
		} {
			if err := d.check("cuMemcpyHtoD", d.cuMemcpyHtoD(cp.dst, unsafe.Pointer(&cp.src[0]), uint64(len(cp.src)))); err != nil {
				free()
				b.Fatal(err)
			}
		}
		sets = append(sets, buf)
	}
	return sets, int64(4 * len(w)), free
}

// gpuTimer measures device time between two events around a benchmark's
// loop; it reports it as the metric "gpu-GB/s" for bytes per iteration.
type gpuTimer struct {
	be         *Backend
	start, end uintptr
}

func newGPUTimer(b *testing.B, be *Backend) *gpuTimer {
	t := &gpuTimer{be: be}
	if err := be.d.check("cuEventCreate", be.d.cuEventCreate(&t.start, 0)); err != nil {
		b.Fatal(err)
	}
	if err := be.d.check("cuEventCreate", be.d.cuEventCreate(&t.end, 0)); err != nil {
		b.Fatal(err)
	}
	return t
}

func (t *gpuTimer) begin(b *testing.B) {
	if err := t.be.d.check("cuEventRecord", t.be.d.cuEventRecord(t.start, 0)); err != nil {
		b.Fatal(err)
	}
}

// finish records the end event, waits for it and reports device GB/s and
// microseconds per iteration.
func (t *gpuTimer) finish(b *testing.B, bytesPerOp int64) {
	d := t.be.d
	if err := d.check("cuEventRecord", d.cuEventRecord(t.end, 0)); err != nil {
		b.Fatal(err)
	}
	if err := d.check("cuEventSynchronize", d.cuEventSynchronize(t.end)); err != nil {
		b.Fatal(err)
	}
	var ms float32
	if err := d.check("cuEventElapsedTime", d.cuEventElapsedTime(&ms, t.start, t.end)); err != nil {
		b.Fatal(err)
	}
	d.cuEventDestroy(t.start)
	d.cuEventDestroy(t.end)
	sec := float64(ms) / 1e3
	b.ReportMetric(float64(bytesPerOp)*float64(b.N)/sec/1e9, "gpu-GB/s")
	b.ReportMetric(sec/float64(b.N)*1e6, "gpu-us/op")
}

// BenchmarkQMVDevice runs the promoted 4-bit, group-64, float16 kernels
// over weights already on the device, rotating over copies that exceed the
// L2 cache: "full" is one product (prep + qmv launches), "main" the qmv
// kernel alone (bias sums prepared once). SetBytes is the packed weight
// bytes of one product: MB/s (wall clock, launch overhead included) and
// gpu-GB/s (device events) are bandwidths of packed weights.
func BenchmarkQMVDevice(b *testing.B) {
	be := gpu(b)
	for _, sz := range []int{4096, 8192} {
		for _, part := range []string{"full", "main"} {
			b.Run(fmt.Sprintf("%dx%d/%s", sz, sz, part), func(b *testing.B) {
				unlock, err := be.enter()
				if err != nil {
					b.Fatal(err)
				}
				defer unlock()
				sets, wb, free := benchSetup(b, be, sz, sz)
				defer free()
				run := func(i int) error {
					if part == "main" {
						return be.launchMain(quant.Float16, 4, 64, sz, sz, sets[i%len(sets)])
					}
					return be.launchQMV(quant.Float16, 4, 64, sz, sz, false, sets[i%len(sets)])
				}
				for i := range sets { // prepare every set (and warm up)
					if err := be.launchQMV(quant.Float16, 4, 64, sz, sz, false, sets[i]); err != nil {
						b.Fatal(err)
					}
				}
				if err := be.d.check("cuCtxSynchronize", be.d.cuCtxSynchronize()); err != nil {
					b.Fatal(err)
				}
				b.SetBytes(wb)
				tm := newGPUTimer(b, be)
				b.ResetTimer()
				tm.begin(b)
				for i := 0; i < b.N; i++ {
					if err := run(i); err != nil {
						b.Fatal(err)
					}
				}
				tm.finish(b, wb)
				b.StopTimer()
				b.ReportMetric(float64(len(sets)), "copies")
			})
		}
	}
}

// BenchmarkMemcpyDtoD copies 1 GiB device to device (cuMemcpyDtoD).
// SetBytes and gpu-GB/s count bytes read plus bytes written (2 GiB per
// copy), the DRAM traffic; the bytes copied are half of that.
func BenchmarkMemcpyDtoD(b *testing.B) {
	be := gpu(b)
	unlock, err := be.enter()
	if err != nil {
		b.Fatal(err)
	}
	defer unlock()
	const n = 1 << 30
	var src, dst uint64
	if err := be.d.check("cuMemAlloc", be.d.cuMemAlloc(&src, n)); err != nil {
		b.Fatal(err)
	}
	defer be.d.cuMemFree(src)
	if err := be.d.check("cuMemAlloc", be.d.cuMemAlloc(&dst, n)); err != nil {
		b.Fatal(err)
	}
	defer be.d.cuMemFree(dst)
	if err := be.d.check("cuMemsetD8", be.d.cuMemsetD8(src, 0x5a, n)); err != nil {
		b.Fatal(err)
	}
	if err := be.d.check("cuMemcpyDtoD", be.d.cuMemcpyDtoD(dst, src, n)); err != nil { // warm-up
		b.Fatal(err)
	}
	be.d.cuCtxSynchronize()
	b.SetBytes(2 * n)
	tm := newGPUTimer(b, be)
	b.ResetTimer()
	tm.begin(b)
	for i := 0; i < b.N; i++ {
		if err := be.d.check("cuMemcpyDtoD", be.d.cuMemcpyDtoD(dst, src, n)); err != nil {
			b.Fatal(err)
		}
	}
	tm.finish(b, 2*n)
}
