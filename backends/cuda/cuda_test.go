package cuda

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runner/quant"
)

// driverPresent reports whether libcuda.so.1 loads on this host.
func driverPresent() bool {
	_, err := loadDriver()
	return !errors.Is(err, ErrNoDriver)
}

var (
	sharedOnce sync.Once
	shared     *Backend
	sharedErr  error
)

// gpu returns one backend shared by the tests of the package, or skips
// the test when this host has no NVIDIA driver (CI has none).
func gpu(t testing.TB) *Backend {
	t.Helper()
	if !driverPresent() {
		t.Skip("no NVIDIA driver on this host (libcuda.so.1 not found): GPU test skipped; run the test binary on a GPU machine")
	}
	sharedOnce.Do(func() { shared, sharedErr = Open() })
	if sharedErr != nil {
		t.Fatalf("Open on a host with the driver: %v", sharedErr)
	}
	return shared
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		if err := shared.Close(); err != nil && code == 0 {
			println("close:", err.Error())
			code = 1
		}
	}
	os.Exit(code)
}

func TestRegistered(t *testing.T) {
	for _, n := range runner.BackendNames() {
		if n == "cuda" {
			return
		}
	}
	t.Fatalf("backend cuda not registered: %v", runner.BackendNames())
}

// TestOpenWithoutDriver checks the clean error on a host without the
// driver, directly and through runner.OpenBackend (what `ledger run
// --backend cuda` calls).
func TestOpenWithoutDriver(t *testing.T) {
	if driverPresent() {
		t.Skip("libcuda.so.1 is present on this host: the no-driver error cannot be observed here")
	}
	b, err := Open()
	if err == nil {
		b.Close()
		t.Fatal("Open succeeded without a driver")
	}
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("error %v does not wrap ErrNoDriver", err)
	}
	const want = "cuda: libcuda.so.1 not found: no NVIDIA driver on this host"
	if !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("error %q, want prefix %q", err, want)
	}
	_, err = runner.OpenBackend("cuda")
	if err == nil || !errors.Is(err, ErrNoDriver) || !strings.Contains(err.Error(), want) {
		t.Fatalf("OpenBackend(cuda) = %v", err)
	}
}

func TestNVRTCCandidates(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "libnvrtc.so.99")
	t.Setenv("LEDGER_NVRTC", p)
	c := nvrtcCandidates()
	if len(c) < 4 || c[0] != p || c[1] != "libnvrtc.so" || c[2] != "libnvrtc.so.13" || c[3] != "libnvrtc.so.12" {
		t.Fatalf("candidates %v", c)
	}
	t.Setenv("LEDGER_NVRTC", "")
	if c := nvrtcCandidates(); c[0] != "libnvrtc.so" {
		t.Fatalf("without LEDGER_NVRTC: %v", c)
	}
}

func TestLayout(t *testing.T) {
	for _, d := range quant.DTypes {
		for _, bits := range quant.Bits {
			r := &runner.QMVRequest{DType: d, Bits: bits, GroupSize: 32, N: 5, K: 96}
			r.W = make([]uint32, r.N*quant.WordsPerRow(bits, r.K))
			off, total := layout(r)
			es := uint64(d.Size())
			g := uint64(r.N * r.K / r.GroupSize)
			parts := []struct{ at, size uint64 }{
				{off.w, 4 * uint64(len(r.W))}, {off.scales, es * g}, {off.biases, es * g}, {off.x, es * uint64(r.K)},
				{off.y, es * uint64(r.N)},
			}
			for i, p := range parts {
				if p.at%align != 0 {
					t.Fatalf("%v b%d: part %d at %d not %d-aligned", d, bits, i, p.at, align)
				}
				if p.at+p.size > total {
					t.Fatalf("%v b%d: part %d past the end", d, bits, i)
				}
				if i > 0 && parts[i-1].at+parts[i-1].size > p.at {
					t.Fatalf("%v b%d: parts %d and %d overlap", d, bits, i-1, i)
				}
			}
		}
	}
}

// TestKernelChunk: qmv.cu's bias-sum chunk per bit width (kernelChunk
// mirrors its Chunk<BITS>) is quant.ChunkSize, and a unit never straddles
// a group.
func TestKernelChunk(t *testing.T) {
	for _, bits := range quant.Bits {
		if kernelChunk[bits] != quant.ChunkSize(bits) {
			t.Errorf("%d bits: kernel chunk %d, quant.ChunkSize %d", bits, kernelChunk[bits], quant.ChunkSize(bits))
		}
		v := unitVals(bits)
		if v%kernelChunk[bits] != 0 || 32%(quant.GroupSizes[0]/v) != 0 {
			t.Errorf("%d bits: unit of %d values vs chunk %d, group %d", bits, v, kernelChunk[bits], quant.GroupSizes[0])
		}
		for _, g := range quant.GroupSizes {
			if g%v != 0 || 32%(g/v) != 0 {
				t.Errorf("%d bits, group %d: %d-value units do not tile the group within a warp", bits, g, v)
			}
		}
	}
}

// TestQMVGeometry checks the launch geometry against qmv.cu's limits: a
// block covers at most qmvMaxT threads in whole warps, no block gets more
// than qmvMaxRows rows, and every block gets at least one chunk of rows.
func TestQMVGeometry(t *testing.T) {
	for _, bits := range quant.Bits {
		for _, n := range []int{1, 3, 37, 4096, 8192, 16384, 1 << 20} {
			for _, k := range []int{32, 384, 8192, 16384, 65536} {
				for _, res := range []int{1, 132, 264, 528} {
					block, grid := qmvGeometry(bits, n, k, res)
					chunks := (n + qmvRB - 1) / qmvRB
					perBlock := (chunks + grid - 1) / grid * qmvRB
					if block%32 != 0 || block < 32 || block > qmvMaxT || grid < 1 || grid > chunks || perBlock > qmvMaxRows {
						t.Fatalf("b%d n=%d k=%d resident %d: block %d grid %d (%d rows a block)", bits, n, k, res, block, grid, perBlock)
					}
					if units := k / unitVals(bits); units <= qmvMaxT && block < units {
						t.Fatalf("b%d k=%d: block %d covers fewer than %d units", bits, k, block, units)
					}
				}
			}
		}
	}
	for _, bits := range quant.Bits {
		// qmv.cu's static part[][] plus the ring must fit a block (227 KiB on Hopper)
		if sm := qmvSmem(qmvStages, qmvRB, bits, qmvMaxT) + 4*qmvMaxT/32*qmvMaxRows; sm > 227<<10 {
			t.Errorf("%d bits: %d bytes of shared memory per block", bits, sm)
		}
	}
	if b, g := qmvGeometry(4, 8192, 8192, 264); b != 256 || g != 264 {
		t.Fatalf("8192x8192 on 264 resident blocks: block %d grid %d", b, g)
	}
}

// TestQMVRejectsBadRequests needs no GPU: validation comes first.
func TestQMVRejectsBadRequests(t *testing.T) {
	var b Backend
	if _, err := b.QMV(context.Background(), nil); err == nil {
		t.Fatal("nil request accepted")
	}
	r := &runner.QMVRequest{Variant: runner.Promoted, DType: quant.Float16, Bits: 7, GroupSize: 32, N: 1, K: 32}
	if _, err := b.QMV(context.Background(), r); err == nil || !strings.Contains(err.Error(), "bits") {
		t.Fatalf("bits 7: %v", err)
	}
	r.Bits = 4
	r.W = make([]uint32, 3) // want 4
	r.Scales, r.Biases, r.X = runner.NewVec(quant.Float16, 1), runner.NewVec(quant.Float16, 1), runner.NewVec(quant.Float16, 32)
	if _, err := b.QMV(context.Background(), r); err == nil || !strings.Contains(err.Error(), "W has 3 words") {
		t.Fatalf("short W: %v", err)
	}
}

// TestKernelCompiles compiles qmv.cu with NVRTC (no GPU needed, only the
// NVRTC library) and checks every kernel entry is in the PTX.
func TestKernelCompiles(t *testing.T) {
	nv, err := loadNVRTC()
	if err != nil {
		t.Skipf("NVRTC not available on this host, kernel compile not checked: %v", err)
	}
	for _, arch := range []string{"compute_90", "compute_80"} {
		ptx, log, err := nv.compilePTX(srcKernel, "qmv.cu", arch, compileOptions)
		if err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		if strings.TrimSpace(log) != "" {
			t.Logf("%s compile log:\n%s", arch, log)
		}
		s := string(ptx)
		if !strings.Contains(s, ".entry qmv_hold(") {
			t.Fatalf("%s: PTX lacks .entry qmv_hold", arch)
		}
		for _, dt := range dtypeNames {
			for _, name := range kernelNames(dt) {
				if !strings.Contains(s, ".entry "+name+"(") {
					t.Fatalf("%s: PTX lacks .entry %s", arch, name)
				}
			}
		}
		t.Logf("NVRTC %s (%s): %s PTX %d bytes", nv.version(), nv.path, arch, len(ptx))
	}
}

// TestMultiVectorKernelsCompile compiles qmv.cu with QMV_NB_KERNELS=1
// (no GPU needed, only NVRTC) and checks every multi-vector kernel entry
// is in the PTX and no single-vector one.
func TestMultiVectorKernelsCompile(t *testing.T) {
	nv, err := loadNVRTC()
	if err != nil {
		t.Skipf("NVRTC not available on this host, kernel compile not checked: %v", err)
	}
	ptx, _, err := nv.compilePTX(srcKernel, "qmv.cu", "compute_90", append(append([]string(nil), compileOptions...), "-DQMV_NB_KERNELS=1"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(ptx)
	for _, dt := range dtypeNames {
		for _, name := range kernelNames(dt) {
			for _, nb := range []string{"_x2", "_x4"} {
				if !strings.Contains(s, ".entry "+name+nb+"(") {
					t.Fatalf("PTX lacks .entry %s%s", name, nb)
				}
			}
			if strings.Contains(s, ".entry "+name+"(") {
				t.Fatalf("PTX has the single-vector .entry %s", name)
			}
		}
	}
}

func kernelNames(dt string) []string {
	var out []string
	for _, b := range quant.Bits {
		out = append(out, "qmv_"+dt+"_b"+strconv.Itoa(b))
	}
	return out
}

func TestReleaseField(t *testing.T) {
	for line, want := range map[string]string{
		"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)": "580.159.04",
		"NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023":      "535.104.05",
		"NVRM version: unknown": "",
		"":                      "",
	} {
		if got := releaseField(line); got != want {
			t.Errorf("releaseField(%q) = %q, want %q", line, got, want)
		}
	}
}
