package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// ErrNoDriver is wrapped by Open's error when libcuda.so.1 cannot be
// loaded (no NVIDIA driver on this host), and ErrNoNVRTC when no NVRTC
// library is found. Check with errors.Is.
var (
	ErrNoDriver = errors.New("no NVIDIA driver on this host")
	ErrNoNVRTC  = errors.New("no NVRTC library found")
)

// driverLib is the file name of the CUDA driver library (libcuda.so.1 on
// Linux, installed with the NVIDIA driver).
const driverLib = "libcuda.so.1"

// nvrtcNames are the NVRTC library names tried with the dynamic loader's
// search path, in order, before the globbed directories.
var nvrtcNames = []string{"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"}

// nvrtcGlobs are the patterns searched for NVRTC after the plain names;
// matches are tried newest name first.
var nvrtcGlobs = []string{
	"/usr/local/cuda*/lib64/libnvrtc.so*", "/usr/local/cuda*/targets/x86_64-linux/lib/libnvrtc.so*",
	"/usr/lib/x86_64-linux-gnu/libnvrtc.so*",
	// NVRTC shipped as a Python wheel (nvidia-cuda-nvrtc) beside PyTorch.
	"/opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib/libnvrtc.so*",
	"/usr/local/lib/python3*/dist-packages/nvidia/*/lib/libnvrtc.so*",
}

// cuResult is a CUresult (0 is CUDA_SUCCESS).
type cuResult int32

// driverAPI holds the CUDA driver API entry points used by the backend,
// resolved once from libcuda.so.1. Signatures follow cuda.h (CUDA 12/13);
// CUdevice is int, CUcontext/CUmodule/CUfunction/CUevent are pointers,
// CUdeviceptr is a 64-bit integer.
type driverAPI struct {
	cuInit                                      func(flags uint32) cuResult
	cuDriverGetVersion                          func(v *int32) cuResult
	cuDeviceGet                                 func(dev *int32, ordinal int32) cuResult
	cuDeviceGetCount                            func(n *int32) cuResult
	cuDeviceGetName                             func(name *byte, n int32, dev int32) cuResult
	cuDeviceGetAttribute                        func(v *int32, attr int32, dev int32) cuResult
	cuDeviceTotalMem                            func(bytes *uint64, dev int32) cuResult
	cuDeviceGetUuid                             func(uuid *[16]byte, dev int32) cuResult
	cuDevicePrimaryCtxRetain                    func(ctx *uintptr, dev int32) cuResult
	cuDevicePrimaryCtxRelease                   func(dev int32) cuResult
	cuCtxSetCurrent                             func(ctx uintptr) cuResult
	cuCtxSynchronize                            func() cuResult
	cuModuleLoadData                            func(mod *uintptr, image unsafe.Pointer) cuResult
	cuModuleUnload                              func(mod uintptr) cuResult
	cuModuleGetFunction                         func(fn *uintptr, mod uintptr, name string) cuResult
	cuMemAlloc                                  func(dptr *uint64, n uint64) cuResult
	cuMemFree                                   func(dptr uint64) cuResult
	cuMemGetInfo                                func(free, total *uint64) cuResult
	cuMemcpyHtoD                                func(dst uint64, src unsafe.Pointer, n uint64) cuResult
	cuMemcpyDtoH                                func(dst unsafe.Pointer, src uint64, n uint64) cuResult
	cuMemcpyDtoD                                func(dst, src uint64, n uint64) cuResult
	cuMemsetD8                                  func(dst uint64, v uint8, n uint64) cuResult
	cuLaunchKernel                              func(fn uintptr, gx, gy, gz, bx, by, bz, shared uint32, stream uintptr, params *unsafe.Pointer, extra *unsafe.Pointer) cuResult
	cuEventCreate                               func(ev *uintptr, flags uint32) cuResult
	cuEventRecord                               func(ev, stream uintptr) cuResult
	cuEventSynchronize                          func(ev uintptr) cuResult
	cuEventElapsedTime                          func(ms *float32, start, end uintptr) cuResult
	cuEventDestroy                              func(ev uintptr) cuResult
	cuGetErrorString                            func(r cuResult, s *uintptr) cuResult
	cuOccupancyMaxActiveBlocksPerMultiprocessor func(n *int32, fn uintptr, block int32, dynSmem uint64) cuResult
	cuFuncSetAttribute                          func(fn uintptr, attr int32, value int32) cuResult
	cuGetErrorName                              func(r cuResult, s *uintptr) cuResult
}

// nvrtcAPI holds the NVRTC entry points. nvrtcProgram is a pointer.
type nvrtcAPI struct {
	path                   string
	nvrtcVersion           func(major, minor *int32) int32
	nvrtcGetErrorString    func(r int32) uintptr
	nvrtcCreateProgram     func(prog *uintptr, src, name string, numHeaders int32, headers, includeNames unsafe.Pointer) int32
	nvrtcCompileProgram    func(prog uintptr, numOptions int32, options unsafe.Pointer) int32
	nvrtcGetPTXSize        func(prog uintptr, n *uint64) int32
	nvrtcGetPTX            func(prog uintptr, ptx *byte) int32
	nvrtcGetProgramLogSize func(prog uintptr, n *uint64) int32
	nvrtcGetProgramLog     func(prog uintptr, log *byte) int32
	nvrtcDestroyProgram    func(prog *uintptr) int32
}

var (
	driverOnce sync.Once
	driver     *driverAPI
	driverErr  error

	nvrtcOnce sync.Once
	nvrtc     *nvrtcAPI
	nvrtcErr  error
)

// bind resolves each name into the function pointed to by the matching
// fptr (alternatives separated by '|' are tried in order, e.g. a _v2
// symbol first). It fails naming the first missing symbol.
func bind(lib uintptr, libName string, syms []struct {
	fptr  any
	names []string
}) error {
	for _, s := range syms {
		var addr uintptr
		var err error
		for _, n := range s.names {
			if addr, err = purego.Dlsym(lib, n); err == nil && addr != 0 {
				break
			}
		}
		if addr == 0 {
			return fmt.Errorf("%s lacks %s: %v", libName, s.names[0], err)
		}
		purego.RegisterFunc(s.fptr, addr)
	}
	return nil
}

type symbol = struct {
	fptr  any
	names []string
}

func sym(fptr any, names ...string) symbol { return symbol{fptr, names} }

// loadDriver loads libcuda.so.1 once and calls cuInit(0). Its error wraps
// ErrNoDriver when the library is absent.
func loadDriver() (*driverAPI, error) {
	driverOnce.Do(func() {
		lib, err := purego.Dlopen(driverLib, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			driverErr = fmt.Errorf("cuda: %s not found: %w (%v)", driverLib, ErrNoDriver, err)
			return
		}
		d := &driverAPI{}
		err = bind(lib, driverLib, []symbol{
			sym(&d.cuInit, "cuInit"),
			sym(&d.cuDriverGetVersion, "cuDriverGetVersion"),
			sym(&d.cuDeviceGet, "cuDeviceGet"),
			sym(&d.cuDeviceGetCount, "cuDeviceGetCount"),
			sym(&d.cuDeviceGetName, "cuDeviceGetName"),
			sym(&d.cuDeviceGetAttribute, "cuDeviceGetAttribute"),
			sym(&d.cuDeviceTotalMem, "cuDeviceTotalMem_v2"),
			sym(&d.cuDeviceGetUuid, "cuDeviceGetUuid_v2", "cuDeviceGetUuid"),
			sym(&d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
			sym(&d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"),
			sym(&d.cuCtxSetCurrent, "cuCtxSetCurrent"),
			sym(&d.cuCtxSynchronize, "cuCtxSynchronize"),
			sym(&d.cuModuleLoadData, "cuModuleLoadData"),
			sym(&d.cuModuleUnload, "cuModuleUnload"),
			sym(&d.cuModuleGetFunction, "cuModuleGetFunction"),
			sym(&d.cuMemAlloc, "cuMemAlloc_v2"),
			sym(&d.cuMemFree, "cuMemFree_v2"),
			sym(&d.cuMemGetInfo, "cuMemGetInfo_v2"),
			sym(&d.cuMemcpyHtoD, "cuMemcpyHtoD_v2"),
			sym(&d.cuMemcpyDtoH, "cuMemcpyDtoH_v2"),
			sym(&d.cuMemcpyDtoD, "cuMemcpyDtoD_v2"),
			sym(&d.cuMemsetD8, "cuMemsetD8_v2"),
			sym(&d.cuLaunchKernel, "cuLaunchKernel"),
			sym(&d.cuEventCreate, "cuEventCreate"),
			sym(&d.cuEventRecord, "cuEventRecord"),
			sym(&d.cuEventSynchronize, "cuEventSynchronize"),
			sym(&d.cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime"),
			sym(&d.cuEventDestroy, "cuEventDestroy_v2", "cuEventDestroy"),
			sym(&d.cuGetErrorString, "cuGetErrorString"),
			sym(&d.cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor"),
			sym(&d.cuFuncSetAttribute, "cuFuncSetAttribute"),
			sym(&d.cuGetErrorName, "cuGetErrorName"),
		})
		if err != nil {
			driverErr = fmt.Errorf("cuda: %w", err)
			return
		}
		if r := d.cuInit(0); r != 0 {
			driverErr = fmt.Errorf("cuda: cuInit: %w", d.err(r))
			return
		}
		driver = d
	})
	return driver, driverErr
}

// nvrtcCandidates returns the NVRTC paths to try: $LEDGER_NVRTC when set,
// the plain names (dynamic loader search path), then the files matching
// nvrtcGlobs, longest name first (a fully versioned file such as
// libnvrtc.so.13.0.88 before its shorter links).
func nvrtcCandidates() []string {
	var out []string
	if p := os.Getenv("LEDGER_NVRTC"); p != "" {
		out = append(out, p)
	}
	out = append(out, nvrtcNames...)
	var globbed []string
	for _, g := range nvrtcGlobs {
		m, _ := filepath.Glob(g)
		globbed = append(globbed, m...)
	}
	sort.SliceStable(globbed, func(i, j int) bool { return len(globbed[i]) > len(globbed[j]) })
	return append(out, globbed...)
}

// loadNVRTC loads NVRTC once (see nvrtcCandidates). Its error wraps
// ErrNoNVRTC and lists what was tried.
func loadNVRTC() (*nvrtcAPI, error) {
	nvrtcOnce.Do(func() {
		var tried []string
		for _, p := range nvrtcCandidates() {
			lib, err := purego.Dlopen(p, purego.RTLD_NOW|purego.RTLD_GLOBAL)
			if err != nil {
				tried = append(tried, p)
				continue
			}
			n := &nvrtcAPI{path: p}
			err = bind(lib, p, []symbol{
				sym(&n.nvrtcVersion, "nvrtcVersion"),
				sym(&n.nvrtcGetErrorString, "nvrtcGetErrorString"),
				sym(&n.nvrtcCreateProgram, "nvrtcCreateProgram"),
				sym(&n.nvrtcCompileProgram, "nvrtcCompileProgram"),
				sym(&n.nvrtcGetPTXSize, "nvrtcGetPTXSize"),
				sym(&n.nvrtcGetPTX, "nvrtcGetPTX"),
				sym(&n.nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize"),
				sym(&n.nvrtcGetProgramLog, "nvrtcGetProgramLog"),
				sym(&n.nvrtcDestroyProgram, "nvrtcDestroyProgram"),
			})
			if err != nil {
				tried = append(tried, p+" ("+err.Error()+")")
				continue
			}
			nvrtc = n
			return
		}
		nvrtcErr = fmt.Errorf("cuda: %w (tried %v; set LEDGER_NVRTC to its path)", ErrNoNVRTC, tried)
	})
	return nvrtc, nvrtcErr
}

// cString reads a NUL-terminated C string at p (empty for a null pointer).
func cString(p uintptr) string {
	if p == 0 {
		return ""
	}
	var b []byte
	for i := uintptr(0); i < 4096; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(nil), p+i)) // C memory owned by the library
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

// Error is a failed CUDA driver call: Code is the CUresult, Name and
// Message come from cuGetErrorName and cuGetErrorString.
type Error struct {
	Code    int
	Name    string
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s (%d): %s", e.Name, e.Code, e.Message)
}

// err converts a CUresult into an *Error (nil for success).
func (d *driverAPI) err(r cuResult) error {
	if r == 0 {
		return nil
	}
	e := &Error{Code: int(r), Name: "CUDA_ERROR", Message: "unknown error"}
	var p uintptr
	if d.cuGetErrorName != nil && d.cuGetErrorName(r, &p) == 0 {
		e.Name = cString(p)
	}
	if d.cuGetErrorString != nil && d.cuGetErrorString(r, &p) == 0 {
		e.Message = cString(p)
	}
	return e
}

// check wraps a CUresult with the call's name; nil for success.
func (d *driverAPI) check(call string, r cuResult) error {
	if err := d.err(r); err != nil {
		return fmt.Errorf("%s: %w", call, err)
	}
	return nil
}

// check converts an nvrtcResult into an error (nil for success).
func (n *nvrtcAPI) check(call string, r int32) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("%s: nvrtc error %d: %s", call, r, cString(n.nvrtcGetErrorString(r)))
}

// version returns NVRTC's "major.minor".
func (n *nvrtcAPI) version() string {
	var maj, min int32
	if n.nvrtcVersion(&maj, &min) != 0 {
		return "unknown"
	}
	return fmt.Sprintf("%d.%d", maj, min)
}

// compilePTX compiles CUDA C++ source to PTX for the virtual architecture
// arch (e.g. "compute_90") with the given extra options. On a compile
// error the returned error carries NVRTC's log.
func (n *nvrtcAPI) compilePTX(src, name, arch string, opts []string) (ptx []byte, log string, err error) {
	var prog uintptr
	if err := n.check("nvrtcCreateProgram", n.nvrtcCreateProgram(&prog, src, name, 0, nil, nil)); err != nil {
		return nil, "", err
	}
	defer n.nvrtcDestroyProgram(&prog)
	all := append([]string{"--gpu-architecture=" + arch}, opts...)
	cstrs := make([][]byte, len(all))
	ptrs := make([]*byte, len(all))
	var pin runtime.Pinner
	defer pin.Unpin()
	for i, o := range all {
		cstrs[i] = append([]byte(o), 0)
		ptrs[i] = &cstrs[i][0]
		pin.Pin(ptrs[i])
	}
	pin.Pin(&ptrs[0])
	cerr := n.check("nvrtcCompileProgram", n.nvrtcCompileProgram(prog, int32(len(ptrs)), unsafe.Pointer(&ptrs[0])))
	var logSize uint64
	if n.nvrtcGetProgramLogSize(prog, &logSize) == 0 && logSize > 1 {
		buf := make([]byte, logSize)
		if n.nvrtcGetProgramLog(prog, &buf[0]) == 0 {
			log = string(buf[:logSize-1])
		}
	}
	if cerr != nil {
		return nil, log, fmt.Errorf("%w\n%s", cerr, log)
	}
	var size uint64
	if err := n.check("nvrtcGetPTXSize", n.nvrtcGetPTXSize(prog, &size)); err != nil {
		return nil, log, err
	}
	if size == 0 {
		return nil, log, fmt.Errorf("nvrtcGetPTXSize: empty PTX")
	}
	ptx = make([]byte, size) // includes the terminating NUL
	if err := n.check("nvrtcGetPTX", n.nvrtcGetPTX(prog, &ptx[0])); err != nil {
		return nil, log, err
	}
	return ptx, log, nil
}

// pointer returns the address of b's first byte (b must not be empty).
func pointer(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }
