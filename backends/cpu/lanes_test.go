package cpu_test

import (
	"context"
	"sort"
	"testing"

	"github.com/evidence-ledger/ledger/backends/cpu"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner"
)

func newBackend(t testing.TB) *cpu.Backend {
	t.Helper()
	b, err := cpu.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// predictedCore is the 60 predicted narrow failures of WORKLOADS.md,
// written out independently of the lane's own predicate.
func predictedCore() []string {
	var ids []string
	for _, d := range []string{"f16", "bf16"} {
		for _, b := range []string{"2", "3", "4", "5", "6"} {
			for _, g := range []string{"32", "64", "128"} {
				for _, p := range []string{"three-way", "overflow"} {
					ids = append(ids, d+"/b"+b+"/g"+g+"/"+p)
				}
			}
		}
	}
	sort.Strings(ids)
	return ids
}

func TestCoreLane(t *testing.T) {
	b := newBackend(t)
	l, err := runner.LookupLane("qmv-bias-sum/v1")
	if err != nil {
		t.Fatal(err)
	}
	res, err := l.Run(context.Background(), &runner.Env{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	if res.Total != 216 || res.Exact != 216 || len(res.Failing) != 0 {
		t.Fatalf("promoted: %d/%d exact, failing %v", res.Exact, res.Total, res.Failing)
	}
	if res.Control.Outcome != ledger.ControlCaught {
		t.Fatalf("control: %s", res.Control.Summary)
	}
	det := res.Control.Details.(map[string]any)
	if det["exact"] != 156 {
		t.Fatalf("narrow exact = %v, want 156", det["exact"])
	}
	got := append([]string(nil), det["failing_cases"].([]string)...)
	sort.Strings(got)
	want := predictedCore()
	if len(got) != 60 || len(want) != 60 {
		t.Fatalf("narrow failing %d ids, want 60", len(got))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("narrow failing set differs at %d: %s vs %s", i, got[i], want[i])
		}
	}
	if runner.Verdict(res, nil) != ledger.StatusPassed {
		t.Fatalf("verdict %v", runner.Verdict(res, nil))
	}
}

func TestPathsLane(t *testing.T) {
	b := newBackend(t)
	l, err := runner.LookupLane("qmv-bias-sum-paths/v1")
	if err != nil {
		t.Fatal(err)
	}
	res, err := l.Run(context.Background(), &runner.Env{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("paths: %d/%d, control %s", res.Exact, res.Total, res.Control.Summary)
	if res.Exact != res.Total || res.Control.Outcome != ledger.ControlCaught {
		t.Fatalf("paths: %d/%d, failing %v, control %s", res.Exact, res.Total, res.Failing[:min(5, len(res.Failing))], res.Control.Summary)
	}
}

func TestSnapshotLane(t *testing.T) {
	b := newBackend(t)
	l, _ := runner.LookupLane("alloc-snapshot/v1")
	res, err := l.Run(context.Background(), &runner.Env{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("snapshot: %d/%d; control %s", res.Exact, res.Total, res.Control.Summary)
	if res.Total != 20000 || res.Exact != 20000 {
		t.Fatalf("coherent snapshots: %d/%d, failing %v", res.Exact, res.Total, res.Failing[:min(5, len(res.Failing))])
	}
	if res.Control.Outcome != ledger.ControlCaught {
		t.Fatalf("control not caught: %s", res.Control.Summary)
	}
	if by, bufs := b.Live(); by != 0 || bufs != 0 {
		t.Fatalf("lane leaked %d bytes in %d raw buffers", by, bufs)
	}
}

func TestFootprintLane(t *testing.T) {
	b := newBackend(t)
	l, _ := runner.LookupLane("alloc-footprint/v1")
	res, err := l.Run(context.Background(), &runner.Env{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Cases {
		t.Logf("%s %s %s", c.ID, c.Result, c.Note)
	}
	t.Logf("control: %s %v", res.Control.Summary, res.Control.Details)
	if res.Total != 12 || res.Exact != 12 || res.Control.Outcome != ledger.ControlCaught {
		t.Fatalf("footprint: %d/%d, control %s", res.Exact, res.Total, res.Control.Summary)
	}
	if by, bufs := b.Live(); by != 0 || bufs != 0 {
		t.Fatalf("lane leaked %d bytes in %d raw buffers", by, bufs)
	}
}
