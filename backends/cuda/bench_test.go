package cuda

import (
	_ "embed"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runner/quant"
)

// srcPrevKernel is the previous qmv kernel pair (prep_<T> building float32
// x and the bias sums, then qmv_<T>_b<BITS> with 8 rows per block of 4
// warps), kept as the benchmarks' baseline.
//
//go:embed testdata/qmv_prev.cu
var srcPrevKernel string

// benchCopies returns how many operand sets of total bytes each fill at
// least 256 MiB, so the working set is several times the L2 cache (50 MB
// on an H100, 60 MB on an H200) and every launch reads its weights from
// device memory.
func benchCopies(total uint64) int { return max(2, int((256<<20+total-1)/total)) }

// benchSet is one product's operands on the device: the current kernel's
// buffers and the previous kernel's float32 x and bias sums.
type benchSet struct {
	buf      qmvBuffers
	xf, bsum uint64
}

// benchSetup puts copies of one random 4-bit, group-64, float16 product of
// n x k on the device (random packed words, scales in [0, 0.01), biases in
// [-0.5, 0.5), x normal) and returns them with the bytes one product must
// read (packed weights, scales, biases, x) and write (y). The caller holds
// enter().
func benchSetup(b *testing.B, be *Backend, n, k int) (sets []benchSet, bytes int64, free func()) {
	rng := rand.New(rand.NewPCG(1, 1))
	const bits, g = 4, 64
	w := make([]uint32, n*quant.WordsPerRow(bits, k))
	for i := range w {
		w[i] = rng.Uint32()
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
	xfOff := total
	bsumOff := xfOff + (4*uint64(k)+align-1)/align*align
	all := bsumOff + (4*uint64(k/g)+align-1)/align*align
	d := be.d
	var bases []uint64
	free = func() {
		for _, p := range bases {
			d.cuMemFree(p)
		}
	}
	for c := 0; c < benchCopies(all); c++ {
		var base uint64
		if err := d.check("cuMemAlloc", d.cuMemAlloc(&base, all)); err != nil {
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
		sets = append(sets, benchSet{buf: buf, xf: base + xfOff, bsum: base + bsumOff})
	}
	es := int64(2)
	bytes = 4*int64(len(w)) + 2*es*int64(n*k/g) + es*int64(k) + es*int64(n)
	return sets, bytes, free
}

// gpuTimer measures device time between two events around a benchmark's
// loop and the host time spent enqueueing it.
type gpuTimer struct {
	be         *Backend
	start, end uintptr
	host       time.Time
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
	t.host = time.Now()
}

// finish records the end event, waits for it and reports gpu-GB/s (device
// bandwidth of bytesPerOp), gpu-us/op (device microseconds per iteration)
// and host-us/op (host time to enqueue one iteration: when it is below
// gpu-us/op the device never waited for the host).
func (t *gpuTimer) finish(b *testing.B, bytesPerOp int64) {
	d := t.be.d
	if err := d.check("cuEventRecord", d.cuEventRecord(t.end, 0)); err != nil {
		b.Fatal(err)
	}
	host := time.Since(t.host)
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
	b.ReportMetric(host.Seconds()/float64(b.N)*1e6, "host-us/op")
}

// benchVariant is a build of a qmv source: the committed qmv.cu with
// macro overrides, or the previous kernel pair.
type benchVariant struct {
	name         string
	prev         bool
	rb, maxT     int
	stages       int
	defines      []string
	mod          uintptr
	prep, qmvF16 uintptr
}

// benchVariants compiles the variants that BenchmarkQMVDevice compares.
// The caller holds enter().
func benchVariants(b *testing.B, be *Backend) []*benchVariant {
	vs := []*benchVariant{
		{name: "prev", prev: true},
		{name: "new", rb: qmvRB, maxT: qmvMaxT, stages: qmvStages},
		{name: "new-s3", rb: qmvRB, maxT: qmvMaxT, stages: 3, defines: []string{"-DQMV_STAGES=3"}},
		{name: "new-s4-rb2", rb: 2, maxT: qmvMaxT, stages: 4, defines: []string{"-DQMV_STAGES=4", "-DQMV_RB=2"}},
		{name: "new-noL2pf", rb: qmvRB, maxT: qmvMaxT, stages: qmvStages, defines: []string{"-DQMV_L2PF=0"}},
	}
	nv, err := loadNVRTC()
	if err != nil {
		b.Fatal(err)
	}
	for _, v := range vs {
		src, opts := srcKernel, append(append([]string(nil), compileOptions...), v.defines...)
		if v.prev {
			src = srcPrevKernel
		}
		ptx, _, err := nv.compilePTX(src, "qmv.cu", be.arch, opts)
		if err != nil {
			b.Fatalf("%s: %v", v.name, err)
		}
		if err := be.d.check("cuModuleLoadData", be.d.cuModuleLoadData(&v.mod, pointer(ptx))); err != nil {
			b.Fatal(err)
		}
		if v.prev {
			if err := be.d.check("prep_f16", be.d.cuModuleGetFunction(&v.prep, v.mod, "prep_f16")); err != nil {
				b.Fatal(err)
			}
		}
		if err := be.d.check("qmv_f16_b4", be.d.cuModuleGetFunction(&v.qmvF16, v.mod, "qmv_f16_b4")); err != nil {
			b.Fatal(err)
		}
		if sm := qmvSmem(v.stages, v.rb, 4, v.maxT); sm > 48<<10 {
			if err := be.d.check("cuFuncSetAttribute", be.d.cuFuncSetAttribute(v.qmvF16, funcAttrMaxDynamicShared, int32(sm))); err != nil {
				b.Fatal(err)
			}
		}
	}
	return vs
}

// launch runs one promoted 4-bit, group-64, float16 product of n x k with
// variant v (the previous pair: prep, then qmv over 8 rows per block of
// 128 threads).
func (v *benchVariant) launch(be *Backend, n, k int, s benchSet) error {
	if v.prev {
		if err := be.launch("prep", v.prep, uint32(k/64), 128, 0, s.buf.x, s.xf, s.bsum, int32(k), int32(64), int32(4), int32(0)); err != nil {
			return err
		}
		return be.launch("qmv", v.qmvF16, uint32((n+7)/8), 128, 0, s.buf.w, s.buf.scales, s.buf.biases, s.xf, s.bsum, s.buf.y, int32(n), int32(k), int32(64))
	}
	block, _ := geometry(v.rb, v.maxT, qmvMaxRows, 4, n, k, 1)
	smem := qmvSmem(v.stages, v.rb, 4, block)
	res, err := be.resident(v.qmvF16, block, smem)
	if err != nil {
		return err
	}
	block, grid := geometry(v.rb, v.maxT, qmvMaxRows, 4, n, k, res)
	return be.launch("qmv", v.qmvF16, uint32(grid), uint32(block), uint32(smem),
		s.buf.w, s.buf.scales, s.buf.biases, s.buf.x, s.buf.y, int32(n), int32(k), int32(64), int32(0))
}

// BenchmarkQMVDevice times one promoted 4-bit, group-64, float16 product
// (B1) per iteration over operands already on the device, rotating over
// copies that exceed the L2 cache, for each kernel variant: "prev" is the
// previous prep + qmv pair, "new" the committed kernel, the others builds
// of qmv.cu with other QMV_STAGES / QMV_RB / QMV_L2PF. SetBytes and
// gpu-GB/s count the bytes one product must move (packed weights, scales,
// biases, x, y). Before timing, every variant's output on the first copy
// is compared with the previous kernel's (relative L2 difference < 1e-2).
func BenchmarkQMVDevice(b *testing.B) {
	be := gpu(b)
	unlock, err := be.enter()
	if err != nil {
		b.Fatal(err)
	}
	vs := benchVariants(b, be)
	unlock()
	for _, sz := range []int{4096, 8192, 16384} {
		b.Run(fmt.Sprintf("%dx%d", sz, sz), func(b *testing.B) {
			unlock, err := be.enter()
			if err != nil {
				b.Fatal(err)
			}
			defer unlock()
			sets, bytes, free := benchSetup(b, be, sz, sz)
			defer free()
			var ref []uint16
			for _, v := range vs {
				if err := v.launch(be, sz, sz, sets[0]); err != nil {
					b.Fatal(err)
				}
				got := make([]uint16, sz)
				if err := be.d.check("cuMemcpyDtoH", be.d.cuMemcpyDtoH(unsafe.Pointer(&got[0]), sets[0].buf.y, uint64(2*sz))); err != nil {
					b.Fatal(err)
				}
				if ref == nil {
					ref = got
					continue
				}
				diff := 0
				var num, den float64
				for i := range got {
					if got[i] != ref[i] {
						diff++
					}
					g, r := float64(quant.F16ToF32(got[i])), float64(quant.F16ToF32(ref[i]))
					num += (g - r) * (g - r)
					den += r * r
				}
				rel := math.Sqrt(num / den)
				b.Logf("%dx%d %s: %d of %d outputs differ in bits from %s, relative L2 difference %.2g (random, inexact inputs: summation order shows)", sz, sz, v.name, diff, sz, vs[0].name, rel)
				if !(rel < 1e-2) {
					b.Fatalf("%s disagrees with %s: relative difference %g", v.name, vs[0].name, rel)
				}
			}
			for _, v := range vs {
				b.Run(v.name, func(b *testing.B) {
					unlock, err := be.enter() // a sub-benchmark runs on its own goroutine
					if err != nil {
						b.Fatal(err)
					}
					defer unlock()
					for i := range sets { // warm up
						if err := v.launch(be, sz, sz, sets[i]); err != nil {
							b.Fatal(err)
						}
					}
					if err := be.d.check("cuCtxSynchronize", be.d.cuCtxSynchronize()); err != nil {
						b.Fatal(err)
					}
					b.SetBytes(bytes)
					tm := newGPUTimer(b, be)
					b.ResetTimer()
					tm.begin(b)
					for i := 0; i < b.N; i++ {
						if err := v.launch(be, sz, sz, sets[i%len(sets)]); err != nil {
							b.Fatal(err)
						}
					}
					tm.finish(b, bytes)
					b.StopTimer()
					b.ReportMetric(float64(len(sets)), "copies")
				})
			}
		})
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
