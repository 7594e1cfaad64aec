package adapters_test

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner"
)

// TestPyTorchAllocDeviceEvidence re-derives the verdicts of the committed
// allocator evidence taken against PyTorch's CUDA caching allocator on the
// GPU device machine (testdata/device/pytorch-alloc) from the adapter's
// recorded readings and answers, with the same Go code that judged them
// there, and checks they equal the recorded evidence.
func TestPyTorchAllocDeviceEvidence(t *testing.T) {
	const dir = "../testdata/device/pytorch-alloc/"
	f, err := os.Open(dir + "pytorch-alloc.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Evidence []ledger.Evidence `json:"evidence"`
	}
	if err := json.NewDecoder(zr).Decode(&out); err != nil {
		t.Fatal(err)
	}
	rec := readExchanges(t, dir+"exchanges.jsonl.gz")
	if len(out.Evidence) != 2 || len(rec) != 2 {
		t.Fatalf("%d evidence records and %d recorded sessions, want 2 and 2", len(out.Evidence), len(rec))
	}
	for i, ev := range out.Evidence {
		if err := ev.Validate(); err != nil {
			t.Errorf("%s: %v", ev.Lane, err)
		}
		if !strings.Contains(string(ev.Details), `"pytorch-cuda"`) || ev.Backend != ledger.BackendCUDA {
			t.Errorf("%s: not a pytorch-cuda record (backend %s)", ev.Lane, ev.Backend)
		}
		checkReplay(t, ev, rec[i])
		t.Logf("%s: %s %d/%d control %s", ev.Lane, ev.Status, ev.CasesExact, ev.CasesTotal, ev.Control)
	}
	// The verdict comes from the readings: one coherent reading with
	// allocated above reserved turns the recorded pass into a failure.
	bad := append([]runner.AllocExchange(nil), rec[0]...)
	for i, x := range bad {
		if !strings.Contains(string(x.Request), `"coherent"`) {
			continue
		}
		var o runner.AllocObservation
		if err := json.Unmarshal([]byte(x.Answer), &o); err != nil {
			t.Fatal(err)
		}
		o.Readings[7][0] = o.Readings[7][1] + 512 // fields: active, reserved, peak
		b, _ := json.Marshal(o)
		bad[i].Answer = string(b)
	}
	if res, err := runner.ReplayAllocLane(context.Background(), runner.LaneAllocSnap, bad); err != nil || runner.Verdict(res, nil) != ledger.StatusFailed {
		t.Errorf("a record with one incoherent reading re-derives %v, %v; want failed", res, err)
	}
	if out.Evidence[0].Lane != runner.LaneAllocSnap || out.Evidence[1].Lane != runner.LaneAllocFoot {
		t.Errorf("lanes %s, %s", out.Evidence[0].Lane, out.Evidence[1].Lane)
	}
}
