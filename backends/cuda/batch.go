package cuda

import (
	"fmt"
	"time"

	"github.com/evidence-ledger/ledger/runner/quant"
)

// qmvNBMaxT is qmv.cu's QMV_NB_MAXT: threads per block at most of the
// multi-vector kernels.
const qmvNBMaxT = 256

// multiVector selects the kernels PrepareQMV times for batches of 2 and
// more: false, one launch of the single-vector kernel with gridDim.y = B
// (each block row reads the weights for its own vector); true, the
// multi-vector kernels qmv_<T>_b<BITS>_x4 and _x2 (each lane unpacks its
// weights once for 4 or 2 vectors) for batches divisible by 4 or 2.
//
// True: on an H100 (testdata/device/throughput, 2026-12-06) the x2 and x4
// kernels were bit-identical to the CPU backend in both variants at every
// dtype, width and group size (TestThroughputMatchesCPU) and took 23.9 and
// 37.9 µs per float16 4-bit 8192 x 8192 product at B2 and B4, against
// 28.8 and 51.9 µs for gridDim.y batching (BenchmarkThroughputQMV).
var multiVector = true

// batchKernel describes which kernel PrepareQMV launches for a batch
// (DeviceState's qmv.batch_kernel).
func batchKernel(multi bool) string {
	if multi {
		return "x4 kernel for batches divisible by 4, x2 for batches divisible by 2, else the single-vector kernel with gridDim.y = batch"
	}
	return "the single-vector kernel with gridDim.y = batch"
}

// nbKernels is the module of qmv.cu built with QMV_NB_KERNELS=1.
type nbKernels struct {
	mod     uintptr
	fn      map[[3]int]uintptr // (dtype, bits, nb) -> kernel
	compile time.Duration      // NVRTC and module load time
}

// vectorsPerBlock returns NB, the vectors one block row of the kernels
// PrepareQMV uses handles for a batch (see multiVector).
func vectorsPerBlock(batch int, multi bool) int {
	switch {
	case multi && batch%4 == 0:
		return 4
	case multi && batch%2 == 0:
		return 2
	}
	return 1
}

// loadNB compiles and loads the multi-vector kernels once (NVRTC with the
// backend's macro definitions and QMV_NB_KERNELS=1). The caller holds
// qmvMu and enter().
func (b *Backend) loadNB() error {
	if b.nb.mod != 0 {
		return nil
	}
	t0 := time.Now()
	nv, err := loadNVRTC()
	if err != nil {
		return err
	}
	opts := append(append(append([]string(nil), compileOptions...), b.opts...), "-DQMV_NB_KERNELS=1")
	ptx, _, err := nv.compilePTX(srcKernel, "qmv.cu", b.arch, opts)
	if err != nil {
		return fmt.Errorf("cuda: compile qmv.cu's multi-vector kernels for %s: %w", b.arch, err)
	}
	var mod uintptr
	if err := b.d.check("cuModuleLoadData", b.d.cuModuleLoadData(&mod, pointer(ptx))); err != nil {
		return fmt.Errorf("cuda: load multi-vector PTX: %w", err)
	}
	fns := map[[3]int]uintptr{}
	for code, t := range dtypeNames {
		for _, bits := range quant.Bits {
			for _, nb := range []int{2, 4} {
				name := fmt.Sprintf("qmv_%s_b%d_x%d", t, bits, nb)
				var fn uintptr
				err := b.d.check("cuModuleGetFunction "+name, b.d.cuModuleGetFunction(&fn, mod, name))
				if sm := qmvSmem(b.stages, qmvRB, bits, qmvNBMaxT); err == nil && sm > 48<<10 {
					err = b.d.check("cuFuncSetAttribute "+name, b.d.cuFuncSetAttribute(fn, funcAttrMaxDynamicShared, int32(sm)))
				}
				if err != nil {
					_ = b.d.cuModuleUnload(mod)
					return fmt.Errorf("cuda: %w", err)
				}
				fns[[3]int{code, bits, nb}] = fn
			}
		}
	}
	b.nb = nbKernels{mod: mod, fn: fns, compile: time.Since(t0)}
	return nil
}

// launchQMVNB launches qmv_<T>_b<bits>_x<nb> over batch vectors (a
// multiple of nb; gridDim.y = batch/nb), as launchQMV does for the
// single-vector kernel. The caller holds qmvMu and enter(), after loadNB.
func (b *Backend) launchQMVNB(dt quant.DType, bits, group, n, k, batch, nb int, narrow bool, buf qmvBuffers) error {
	fn, ok := b.nb.fn[[3]int{int(dt), bits, nb}]
	if !ok || batch%nb != 0 {
		return fmt.Errorf("no %d-vector qmv kernel for dtype %v, %d bits, batch %d", nb, dt, bits, batch)
	}
	if kernelChunk[bits] != quant.ChunkSize(bits) {
		return fmt.Errorf("qmv.cu's bias-sum chunk for %d bits is %d, quant.ChunkSize says %d", bits, kernelChunk[bits], quant.ChunkSize(bits))
	}
	rowsY := batch / nb
	block, _ := geometry(qmvRB, qmvNBMaxT, qmvMaxRows, bits, n, k, 1)
	smem := qmvSmem(b.stages, qmvRB, bits, block)
	res, err := b.resident(fn, block, smem)
	if err != nil {
		return err
	}
	block, grid := geometry(qmvRB, qmvNBMaxT, qmvMaxRows, bits, n, k, max(1, res/rowsY))
	nw := int32(0)
	if narrow {
		nw = 1
	}
	return b.launchGrid("qmv_x", fn, uint32(grid), uint32(rowsY), uint32(block), uint32(smem),
		buf.w, buf.scales, buf.biases, buf.x, buf.y, int32(n), int32(k), int32(group), nw)
}
