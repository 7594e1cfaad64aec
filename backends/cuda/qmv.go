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
// qmv.cu (prep_<t>, qmv_<t>_b<bits>).
var dtypeNames = map[int]string{int(quant.Float16): "f16", int(quant.BFloat16): "bf16", int(quant.Float32): "f32"}

// Launch geometry of qmv.cu: QMV_ROWS rows per block of QMV_WARPS warps;
// the prep kernel runs one block of prepBlock threads per group (group
// sizes are at most 128).
const (
	qmvRows   = 8
	qmvWarps  = 4
	prepBlock = 128
)

// align is the alignment of the sub-buffers of one QMV call's device
// allocation (cuMemAlloc returns 256-byte aligned memory).
const align = 256

// qmvBuffers are the device addresses of one product's operands.
type qmvBuffers struct {
	w, scales, biases, x, xf, bsum, y uint64
}

// layout returns the offsets of the operands in one allocation and its
// total size.
func layout(r *runner.QMVRequest) (off qmvBuffers, total uint64) {
	es := uint64(r.DType.Size())
	groups := uint64(r.N) * uint64(r.K/r.GroupSize)
	sizes := []uint64{
		4 * uint64(len(r.W)), es * groups, es * groups, es * uint64(r.K),
		4 * uint64(r.K), 4 * uint64(r.K/r.GroupSize), es * uint64(r.N),
	}
	offs := make([]uint64, len(sizes))
	for i, s := range sizes {
		offs[i] = total
		total += (s + align - 1) / align * align
	}
	return qmvBuffers{offs[0], offs[1], offs[2], offs[3], offs[4], offs[5], offs[6]}, total
}

func (q qmvBuffers) add(base uint64) qmvBuffers {
	return qmvBuffers{q.w + base, q.scales + base, q.biases + base, q.x + base, q.xf + base, q.bsum + base, q.y + base}
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
// and x to it, launches prep_<T> (x widened to float32 and the bias sums,
// promoted or narrow, with chunk P = quant.ChunkSize(bits)) and then
// qmv_<T>_b<bits>, copies y back and frees the buffer. Calls are
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
	if err := b.launchQMV(r.DType, r.Bits, r.GroupSize, r.N, r.K, r.Variant == runner.Narrow, buf); err != nil {
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

// launchQMV launches the two kernels of one product (launchPrep, then
// launchMain) on the default stream over operands already on the device.
// The caller holds enter(). It does not wait for the kernels (a following
// synchronous copy or cuCtxSynchronize does).
func (b *Backend) launchQMV(dt quant.DType, bits, group, n, k int, narrow bool, buf qmvBuffers) error {
	if err := b.launchPrep(dt, bits, group, k, narrow, buf); err != nil {
		return err
	}
	return b.launchMain(dt, bits, group, n, k, buf)
}

// launchPrep launches prep_<T>: xf and the bias sums, one block per group.
func (b *Backend) launchPrep(dt quant.DType, bits, group, k int, narrow bool, buf qmvBuffers) error {
	prep, ok := b.prep[int(dt)]
	if !ok {
		return fmt.Errorf("no prep kernel for dtype %v", dt)
	}
	nw := int32(0)
	if narrow {
		nw = 1
	}
	return b.launch("prep", prep, uint32(k/group), prepBlock,
		buf.x, buf.xf, buf.bsum, int32(k), int32(group), int32(quant.ChunkSize(bits)), nw)
}

// launchMain launches qmv_<T>_b<bits> over xf and the bias sums.
func (b *Backend) launchMain(dt quant.DType, bits, group, n, k int, buf qmvBuffers) error {
	fn, ok := b.qmv[[2]int{int(dt), bits}]
	if !ok {
		return fmt.Errorf("no qmv kernel for dtype %v, %d bits", dt, bits)
	}
	return b.launch("qmv", fn, uint32((n+qmvRows-1)/qmvRows), 32*qmvWarps,
		buf.w, buf.scales, buf.biases, buf.xf, buf.bsum, buf.y, int32(n), int32(k), int32(group))
}

// launch calls cuLaunchKernel with a 1-D grid and block on the default
// stream. args are the kernel's parameters in order: uint64 device
// pointers and int32 values, each passed by address as cuLaunchKernel
// requires. The caller holds enter().
func (b *Backend) launch(name string, fn uintptr, grid, block uint32, args ...any) error {
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
	return b.d.check("cuLaunchKernel "+name, b.d.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, 0, &params[0], nil))
}
