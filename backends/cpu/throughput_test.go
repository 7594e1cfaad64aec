package cpu_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/internal/stats"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runner/quant"
)

func testSubject() ledger.Subject {
	return ledger.Subject{Repository: "https://github.com/evidence-ledger/ledger",
		Commit: strings.Repeat("ab", 20), Tree: strings.Repeat("cd", 20)}
}

// throughputCase is the one case the CPU tests time: B1, 4096 x 4096,
// float16, 4 bits.
const throughputCase = "batch1/n4096/k4096/f16/b4/g64"

// TestThroughputLaneCPU runs qmv-throughput/v1 on one case through
// runner.Run: the record validates, every field is filled and the 2x
// control is caught by the monotonic clock.
func TestThroughputLaneCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("times a 4096 x 4096 kernel for seconds")
	}
	b := newBackend(t)
	var prog [][2]int
	runs, err := runner.Run(context.Background(), b, runner.Options{
		Lanes: []string{"qmv-throughput"}, Subject: testSubject(), Runner: runner.BuildRunner(),
		Cases: []string{throughputCase}, CaseBudget: 3 * time.Second, MaxSamples: 200,
		Progress: func(_ string, done, total int) { prog = append(prog, [2]int{done, total}) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].Err != nil {
		t.Fatalf("runs %+v", runs)
	}
	ev := runs[0].Evidence
	if ev.Lane != runner.ThroughputLane || ev.CasesTotal != 1 || ev.CasesExact != 1 {
		t.Fatalf("lane %s: %d/%d exact, failing %v", ev.Lane, ev.CasesExact, ev.CasesTotal, ev.FailingCases)
	}
	tp, err := ledger.ThroughputOf(&ev)
	if err != nil || tp == nil {
		t.Fatalf("details.throughput: %v %v", tp, err)
	}
	if tp.Clock != "monotonic" || tp.Candidate != "promoted" || tp.Baseline == nil || tp.Baseline.Name != "narrow" ||
		tp.Confidence != 0.95 || tp.TargetRel != 0.01 || len(tp.Cases) != 1 {
		t.Fatalf("throughput header %+v", tp)
	}
	for _, k := range []string{"cpu.model", "cpu.mhz", "cpu.governor", "loadavg", "gomaxprocs"} {
		if tp.DeviceState["before."+k] == "" || tp.DeviceState["after."+k] == "" {
			t.Errorf("device state %s missing: %v", k, tp.DeviceState)
		}
	}
	c := tp.Cases[0]
	if c.ID != throughputCase || c.Batch != 1 || c.N != 4096 || c.K != 4096 || c.DType != "f16" || c.Bits != 4 || c.GroupSize != 64 ||
		c.LaunchesPerSample < 1 || len(c.CandidateS) < stats.MinSamples || len(c.BaselineS) != len(c.CandidateS) ||
		c.BaselineMedian == nil || c.Ratio == nil || c.Output.Values != 4096 || c.Output.BaselineRelL2 == nil ||
		c.Output.RelL2 > c.Output.Tolerance || *c.Output.BaselineRelL2 > c.Output.Tolerance {
		t.Fatalf("case %+v", c)
	}
	if m := c.CandidateMedian; !(m.Low <= m.Estimate && m.Estimate <= m.High && m.Low > 0) {
		t.Fatalf("candidate median %+v", m)
	}
	var det struct {
		Cases   []ledger.CaseResult `json:"cases"`
		Control runner.ControlResult
	}
	if err := json.Unmarshal(ev.Details, &det); err != nil {
		t.Fatal(err)
	}
	if len(det.Cases) != 1 || det.Cases[0].Result != "exact" || !strings.HasPrefix(det.Cases[0].Note, "promoted ") ||
		!strings.Contains(det.Cases[0].Note, ", narrow ") {
		t.Fatalf("case results %+v", det.Cases)
	}
	if ev.Control != ledger.ControlCaught || ev.Status != ledger.StatusPassed {
		t.Fatalf("status %s, control %s: %s", ev.Status, ev.Control, det.Control.Summary)
	}
	if !strings.Contains(det.Control.Summary, throughputCase) {
		t.Fatalf("control summary %q does not name the case", det.Control.Summary)
	}
	if len(prog) == 0 || prog[len(prog)-1] != [2]int{1, 1} {
		t.Fatalf("progress %v", prog)
	}
	t.Logf("%s; %s", det.Cases[0].Note, det.Control.Summary)
}

// TestCPUTimerRepeat: the same arm launched twice per product measures
// about twice as long per sample.
func TestCPUTimerRepeat(t *testing.T) {
	b := newBackend(t)
	c := runner.ThroughputCase{ID: "t", Batch: 2, N: 2048, K: 2048, DType: quant.Float16, Bits: 4, GroupSize: 64}
	r, xs, err := runner.ThroughputOperands(c)
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.PrepareQMV(context.Background(), r, xs)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.LaunchesPerSample() < 1 {
		t.Fatalf("launches %d", p.LaunchesPerSample())
	}
	out, err := p.Output(context.Background(), runner.Promoted)
	if err != nil || len(out) != 2 || out[1].Len() != c.N {
		t.Fatalf("output: %d rows, %v", len(out), err)
	}
	s, _, err := runner.Measure(context.Background(), []runner.Arm{p.Arm(runner.Promoted, 1), p.Arm(runner.Promoted, 2)},
		runner.MeasureOptions{Budget: 2 * time.Second, MaxSamples: 100})
	if err != nil {
		t.Fatal(err)
	}
	iv, ok := stats.MedianCI(stats.Ratios(s[1], s[0]), 0.95)
	if !ok || iv.Estimate < 1.7 || iv.Estimate > 2.3 {
		t.Fatalf("repeat 2 / repeat 1 = %+v over %d samples, want about 2", iv, len(s[0]))
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Output(context.Background(), runner.Promoted); err == nil {
		t.Fatal("output after close")
	}
}
