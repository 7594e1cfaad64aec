package cuda

import (
	"context"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runner/quant"
)

// dtypeNames maps runner/quant.DType codes to the kernel name suffixes of
// qmv.cu (qmv_<t>_b<bits>).
var dtypeNames = map[int]string{int(quant.Float16): "f16", int(quant.BFloat16): "bf16", int(quant.Float32): "f32"}

// Launch geometry of qmv.cu (its QMV_RB, QMV_MAXT, QMV_MAXROWS,
// QMV_STAGES): rows per chunk, threads per block at most, rows per block
// at most, chunks in the shared-memory ring (0: none).
const (
	qmvRB      = 4
	qmvMaxT    = 512
	qmvMaxRows = 256
	qmvStages  = 0
)

// funcAttrMaxDynamicShared is CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
const funcAttrMaxDynamicShared = 8

// qmvSmem returns the dynamic shared memory in bytes of a block of block
// threads of a build of qmv.cu with QMV_STAGES = stages and QMV_RB = rb:
// per warp, stages chunks of rb rows of 32 lanes' weight units plus a
// 4-byte scale word and bias word each.
func qmvSmem(stages, rb, bits, block int) int {
	if stages == 0 {
		return 0
	}
	unitBytes := unitVals(bits) * bits / 8
	return block / 32 * stages * rb * 32 * (unitBytes + 8)
}

// kernelChunk is the bias-sum chunk P that qmv.cu's Chunk<BITS> uses; it
// must equal quant.ChunkSize (checked before every launch and by a test).
var kernelChunk = map[int]int{2: 4, 3: 8, 4: 4, 5: 8, 6: 4, 8: 1}

// unitVals is the values per thread unit of qmv.cu's Unit<BITS>.
func unitVals(bits int) int {
	if bits == 8 {
		return 16
	}
	return 32
}

// qmvGeometry returns the block size (threads, a multiple of 32 covering
// the K/VALS units up to qmvMaxT) and the grid size of one product of n
// rows, given how many blocks of that size fit on the device at once
// (resident >= 1): one wave when the rows spread over it with at most
// qmvMaxRows rows per block, else as many blocks as that limit needs, and
// never more blocks than row chunks.
func qmvGeometry(bits, n, k, resident int) (block, grid int) {
	return geometry(qmvRB, qmvMaxT, qmvMaxRows, bits, n, k, resident)
}

// geometry is qmvGeometry for a build of qmv.cu with QMV_RB = rb,
// QMV_MAXT = maxT and QMV_MAXROWS = maxRows.
func geometry(rb, maxT, maxRows, bits, n, k, resident int) (block, grid int) {
	units := k / unitVals(bits)
	block = min(maxT, (units+31)/32*32)
	chunks := (n + rb - 1) / rb
	grid = max(resident, (chunks+maxRows/rb-1)/(maxRows/rb))
	return block, min(grid, chunks)
}

// align is the alignment of the sub-buffers of one QMV call's device
// allocation (cuMemAlloc returns 256-byte aligned memory).
const align = 256

// qmvBuffers are the device addresses of one product's operands.
type qmvBuffers struct {
	w, scales, biases, x, y uint64
}

// layout returns the offsets of the operands in one allocation and its
// total size.
func layout(r *runner.QMVRequest) (off qmvBuffers, total uint64) { return batchLayout(r, 1) }

// batchLayout is layout for batch products with the same weights: x holds
// batch vectors of K values back to back, y batch vectors of N values.
func batchLayout(r *runner.QMVRequest, batch int) (off qmvBuffers, total uint64) {
	es := uint64(r.DType.Size())
	groups := uint64(r.N) * uint64(r.K/r.GroupSize)
	sizes := []uint64{
		4 * uint64(r.N) * uint64(quant.WordsPerRow(r.Bits, r.K)), es * groups, es * groups,
		es * uint64(r.K) * uint64(batch), es * uint64(r.N) * uint64(batch),
	}
	offs := make([]uint64, len(sizes))
	for i, s := range sizes {
		offs[i] = total
		total += (s + align - 1) / align * align
	}
	return qmvBuffers{offs[0], offs[1], offs[2], offs[3], offs[4]}, total
}

func (q qmvBuffers) add(base uint64) qmvBuffers {
	return qmvBuffers{q.w + base, q.scales + base, q.biases + base, q.x + base, q.y + base}
}

// vecBytes returns the raw bytes of v (little-endian host order, as the
// device reads them).
func vecBytes(v runner.Vec) []byte {
	if v.DType == quant.Float32 {
		if len(v.B32) == 0 {
			return nil
		}
		return unsafe.Slice((*byte)(unsafe.Pointer(&v.B32[0])), 4*len(v.B32))
	}
	if len(v.B16) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v.B16[0])), 2*len(v.B16))
}

// QMV runs y = W x on the GPU (see runner.QMVRequest and qmv.cu). One call
// allocates one device buffer for all operands, copies W, scales, biases
// and x to it, launches qmv_<T>_b<bits> (bias sums promoted or narrow, with
// chunk P = quant.ChunkSize(bits), and the product in one kernel), copies
// y back and frees the buffer. Calls are
// serialized. Errors: invalid requests (runner.QMVRequest.Validate), a
// closed backend, shapes too large for 32-bit kernel indexing, driver
// errors; ctx is checked before the launch.
func (b *Backend) QMV(ctx context.Context, r *runner.QMVRequest) (runner.Vec, error) {
	if r == nil {
		return runner.Vec{}, fmt.Errorf("cuda qmv: nil request")
	}
	if err := r.Validate(); err != nil {
		return runner.Vec{}, fmt.Errorf("cuda %w", err)
	}
	if uint64(r.N)*uint64(r.K) >= 1<<31 || r.K*8 >= 1<<31 {
		return runner.Vec{}, fmt.Errorf("cuda qmv: shape %dx%d too large for this kernel (N*K must be < 2^31)", r.N, r.K)
	}
	if err := ctx.Err(); err != nil {
		return runner.Vec{}, err
	}
	b.qmvMu.Lock()
	defer b.qmvMu.Unlock()
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return runner.Vec{}, fmt.Errorf("cuda qmv: backend closed")
	}
	unlock, err := b.enter()
	if err != nil {
		return runner.Vec{}, err
	}
	defer unlock()
	d := b.d
	off, total := layout(r)
	var base uint64
	if err := d.check("cuMemAlloc", d.cuMemAlloc(&base, total)); err != nil {
		return runner.Vec{}, fmt.Errorf("cuda qmv: %w", err)
	}
	defer d.cuMemFree(base)
	buf := off.add(base)
	for _, c := range []struct {
		dst uint64
		src []byte
	}{
		{buf.w, unsafe.Slice((*byte)(unsafe.Pointer(&r.W[0])), 4*len(r.W))},
		{buf.scales, vecBytes(r.Scales)}, {buf.biases, vecBytes(r.Biases)}, {buf.x, vecBytes(r.X)},
	} {
		if err := d.check("cuMemcpyHtoD", d.cuMemcpyHtoD(c.dst, unsafe.Pointer(&c.src[0]), uint64(len(c.src)))); err != nil {
			return runner.Vec{}, fmt.Errorf("cuda qmv: %w", err)
		}
	}
	if err := b.launchQMV(r.DType, r.Bits, r.GroupSize, r.N, r.K, 1, r.Variant == runner.Narrow, buf); err != nil {
		return runner.Vec{}, fmt.Errorf("cuda qmv: %w", err)
	}
	out := runner.NewVec(r.DType, r.N)
	dst := vecBytes(out)
	if err := d.check("cuMemcpyDtoH", d.cuMemcpyDtoH(unsafe.Pointer(&dst[0]), buf.y, uint64(len(dst)))); err != nil {
		return runner.Vec{}, fmt.Errorf("cuda qmv: %w", err)
	}
	runtime.KeepAlive(r)
	return out, nil
}

// launchQMV launches qmv_<T>_b<bits> on the default stream over operands
// already on the device (n x k weights, group size group) for batch >= 1
// vectors (buf.x holds batch vectors of k values, buf.y batch vectors of
// n values; gridDim.y = batch, and the blocks of one wave are shared
// among the batch's block rows). The caller holds enter(). It does not
// wait for the kernel (a following synchronous copy or cuCtxSynchronize
// does).
func (b *Backend) launchQMV(dt quant.DType, bits, group, n, k, batch int, narrow bool, buf qmvBuffers) error {
	fn, ok := b.qmv[[2]int{int(dt), bits}]
	if !ok {
		return fmt.Errorf("no qmv kernel for dtype %v, %d bits", dt, bits)
	}
	if kernelChunk[bits] != quant.ChunkSize(bits) {
		return fmt.Errorf("qmv.cu's bias-sum chunk for %d bits is %d, quant.ChunkSize says %d", bits, kernelChunk[bits], quant.ChunkSize(bits))
	}
	block, _ := qmvGeometry(bits, n, k, 1)
	smem := qmvSmem(b.stages, qmvRB, bits, block)
	res, err := b.resident(fn, block, smem)
	if err != nil {
		return err
	}
	block, grid := qmvGeometry(bits, n, k, max(1, res/batch))
	nw := int32(0)
	if narrow {
		nw = 1
	}
	return b.launchGrid("qmv", fn, uint32(grid), uint32(batch), uint32(block), uint32(smem),
		buf.w, buf.scales, buf.biases, buf.x, buf.y, int32(n), int32(k), int32(group), nw)
}

// resident returns how many blocks of fn with block threads and smem
// bytes of dynamic shared memory run at once on the whole device
// (multiprocessors times the occupancy calculator's blocks per
// multiprocessor), at least 1; results are cached. The caller holds
// enter().
func (b *Backend) resident(fn uintptr, block, smem int) (int, error) {
	key := residentKey{fn, block, smem}
	b.mu.Lock()
	v, ok := b.occ[key]
	b.mu.Unlock()
	if ok {
		return v, nil
	}
	var per int32
	if err := b.d.check("cuOccupancyMaxActiveBlocksPerMultiprocessor",
		b.d.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per, fn, int32(block), uint64(smem))); err != nil {
		return 0, err
	}
	v = max(1, int(per)*max(1, b.sms))
	b.mu.Lock()
	b.occ[key] = v
	b.mu.Unlock()
	return v, nil
}

type residentKey struct {
	fn          uintptr
	block, smem int
}

// launch calls cuLaunchKernel with a 1-D grid and block and smem bytes of
// dynamic shared memory on the default stream. args are the kernel's parameters in order: uint64 device
// pointers and int32 values, each passed by address as cuLaunchKernel
// requires. The caller holds enter().
func (b *Backend) launch(name string, fn uintptr, grid, block, smem uint32, args ...any) error {
	return b.launchGrid(name, fn, grid, 1, block, smem, args...)
}

// launchGrid is launch with a 2-D grid of gx x gy blocks.
func (b *Backend) launchGrid(name string, fn uintptr, gx, gy, block, smem uint32, args ...any) error {
	// Parameter values live in one pinned slab; params points into it.
	slab := make([]uint64, len(args))
	params := make([]unsafe.Pointer, len(args))
	var pin runtime.Pinner
	defer pin.Unpin()
	pin.Pin(&slab[0])
	for i, a := range args {
		switch v := a.(type) {
		case uint64:
			slab[i] = v
		case int32:
			*(*int32)(unsafe.Pointer(&slab[i])) = v
		default:
			return fmt.Errorf("launch %s: unsupported parameter type %T", name, a)
		}
		params[i] = unsafe.Pointer(&slab[i])
	}
	pin.Pin(&params[0])
	return b.d.check("cuLaunchKernel "+name, b.d.cuLaunchKernel(fn, gx, gy, 1, block, 1, 1, smem, 0, &params[0], nil))
}
