package cuda

import (
	_ "embed"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runner/alloc"
)

func init() {
	runner.RegisterBackend(string(ledger.BackendCUDA), func() (runner.Backend, error) { return Open() })
}

//go:embed qmv.cu
var srcKernel string

//go:embed qmv.go
var srcQMV []byte

//go:embed driver.go
var srcDriver []byte

//go:embed cuda.go
var srcBackend []byte

//go:embed throughput.go
var srcThroughput []byte

//go:embed batch.go
var srcBatch []byte

// Device attribute ids (cuda.h, CUdevice_attribute).
const (
	attrMultiprocessorCount = 16
	attrL2CacheSize         = 38
	attrPCIBusID            = 33
	attrPCIDeviceID         = 34
	attrComputeCapMajor     = 75
	attrComputeCapMinor     = 76
)

// Backend is the CUDA backend: device 0 of the host, its primary context,
// and the qmv kernels compiled by NVRTC at Open. It is safe for concurrent
// use: every driver call runs on a locked OS thread with the backend's
// context made current; QMV calls are serialized.
type Backend struct {
	d      *driverAPI
	dev    int32
	ctx    uintptr
	mod    uintptr
	device ledger.Device
	arch   string // e.g. "compute_90"
	ptx    []byte
	uuid   string // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi -i takes it; "" if unknown

	qmv    map[[2]int]uintptr  // (dtype, bits) -> qmv kernel
	hold   uintptr             // qmv_hold kernel
	nb     nbKernels           // the multi-vector kernels, compiled on first use; guarded by qmvMu
	opts   []string            // the NVRTC macro definitions of qmv.cu at Open
	sms    int                 // multiprocessors
	stages int                 // QMV_STAGES of the compiled qmv.cu
	occ    map[residentKey]int // guarded by mu; see resident

	qmvMu sync.Mutex // serializes QMV

	mu     sync.Mutex
	live   map[uintptr]int // device pointer -> size
	closed bool

	liveBytes atomic.Int64
	liveCount atomic.Int64
}

var _ runner.Backend = (*Backend)(nil)

// Open loads the CUDA driver (libcuda.so.1) and NVRTC at run time, takes
// device 0's primary context and compiles the qmv kernels (qmv.cu) to PTX
// for the device's compute capability. Errors: ErrNoDriver (wrapped) when
// libcuda.so.1 is missing, e.g. "cuda: libcuda.so.1 not found: no NVIDIA
// driver on this host"; ErrNoNVRTC when no NVRTC library is found; driver
// errors (*Error) when there is no device or a call fails; NVRTC's log on a
// compile error.
func Open() (*Backend, error) { return open(nil, qmvStages) }

// open is Open with extra NVRTC options (macro definitions of qmv.cu) and
// the QMV_STAGES value they leave in force.
func open(defines []string, stages int) (*Backend, error) {
	d, err := loadDriver()
	if err != nil {
		return nil, err
	}
	var count int32
	if err := d.check("cuDeviceGetCount", d.cuDeviceGetCount(&count)); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	if count < 1 {
		return nil, fmt.Errorf("cuda: the driver reports no CUDA device")
	}
	b := &Backend{d: d, live: map[uintptr]int{}, qmv: map[[2]int]uintptr{}, occ: map[residentKey]int{}, stages: stages,
		opts: append([]string(nil), defines...)}
	if err := d.check("cuDeviceGet", d.cuDeviceGet(&b.dev, 0)); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	if err := d.check("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(&b.ctx, b.dev)); err != nil {
		return nil, fmt.Errorf("cuda: %w", err)
	}
	if err := b.init(defines); err != nil {
		if b.mod != 0 {
			if unlock, uerr := b.enter(); uerr == nil {
				_ = d.cuModuleUnload(b.mod)
				unlock()
			}
		}
		_ = b.release()
		return nil, err
	}
	return b, nil
}

// init reads the device identity, compiles and loads the kernels.
func (b *Backend) init(defines []string) error {
	nv, err := loadNVRTC()
	if err != nil {
		return err
	}
	unlock, err := b.enter()
	if err != nil {
		return err
	}
	defer unlock()
	d := b.d
	attr := func(a int32) int {
		var v int32
		if d.cuDeviceGetAttribute(&v, a, b.dev) != 0 {
			return -1
		}
		return int(v)
	}
	var name [256]byte
	if err := d.check("cuDeviceGetName", d.cuDeviceGetName(&name[0], int32(len(name)), b.dev)); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	var drv int32
	if err := d.check("cuDriverGetVersion", d.cuDriverGetVersion(&drv)); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	var total uint64
	if err := d.check("cuDeviceTotalMem", d.cuDeviceTotalMem(&total, b.dev)); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	major, minor := attr(attrComputeCapMajor), attr(attrComputeCapMinor)
	if major < 0 || minor < 0 {
		return fmt.Errorf("cuda: cannot read the compute capability")
	}
	b.arch = fmt.Sprintf("compute_%d%d", major, minor)
	var uuid [16]byte
	if d.cuDeviceGetUuid(&uuid, b.dev) == 0 {
		b.uuid = formatUUID(uuid)
	}
	api := fmt.Sprintf("%d.%d", drv/1000, drv%1000/10)
	b.device = ledger.Device{
		Model:  strings.TrimRight(string(name[:]), "\x00"),
		Driver: driverRelease(api),
		Attrs: map[string]string{
			"compute_capability": fmt.Sprintf("%d.%d", major, minor),
			"cuda_driver_api":    api,
			"memory_bytes":       fmt.Sprint(total),
			"multiprocessors":    fmt.Sprint(attr(attrMultiprocessorCount)),
			"l2_bytes":           fmt.Sprint(attr(attrL2CacheSize)),
			"pci":                fmt.Sprintf("%02x:%02x", attr(attrPCIBusID), attr(attrPCIDeviceID)),
			"nvrtc":              nv.version(),
			"nvrtc_library":      nv.path,
			"ptx_arch":           b.arch,
			"host_cores":         fmt.Sprint(runtime.NumCPU()),
			"goarch":             runtime.GOARCH,
			"go_version":         runtime.Version(),
		},
	}
	ptx, _, err := nv.compilePTX(srcKernel, "qmv.cu", b.arch, append(append([]string(nil), compileOptions...), defines...))
	if err != nil {
		return fmt.Errorf("cuda: compile qmv.cu for %s: %w", b.arch, err)
	}
	b.ptx = ptx
	if err := d.check("cuModuleLoadData", d.cuModuleLoadData(&b.mod, pointer(ptx))); err != nil {
		return fmt.Errorf("cuda: load PTX: %w", err)
	}
	b.sms = attr(attrMultiprocessorCount)
	if err := d.check("cuModuleGetFunction qmv_hold", d.cuModuleGetFunction(&b.hold, b.mod, "qmv_hold")); err != nil {
		return fmt.Errorf("cuda: %w", err)
	}
	for code, t := range dtypeNames {
		var fn uintptr
		for _, bits := range []int{2, 3, 4, 5, 6, 8} {
			name := fmt.Sprintf("qmv_%s_b%d", t, bits)
			if err := d.check("cuModuleGetFunction "+name, d.cuModuleGetFunction(&fn, b.mod, name)); err != nil {
				return fmt.Errorf("cuda: %w", err)
			}
			if sm := qmvSmem(b.stages, qmvRB, bits, qmvMaxT); sm > 48<<10 {
				if err := d.check("cuFuncSetAttribute "+name, d.cuFuncSetAttribute(fn, funcAttrMaxDynamicShared, int32(sm))); err != nil {
					return fmt.Errorf("cuda: %w", err)
				}
			}
			b.qmv[[2]int{code, bits}] = fn
		}
	}
	return nil
}

// compileOptions are the NVRTC options besides the architecture: C++17
// (if constexpr), device code by default, no fused multiply-add (the Go
// reference never fuses).
var compileOptions = []string{"--std=c++17", "-default-device", "--fmad=false"}

// driverRelease returns the NVIDIA driver release read from
// /proc/driver/nvidia/version (first line, e.g. "NVRM version: NVIDIA UNIX
// Open Kernel Module for x86_64  580.159.04  Release Build ...": the first
// field made of digits and dots), as "NVIDIA 580.159.04 (CUDA driver API
// 13.0)"; else "CUDA driver API <api>".
func driverRelease(api string) string {
	if b, err := os.ReadFile("/proc/driver/nvidia/version"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		if v := releaseField(line); v != "" {
			return "NVIDIA " + v + " (CUDA driver API " + api + ")"
		}
	}
	return "CUDA driver API " + api
}

// releaseField returns the first whitespace-separated field of line that
// is a dotted version number (digits and at least one dot), or "".
func releaseField(line string) string {
	for _, f := range strings.Fields(line) {
		if strings.Count(f, ".") == 0 || strings.Trim(f, "0123456789.") != "" || f[0] == '.' {
			continue
		}
		return f
	}
	return ""
}

// enter locks the goroutine to its OS thread and makes the backend's
// context current there; the returned function unlocks. Every driver call
// after Open goes through it (a CUDA context is current per OS thread, and
// goroutines move between threads).
func (b *Backend) enter() (func(), error) {
	runtime.LockOSThread()
	if err := b.d.check("cuCtxSetCurrent", b.d.cuCtxSetCurrent(b.ctx)); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("cuda: %w", err)
	}
	return runtime.UnlockOSThread, nil
}

// Name returns ledger.BackendCUDA.
func (b *Backend) Name() ledger.Backend { return ledger.BackendCUDA }

// Device returns the GPU identity: Model is the device name
// (cuDeviceGetName), Driver the NVIDIA driver release and CUDA driver API
// version; Attrs hold compute_capability, cuda_driver_api, memory_bytes,
// multiprocessors, l2_bytes, pci (bus:device), nvrtc (version), nvrtc_library,
// ptx_arch, host_cores, gomaxprocs, goarch and go_version. Cores is left 0:
// GPU "cores" have no single meaning (see multiprocessors).
func (b *Backend) Device() ledger.Device {
	d := b.device
	d.Attrs = map[string]string{}
	for k, v := range b.device.Attrs {
		d.Attrs[k] = v
	}
	d.Attrs["gomaxprocs"] = fmt.Sprint(runtime.GOMAXPROCS(0))
	return d
}

// Alloc returns n > 0 bytes of fresh device memory (cuMemAlloc).
// Buffer.Addr is the device pointer, Buffer.Host is nil (device memory is
// not host-visible).
func (b *Backend) Alloc(n int) (alloc.Buffer, error) {
	if n <= 0 {
		return alloc.Buffer{}, fmt.Errorf("cuda alloc: size must be > 0, got %d", n)
	}
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return alloc.Buffer{}, fmt.Errorf("cuda alloc: backend closed")
	}
	unlock, err := b.enter()
	if err != nil {
		return alloc.Buffer{}, err
	}
	var p uint64
	err = b.d.check("cuMemAlloc", b.d.cuMemAlloc(&p, uint64(n)))
	unlock()
	if err != nil {
		return alloc.Buffer{}, fmt.Errorf("cuda alloc %d bytes: %w", n, err)
	}
	b.mu.Lock()
	if b.closed { // closed while allocating
		b.mu.Unlock()
		if unlock, err := b.enter(); err == nil {
			_ = b.d.cuMemFree(p)
			unlock()
		}
		return alloc.Buffer{}, fmt.Errorf("cuda alloc: backend closed")
	}
	b.live[uintptr(p)] = n
	b.mu.Unlock()
	b.liveBytes.Add(int64(n))
	b.liveCount.Add(1)
	return alloc.Buffer{Addr: uintptr(p), Size: n}, nil
}

// Free releases a buffer returned by Alloc (cuMemFree); freeing an unknown
// or already freed buffer is an error.
func (b *Backend) Free(buf alloc.Buffer) error {
	b.mu.Lock()
	size, ok := b.live[buf.Addr]
	if ok && size == buf.Size {
		delete(b.live, buf.Addr)
	}
	b.mu.Unlock()
	if !ok || size != buf.Size {
		return fmt.Errorf("cuda free: %#x (%d bytes) is not a live allocation", buf.Addr, buf.Size)
	}
	b.liveBytes.Add(-int64(buf.Size))
	b.liveCount.Add(-1)
	unlock, err := b.enter()
	if err != nil {
		return err
	}
	defer unlock()
	return b.d.check("cuMemFree", b.d.cuMemFree(uint64(buf.Addr)))
}

// Live returns the bytes and buffers currently allocated through Alloc.
func (b *Backend) Live() (bytes, buffers int64) { return b.liveBytes.Load(), b.liveCount.Load() }

// Sources returns the kernel source (qmv.cu) and the Go files that
// compile, launch, allocate and time (qmv.go, driver.go, cuda.go,
// throughput.go, batch.go).
func (b *Backend) Sources() map[string][]byte {
	return map[string][]byte{"qmv.cu": []byte(srcKernel), "qmv.go": srcQMV, "driver.go": srcDriver, "cuda.go": srcBackend,
		"throughput.go": srcThroughput, "batch.go": srcBatch}
}

// PTX returns the PTX that NVRTC produced for this device at Open.
func (b *Backend) PTX() []byte { return append([]byte(nil), b.ptx...) }

// Close frees every outstanding device allocation, unloads the module and
// releases the primary context. Further calls fail.
func (b *Backend) Close() error {
	b.qmvMu.Lock()
	defer b.qmvMu.Unlock()
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	live := b.live
	b.live = map[uintptr]int{}
	b.mu.Unlock()
	b.liveBytes.Store(0)
	b.liveCount.Store(0)
	unlock, err := b.enter()
	if err != nil {
		return err
	}
	var first error
	for p := range live {
		if err := b.d.check("cuMemFree", b.d.cuMemFree(uint64(p))); err != nil && first == nil {
			first = err
		}
	}
	if b.mod != 0 {
		if err := b.d.check("cuModuleUnload", b.d.cuModuleUnload(b.mod)); err != nil && first == nil {
			first = err
		}
		b.mod = 0
	}
	if b.nb.mod != 0 {
		if err := b.d.check("cuModuleUnload", b.d.cuModuleUnload(b.nb.mod)); err != nil && first == nil {
			first = err
		}
		b.nb.mod = 0
	}
	unlock()
	if err := b.release(); err != nil && first == nil {
		first = err
	}
	return first
}

// release drops the primary context reference taken by Open.
func (b *Backend) release() error {
	if b.ctx == 0 {
		return nil
	}
	b.ctx = 0
	return b.d.check("cuDevicePrimaryCtxRelease", b.d.cuDevicePrimaryCtxRelease(b.dev))
}
