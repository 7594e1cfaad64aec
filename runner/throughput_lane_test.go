package runner_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/backends/cpu"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runner/quant"
)

// fakeTimed is a ThroughputBackend whose outputs are the reference
// rounded to the dtype (badRows of them zero in variant bad) and whose
// arms draw samples around fixed means.
type fakeTimed struct {
	*cpu.Backend
	bad     runner.Variant
	badRows int
	// slowedFactor is the slowed arm's mean over the candidate's.
	slowedFactor float64
	prepared     int
}

func (f *fakeTimed) Clock() string { return "fake" }

func (f *fakeTimed) DeviceState() map[string]string {
	return map[string]string{"clocks.sm_mhz": "1980"}
}

func (f *fakeTimed) PrepareQMV(_ context.Context, r *runner.QMVRequest, xs []runner.Vec) (runner.PreparedQMV, error) {
	f.prepared++
	ref := runner.ThroughputReference(r, xs)
	return &fakePrepared{f: f, d: r.DType, ref: ref, rng: rand.New(rand.NewPCG(7, uint64(f.prepared)))}, nil
}

type fakePrepared struct {
	f   *fakeTimed
	d   quant.DType
	ref [][]float64
	rng *rand.Rand
}

func (p *fakePrepared) Output(_ context.Context, v runner.Variant) ([]runner.Vec, error) {
	out := make([]runner.Vec, len(p.ref))
	for b, row := range p.ref {
		out[b] = runner.NewVec(p.d, len(row))
		for n, x := range row {
			if v == p.f.bad && n < p.f.badRows {
				continue
			}
			out[b].Set(n, quant.FromF32(p.d, float32(x)))
		}
	}
	return out, nil
}

func (p *fakePrepared) Arm(v runner.Variant, repeat int) runner.Arm {
	mean := 20e-6
	if v == runner.Narrow {
		mean = 20.2e-6
	}
	if repeat > 1 {
		mean *= p.f.slowedFactor
	}
	return fakeSampler{rng: p.rng, mean: mean}
}

func (p *fakePrepared) LaunchesPerSample() int { return 64 }
func (p *fakePrepared) Close() error           { return nil }

type fakeSampler struct {
	rng  *rand.Rand
	mean float64
}

func (a fakeSampler) Sample(_ context.Context, n int) ([]float64, error) {
	out := make([]float64, n)
	for i := range out {
		out[i] = a.mean * (1 + 0.003*a.rng.NormFloat64())
	}
	return out, nil
}

func newFakeTimed(t *testing.T) *fakeTimed {
	b, err := cpu.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return &fakeTimed{Backend: b, slowedFactor: 2}
}

const fakeCase = "batch2/n4096/k4096/f32/b3/g64"

func runThroughput(t *testing.T, b runner.Backend, cases ...string) (ledger.Evidence, *ledger.Throughput) {
	t.Helper()
	runs, err := runner.Run(context.Background(), b, runner.Options{Lanes: []string{runner.ThroughputLane}, Subject: testSubject(),
		Runner: runner.BuildRunner(), Cases: cases, CaseBudget: time.Second, MaxSamples: 60})
	if err != nil || len(runs) != 1 {
		t.Fatalf("run: %v", err)
	}
	ev := runs[0].Evidence
	tp, err := ledger.ThroughputOf(&ev)
	if runs[0].Err == nil && (err != nil || tp == nil) {
		t.Fatalf("details.throughput: %v", err)
	}
	return ev, tp
}

func TestThroughputLaneFakePasses(t *testing.T) {
	ev, tp := runThroughput(t, newFakeTimed(t), fakeCase)
	if ev.Status != ledger.StatusPassed || ev.Control != ledger.ControlCaught || ev.CasesExact != 1 {
		t.Fatalf("status %s control %s, %d/%d: %s", ev.Status, ev.Control, ev.CasesExact, ev.CasesTotal, ev.Details)
	}
	c := tp.Cases[0]
	if tp.Clock != "fake" || tp.DeviceState["before.clocks.sm_mhz"] != "1980" || tp.DeviceState["after.clocks.sm_mhz"] != "1980" ||
		c.LaunchesPerSample != 64 || !c.Converged || c.Ratio == nil || c.Ratio.Low > 1.01 || c.Ratio.High < 1.01 {
		t.Fatalf("record %+v case %+v", tp, c)
	}
}

// TestThroughputLaneWrongOutput: a baseline that zeroes half its rows
// fails the lane with the case named, though its timing is recorded.
func TestThroughputLaneWrongOutput(t *testing.T) {
	f := newFakeTimed(t)
	f.bad, f.badRows = runner.Narrow, 2048
	ev, tp := runThroughput(t, f, fakeCase)
	if ev.Status != ledger.StatusFailed || ev.CasesExact != 0 || ev.CasesTotal != 1 || !slices.Equal(ev.FailingCases, []string{fakeCase}) {
		t.Fatalf("status %s, %d/%d, failing %v", ev.Status, ev.CasesExact, ev.CasesTotal, ev.FailingCases)
	}
	o := tp.Cases[0].Output
	if o.RelL2 > o.Tolerance || o.BaselineRelL2 == nil || *o.BaselineRelL2 <= o.Tolerance {
		t.Fatalf("output check %+v", o)
	}
	var det struct {
		Cases []ledger.CaseResult `json:"cases"`
	}
	if err := json.Unmarshal(ev.Details, &det); err != nil || len(det.Cases) != 1 || det.Cases[0].Result != "mismatch" ||
		!strings.Contains(det.Cases[0].Got, "baseline rel_l2") {
		t.Fatalf("cases %+v (%v)", det.Cases, err)
	}
}

// TestThroughputLaneControlNotSlower: a slowed arm that is not slower
// leaves the lane inconclusive.
func TestThroughputLaneControlNotSlower(t *testing.T) {
	f := newFakeTimed(t)
	f.slowedFactor = 1
	ev, _ := runThroughput(t, f, fakeCase)
	if ev.Status != ledger.StatusInconclusive || ev.Control != ledger.ControlNotCaught {
		t.Fatalf("status %s control %s", ev.Status, ev.Control)
	}
	if !strings.Contains(string(ev.Details), "caught on 0/1 control cases") {
		t.Fatalf("control summary: %s", ev.Details)
	}
}

func TestThroughputLaneRefusals(t *testing.T) {
	l, err := runner.LookupLane("qmv-throughput")
	if err != nil {
		t.Fatal(err)
	}
	f := newFakeTimed(t)
	for _, tc := range []struct {
		env  runner.Env
		want string
	}{
		{runner.Env{Backend: f, Cases: []string{"batch9/*"}}, `["batch9/*"] match none`},
		{runner.Env{Backend: f, Cases: []string{"batch1/["}}, `case glob "batch1/["`},
		{runner.Env{Backend: f, MaxSamples: 5000}, "max samples 5000"},
		{runner.Env{Backend: f, CaseBudget: -time.Second}, "negative"},
		{runner.Env{Backend: struct{ runner.Backend }{f.Backend}}, "backend cpu cannot time its kernel"},
	} {
		if _, err := l.Run(context.Background(), &tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want %q", tc.env.Cases, err, tc.want)
		}
	}
	if f.prepared != 0 {
		t.Fatalf("%d cases prepared before a refusal", f.prepared)
	}
}

// TestThroughputLaneOnRequest: a run that names no lane skips the
// throughput lane, so case globs select nothing there.
func TestThroughputLaneOnRequest(t *testing.T) {
	l, _ := runner.LookupLane(runner.ThroughputLane)
	if !runner.IsOnRequest(l) || !runner.SelectsCases(l) {
		t.Fatal("throughput lane not on request or not selecting cases")
	}
	for _, d := range runner.DefaultLanes() {
		if d.Name() == runner.ThroughputLane || runner.IsOnRequest(d) {
			t.Fatalf("default lanes hold %s", d.Name())
		}
	}
	if n := len(runner.DefaultLanes()); n != len(runner.Lanes())-1 {
		t.Fatalf("%d default lanes of %d", n, len(runner.Lanes()))
	}
	b := newFakeTimed(t)
	for _, lanes := range [][]string{nil, {"alloc-footprint/v1"}} {
		_, err := runner.Run(context.Background(), b, runner.Options{Lanes: lanes, Subject: testSubject(), Cases: []string{"batch1/*"}})
		if err == nil || !strings.Contains(err.Error(), "select cases of none of the selected lanes") {
			t.Fatalf("lanes %v with case globs: %v", lanes, err)
		}
	}
}

func TestThroughputControlCases(t *testing.T) {
	sel, err := runner.SelectThroughputCases([]string{"batch1/n8192/*/f16/b*/*", "batch2/n4096/k4096/f32/b8/*"})
	if err != nil || len(sel) != 7 {
		t.Fatalf("%d cases, %v", len(sel), err)
	}
	ctl := runner.ThroughputControlCases(sel)
	for i, c := range sel {
		if ctl[i] != (c.ID == "batch1/n8192/k8192/f16/b4/g64") {
			t.Errorf("%s: control %v", c.ID, ctl[i])
		}
	}
	sel, err = runner.SelectThroughputCases([]string{"batch4/n4096"})
	if err != nil || len(sel) != 18 {
		t.Fatalf("leading segments: %d cases, %v", len(sel), err)
	}
	if ctl := runner.ThroughputControlCases(sel); !ctl[0] || slices.Contains(ctl[1:], true) {
		t.Fatalf("no control case selected: control on %v, want the first only", ctl)
	}
}
