package adapters_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner"
)

// mlxAllocLib is where `make mlx-alloc-lib` builds the native half of the
// MLX allocator adapter.
const mlxAllocLib = "../var/mlx-cpu/lib/libledger_mlx_alloc.so"

// TestMLXCPUAllocLanes runs alloc-snapshot/v1 and alloc-footprint/v1
// against MLX's own CPU allocator (the pinned wheels) through
// ledger-alloc-adapter/1 and checks what the ledger decided from the
// readings: the snapshot lane cannot pass (MLX has no coherent reading:
// failed, every case unsupported, the reason naming the missing API) and
// its control either reproduces the inconsistent independent reads
// (caught) or says the traffic did not race (inconclusive, never passed);
// the footprint lane checks MLX against its own rule set (runner.MLXCPURules,
// from MLX's source) and finds the refused-request accounting (active
// memory grows by a request malloc could not serve).
func TestMLXCPUAllocLanes(t *testing.T) {
	requireMLX(t)
	if _, err := os.Stat(mlxAllocLib); err != nil {
		msg := "run `make mlx-alloc-lib`: " + err.Error()
		if os.Getenv("LEDGER_REQUIRE_MLX") == "1" {
			t.Fatal("LEDGER_REQUIRE_MLX=1: " + msg)
		}
		t.Skip(msg)
	}
	cfg, err := runner.LoadImplConfig("implementations.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dump := t.TempDir() + "/exchanges.jsonl"
	t.Setenv("LEDGER_ALLOC_DUMP", dump)
	runs := run(t, cfg, "mlx-cpu-alloc", runner.LaneAllocSnap, runner.LaneAllocFoot)
	// The verdicts re-derived from the adapter's record equal the live ones.
	if rec := readExchanges(t, dump); len(rec) != 2 {
		t.Errorf("record holds %d sessions, want 2", len(rec))
	} else {
		checkReplay(t, runs[0].Evidence, rec[0])
		checkReplay(t, runs[1].Evidence, rec[1])
	}
	if len(runs) != 2 {
		t.Fatalf("%d records, want 2", len(runs))
	}
	snap, foot := runs[0].Evidence, runs[1].Evidence
	t.Logf("snapshot: %s, control %s: %s", snap.Status, snap.Control, detail(snap, "control"))
	if snap.Status != ledger.StatusFailed || snap.CasesExact != 0 {
		t.Errorf("snapshot lane: status %s, %d exact; want failed with no exact reading (MLX has no coherent snapshot)", snap.Status, snap.CasesExact)
	}
	if d := detail(snap, "coherent"); !strings.Contains(d, "get_active_memory") {
		t.Errorf("snapshot lane: coherent side %q does not name the missing API", d)
	}
	if snap.Control != ledger.ControlCaught && snap.Control != ledger.ControlNotCaught {
		t.Errorf("snapshot control %s", snap.Control)
	}
	if lib := snap.Subject.Artifacts["libledger_mlx_alloc.so"]; lib == "" {
		t.Errorf("the native adapter library is not pinned: %v", snap.Subject.Artifacts)
	}
	t.Logf("footprint: %s %d/%d, control %s: %s", foot.Status, foot.CasesExact, foot.CasesTotal, foot.Control, detail(foot, "cases"))
	cases := caseMap(foot)
	for _, c := range []string{"fresh", "reuse", "detach"} {
		if r := cases["mlx-cpu/"+c]; r.Result != "exact" {
			t.Errorf("mlx-cpu/%s: %s %s", c, r.Result, r.Note)
		}
	}
	// MLX counts a request std::malloc refused (no_gpu/allocator.cpp:102-109).
	if r := cases["mlx-cpu/overflow"]; r.Result != "mismatch" || !strings.Contains(r.Note, "left active") {
		t.Errorf("mlx-cpu/overflow: %s %q, want the refused request's accounting found", r.Result, r.Note)
	}
	if foot.Status != ledger.StatusFailed || foot.Control != ledger.ControlCaught {
		t.Errorf("footprint: status %s control %s, want failed (overflow) with the naive bound caught", foot.Status, foot.Control)
	}
}

// detail returns the evidence detail key as JSON text.
func detail(ev ledger.Evidence, key string) string {
	var d map[string]json.RawMessage
	_ = json.Unmarshal(ev.Details, &d)
	return string(d[key])
}

// caseMap returns the evidence's per-case results by id.
func caseMap(ev ledger.Evidence) map[string]ledger.CaseResult {
	var d struct {
		Cases []ledger.CaseResult `json:"cases"`
	}
	_ = json.Unmarshal(ev.Details, &d)
	m := map[string]ledger.CaseResult{}
	for _, c := range d.Cases {
		m[c.ID] = c
	}
	return m
}
