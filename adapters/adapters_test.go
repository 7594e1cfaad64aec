package adapters_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/backends/cpu"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner"
)

func python(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed: the Python adapters are not tested here")
	}
	return p
}

// TestPythonProtocolUnit runs the pure-Python protocol unit tests.
func TestPythonProtocolUnit(t *testing.T) {
	py := python(t)
	cmd := exec.Command(py, "-m", "unittest", "-v", "test_ledger_adapter")
	cmd.Dir = "python"
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("python unittest: %v\n%s", err, out)
	}
}

// TestShippedConfig: implementations.yaml parses and names every shipped
// adapter.
func TestShippedConfig(t *testing.T) {
	cfg, err := runner.LoadImplConfig("implementations.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"reference", "reference-narrow", "pytorch-dequant-cuda", "pytorch-dequant-cpu", "pytorch-int4pack-cuda", "pytorch-int4pack-cpu", "mlx-cpu", "mlx-metal"} {
		im, err := cfg.Lookup(n)
		if err != nil {
			t.Fatal(err)
		}
		for _, src := range im.AdapterSources {
			if _, err := os.Stat(src); err != nil && !strings.HasPrefix(src, "../") {
				t.Fatalf("%s: adapter source %s: %v", n, src, err)
			}
		}
	}
}

func config(t *testing.T, name string, command []string, env ...string) *runner.ImplConfig {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	cmd, _ := json.Marshal(command)
	envj, _ := json.Marshal(append(env, "PYTHONDONTWRITEBYTECODE=1"))
	y := fmt.Sprintf("implementations:\n  - name: %s\n    command: %s\n    backend: cpu\n    env: %s\n    adapter_sources: [python/ledger_adapter.py]\n    case_timeout: 60s\n", name, cmd, envj)
	cfg, err := runner.ParseImplConfig([]byte(y), wd)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func run(t *testing.T, cfg *runner.ImplConfig, name string, lanes ...string) []runner.ImplRun {
	t.Helper()
	b, err := cpu.New()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var stderr bytes.Buffer
	subj := ledger.Subject{Repository: "example.com/adapter-test", Commit: strings.Repeat("a", 40), Tree: strings.Repeat("b", 40)}
	runs, err := runner.RunImpl(context.Background(), cfg, name, runner.ImplOptions{Lanes: lanes, Subject: subj, Control: b, Stderr: &stderr})
	if err != nil {
		t.Fatalf("%v\nadapter stderr:\n%s", err, stderr.String())
	}
	if stderr.Len() > 0 {
		t.Logf("adapter stderr:\n%s", stderr.String())
	}
	return runs
}

// TestMLXAdapterLayout runs the MLX adapter over the 216-case core lane
// against an exact stand-in for mlx.core that implements MLX's documented
// affine semantics: 216/216 exact proves the adapter hands MLX the
// protocol's weights, scales, biases and x in MLX's layout (shapes, raw
// bit views, transpose) and maps the output back bit for bit; the CPU
// narrow control must give 156/216.
func TestMLXAdapterLayout(t *testing.T) {
	py := python(t)
	fake, _ := filepath.Abs("mlx/testdata/fakemlx")
	cfg := config(t, "mlx-fake", []string{py, "mlx/ledger_mlx_adapter.py", "--device", "cpu"}, "PYTHONPATH="+fake)
	ev := run(t, cfg, "mlx-fake", runner.LaneQMV)[0].Evidence
	if ev.Status != ledger.StatusPassed || ev.CasesExact != 216 || ev.Control != ledger.ControlCaught {
		t.Fatalf("%s %d/%d control %s, failing %v\n%s", ev.Status, ev.CasesExact, ev.CasesTotal, ev.Control, ev.FailingCases, ev.Details)
	}
	if ev.Device.Attrs["implementation"] != "mlx-quantized-matmul" || ev.Device.Attrs["implementation.version"] != "0.0.0-fake" {
		t.Fatalf("device %+v", ev.Device)
	}
	if !strings.Contains(string(ev.Details), `"exact":156`) {
		t.Fatalf("narrow control not 156/216: %s", ev.Details)
	}
}

func haveTorch(t *testing.T, py string) {
	t.Helper()
	if err := exec.Command(py, "-c", "import torch").Run(); err != nil {
		t.Skip("torch is not installed for python3: the PyTorch adapter runs only where it is (see testdata/device)")
	}
}

// TestTorchAdapterCPU runs both PyTorch implementations on CPU over the
// core lane where torch is installed: every case must be answered (no
// error); exactness is what the evidence reports, not a test assertion.
func TestTorchAdapterCPU(t *testing.T) {
	py := python(t)
	haveTorch(t, py)
	for _, k := range []string{"dequant", "int4pack"} {
		cfg := config(t, "torch-"+k, []string{py, "pytorch/ledger_torch_adapter.py", "--kernel", k, "--device", "cpu"})
		ev := run(t, cfg, "torch-"+k, runner.LaneQMV)[0].Evidence
		if ev.Status == ledger.StatusError || ev.Status == ledger.StatusPassed && ev.CasesExact != 216 {
			t.Fatalf("%s: %s %d/%d\n%s", k, ev.Status, ev.CasesExact, ev.CasesTotal, ev.Details)
		}
		t.Logf("%s: %s %d/%d", k, ev.Status, ev.CasesExact, ev.CasesTotal)
	}
}
