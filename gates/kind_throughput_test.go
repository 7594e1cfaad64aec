package gates

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/internal/stats"
	"github.com/evidence-ledger/ledger/ledger"
)

// throughputYAML is a release with one throughput gate over core's head:
// promoted vs narrow on cuda, threshold 0.98, the batch 1 cases (the
// runner's ids, and the one-letter ids of the shorter tests).
const throughputYAML = `version: 2.0.0-speed
approval_role: release-manager
components:
  - name: core
    repository: example/core
    reviewed: ` + "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2" + `
    head: ` + "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1" + `
    tree: ` + "c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3" + `
artifacts:
  lib: sha256:1111111111111111111111111111111111111111111111111111111111111111
gates:
  - id: speed
    kind: throughput
    component: core
    backends: [cuda]
    baseline: narrow
    threshold: 0.98
    select: ["batch1/*/*/*/*/*", "batch1/?"]
`

func throughputRelease(t testing.TB, extra string) *Release {
	t.Helper()
	r, err := ParseRelease([]byte(throughputYAML + extra))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// shortIDs name the cases the tests use by a short name.
var shortIDs = map[string]string{
	"batch1/a": "batch1/n4096/k4096/f32/b4/g64", "batch1/b": "batch1/n4096/k4096/bf16/b4/g64",
	"batch2/a": "batch2/n4096/k4096/f32/b4/g64", "batch4/a": "batch4/n4096/k4096/f32/b4/g64",
}

// synthCase is a case whose n paired samples have ratios
// baseline/candidate of ratio times (1 + noise*N(0,1)), candidate times
// near 40 µs with 1 % jitter; rng is seeded by the caller. id is a case
// id of the lane (or a key of shortIDs); its fields follow from it.
func synthCase(rng *rand.Rand, id string, n int, ratio, noise float64) ledger.ThroughputCase {
	if long, ok := shortIDs[id]; ok {
		id = long
	}
	c := ledger.ThroughputCase{ID: id, LaunchesPerSample: 100}
	var d string
	if _, err := fmt.Sscanf(strings.ReplaceAll(id, "/", " "), "batch%d n%d k%d %s b%d g%d", &c.Batch, &c.N, &c.K, &d, &c.Bits, &c.GroupSize); err != nil {
		panic("synthCase: " + id + ": " + err.Error())
	}
	c.DType = d
	c.Output = ledger.OutputCheck{RelL2: 2e-4, Tolerance: 0.02, BitExact: c.Batch * c.N, Values: c.Batch * c.N}
	for range n {
		cand := 40e-6 * (1 + 0.01*rng.NormFloat64())
		r := ratio * (1 + noise*rng.NormFloat64())
		if r < 0.05 {
			r = 0.05
		}
		c.CandidateS = append(c.CandidateS, cand)
		c.BaselineS = append(c.BaselineS, cand*r)
	}
	return c
}

// throughputEv is a passed cuda record of the default throughput lane at
// core's head whose details carry cases (promoted vs narrow at 0.95).
func throughputEv(cases ...ledger.ThroughputCase) ledger.Evidence {
	e := passing(DefaultThroughputLane)
	e.Backend = ledger.BackendCUDA
	e.CasesExact, e.CasesTotal, e.Control = len(cases), len(cases), ledger.ControlCaught
	setThroughput(&e, &ledger.Throughput{Clock: "cuda-events", Candidate: "promoted", Baseline: &ledger.ThroughputBaseline{Name: "narrow"},
		Confidence: 0.95, TargetRel: 0.01, Cases: cases})
	return e
}

func setThroughput(e *ledger.Evidence, tp *ledger.Throughput) {
	b, err := json.Marshal(map[string]any{ledger.ThroughputField: tp})
	if err != nil {
		panic(err)
	}
	e.Details = b
}

func throughputOf(t testing.TB, e *ledger.Evidence) *ledger.Throughput {
	t.Helper()
	tp, err := ledger.ThroughputOf(e)
	if err != nil || tp == nil {
		t.Fatal(tp, err)
	}
	return tp
}

func speedGate(t testing.TB, rel *Release, evs ...ledger.Evidence) GateResult {
	t.Helper()
	s := openStore(t)
	apply(t, s, rel)
	record(t, s, evs...)
	return evaluate(t, s, rel).Gates[0]
}

func firstBaseline(g GateResult, i int) string {
	if i < len(g.Baseline) {
		return g.Baseline[i].Reason
	}
	return ""
}

// TestThroughputSpeedupPasses: a clear speed-up (ratio 1.2, 1 % noise, 40
// pairs per case) passes, the reason and the result giving the worst
// case's ratio with its interval and the pair count; cases outside select
// (a batch 4 case that regressed) are not judged.
func TestThroughputSpeedupPasses(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	e := throughputEv(synthCase(rng, "batch1/n8192/k8192/f16/b4/g64", 40, 1.2, 0.01),
		synthCase(rng, "batch1/n4096/k4096/f16/b4/g64", 40, 1.1, 0.01),
		synthCase(rng, "batch4/n4096/k4096/f16/b4/g64", 40, 0.5, 0.01))
	g := speedGate(t, throughputRelease(t, ""), e)
	if g.State != StatePassed || g.Throughput == nil || g.Throughput.Verdict != ThroughputMeets {
		t.Fatalf("state %s (%s) %+v %+v; want passed", g.State, g.Reason, g.Throughput, g.Baseline)
	}
	r := g.Throughput
	if r.Case != "batch1/n4096/k4096/f16/b4/g64" || r.Cases != 2 || r.Pairs != 40 || r.Ratio.Low < 1.05 || r.Ratio.High > 1.15 || r.Candidate != "promoted" || r.Baseline != "narrow" {
		t.Fatalf("decisive result %+v; want the 1.1 batch 1 case of 2", r)
	}
	for _, want := range []string{"speed ratio 1.", ">= 0.98", "worst of 2 cases", "promoted vs narrow", "40 pairs"} {
		if !strings.Contains(g.Reason, want) {
			t.Errorf("reason %q lacks %q", g.Reason, want)
		}
	}
	if len(g.Satisfying) != 1 || !strings.Contains(g.Satisfying[0].Summary, "speed ratio") {
		t.Fatalf("satisfying %+v", g.Satisfying)
	}
}

// TestThroughputRegressionFailsUntilSuperseded: a clear regression (ratio
// 0.9 in one selected case) keeps the gate failed, the reason naming the
// case and its ratio interval, even beside a passing run; a supersede for
// the pins retracts it (baseline with the supersede's author and reason)
// and the passing run counts.
func TestThroughputRegressionFailsUntilSuperseded(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const id = "batch1/n8192/k8192/f16/b4/g64"
	bad := throughputEv(synthCase(rng, id, 40, 0.9, 0.01), synthCase(rng, "batch1/n4096/k4096/f16/b4/g64", 40, 1.0, 0.001))
	good := throughputEv(synthCase(rng, id, 40, 1.01, 0.001))
	good.FinishedAt = good.FinishedAt.Add(1)
	s := openStore(t)
	rel := throughputRelease(t, "")
	apply(t, s, rel)
	first := record(t, s, bad, good)[0].ID
	g := evaluate(t, s, rel).Gates[0]
	if g.State != StateFailed || len(g.Failing) != 1 || g.Failing[0].ID != first || g.Throughput == nil || g.Throughput.Verdict != ThroughputRegressed {
		t.Fatalf("state %s (%s) failing %+v; want failed by %s", g.State, g.Reason, g.Failing, first)
	}
	for _, want := range []string{id + ": speed ratio 0.9", "< 0.98", "[0.8", "superseded"} {
		if !strings.Contains(g.Reason, want) {
			t.Errorf("reason %q lacks %q", g.Reason, want)
		}
	}
	supersede(t, s, rel.Version, first)
	g = evaluate(t, s, rel).Gates[0]
	if g.State != StatePassed || len(g.Failing) != 0 || !strings.Contains(firstBaseline(g, 0), "superseded by") || !strings.Contains(firstBaseline(g, 0), "dana") {
		t.Fatalf("after the supersede: state %s (%s) baseline %+v; want passed with the regression as baseline", g.State, g.Reason, g.Baseline)
	}
}

// TestIssue34AcceptanceTooNoisySamplesInconclusive is issue 34's
// acceptance test: a too-noisy sample set (30 pairs with 20 % noise around
// a speed ratio of 1.0, threshold 0.98) neither passes nor fails the gate:
// it stays open, its reason "inconclusive: ..." naming the case whose
// interval straddles the threshold, and the record is baseline.
func TestIssue34AcceptanceTooNoisySamplesInconclusive(t *testing.T) {
	rng := rand.New(rand.NewPCG(34, 34))
	const id = "batch1/n8192/k8192/f16/b4/g64"
	e := throughputEv(synthCase(rng, id, 30, 1.0, 0.20))
	tp := throughputOf(t, &e)
	iv, ok := stats.MedianCI(stats.Ratios(tp.Cases[0].BaselineS, tp.Cases[0].CandidateS), 0.95)
	if !ok || iv.Low >= 0.98 || iv.High < 0.98 {
		t.Fatalf("the synthetic set does not straddle 0.98: %+v %v", iv, ok)
	}
	g := speedGate(t, throughputRelease(t, ""), e)
	if g.State != StateOpen || !strings.HasPrefix(g.Reason, "inconclusive: "+id) || !strings.Contains(g.Reason, "30 pairs") {
		t.Fatalf("state %s reason %q; want open, inconclusive naming %s", g.State, g.Reason, id)
	}
	if g.Throughput == nil || g.Throughput.Verdict != ThroughputInconclusive || len(g.Satisfying) != 0 || len(g.Failing) != 0 || len(g.Missing) != 1 {
		t.Fatalf("result %+v satisfying %+v failing %+v missing %q", g.Throughput, g.Satisfying, g.Failing, g.Missing)
	}
	if !strings.Contains(firstBaseline(g, 0), "inconclusive") {
		t.Fatalf("baseline %+v; want the record as inconclusive", g.Baseline)
	}
}

// TestThroughputFewSamplesNeverPass: one sample or three pairs of a clear
// speed-up, even in a record stating a low confidence (whose intervals
// would be narrower), leave the gate open: the gate judges at 0.95 at
// least and needs stats.MinSamples pairs.
func TestThroughputFewSamplesNeverPass(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		for _, conf := range []float64{0.95, 0.5, 0.01} {
			rng := rand.New(rand.NewPCG(uint64(n), 7))
			e := throughputEv(synthCase(rng, "batch1/n8192/k8192/f16/b4/g64", n, 2.0, 0.001))
			tp := throughputOf(t, &e)
			tp.Confidence = conf
			setThroughput(&e, tp)
			g := speedGate(t, throughputRelease(t, ""), e)
			if g.State != StateOpen || !strings.Contains(g.Reason, "inconclusive") || !strings.Contains(g.Reason, fmt.Sprintf("%d pair(s), fewer than", n)) && !strings.Contains(g.Reason, "no interval") {
				t.Errorf("%d pairs at confidence %v: state %s (%s); want open, inconclusive", n, conf, g.State, g.Reason)
			}
		}
	}
	// A record without baseline samples (one side only) is baseline.
	rng := rand.New(rand.NewPCG(9, 9))
	e := throughputEv(synthCase(rng, "batch1/a", 40, 2, 0.001))
	tp := throughputOf(t, &e)
	tp.Baseline = nil
	tp.Cases[0].BaselineS = nil
	setThroughput(&e, tp)
	if g := speedGate(t, throughputRelease(t, ""), e); g.State != StateOpen || !strings.Contains(firstBaseline(g, 0), "one side only") {
		t.Fatalf("one side only: %s %+v", g.State, g.Baseline)
	}
}

// TestThroughputBaselineMismatch: a record compared against another
// baseline name, without or with another baseline artifact digest, with
// no case matching select or fewer selected cases than cases, is baseline
// with the reason, and the gate stays open.
func TestThroughputBaselineMismatch(t *testing.T) {
	digestNarrow := "sha256:" + strings.Repeat("ab", 32)
	arts := "    baseline_artifacts: {libnarrow.so: \"" + digestNarrow + "\"}\n"
	rng := rand.New(rand.NewPCG(5, 6))
	mk := func(name string, art map[string]string, ids ...string) ledger.Evidence {
		var cs []ledger.ThroughputCase
		for _, id := range ids {
			cs = append(cs, synthCase(rng, id, 40, 1.2, 0.01))
		}
		e := throughputEv(cs...)
		tp := throughputOf(t, &e)
		tp.Baseline = &ledger.ThroughputBaseline{Name: name, Artifacts: art}
		setThroughput(&e, tp)
		return e
	}
	for _, tc := range []struct {
		name, extra, why string
		e                ledger.Evidence
	}{
		{"other baseline name", "", `compared against baseline "original", the gate's is "narrow"`, mk("original", nil, "batch1/a")},
		{"baseline artifact missing", arts, "baseline does not carry artifact libnarrow.so", mk("narrow", nil, "batch1/a")},
		{"baseline artifact digest", arts, "baseline artifact libnarrow.so sha256:cdcdcdcdcdcd", mk("narrow", map[string]string{"libnarrow.so": "sha256:" + strings.Repeat("cd", 32)}, "batch1/a")},
		{"no selected case", "", "no case matches select (batch1/*/*/*/*/*, batch1/?)", mk("narrow", nil, "batch2/a", "batch4/a")},
		{"too few cases", "    cases: 3\n", "2 selected case(s), the gate needs 3", mk("narrow", nil, "batch1/a", "batch1/b", "batch2/a")},
		{"not throughput", "", "no throughput measurements", passing(DefaultThroughputLane)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "not throughput" {
				tc.e.Backend = ledger.BackendCUDA
			}
			g := speedGate(t, throughputRelease(t, tc.extra), tc.e)
			if g.State != StateOpen || !strings.Contains(firstBaseline(g, 0), tc.why) || !strings.Contains(g.Reason, "do not count") {
				t.Fatalf("state %s (%s) baseline %+v; want open with %q", g.State, g.Reason, g.Baseline, tc.why)
			}
		})
	}
	// The right baseline artifact digest counts.
	g := speedGate(t, throughputRelease(t, arts), mk("narrow", map[string]string{"libnarrow.so": digestNarrow}, "batch1/a"))
	if g.State != StatePassed {
		t.Fatalf("matching baseline artifacts: %s (%s)", g.State, g.Reason)
	}
}

// TestThroughputSamplesDecide: the runner's summaries are never read. A
// record whose summaries claim a 1.5x speed-up while its samples show
// 0.9 fails; one whose summaries claim a regression while its samples
// show a speed-up passes.
func TestThroughputSamplesDecide(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	lie := func(ratio float64, claim ledger.Interval) ledger.Evidence {
		c := synthCase(rng, "batch1/n8192/k8192/f16/b4/g64", 40, ratio, 0.01)
		c.Ratio, c.Converged = &claim, true
		c.CandidateMedian = ledger.Interval{Estimate: 1e-6, Low: 1e-6, High: 1e-6}
		return throughputEv(c)
	}
	if g := speedGate(t, throughputRelease(t, ""), lie(0.9, ledger.Interval{Estimate: 1.5, Low: 1.49, High: 1.51})); g.State != StateFailed || !strings.Contains(g.Reason, ": speed ratio 0.8") || !strings.Contains(g.Reason, "< 0.98") {
		t.Fatalf("summary 1.5, samples 0.9: %s (%s); want failed by the samples", g.State, g.Reason)
	}
	if g := speedGate(t, throughputRelease(t, ""), lie(1.2, ledger.Interval{Estimate: 0.5, Low: 0.49, High: 0.51})); g.State != StatePassed || !strings.Contains(g.Reason, "speed ratio 1.2") {
		t.Fatalf("summary 0.5, samples 1.2: %s (%s); want passed by the samples", g.State, g.Reason)
	}
}

// TestThroughputCountingRule: the lane counting rule holds for throughput
// gates: a failed run keeps the gate failed, other backends, other
// commits, inconclusive runs are baseline, a
// repeated record counts once.
func TestThroughputCountingRule(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	good := throughputEv(synthCase(rng, "batch1/a", 40, 1.2, 0.01))
	failed := good
	failed.Status = ledger.StatusFailed
	if g := speedGate(t, throughputRelease(t, ""), good, failed); g.State != StateFailed || !strings.Contains(g.Reason, "status failed") {
		t.Fatalf("failed run: %s (%s)", g.State, g.Reason)
	}
	metal := good
	metal.Backend = ledger.BackendMetal
	other := good
	other.Subject.Commit = otherC
	incon := good
	incon.Status = ledger.StatusInconclusive
	for _, tc := range []struct {
		name, why string
		e         ledger.Evidence
	}{
		{"other backend", "other backend metal", metal},
		{"other commit", "other commit", other},
		{"inconclusive status", "status inconclusive", incon},
	} {
		g := speedGate(t, throughputRelease(t, ""), tc.e)
		if g.State != StateOpen || !strings.Contains(firstBaseline(g, 0), tc.why) {
			t.Errorf("%s: %s baseline %+v; want open with %q", tc.name, g.State, g.Baseline, tc.why)
		}
	}
	again := good
	again.RecordedBy = &ledger.Recorder{Token: &ledger.RecorderToken{ID: "tok_0123456789ab", Name: "ci-2"}}
	if g := speedGate(t, throughputRelease(t, ""), good, again); g.State != StatePassed || !strings.Contains(g.Reason, "1 passing run(s)") || !strings.Contains(g.Reason, "1 duplicate") {
		t.Fatalf("repeated record: %s (%s)", g.State, g.Reason)
	}
}

// TestThroughputValidation: every field error names the field.
func TestThroughputValidation(t *testing.T) {
	base := "  - {id: g, kind: throughput, component: core, backends: [cuda], baseline: narrow, threshold: 0.98"
	noThresh := "  - {id: g, kind: throughput, component: core, backends: [cuda], baseline: narrow"
	for _, tc := range []struct{ gate, field string }{
		{"  - {id: g, kind: throughput, component: core, baseline: narrow, threshold: 0.98}", "gates[0].backends"},
		{"  - {id: g, kind: throughput, component: core, backends: [cuda], threshold: 0.98}", "gates[0].baseline"},
		{"  - {id: g, kind: throughput, component: core, backends: [cuda], baseline: narrow}", "gates[0].threshold"},
		{noThresh + ", threshold: 0}", "gates[0].threshold"},
		{"  - {id: g, kind: throughput, component: core, backends: [cuda], baseline: narrow, threshold: -1}", "gates[0].threshold"},
		{"  - {id: g, kind: throughput, component: core, backends: [cuda], baseline: narrow, threshold: 10.5}", "gates[0].threshold"},
		{"  - {id: g, kind: throughput, component: core, backends: [cuda], baseline: narrow, threshold: .nan}", "gates[0].threshold"},
		{base + ", select: [\"batch1/[\"]}", "gates[0].select[0]"},
		{base + ", select: [\"\"]}", "gates[0].select[0]"},
		{base + ", select: [\"batch1/\"]}", "gates[0].select[0]"},
		{base + ", select: [\"batch1//b4\"]}", "gates[0].select[0]"},
		{base + ", baseline_artifacts: {lib: sha256:abc}}", "gates[0].baseline_artifacts.lib"},
		{base + ", cases: -1}", "gates[0].cases"},
		{base + ", cases: 513}", "gates[0].cases"},
		{base + ", lane: qmv-bias-sum/v1}", "gates[0].lane"},
		{noThresh + ", threshold: \"0.98\"}", "gates[0].threshold"},
		{noThresh + ", threshold: [0.98]}", "gates[0].threshold"},
		{base + ", cases: \"27\"}", "gates[0].cases"},
		{base + ", lane: nope}", "gates[0].lane"},
		{"  - {id: g, kind: throughput, component: core, backends: [tpu], baseline: narrow, threshold: 0.98}", "gates[0].backends[0]"},
		{base + ", min_runs: 2}", "gates[0].min_runs"},
		{"  - {id: g, kind: lane, lane: x/v1, component: core, backends: [cpu], threshold: 0.98}", "gates[0].threshold"},
		{"  - {id: g, kind: lane, lane: x/v1, component: core, backends: [cpu], baseline: narrow}", "gates[0].baseline"},
		{"  - {id: g, kind: manual, role: r, select: [a]}", "gates[0].select"},
	} {
		y := strings.Split(throughputYAML, "gates:\n")[0] + "gates:\n" + tc.gate + "\n"
		_, err := ParseRelease([]byte(y))
		var le *ledger.Error
		if ledger.ErrorCode(err) != ledger.CodeInvalid || !asError(err, &le) || le.Field != tc.field {
			t.Errorf("%s: %v; want invalid naming %s", tc.gate, err, tc.field)
		}
	}
	rel := throughputRelease(t, "")
	if g := rel.Gates[0]; g.Lane != DefaultThroughputLane || g.Threshold != 0.98 || g.Baseline != "narrow" {
		t.Fatalf("defaults: %+v", g)
	}
	if !strings.Contains(KindRule(KindThroughput), "paired ratios") {
		t.Fatal("no rule text")
	}
}
