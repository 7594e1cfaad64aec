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
// Throughput (runner.ThroughputBackend, throughput.go): PrepareQMV puts
// copies of one case's operands (weights, scales, biases, the batch of 1 to
// 8 activation vectors and their outputs) on the device until they fill 256
// MiB, several times the L2 cache (at most 4096 copies), so that each
// product reads its operands from device memory; a batch is one launch of
// the multi-vector kernels of qmv.cu built with QMV_NB_KERNELS=1 (compiled
// on first use; they unpack each weight once for 4 vectors when B is
// divisible by 4, else for 2 when B is even), or of the single-vector
// kernel with gridDim.y = B for odd B (batch.go's multiVector). It chooses L, the products per
// sample, so that one sample takes at least 0.5 ms of device time (1 <= L
// <= 4096), and warms up with about 50 ms of launches. A sample is the
// device time between two CUDA events recorded on the launch stream around
// L products (each on the next copy; with repeat > 1, repeat launches per
// product, each on the next copy), divided by L: seconds per product on the
// device's clock, launch gaps between back-to-back kernels included and
// host time excluded. Before each sample a one-thread kernel (qmv_hold)
// holds the stream for 1.5 times the host's recent queueing time, so the
// launches are queued before the device reaches them and a slow host does
// not show as idle device time. Limits: event timestamps have a resolution
// of about 0.5 µs (negligible against 0.5 ms samples); the samples include
// the clock and power state the GPU is in (DeviceState records clocks,
// temperature, power, throttle reasons and other processes from nvidia-smi,
// when it is on PATH, but nothing locks the clocks); work of other
// processes on the same GPU shares the timed interval; the copies defeat
// the L2 cache, not the TLBs or DRAM page state.
//
// On a host without the NVIDIA driver Open fails with an error wrapping
// ErrNoDriver ("cuda: libcuda.so.1 not found: no NVIDIA driver on this
// host ..."), so `ledger run --backend cuda` exits 2 with that message.
//
// Importing the package registers the backend as "cuda" with
// runner.RegisterBackend.
package cuda
