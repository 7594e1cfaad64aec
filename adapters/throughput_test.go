package adapters_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner"
)

// throughputCase is the one small case the adapters' throughput tests
// run: 4096 x 4096, 4-bit, batch 1.
const throughputCase = "batch1/n4096/k4096/%s/b4/g64"

// runThroughput runs qmv-throughput/v1 on one case through the
// implementation name of cfg with a short budget and checks what every
// such record must hold: one record, not error, not failed (the output
// within tolerance), details.throughput valid with one case on the
// adapter's clock.
func runThroughput(t *testing.T, cfg *runner.ImplConfig, name, dtype, clock string) (ledger.Evidence, *ledger.Throughput) {
	t.Helper()
	var stderr strings.Builder
	subj := ledger.Subject{Repository: "example.com/adapter-test", Commit: strings.Repeat("a", 40), Tree: strings.Repeat("b", 40)}
	id := strings.Replace(throughputCase, "%s", dtype, 1)
	runs, err := runner.RunImpl(context.Background(), cfg, name, runner.ImplOptions{Lanes: []string{runner.ThroughputLane},
		Cases: []string{id}, CaseBudget: 3 * time.Second, MaxSamples: 60, Subject: subj, Stderr: &stderr})
	if err != nil {
		t.Fatalf("%v\nadapter stderr:\n%s", err, stderr.String())
	}
	if len(runs) != 1 {
		t.Fatalf("%d records, want 1", len(runs))
	}
	ev := runs[0].Evidence
	if ev.Status == ledger.StatusError || ev.Status == ledger.StatusFailed {
		t.Fatalf("%s: %v\n%s\nadapter stderr:\n%s", ev.Status, runs[0].Err, ev.Details, stderr.String())
	}
	tp, err := ledger.ThroughputOf(&ev)
	if err != nil || tp == nil || len(tp.Cases) != 1 || tp.Cases[0].ID != id || tp.Clock != clock {
		t.Fatalf("throughput %+v: %v", tp, err)
	}
	c := tp.Cases[0]
	t.Logf("%s %s: %s, control %s; median %.3g s per product [%.3g, %.3g], n %d, %d products per sample, output rel_l2 %.2g (%d/%d bit-exact)",
		name, c.ID, ev.Status, ev.Control, c.CandidateMedian.Estimate, c.CandidateMedian.Low, c.CandidateMedian.High,
		len(c.CandidateS), c.LaunchesPerSample, c.Output.RelL2, c.Output.BitExact, c.Output.Values)
	return ev, tp
}

// TestMLXCPUThroughput runs qmv-throughput/v1 through the shipped mlx-cpu
// implementation (real MLX, the pinned wheels; CI requires it with
// LEDGER_REQUIRE_MLX=1) on one small case: MLX's output must be within
// the lane's tolerance of the float64 reference and the samples must come
// on perf_counter_ns with the adapter's device state.
func TestMLXCPUThroughput(t *testing.T) {
	requireMLX(t)
	cfg, err := runner.LoadImplConfig("implementations.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, tp := runThroughput(t, cfg, "mlx-cpu", "f32", "perf_counter_ns") // float16 ~50x slower: software halves on x86 (docs/validating-mlx.md)
	if tp.Baseline != nil || tp.DeviceState["runtime.mlx"] == "" {
		t.Fatalf("baseline %+v, device state %v", tp.Baseline, tp.DeviceState)
	}
}

// TestTorchCPUThroughput runs qmv-throughput/v1 through both PyTorch
// implementations on CPU where torch is installed (bfloat16: the int4
// kernel's only dtype).
func TestTorchCPUThroughput(t *testing.T) {
	py := python(t)
	haveTorch(t, py)
	for _, k := range []string{"dequant", "int4pack"} {
		cfg := config(t, "torch-"+k, []string{py, "pytorch/ledger_torch_adapter.py", "--kernel", k, "--device", "cpu"})
		runThroughput(t, cfg, "torch-"+k, "bf16", "perf_counter_ns")
	}
}
