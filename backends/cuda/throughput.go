package cuda

import (
	"context"
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runner/quant"
)

var _ runner.ThroughputBackend = (*Backend)(nil)

// Limits of the throughput timer (see PrepareQMV).
const (
	// tpRotateBytes is the size the operand copies reach together: several
	// times the L2 cache (50 MB on an H100, 60 MB on an H200), so that
	// every product reads its operands from device memory.
	tpRotateBytes = 256 << 20
	// tpMaxCopies caps the copies of a small product's operands.
	tpMaxCopies = 4096
	// tpSampleSeconds is the least device time of one sample's group of
	// products; tpMaxLaunches caps the group.
	tpSampleSeconds = 0.5e-3
	tpMaxLaunches   = 4096
	// tpWarmupSeconds is the device time of the warm-up launches.
	tpWarmupSeconds = 50e-3
	// tpProbe is the products of the group that times one product before
	// the group size is chosen.
	tpProbe = 16
	// tpMaxBatch is the largest batch PrepareQMV accepts.
	tpMaxBatch = 8
	// tpMaxHold caps the hold before each sample.
	tpMaxHold = 100 * time.Millisecond
)

// Clock returns "cuda-events": samples are cuEventElapsedTime between two
// events recorded on the launch stream.
func (b *Backend) Clock() string { return "cuda-events" }

// checkBatch validates a throughput request: r valid (runner.QMVRequest
// Validate), within the kernel's 32-bit indexing, and 1 to tpMaxBatch
// activation vectors of r.K values of r.DType.
func checkBatch(r *runner.QMVRequest, xs []runner.Vec) error {
	if r == nil {
		return fmt.Errorf("nil request")
	}
	if err := r.Validate(); err != nil {
		return err
	}
	if uint64(r.N)*uint64(r.K) >= 1<<31 || r.K*8 >= 1<<31 {
		return fmt.Errorf("shape %dx%d too large for this kernel (N*K must be < 2^31)", r.N, r.K)
	}
	if len(xs) < 1 || len(xs) > tpMaxBatch {
		return fmt.Errorf("batch of %d activation vectors: the kernel takes 1 to %d", len(xs), tpMaxBatch)
	}
	for i, x := range xs {
		if x.DType != r.DType || x.Len() != r.K {
			return fmt.Errorf("activation vector %d has %d values of %v, want %d of %v", i, x.Len(), x.DType, r.K, r.DType)
		}
	}
	return nil
}

// rotationCopies returns how many copies of one product's operands (bytes
// each, > 0) together reach tpRotateBytes: at least 2, at most
// tpMaxCopies.
func rotationCopies(bytes uint64) int {
	if bytes == 0 {
		return 2
	}
	return int(min(tpMaxCopies, max(2, (tpRotateBytes+bytes-1)/bytes)))
}

// launchesPerSample returns the group size L for products of perProduct
// seconds: the fewest products that take tpSampleSeconds, within [1,
// tpMaxLaunches] (tpMaxLaunches when perProduct is not a positive number).
func launchesPerSample(perProduct float64) int {
	if !(perProduct > 0) || math.IsInf(perProduct, 0) {
		return tpMaxLaunches
	}
	return int(min(tpMaxLaunches, max(1, math.Ceil(tpSampleSeconds/perProduct))))
}

// warmupLaunches returns the launches that take tpWarmupSeconds at
// perProduct seconds each, at least copies (every copy read once) and at
// most 64 * tpMaxLaunches.
func warmupLaunches(perProduct float64, copies int) int {
	n := 64 * tpMaxLaunches
	if perProduct > 0 && !math.IsInf(perProduct, 0) {
		n = int(min(float64(n), math.Ceil(tpWarmupSeconds/perProduct)))
	}
	return max(n, copies)
}

// holdFor returns how long the device is held before a sample whose
// launches take the host queue seconds to queue: 1.5 times that plus
// 50 µs, at most tpMaxHold.
func holdFor(queue float64) time.Duration {
	d := time.Duration(1.5*queue*1e9) + 50*time.Microsecond
	if !(queue >= 0) || d > tpMaxHold {
		return tpMaxHold
	}
	return d
}

// PrepareQMV puts tpRotateBytes of copies of r's operands with the batch
// xs on the device (one allocation; each copy holds W, scales, biases, the
// len(xs) vectors back to back and their outputs), times a group of
// products to choose the products per sample L (one sample's group takes
// at least 0.5 ms of device time, 1 <= L <= 4096), and warms up with
// about 50 ms of launches. Every product is one launch over the whole
// batch on the next copy: the single-vector kernel with gridDim.y =
// len(xs), or with multiVector set a multi-vector kernel (batch.go). It
// holds the backend's qmv lock. Errors: invalid requests, batches outside 1..8,
// shapes the kernel cannot index, not enough device memory, driver errors,
// ctx's error.
func (b *Backend) PrepareQMV(ctx context.Context, r *runner.QMVRequest, xs []runner.Vec) (runner.PreparedQMV, error) {
	p, err := b.prepareQMV(ctx, r, xs, vectorsPerBlock(len(xs), multiVector))
	if err != nil {
		return nil, err
	}
	return p, nil
}

// prepareQMV is PrepareQMV with the kernel chosen: nb = 1, the
// single-vector kernel with gridDim.y = len(xs); nb = 2 or 4 (dividing
// len(xs)), the nb-vector kernel with gridDim.y = len(xs)/nb.
func (b *Backend) prepareQMV(ctx context.Context, r *runner.QMVRequest, xs []runner.Vec, nb int) (*prepared, error) {
	if err := checkBatch(r, xs); err != nil {
		return nil, fmt.Errorf("cuda prepare qmv: %w", err)
	}
	if nb != 1 && (nb != 2 && nb != 4 || len(xs)%nb != 0) {
		return nil, fmt.Errorf("cuda prepare qmv: no %d-vector kernel for a batch of %d", nb, len(xs))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.qmvMu.Lock()
	defer b.qmvMu.Unlock()
	if b.isClosed() {
		return nil, fmt.Errorf("cuda prepare qmv: backend closed")
	}
	unlock, err := b.enter()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if nb > 1 {
		if err := b.loadNB(); err != nil {
			return nil, err
		}
	}
	p := &prepared{b: b, dt: r.DType, bits: r.Bits, group: r.GroupSize, n: r.N, k: r.K, batch: len(xs), nb: nb}
	if err := p.setup(ctx, r, xs); err != nil {
		p.free()
		return nil, fmt.Errorf("cuda prepare qmv %dx%d %v b%d g%d batch %d: %w", r.N, r.K, r.DType, r.Bits, r.GroupSize, len(xs), err)
	}
	return p, nil
}

func (b *Backend) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// prepared is one case's operands on the device. Its methods hold the
// backend's qmv lock and enter().
type prepared struct {
	b                        *Backend
	dt                       quant.DType
	bits, group, n, k, batch int
	nb                       int          // vectors per block row of the kernel (1: the single-vector kernel)
	base                     uint64       // one allocation of every copy
	sets                     []qmvBuffers // the copies
	next                     int          // the copy the next product reads
	launches                 int          // L
	queue                    float64      // seconds the host takes to queue one launch (running estimate)
	events                   []uintptr
	closed                   bool
}

// setup allocates and fills the copies, chooses L and warms up. The
// caller holds the qmv lock and enter().
func (p *prepared) setup(ctx context.Context, r *runner.QMVRequest, xs []runner.Vec) error {
	d := p.b.d
	off, per := batchLayout(r, p.batch)
	copies := rotationCopies(per)
	total := per * uint64(copies)
	var free, all uint64
	if err := d.check("cuMemGetInfo", d.cuMemGetInfo(&free, &all)); err != nil {
		return err
	}
	if total > free/10*9 {
		return fmt.Errorf("needs %d MiB of device memory for %d operand copies, %d MiB free", total>>20, copies, free>>20)
	}
	if err := d.check("cuMemAlloc", d.cuMemAlloc(&p.base, total)); err != nil {
		p.base = 0
		return err
	}
	xb := make([]byte, 0, len(vecBytes(xs[0]))*len(xs))
	for _, x := range xs {
		xb = append(xb, vecBytes(x)...)
	}
	first := off.add(p.base)
	if err := d.check("cuMemsetD8", d.cuMemsetD8(p.base, 0, per)); err != nil {
		return err
	}
	for _, c := range []struct {
		dst uint64
		src []byte
	}{
		{first.w, unsafe.Slice((*byte)(unsafe.Pointer(&r.W[0])), 4*len(r.W))},
		{first.scales, vecBytes(r.Scales)}, {first.biases, vecBytes(r.Biases)}, {first.x, xb},
	} {
		if err := d.check("cuMemcpyHtoD", d.cuMemcpyHtoD(c.dst, unsafe.Pointer(&c.src[0]), uint64(len(c.src)))); err != nil {
			return err
		}
	}
	for filled := 1; filled < copies; { // double the filled copies
		n := min(filled, copies-filled)
		if err := d.check("cuMemcpyDtoD", d.cuMemcpyDtoD(p.base+uint64(filled)*per, p.base, uint64(n)*per)); err != nil {
			return err
		}
		filled += n
	}
	for c := range copies {
		p.sets = append(p.sets, off.add(p.base+uint64(c)*per))
	}
	if err := p.ensureEvents(2); err != nil {
		return err
	}
	// Time a group of products (after one pass over a few copies) to
	// choose L and the warm-up.
	for range min(copies, tpProbe) {
		if err := p.product(false); err != nil {
			return err
		}
	}
	_, queue, err := p.timeGroup(tpProbe, 1, false, 0)
	if err != nil {
		return err
	}
	p.queue = queue / tpProbe
	// again with the device held while the host queues, so that the
	// group's time is the device's alone
	ms, _, err := p.timeGroup(tpProbe, 1, false, holdFor(queue))
	if err != nil {
		return err
	}
	perProduct := float64(ms) / 1e3 / tpProbe
	p.launches = launchesPerSample(perProduct)
	n := warmupLaunches(perProduct, copies)
	for i := range n {
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				_ = d.cuCtxSynchronize()
				return err
			}
		}
		if err := p.product(false); err != nil {
			return err
		}
	}
	return d.check("cuCtxSynchronize", d.cuCtxSynchronize())
}

// ensureEvents creates events until there are n. The caller holds enter().
func (p *prepared) ensureEvents(n int) error {
	for len(p.events) < n {
		var ev uintptr
		if err := p.b.d.check("cuEventCreate", p.b.d.cuEventCreate(&ev, 0)); err != nil {
			return err
		}
		p.events = append(p.events, ev)
	}
	return nil
}

// product launches one product (the whole batch) on the next copy. The
// caller holds enter().
func (p *prepared) product(narrow bool) error {
	s := p.sets[p.next]
	p.next = (p.next + 1) % len(p.sets)
	if p.nb > 1 {
		return p.b.launchQMVNB(p.dt, p.bits, p.group, p.n, p.k, p.batch, p.nb, narrow, s)
	}
	return p.b.launchQMV(p.dt, p.bits, p.group, p.n, p.k, p.batch, narrow, s)
}

// timeGroup times n products of repeat launches each between events 0 and
// 1, after holding the device for hold when hold > 0, and waits for them;
// it returns the elapsed milliseconds and the seconds the host took to
// queue the launches. The caller holds enter().
func (p *prepared) timeGroup(n, repeat int, narrow bool, hold time.Duration) (ms float32, queue float64, err error) {
	d := p.b.d
	if hold > 0 {
		if err := p.b.launch("qmv_hold", p.b.hold, 1, 1, 0, uint64(hold.Nanoseconds())); err != nil {
			return 0, 0, err
		}
	}
	if err := d.check("cuEventRecord", d.cuEventRecord(p.events[0], 0)); err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	for range n * repeat {
		if err := p.product(narrow); err != nil {
			return 0, 0, err
		}
	}
	queue = time.Since(t0).Seconds()
	if err := d.check("cuEventRecord", d.cuEventRecord(p.events[1], 0)); err != nil {
		return 0, 0, err
	}
	if err := d.check("cuEventSynchronize", d.cuEventSynchronize(p.events[1])); err != nil {
		return 0, 0, err
	}
	err = d.check("cuEventElapsedTime", d.cuEventElapsedTime(&ms, p.events[0], p.events[1]))
	return ms, queue, err
}

// lock takes the backend's qmv lock and enter() for a method of p; it
// fails when p or the backend is closed.
func (p *prepared) lock(what string) (func(), error) {
	p.b.qmvMu.Lock()
	if p.closed || p.b.isClosed() {
		p.b.qmvMu.Unlock()
		return nil, fmt.Errorf("cuda %s: prepared operands or backend closed", what)
	}
	unlock, err := p.b.enter()
	if err != nil {
		p.b.qmvMu.Unlock()
		return nil, err
	}
	return func() { unlock(); p.b.qmvMu.Unlock() }, nil
}

// LaunchesPerSample returns L, the products one sample times.
func (p *prepared) LaunchesPerSample() int { return p.launches }

// Arm returns the timed side of variant v (promoted or narrow bias sums);
// with repeat > 1 each timed product launches the kernel repeat times,
// each launch on the next copy (repeat < 1 counts as 1).
func (p *prepared) Arm(v runner.Variant, repeat int) runner.Arm {
	return &arm{p: p, narrow: v == runner.Narrow, repeat: max(1, repeat)}
}

type arm struct {
	p      *prepared
	narrow bool
	repeat int
}

// Sample takes n samples: for each, it queues a hold of the device (see
// holdFor) so that the host can queue the sample's launches ahead of the
// device, then an event, L products of repeat launches, an event; after
// the last sample it waits for the device and returns each sample's
// elapsed event time divided by L, in seconds per product. It checks ctx
// before each sample and holds the backend's qmv lock throughout.
func (a *arm) Sample(ctx context.Context, n int) ([]float64, error) {
	if n < 0 {
		return nil, fmt.Errorf("cuda sample: n = %d", n)
	}
	p := a.p
	unlock, err := p.lock("sample")
	if err != nil {
		return nil, err
	}
	defer unlock()
	d := p.b.d
	if err := p.ensureEvents(2 * n); err != nil {
		return nil, err
	}
	launches := p.launches * a.repeat
	fail := func(err error) ([]float64, error) {
		_ = d.cuCtxSynchronize() // let queued work finish before the events are reused
		return nil, err
	}
	for i := range n {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		hold := holdFor(p.queue * float64(launches))
		if err := p.b.launch("qmv_hold", p.b.hold, 1, 1, 0, uint64(hold.Nanoseconds())); err != nil {
			return fail(err)
		}
		if err := d.check("cuEventRecord", d.cuEventRecord(p.events[2*i], 0)); err != nil {
			return fail(err)
		}
		t0 := time.Now()
		for range launches {
			if err := p.product(a.narrow); err != nil {
				return fail(err)
			}
		}
		if err := d.check("cuEventRecord", d.cuEventRecord(p.events[2*i+1], 0)); err != nil {
			return fail(err)
		}
		p.queue = max(time.Since(t0).Seconds()/float64(launches), 0.9*p.queue)
	}
	out := make([]float64, n)
	if n == 0 {
		return out, nil
	}
	if err := d.check("cuEventSynchronize", d.cuEventSynchronize(p.events[2*n-1])); err != nil {
		return fail(err)
	}
	for i := range out {
		var ms float32
		if err := d.check("cuEventElapsedTime", d.cuEventElapsedTime(&ms, p.events[2*i], p.events[2*i+1])); err != nil {
			return fail(err)
		}
		out[i] = float64(ms) / 1e3 / float64(p.launches)
	}
	return out, nil
}

// Output runs one product of variant v over the batch and returns batch
// rows of N raw values.
func (p *prepared) Output(ctx context.Context, v runner.Variant) ([]runner.Vec, error) {
	if v != runner.Promoted && v != runner.Narrow {
		return nil, fmt.Errorf("cuda output: invalid variant %d", uint8(v))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	unlock, err := p.lock("output")
	if err != nil {
		return nil, err
	}
	defer unlock()
	s := p.sets[p.next]
	if err := p.product(v == runner.Narrow); err != nil {
		return nil, fmt.Errorf("cuda output: %w", err)
	}
	all := runner.NewVec(p.dt, p.batch*p.n)
	dst := vecBytes(all)
	if err := p.b.d.check("cuMemcpyDtoH", p.b.d.cuMemcpyDtoH(unsafe.Pointer(&dst[0]), s.y, uint64(len(dst)))); err != nil {
		return nil, fmt.Errorf("cuda output: %w", err)
	}
	rows := make([]runner.Vec, p.batch)
	for i := range rows {
		rows[i] = runner.NewVec(p.dt, p.n)
		for j := range p.n {
			rows[i].Set(j, all.At(i*p.n+j))
		}
	}
	return rows, nil
}

// Close frees the copies and the events; closing twice, or after the
// backend (whose context took the memory with it), does nothing.
func (p *prepared) Close() error {
	p.b.qmvMu.Lock()
	defer p.b.qmvMu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	if p.b.isClosed() {
		return nil
	}
	unlock, err := p.b.enter()
	if err != nil {
		return err
	}
	defer unlock()
	return p.free()
}

// free releases the allocation and the events. The caller holds enter().
func (p *prepared) free() error {
	d := p.b.d
	var first error
	for _, ev := range p.events {
		if err := d.check("cuEventDestroy", d.cuEventDestroy(ev)); err != nil && first == nil {
			first = err
		}
	}
	p.events = nil
	if p.base != 0 {
		if err := d.check("cuMemFree", d.cuMemFree(p.base)); err != nil && first == nil {
			first = err
		}
		p.base = 0
	}
	p.sets = nil
	return first
}
