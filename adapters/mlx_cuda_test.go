package adapters_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner"
)

// mlxCUDADir holds the MLX CUDA evidence taken on the GPU host
// (testdata/device/mlx/README.md says how).
const mlxCUDADir = "../testdata/device/mlx"

// The wheels the mlx-cuda entry pins, sha256 as on PyPI.
var mlxCUDAWheels = map[string]string{
	"mlx-0.32.4-cp312-cp312-manylinux_2_35_x86_64.whl":      "sha256:b517badcb8174f8937699465a0ba5b58c2daeaa9bd13d69b1e6ab13401d24a74",
	"mlx_cuda_13-0.32.4-py3-none-manylinux_2_35_x86_64.whl": "sha256:94cb48fba73e5ee39467e51c35c51c691123359ca17bafd1a24cf92ad6732bee",
}

// TestMLXCUDADeviceEvidence checks the committed MLX CUDA evidence (no
// GPU needed): each record is the mlx-cuda implementation's (CUDA
// backend, the pinned wheels, MLX 0.32.4 on an NVIDIA device), every
// case's recorded verdict, first differing row and values equal the exact
// model of MLX's CUDA qmv kernel (mlxcudamodel_test.go), and every row of
// every case's raw output (cases.jsonl, written by the adapter) equals the
// model's. It also checks that the outputs tell that kernel from float
// running sums (the kernel before "[CUDA] Use fp16 accumulation"): on
// the core lane one verdict differs, on both lanes raw output rows do.
func TestMLXCUDADeviceEvidence(t *testing.T) {
	b, err := os.ReadFile(mlxCUDADir + "/run-output.json")
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Evidence []ledger.Evidence `json:"evidence"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	raw := readCaseDump(t, mlxCUDADir+"/cases.jsonl")
	lanes := map[string]bool{}
	altRows := 0
	for _, ev := range out.Evidence {
		if ev.Subject.Artifacts["libmlx.so"] == "" {
			continue // the control's record
		}
		lanes[ev.Lane] = true
		t.Run(ev.Lane, func(t *testing.T) {
			if ev.Backend != ledger.BackendCUDA {
				t.Errorf("backend %s, want cuda", ev.Backend)
			}
			for name, sum := range mlxCUDAWheels {
				if got := ev.Subject.Artifacts[name]; got != sum {
					t.Errorf("artifact %s: pinned %q, PyPI %q", name, got, sum)
				}
			}
			at := ev.Device.Attrs
			if at["runtime.mlx"] != "0.32.4" || at["runtime.dist.mlx-cuda-13"] != "0.32.4" || at["mlx.device"] != "Device(gpu, 0)" ||
				!strings.HasPrefix(ev.Device.Model, "NVIDIA H") || !strings.HasSuffix(at["runtime.libmlx"], "/mlx/lib/libmlx.so") {
				t.Errorf("device %q attributes do not name MLX 0.32.4 (mlx-cuda-13) on an NVIDIA GPU: %v", ev.Device.Model, at)
			}
			altRows += checkAgainstCUDAModel(t, ev, raw)
		})
	}
	if !lanes[runner.LaneQMV] || !lanes[runner.LaneQMVPaths] {
		t.Fatalf("the evidence holds mlx-cuda records for %v, want both qmv lanes", lanes)
	}
	// Only the core lane's bf16/b6/g32/exact-control tells them apart (a
	// product rounded to bfloat16 by the fma into its running sum): each
	// running sum holds at most one nonzero term on these lanes.
	if altRows == 0 {
		t.Error("the recorded outputs do not tell T running sums from float running sums")
	}
}

type caseDump struct {
	ID  string   `json:"id"`
	N   int      `json:"n"`
	K   int      `json:"k"`
	Out []string `json:"out"`
}

func readCaseDump(t *testing.T, path string) map[string]caseDump {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]caseDump{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var c caseDump
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		if _, dup := m[c.ID]; dup {
			t.Fatalf("%s: two dumped outputs", c.ID)
		}
		m[c.ID] = c
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

// checkAgainstCUDAModel compares each recorded case and raw output with
// the model; it returns how many raw output rows float running sums would
// have predicted otherwise.
func checkAgainstCUDAModel(t *testing.T, ev ledger.Evidence, raw map[string]caseDump) (altRows int) {
	var det struct {
		Cases []ledger.CaseResult `json:"cases"`
	}
	if err := json.Unmarshal(ev.Details, &det); err != nil {
		t.Fatal(err)
	}
	rec := map[string]ledger.CaseResult{}
	for _, c := range det.Cases {
		rec[c.ID] = c
	}
	cases, err := runner.QMVLaneCases(ev.Lane)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec) != len(cases) || ev.CasesTotal != len(cases) {
		t.Fatalf("%d recorded cases (total %d), the lane has %d", len(rec), ev.CasesTotal, len(cases))
	}
	rowRe := regexp.MustCompile(`^row (\d+) of`)
	exact, disagree, altDiffer, rows := 0, 0, 0, 0
	var lines []string
	for _, c := range cases {
		p, outs, err := predictMLXCUDA(c.Req, false)
		if err != nil {
			t.Fatalf("%s: model: %v", c.ID, err)
		}
		alt, altOuts, err := predictMLXCUDA(c.Req, true)
		if err != nil {
			t.Fatalf("%s: float-sums model: %v", c.ID, err)
		}
		got, ok := rec[c.ID]
		if !ok || got.Result != "exact" && got.Result != "mismatch" {
			t.Errorf("%s: recorded %+v: MLX did not answer the case", c.ID, got)
			continue
		}
		// Every row of MLX's raw output is the model's.
		d, ok := raw[c.ID]
		if !ok || d.N != c.Req.N || d.K != c.Req.K || len(d.Out) != c.Req.N {
			t.Errorf("%s: no raw output of N=%d K=%d in cases.jsonl: %+v", c.ID, c.Req.N, c.Req.K, d)
		} else {
			for n, s := range d.Out {
				v, err := strconv.ParseUint(s, 0, 32)
				if err != nil {
					t.Fatalf("%s: %v", c.ID, err)
				}
				mv := decodeValue(c.Req.DType, uint32(v))
				if mv != outs[n] && !(math.IsNaN(mv) && math.IsNaN(outs[n])) {
					t.Errorf("%s row %d: MLX returned %s (%g), the model %g", c.ID, n, s, mv, outs[n])
				}
				if mv != altOuts[n] && !(math.IsNaN(mv) && math.IsNaN(altOuts[n])) {
					altRows++
				}
				rows++
			}
		}
		if p.Exact {
			exact++
		}
		if alt.Exact != (got.Result == "exact") {
			altDiffer++
		}
		if (got.Result == "exact") != p.Exact {
			disagree++
			if disagree <= 20 {
				t.Errorf("%s: the ledger recorded %s (expected %s, got %s, %s); the model of MLX's CUDA qmv predicts exact=%v (row %d: %g, want %g; %s)",
					c.ID, got.Result, got.Expected, got.Got, got.Note, p.Exact, p.Row, p.Got, p.Want, p.Why)
			}
			continue
		}
		if p.Exact {
			continue
		}
		m := rowRe.FindStringSubmatch(got.Note)
		if m == nil || m[1] != strconv.Itoa(p.Row) || recordedValue(t, c.Req, got.Got) != p.Got || recordedValue(t, c.Req, got.Expected) != p.Want {
			t.Errorf("%s: recorded %s vs %s (%s); model: row %d got %g want %g", c.ID, got.Got, got.Expected, got.Note, p.Row, p.Got, p.Want)
		}
		lines = append(lines, fmt.Sprintf("| %s | %d | %g | %g | %s |", c.ID, p.Row, p.Got, p.Want, p.Why))
	}
	if disagree > 0 {
		t.Errorf("%s: %d of %d recorded verdicts disagree with the model", ev.Lane, disagree, len(cases))
	}
	wantStatus := ledger.StatusPassed
	if exact < len(cases) {
		wantStatus = ledger.StatusFailed
	}
	if ev.CasesExact != exact || ev.Status != wantStatus || ev.Control != ledger.ControlCaught {
		t.Errorf("%s: %s %d/%d control %s; the model predicts %s %d/%d with the control caught", ev.Lane, ev.Status, ev.CasesExact, ev.CasesTotal, ev.Control, wantStatus, exact, len(cases))
	}
	t.Logf("%s on MLX %s CUDA (%s): %s, %d/%d exact (the model predicts %d), control %s; %d raw output rows equal the model's",
		ev.Lane, ev.Device.Attrs["runtime.mlx"], ev.Device.Model, ev.Status, ev.CasesExact, ev.CasesTotal, exact, ev.Control, rows)
	t.Logf("%s: float running sums (the kernel before 3b3590b) would disagree with %d recorded verdicts and %d raw output rows", ev.Lane, altDiffer, altRows)
	if rep := os.Getenv("LEDGER_MLX_CUDA_REPORT"); rep != "" {
		f, err := os.OpenFile(rep, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		fmt.Fprintf(f, "## %s: %s, %d/%d exact\n\n| case | row | MLX | exact | first inexact operation (model) |\n|---|---|---|---|---|\n%s\n\n", ev.Lane, ev.Status, ev.CasesExact, ev.CasesTotal, strings.Join(lines, "\n"))
	}
	return altRows
}
