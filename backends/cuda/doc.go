// Package cuda is the CUDA backend of the hardware lanes: it implements
// runner.Backend on device 0 of an NVIDIA GPU without cgo. The CUDA driver
// (libcuda.so.1) and NVRTC (libnvrtc.so, .so.13, .so.12, or a file found
// under /usr/local/cuda*/lib64, /usr/lib/x86_64-linux-gnu or a Python
// wheel; $LEDGER_NVRTC overrides) are loaded at run time with
// github.com/ebitengine/purego, so the same CGO_ENABLED=0 binary runs on
// hosts with and without a GPU.
//
// Open compiles the embedded kernel source qmv.cu to PTX for the device's
// compute capability (NVRTC options --std=c++17 -default-device
// --fmad=false) and loads it with cuModuleLoadData. The qmv kernels
// implement WORKLOADS.md sections 1 and 2 with the same chunk-first
// bias-sum semantics as backends/cpu in both variants (promoted and
// narrow); float16 and bfloat16 conversions are written out in the kernel
// with round-to-nearest-even, so no CUDA headers are needed. Alloc and
// Free are cuMemAlloc and cuMemFree of real device memory (Buffer.Host is
// nil), which the allocator lanes drive with the CUDA rule set.
//
// On a host without the NVIDIA driver Open fails with an error wrapping
// ErrNoDriver ("cuda: libcuda.so.1 not found: no NVIDIA driver on this
// host ..."), so `ledger run --backend cuda` exits 2 with that message.
//
// Importing the package registers the backend as "cuda" with
// runner.RegisterBackend.
package cuda
