package runner

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner/alloc"
	"github.com/evidence-ledger/ledger/runner/quant"
)

// Variant selects the bias-sum semantics of the qmv kernel.
type Variant uint8

// The variants (WORKLOADS.md section 2).
const (
	// Promoted is the corrected kernel: every bias-sum operand is widened
	// to float32 before it is added: ((U(x0)+U(x1))+U(x2))+U(x3).
	Promoted Variant = iota + 1
	// Narrow is the original kernel: each chunk of P values is added up in
	// the activation dtype T, left to right, and only the chunk result is
	// widened to float32.
	Narrow
)

// String returns "promoted" or "narrow".
func (v Variant) String() string {
	switch v {
	case Promoted:
		return "promoted"
	case Narrow:
		return "narrow"
	}
	return fmt.Sprintf("variant(%d)", uint8(v))
}

// Vec is a vector of raw values of one dtype: B16 holds float16 or
// bfloat16 bit patterns, B32 float32 bit patterns; exactly the one that
// matches DType is used.
type Vec struct {
	DType quant.DType
	B16   []uint16
	B32   []uint32
}

// Len returns the number of values.
func (v Vec) Len() int {
	if v.DType == quant.Float32 {
		return len(v.B32)
	}
	return len(v.B16)
}

// At returns the raw bits of value i (in the low 16 bits for f16/bf16).
func (v Vec) At(i int) uint32 {
	if v.DType == quant.Float32 {
		return v.B32[i]
	}
	return uint32(v.B16[i])
}

// NewVec returns a zeroed vector of n values of dtype d.
func NewVec(d quant.DType, n int) Vec {
	if d == quant.Float32 {
		return Vec{DType: d, B32: make([]uint32, n)}
	}
	return Vec{DType: d, B16: make([]uint16, n)}
}

// Set stores raw bits at index i.
func (v Vec) Set(i int, bits uint32) {
	if v.DType == quant.Float32 {
		v.B32[i] = bits
	} else {
		v.B16[i] = uint16(bits)
	}
}

func (v Vec) check(name string, n int, d quant.DType) error {
	if v.DType != d {
		return fmt.Errorf("qmv: %s has dtype %v, want %v (x, scales and biases share one dtype)", name, v.DType, d)
	}
	if d == quant.Float32 && len(v.B16) != 0 || d != quant.Float32 && len(v.B32) != 0 {
		return fmt.Errorf("qmv: %s fills the wrong storage for %v", name, d)
	}
	if v.Len() != n {
		return fmt.Errorf("qmv: %s has %d values, want %d", name, v.Len(), n)
	}
	return nil
}

// QMVRequest is one quantized matrix-vector product y = W x (M = 1) over
// affine-quantized weights (WORKLOADS.md section 1):
//
//   - W: N rows of K*Bits/32 uint32 words, each row one little-endian bit
//     stream (element k at bits [k*Bits, (k+1)*Bits)), see quant.PackRow;
//   - Scales, Biases: N x K/GroupSize values of DType (row-major);
//   - X: K values of DType.
//
// The result has N values of DType: y[n] = sum over groups g of
// scale[n,g]*sum_k(q[n,k]*x[k]) + bias[n,g]*bsum_g, accumulated in float32,
// where bsum_g is built in chunks of quant.ChunkSize(Bits) consecutive x
// values with the Variant's semantics, and the float32 result is rounded to
// DType with round-to-nearest-even.
type QMVRequest struct {
	Variant   Variant
	DType     quant.DType
	Bits      int
	GroupSize int
	N, K      int
	W         []uint32
	Scales    Vec
	Biases    Vec
	X         Vec
}

// Validate checks the request's shapes, dtypes and variant. Backends call
// it before running the kernel.
func (r *QMVRequest) Validate() error {
	if r.Variant != Promoted && r.Variant != Narrow {
		return fmt.Errorf("qmv: invalid variant %d", uint8(r.Variant))
	}
	if !r.DType.Valid() {
		return fmt.Errorf("qmv: invalid dtype %d", uint8(r.DType))
	}
	if err := quant.CheckShape(r.Bits, r.GroupSize, r.N, r.K); err != nil {
		return fmt.Errorf("qmv: %w", err)
	}
	if want := r.N * quant.WordsPerRow(r.Bits, r.K); len(r.W) != want {
		return fmt.Errorf("qmv: W has %d words, want %d", len(r.W), want)
	}
	groups := r.N * r.K / r.GroupSize
	if err := r.Scales.check("scales", groups, r.DType); err != nil {
		return err
	}
	if err := r.Biases.check("biases", groups, r.DType); err != nil {
		return err
	}
	return r.X.check("x", r.K, r.DType)
}

// Backend is what a hardware backend implements. Implementations must be
// safe for concurrent use (the allocator lanes call Alloc and Free from
// several goroutines; QMV may be called concurrently).
type Backend interface {
	// Name is the backend's ledger name (ledger.BackendCPU, ...).
	Name() ledger.Backend
	// Device describes the hardware: model, driver, cores, free-form
	// attributes (architecture, toolchain versions).
	Device() ledger.Device
	// Alloc returns n > 0 bytes of real, fresh backend memory (host memory
	// for CPU, device memory via cuMemAlloc for CUDA); Free releases it.
	// Buffer.Host is nil when the memory is not host-visible.
	Alloc(n int) (alloc.Buffer, error)
	Free(b alloc.Buffer) error
	// QMV runs the qmv kernel on the backend for a validated request and
	// returns N raw output values of r.DType. It must honour ctx
	// cancellation between work items.
	QMV(ctx context.Context, r *QMVRequest) (Vec, error)
	// Sources returns the backend's kernel and raw-memory source files
	// (name -> bytes, e.g. "qmv.go" or "qmv.cu"), pinned by digest in the
	// evidence of every lane run on this backend.
	Sources() map[string][]byte
	// Close releases the backend (contexts, modules). Further calls fail.
	Close() error
}

var (
	backendsMu sync.Mutex
	backends   = map[string]func() (Backend, error){}
)

// RegisterBackend makes a backend available by name (for ledger run
// --backend). It is meant for init functions and panics on an empty name,
// a nil constructor or a duplicate name.
func RegisterBackend(name string, open func() (Backend, error)) {
	backendsMu.Lock()
	defer backendsMu.Unlock()
	if name == "" || open == nil {
		panic("runner: RegisterBackend with empty name or nil constructor")
	}
	if _, dup := backends[name]; dup {
		panic("runner: backend " + name + " registered twice")
	}
	backends[name] = open
}

// BackendNames returns the registered backend names, sorted.
func BackendNames() []string {
	backendsMu.Lock()
	defer backendsMu.Unlock()
	names := make([]string, 0, len(backends))
	for n := range backends {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// OpenBackend opens the backend registered under name. It fails for an
// unknown name (listing the known ones) or when the constructor fails (no
// driver, no device).
func OpenBackend(name string) (Backend, error) {
	backendsMu.Lock()
	open, ok := backends[name]
	backendsMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("unknown backend %q (registered: %v)", name, BackendNames())
	}
	b, err := open()
	if err != nil {
		return nil, fmt.Errorf("open backend %s: %w", name, err)
	}
	return b, nil
}
