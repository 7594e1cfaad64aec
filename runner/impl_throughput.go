package runner

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

//go:embed impl_throughput.go
var srcImplThroughput []byte

//go:embed adapter_timing.go
var srcImplThroughputFrames []byte

//go:embed adapter_client_timing.go
var srcImplThroughputClient []byte

// isThroughputLane reports whether name selects ThroughputLane.
func isThroughputLane(name string) bool {
	return name == ThroughputLane || name == ledger.LaneName(ThroughputLane)
}

// implThroughputLane is ThroughputLane run against an external
// implementation through the adapter protocol's timing frames. It is not
// registered: RunImpl runs it; Run refuses to run without an adapter.
type implThroughputLane struct{}

func (implThroughputLane) Name() string { return ThroughputLane }
func (implThroughputLane) Summary() string {
	return ThroughputLane + " against an external implementation through " + AdapterProtocol + " timing frames"
}
func (implThroughputLane) Run(context.Context, *Env) (*Result, error) {
	return nil, fmt.Errorf("%s against an external implementation runs only through ledger run --impl", ThroughputLane)
}

func (implThroughputLane) Definition() []byte {
	d := map[string]any{
		"lane": ThroughputLane, "against": "an external implementation through " + AdapterProtocol + " timing frames (prepare, ready, time, samples)",
		"cases":     "ThroughputCases (batch x shape x dtype x bits, group 64), selected by id globs; operands ThroughputOperands",
		"reference": "ThroughputReference (float64); output check CheckThroughputOutput, tolerance ThroughputTolerance (2e-2 float16/bfloat16, 1e-3 float32)",
		"timing":    "the adapter's own clock; interleaved rounds of the candidate and its original (Measure), 95 % order-statistic intervals of the median, target relative half-width 1 %",
		"control":   fmt.Sprintf("the candidate launched twice per timed product on the control cases (else the first selected case): the paired ratios candidate/slowed must have their interval inside [%v, %v]", ControlLow, ControlHigh),
		"verdict":   "error when an adapter fails; failed when an output (candidate or original) is beyond tolerance or a case is unsupported; inconclusive when the control is not caught; passed otherwise",
		"sources": map[string]string{
			"runner/impl_throughput.go": sha256Hex(srcImplThroughput), "runner/adapter_timing.go": sha256Hex(srcImplThroughputFrames),
			"runner/adapter_client_timing.go": sha256Hex(srcImplThroughputClient),
		},
	}
	b, _ := ledger.CanonicalBody(d)
	return b
}

// implThroughputCases returns the cases patterns select (SelectThroughputCases).
func implThroughputCases(patterns []string) ([]ThroughputCase, error) {
	return SelectThroughputCases(patterns)
}

// throughputControl is the negative control's outcome on one case.
type throughputControl struct {
	Case    string          `json:"case"`
	Ratio   ledger.Interval `json:"ratio"`
	Caught  bool            `json:"caught"`
	Samples int             `json:"samples"`
}

// throughputOut is what the measurement of the selected cases produced.
type throughputOut struct {
	total          int
	cases          []ledger.ThroughputCase
	results        []ledger.CaseResult
	failing        []string
	clock          string
	controls       []throughputControl
	baseLaunches   map[string]int // the original's launches per sample where they differ from the candidate's
	conf, target   float64
	candidate      *AdapterHello
	baseline       *AdapterHello
	candidateClock string
}

// runImplThroughput runs ThroughputLane against the implementation name
// and, when it names an original, the original in the same run: for each
// selected case it prepares the operands on both adapters, checks both
// outputs against ThroughputReference, then takes interleaved rounds of
// samples (Measure: the candidate, the original, and on control cases the
// candidate launched twice per product). It returns one record, the
// implementation's, whose details.throughput holds both sides' samples.
// It fails before any record on bad options, an adapter that does not
// start or does not announce the timing capability.
func runImplThroughput(ctx context.Context, cfg *ImplConfig, name string, o ImplOptions) ([]ImplRun, error) {
	cases, err := implThroughputCases(o.Cases)
	if err != nil {
		return nil, err
	}
	if o.CaseBudget < 0 {
		return nil, fmt.Errorf("case budget must be >= 0, got %v", o.CaseBudget)
	}
	if o.MaxSamples < 0 || o.MaxSamples > ledger.MaxThroughputSamples {
		return nil, fmt.Errorf("max samples must be in 0..%d, got %d", ledger.MaxThroughputSamples, o.MaxSamples)
	}
	r, err := newImplRunner(cfg, name, &o)
	if err != nil {
		return nil, err
	}
	defer r.close()
	if err := r.start(ctx); err != nil {
		return nil, err
	}
	out := &throughputOut{total: len(cases), candidate: r.sess.hello, baseLaunches: map[string]int{}}
	if !r.sess.hello.Timing {
		return nil, fmt.Errorf("%s: the adapter does not announce the timing capability (hello \"timing\": true), so lane %s cannot run through it", r.im.Name, ThroughputLane)
	}
	if r.origSess != nil {
		out.baseline = r.origSess.hello
		if !r.origSess.hello.Timing {
			return nil, fmt.Errorf("original %s: the adapter does not announce the timing capability (hello \"timing\": true), so lane %s cannot run through it", r.orig.Name, ThroughputLane)
		}
	}
	mo := MeasureOptions{Budget: o.CaseBudget, MaxSamples: o.MaxSamples}.withDefaults()
	out.conf, out.target = mo.Confidence, mo.TargetRel
	start, t0 := r.now(), time.Now()
	runErr := r.measureThroughput(ctx, cases, mo, out)
	if runErr != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	end := r.now()
	changed := changedPins(r.im, r.pins)
	if r.orig != nil {
		changed = append(changed, changedPins(r.orig, r.origPins)...)
	}
	ev, err := r.throughputEvidence(out, runErr, changed, start, end)
	if err != nil {
		return nil, err
	}
	return []ImplRun{{LaneRun: LaneRun{Lane: ThroughputLane, Evidence: ev, Wall: time.Since(t0), Err: runErr}, Implementation: r.im.Name, Role: "impl"}}, nil
}

// measureThroughput measures every case into out; an error (an adapter
// failure, cancellation) stops it.
func (r *implRunner) measureThroughput(ctx context.Context, cases []ThroughputCase, mo MeasureOptions, out *throughputOut) error {
	anyControl := false
	for _, c := range cases {
		anyControl = anyControl || c.Control
	}
	for i, c := range cases {
		if err := ctx.Err(); err != nil {
			return err
		}
		ctl := c.Control || (i == 0 && !anyControl)
		if err := r.measureCase(ctx, c, ctl, mo, out); err != nil {
			return err
		}
		if r.o.Progress != nil {
			r.o.Progress(ThroughputLane, i+1, len(cases))
		}
	}
	return nil
}

// measureCase prepares, checks and measures one case.
func (r *implRunner) measureCase(ctx context.Context, c ThroughputCase, ctl bool, mo MeasureOptions, out *throughputOut) error {
	req, xs, err := ThroughputOperands(c)
	if err != nil {
		return err
	}
	refc := make(chan [][]float64, 1)
	go func() { refc <- ThroughputReference(req, xs) }()
	got, err := r.sess.prepare(ctx, c.ID, req, xs)
	if err != nil {
		err = fmt.Errorf("%s: %w", r.im.Name, err)
	}
	var gotB []Vec
	if err == nil && r.origSess != nil {
		if gotB, err = r.origSess.prepare(ctx, c.ID, req, xs); err != nil {
			err = fmt.Errorf("original %s: %w", r.orig.Name, err)
		}
	}
	ref := <-refc
	if u := (*UnsupportedError)(nil); errors.As(err, &u) {
		out.results = append(out.results, ledger.CaseResult{ID: c.ID, Result: "error", Note: clipNote(err.Error())})
		out.failing = append(out.failing, c.ID)
		return nil
	}
	if err != nil {
		return err
	}
	oc, err := CheckThroughputOutput(c.DType, ref, got)
	if err != nil {
		return fmt.Errorf("prepare %s: %w", c.ID, err)
	}
	var notes []string
	if oc.RelL2 > oc.Tolerance {
		notes = append(notes, fmt.Sprintf("%s's output rel_l2 %.3g > tolerance %.3g", r.im.Name, oc.RelL2, oc.Tolerance))
	}
	if gotB != nil {
		ob, err := CheckThroughputOutput(c.DType, ref, gotB)
		if err != nil {
			return fmt.Errorf("original %s: prepare %s: %w", r.orig.Name, c.ID, err)
		}
		oc.BaselineRelL2 = &ob.RelL2
		if ob.RelL2 > ob.Tolerance {
			notes = append(notes, fmt.Sprintf("original %s's output rel_l2 %.3g > tolerance %.3g", r.orig.Name, ob.RelL2, ob.Tolerance))
		}
	}
	cand := &adapterArm{s: r.sess, side: r.im.Name, id: c.ID, repeat: 1}
	arms := []Arm{cand}
	var base *adapterArm
	if r.origSess != nil {
		base = &adapterArm{s: r.origSess, side: "original " + r.orig.Name, id: c.ID, repeat: 1}
		arms = append(arms, base)
	}
	sides := len(arms)
	if ctl {
		arms = append(arms, &adapterArm{s: r.sess, side: r.im.Name + " (control)", id: c.ID, repeat: 2})
	}
	samples, conv, err := Measure(ctx, arms, mo)
	if err != nil {
		return err
	}
	if out.clock == "" {
		out.clock = cand.clock
	}
	if cand.clock != out.clock || base != nil && base.clock != out.clock {
		bc := ""
		if base != nil {
			bc = base.clock
		}
		return fmt.Errorf("case %s: the samples were timed on different clocks (%s: %q, original: %q, earlier cases: %q); they do not compare", c.ID, r.im.Name, cand.clock, bc, out.clock)
	}
	if base != nil && base.launches != cand.launches {
		out.baseLaunches[c.ID] = base.launches
	}
	out.cases = append(out.cases, SummarizeThroughput(c, cand.launches, samples[:sides], conv, mo.Confidence, oc))
	if ctl {
		caught, iv := ControlCaught(samples[0], samples[sides], mo.Confidence)
		out.controls = append(out.controls, throughputControl{Case: c.ID, Ratio: iv, Caught: caught, Samples: len(samples[0])})
	}
	cr := ledger.CaseResult{ID: c.ID, Result: "exact", Note: fmt.Sprintf("within tolerance, rel_l2 %.3g", oc.RelL2)}
	if len(notes) > 0 {
		cr = ledger.CaseResult{ID: c.ID, Result: "mismatch", Note: clipNote(strings.Join(notes, "; "))}
		out.failing = append(out.failing, c.ID)
	}
	out.results = append(out.results, cr)
	return nil
}

func clipNote(s string) string {
	if len(s) > 512 {
		s = s[:512] + "..."
	}
	return s
}

// throughputEvidence builds the implementation's record.
func (r *implRunner) throughputEvidence(out *throughputOut, runErr error, changed []string, start, end time.Time) (ledger.Evidence, error) {
	arts := map[string]string{}
	for k, v := range r.common {
		arts[k] = v
	}
	for k, v := range r.pins {
		arts[k] = v
	}
	b := &implBackend{name: r.im.Backend, device: implDevice(*out.candidate)}
	var res *Result
	if runErr == nil {
		res = &Result{Total: out.total, Exact: out.total - len(out.failing), Failing: out.failing, Cases: out.results,
			Details: map[string]any{"implementation": r.im.Name, "role": "impl", "adapter_command": r.im.Command}}
		res.Control = throughputControlResult(out.controls)
		if len(out.cases) > 0 {
			t := &ledger.Throughput{Clock: out.clock, Candidate: r.im.Name, Confidence: out.conf, TargetRel: out.target,
				DeviceState: throughputDeviceState(out), Cases: out.cases}
			if r.orig != nil {
				t.Baseline = &ledger.ThroughputBaseline{Name: r.orig.Name, Artifacts: r.origPins}
				res.Details["original"] = r.orig.Name
				res.Details["original_adapter_command"] = r.orig.Command
				if len(out.baseLaunches) > 0 {
					res.Details["baseline_launches_per_sample"] = out.baseLaunches
				}
			}
			if err := t.Validate(); err != nil {
				return ledger.Evidence{}, fmt.Errorf("run %s: %w", r.im.Name, err)
			}
			res.Details[ledger.ThroughputField] = t
		}
		if len(changed) > 0 {
			res.Details["artifacts_changed"] = changed
		}
	}
	ev, err := BuildEvidence(implThroughputLane{}, b, r.o.Subject, arts, r.o.Runner, res, runErr, start, end)
	if err != nil {
		return ev, err
	}
	if len(changed) > 0 && ev.Status != ledger.StatusError {
		ev.Status = ledger.StatusError
		ev.Normalize()
		if err := ev.Validate(); err != nil {
			return ev, err
		}
	}
	return ev, nil
}

// throughputControlResult is caught when every control case was caught
// (and at least one was measured).
func throughputControlResult(cs []throughputControl) ControlResult {
	if len(cs) == 0 {
		return ControlResult{Outcome: ledger.ControlNotCaught, Summary: "no control case was measured (its case was unsupported)"}
	}
	missed := 0
	for _, c := range cs {
		if !c.Caught {
			missed++
		}
	}
	cr := ControlResult{Outcome: ledger.ControlCaught, Details: cs,
		Summary: fmt.Sprintf("the candidate launched twice per product measured at %.3f of its speed (%s, interval %.3f..%.3f, bounds %v..%v)", cs[0].Ratio.Estimate, cs[0].Case, cs[0].Ratio.Low, cs[0].Ratio.High, ControlLow, ControlHigh)}
	if missed > 0 {
		cr.Outcome = ledger.ControlNotCaught
		cr.Summary = fmt.Sprintf("%d of %d control cases not caught: the interval of candidate/slowed is not inside [%v, %v]; %s", missed, len(cs), ControlLow, ControlHigh, cr.Summary)
	}
	return cr
}

// throughputDeviceState is what the adapters said of their device,
// runtime and state at start: the candidate's under "device.",
// "runtime." and "before.", the original's under "baseline." plus the
// same.
func throughputDeviceState(out *throughputOut) map[string]string {
	m := map[string]string{}
	add := func(prefix string, h *AdapterHello) {
		m[prefix+"device.model"] = h.Device.Model
		if h.Device.Driver != "" {
			m[prefix+"device.driver"] = h.Device.Driver
		}
		for k, v := range h.Device.Attrs {
			m[prefix+"device."+k] = v
		}
		for k, v := range h.Runtime {
			m[prefix+"runtime."+k] = v
		}
		for k, v := range h.State {
			m[prefix+"before."+k] = v
		}
		m[prefix+"implementation"] = h.Implementation + " " + h.Version
	}
	add("", out.candidate)
	if out.baseline != nil {
		add("baseline.", out.baseline)
	}
	return m
}
