package cuda

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runner/quant"
)

// The tests in this file run without a GPU.

func smallRequest(d quant.DType, n, k int) *runner.QMVRequest {
	groups := n * k / 64
	return &runner.QMVRequest{Variant: runner.Promoted, DType: d, Bits: 4, GroupSize: 64, N: n, K: k,
		W: make([]uint32, n*quant.WordsPerRow(4, k)), Scales: runner.NewVec(d, groups), Biases: runner.NewVec(d, groups),
		X: runner.NewVec(d, k)}
}

func TestCheckBatch(t *testing.T) {
	r := smallRequest(quant.Float16, 8, 128)
	vecs := func(n int, d quant.DType, k int) []runner.Vec {
		xs := make([]runner.Vec, n)
		for i := range xs {
			xs[i] = runner.NewVec(d, k)
		}
		return xs
	}
	for _, n := range []int{1, 2, 4, 8} {
		if err := checkBatch(r, vecs(n, quant.Float16, 128)); err != nil {
			t.Fatalf("batch %d: %v", n, err)
		}
	}
	bad := smallRequest(quant.Float16, 8, 128)
	bad.W = bad.W[1:]
	for name, c := range map[string]struct {
		r    *runner.QMVRequest
		xs   []runner.Vec
		want string
	}{
		"nil":        {nil, vecs(1, quant.Float16, 128), "nil request"},
		"invalid":    {bad, vecs(1, quant.Float16, 128), "W has"},
		"empty":      {r, nil, "batch of 0 activation vectors: the kernel takes 1 to 8"},
		"too large":  {r, vecs(9, quant.Float16, 128), "batch of 9 activation vectors: the kernel takes 1 to 8"},
		"wrong K":    {r, append(vecs(1, quant.Float16, 128), runner.NewVec(quant.Float16, 64)), "activation vector 1 has 64 values of f16, want 128 of f16"},
		"wrong type": {r, vecs(2, quant.Float32, 128), "activation vector 0 has 128 values of f32, want 128 of f16"},
	} {
		err := checkBatch(c.r, c.xs)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to contain %q", name, err, c.want)
		}
	}
}

// TestPrepareRejectsBeforeTheDevice: bad requests fail with the reason
// before any driver call (the zero Backend has no driver).
func TestPrepareRejectsBeforeTheDevice(t *testing.T) {
	var b Backend
	r := smallRequest(quant.Float16, 8, 128)
	xs := make([]runner.Vec, 9)
	for i := range xs {
		xs[i] = runner.NewVec(quant.Float16, 128)
	}
	_, err := b.PrepareQMV(context.Background(), r, xs)
	if err == nil || !strings.Contains(err.Error(), "cuda prepare qmv: batch of 9 activation vectors") {
		t.Fatalf("error %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.PrepareQMV(ctx, r, xs[:1]); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: error %v", err)
	}
	for _, c := range []struct{ batch, nb int }{{3, 2}, {2, 4}, {6, 3}, {4, 8}} {
		_, err := b.prepareQMV(context.Background(), r, xs[:c.batch], c.nb)
		if want := fmt.Sprintf("cuda prepare qmv: no %d-vector kernel for a batch of %d", c.nb, c.batch); err == nil || err.Error() != want {
			t.Errorf("batch %d nb %d: error %v, want %q", c.batch, c.nb, err, want)
		}
	}
}

func TestVectorsPerBlock(t *testing.T) {
	for _, c := range []struct {
		batch int
		multi bool
		want  int
	}{
		{1, true, 1}, {2, true, 2}, {3, true, 1}, {4, true, 4}, {6, true, 2}, {8, true, 4},
		{1, false, 1}, {2, false, 1}, {4, false, 1}, {8, false, 1},
	} {
		if got := vectorsPerBlock(c.batch, c.multi); got != c.want {
			t.Errorf("vectorsPerBlock(%d, %v) = %d, want %d", c.batch, c.multi, got, c.want)
		}
	}
}

func TestRotationCopies(t *testing.T) {
	for _, c := range []struct {
		bytes uint64
		want  int
	}{
		{0, 2}, {1, tpMaxCopies}, {64 << 10, tpMaxCopies}, {1 << 20, 256}, {5 << 20, 52},
		{36 << 20, 8}, {(36 << 20) + 1, 8}, {200 << 20, 2}, {1 << 30, 2},
	} {
		got := rotationCopies(c.bytes)
		if got != c.want {
			t.Errorf("rotationCopies(%d) = %d, want %d", c.bytes, got, c.want)
		}
		if c.bytes > 0 && got < tpMaxCopies && uint64(got)*c.bytes < tpRotateBytes {
			t.Errorf("rotationCopies(%d) = %d copies: %d bytes, below %d", c.bytes, got, uint64(got)*c.bytes, tpRotateBytes)
		}
	}
}

func TestLaunchesPerSample(t *testing.T) {
	for _, c := range []struct {
		s    float64
		want int
	}{
		{44e-6, 12}, {12e-6, 42}, {0.5e-3, 1}, {2e-3, 1}, {1e-9, tpMaxLaunches}, {0, tpMaxLaunches}, {-1, tpMaxLaunches},
	} {
		if got := launchesPerSample(c.s); got != c.want {
			t.Errorf("launchesPerSample(%g) = %d, want %d", c.s, got, c.want)
		}
		if got := launchesPerSample(c.s); c.s > 0 && got < tpMaxLaunches && float64(got)*c.s < tpSampleSeconds*(1-1e-9) {
			t.Errorf("launchesPerSample(%g) = %d: %g s per sample", c.s, got, float64(got)*c.s)
		}
	}
}

func TestWarmupLaunches(t *testing.T) {
	if got := warmupLaunches(44e-6, 8); got != 1137 {
		t.Errorf("warmupLaunches(44µs, 8) = %d, want 1137", got)
	}
	if got := warmupLaunches(1e-3, 100); got != 100 {
		t.Errorf("warmupLaunches(1ms, 100 copies) = %d, want 100 (every copy once)", got)
	}
	if got := warmupLaunches(0, 2); got != 64*tpMaxLaunches {
		t.Errorf("warmupLaunches(0) = %d", got)
	}
}

func TestHoldFor(t *testing.T) {
	if got := holdFor(0); got != 50*time.Microsecond {
		t.Errorf("holdFor(0) = %v", got)
	}
	if got := holdFor(1e-3); got != 1550*time.Microsecond {
		t.Errorf("holdFor(1ms) = %v", got)
	}
	if got := holdFor(10); got != tpMaxHold {
		t.Errorf("holdFor(10 s) = %v, want the cap", got)
	}
}

func TestBatchLayout(t *testing.T) {
	r := smallRequest(quant.Float16, 100, 256)
	one, t1 := layout(r)
	four, t4 := batchLayout(r, 4)
	if one.w != 0 || four.w != 0 || one.x != four.x || one.scales != four.scales {
		t.Fatalf("layouts %+v %+v", one, four)
	}
	// x: 4*256 float16 = 2048 bytes; y: 4*100 float16 = 800 -> 1024.
	if four.y-four.x != 2048 || t4-four.y != 1024 || t1-one.y != 256 {
		t.Fatalf("batch layout %+v total %d (single %+v total %d)", four, t4, one, t1)
	}
	for _, o := range []uint64{four.w, four.scales, four.biases, four.x, four.y, t4} {
		if o%align != 0 {
			t.Fatalf("offset %d not %d-byte aligned", o, align)
		}
	}
}

func TestClock(t *testing.T) {
	if c := (&Backend{}).Clock(); c != "cuda-events" {
		t.Fatal(c)
	}
}

// Canned nvidia-smi output (driver 580, H100 SXM; csv,noheader,nounits).
const (
	smiBusy    = "1980, 2619, 1980, 41, 412.37, 700.00, P0, Enabled, 0x0000000000000000\n"
	smiIdle    = "345, 2619, 1980, 29, 69.87, 700.00, P0, Disabled, 0x0000000000000001\n"
	smiCapped  = "1755, 2619, 1980, 67, 699.12, 700.00, P0, Enabled, 0x00000000000000A4\n"
	smiNA      = "1410, 1593, 1410, 33, [N/A], [N/A], P0, Enabled, [Not Supported]\n"
	smiApps    = "1234, /usr/bin/python3, 20480\n4242, /tmp/cuda.test, 812\n77, /opt/app/bin/server, worker, [N/A]\n"
	smiNoApps  = "No running processes found\n"
	smiBadName = "Field \"clocks_event_reasons.active\" is not a valid field to query.\n\n"
)

func TestParseGPUQuery(t *testing.T) {
	for _, c := range []struct {
		out  string
		want map[string]string
	}{
		{smiBusy, map[string]string{"clocks.sm_mhz": "1980", "clocks.mem_mhz": "2619", "clocks.max_sm_mhz": "1980",
			"temperature_c": "41", "power_w": "412.37", "power_limit_w": "700.00", "pstate": "P0",
			"persistence_mode": "Enabled", "clocks.throttle_reasons": "0x0000000000000000 (none)"}},
		{"\n" + smiIdle, map[string]string{"clocks.sm_mhz": "345", "persistence_mode": "Disabled",
			"clocks.throttle_reasons": "0x0000000000000001 (gpu_idle)"}},
		{smiCapped, map[string]string{"temperature_c": "67",
			"clocks.throttle_reasons": "0x00000000000000A4 (sw_power_cap, sw_thermal_slowdown, hw_power_brake_slowdown)"}},
		{smiNA, map[string]string{"power_w": "[N/A]", "clocks.throttle_reasons": "[Not Supported]"}},
	} {
		got, err := parseGPUQuery([]byte(c.out))
		if err != nil {
			t.Fatalf("%q: %v", c.out, err)
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("%q: %s = %q, want %q", c.out, k, got[k], v)
			}
		}
		if len(got) != len(smiFields)+1 {
			t.Errorf("%q: %d keys %v", c.out, len(got), got)
		}
	}
	for _, bad := range []string{"", "\n\n", "1980, 2619\n", smiBadName} {
		if _, err := parseGPUQuery([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestThrottleReasons(t *testing.T) {
	for in, want := range map[string]string{
		"0x0000000000000008": "0x0000000000000008 (hw_slowdown)",
		"0x0000000000001000": "0x0000000000001000 (0x1000)",
		"0x0000000000000041": "0x0000000000000041 (gpu_idle, hw_thermal_slowdown)",
		"[N/A]":              "[N/A]",
		"12":                 "12",
	} {
		if got := throttleReasons(in); got != want {
			t.Errorf("throttleReasons(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseComputeApps(t *testing.T) {
	if got, want := parseComputeApps([]byte(smiApps), 4242), "1234 /usr/bin/python3 (20480 MiB); 77 /opt/app/bin/server, worker ([N/A])"; got != want {
		t.Errorf("apps: %q, want %q", got, want)
	}
	for _, out := range []string{"", "\n", smiNoApps, "4242, /tmp/cuda.test, 812\n"} {
		if got := parseComputeApps([]byte(out), 4242); got != "none" {
			t.Errorf("%q: %q, want none", out, got)
		}
	}
}

// fakeSMI answers the queries of deviceState from canned text; a query
// for the fields in reject fails as nvidia-smi does.
type fakeSMI struct {
	gpu, apps string
	reject    string
	calls     [][]string
}

func (f *fakeSMI) run(ctx context.Context, args ...string) ([]byte, error) {
	f.calls = append(f.calls, args)
	if _, ok := ctx.Deadline(); !ok {
		return nil, fmt.Errorf("no deadline")
	}
	q := args[0]
	switch {
	case f.reject != "" && strings.Contains(q, f.reject):
		return nil, fmt.Errorf("nvidia-smi: exit status 2: %s", smiBadName)
	case strings.HasPrefix(q, "--query-gpu="):
		return []byte(f.gpu), nil
	case strings.HasPrefix(q, "--query-compute-apps="):
		return []byte(f.apps), nil
	}
	return nil, fmt.Errorf("unexpected %v", args)
}

func TestDeviceState(t *testing.T) {
	const id = "GPU-6f0e4c2a-9d3b-11ee-8c90-0242ac120002"
	f := &fakeSMI{gpu: smiBusy, apps: smiApps, reject: "clocks_event_reasons"}
	st := deviceState(f.run, id, 4242, "NVIDIA 580.95.05 (CUDA driver API 13.0)")
	want := map[string]string{
		"driver": "NVIDIA 580.95.05 (CUDA driver API 13.0)", "clocks.sm_mhz": "1980", "temperature_c": "41",
		"clocks.throttle_reasons": "0x0000000000000000 (none)",
		"other_processes":         "1234 /usr/bin/python3 (20480 MiB); 77 /opt/app/bin/server, worker ([N/A])",
	}
	for k, v := range want {
		if st[k] != v {
			t.Errorf("%s = %q, want %q (state %v)", k, st[k], v, st)
		}
	}
	if len(f.calls) != 3 || !strings.Contains(f.calls[1][0], "clocks_throttle_reasons.active") {
		t.Fatalf("calls %v: want the older throttle field after the newer one fails", f.calls)
	}
	for _, c := range f.calls {
		if c[len(c)-2] != "-i" || c[len(c)-1] != id {
			t.Fatalf("call %v does not select the GPU", c)
		}
	}

	st = deviceState(func(context.Context, ...string) ([]byte, error) {
		return nil, fmt.Errorf("exec: %w", exec.ErrNotFound)
	}, id, 1, "CUDA driver API 13.0")
	if st["nvidia_smi"] != "not found on PATH" || st["driver"] != "CUDA driver API 13.0" || len(st) != 2 {
		t.Fatalf("without nvidia-smi: %v", st)
	}
	f = &fakeSMI{gpu: "garbage\n", apps: ""}
	if st := deviceState(f.run, "", 1, "d"); !strings.HasPrefix(st["nvidia_smi"], "unreadable output: ") {
		t.Fatalf("garbage: %v", st)
	}
	f = &fakeSMI{gpu: smiIdle, apps: smiNoApps}
	if st := deviceState(f.run, "", 1, "d"); st["other_processes"] != "none" || st["pstate"] != "P0" || len(f.calls[0]) != 2 {
		t.Fatalf("idle: %v, calls %v", st, f.calls)
	}
}

func TestFormatUUID(t *testing.T) {
	u := [16]byte{0x6f, 0x0e, 0x4c, 0x2a, 0x9d, 0x3b, 0x11, 0xee, 0x8c, 0x90, 0x02, 0x42, 0xac, 0x12, 0x00, 0x02}
	if got := formatUUID(u); got != "GPU-6f0e4c2a-9d3b-11ee-8c90-0242ac120002" {
		t.Fatal(got)
	}
}

// TestKernelDefaults: the host's launch constants equal qmv.cu's default
// build parameters.
func TestKernelDefaults(t *testing.T) {
	for name, want := range map[string]int{
		"QMV_RB": qmvRB, "QMV_MAXT": qmvMaxT, "QMV_MAXROWS": qmvMaxRows, "QMV_STAGES": qmvStages, "QMV_NB_MAXT": qmvNBMaxT,
	} {
		m := regexp.MustCompile(`(?m)^#define ` + name + ` (\d+)$`).FindStringSubmatch(srcKernel)
		if m == nil || m[1] != strconv.Itoa(want) {
			t.Errorf("qmv.cu's default %s is %v, the host uses %d", name, m, want)
		}
	}
}
