package runner

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/evidence-ledger/ledger/ledger"
)

// throughputLane is qmv-throughput/v1: the backend's own qmv kernel timed
// on its own clock, the corrected variant (Promoted, the candidate) against
// the original (Narrow, the baseline), interleaved in one run.
type throughputLane struct{}

// NewThroughputLane returns qmv-throughput/v1. It runs only when named
// (OnRequest) and honours Env.Cases, Env.CaseBudget and Env.MaxSamples;
// the backend must implement ThroughputBackend.
func NewThroughputLane() Lane { return throughputLane{} }

//go:embed throughput.go
var srcThroughput []byte

//go:embed throughput_lane.go
var srcThroughputLane []byte

//go:embed throughput_lane_case.go
var srcThroughputLaneCase []byte

func (throughputLane) Name() string { return ThroughputLane }

func (throughputLane) Summary() string {
	return "qmv throughput: the backend's own kernel, promoted vs narrow interleaved, B1/B2/B4 x 4096²..16384² x dtype x bits"
}

// OnRequest is true: the lane takes minutes and runs only when named.
func (throughputLane) OnRequest() bool { return true }

// SelectsCases is true: Env.Cases selects the lane's cases.
func (throughputLane) SelectsCases() bool { return true }

func (throughputLane) Definition() []byte {
	cs := ThroughputCases()
	ids := make([]string, len(cs))
	var ctl []string
	for i, c := range cs {
		ids[i] = c.ID
		if c.Control {
			ctl = append(ctl, c.ID)
		}
	}
	o := MeasureOptions{}.withDefaults()
	def := map[string]any{
		"lane":          ThroughputLane,
		"cases":         ids,
		"control_cases": ctl,
		"operands":      "ThroughputOperands: uniform random weight words, scales in [0, 0.01), biases in [-0.5, 0.5), standard normal activations, rounded to the dtype, seeded by the shape",
		"output":        "every vector's product of both variants within ThroughputTolerance (relative L2, float64 reference) or the case is a mismatch",
		"measurement": map[string]any{
			"rule":       "arms promoted, narrow (and promoted launched twice on control cases) take rounds of samples in rotating order until every median interval and every paired ratio interval is within target_rel, or max_samples or the case budget ends",
			"sample":     "seconds per product: the backend clock's time of launches_per_sample back-to-back products divided by their count",
			"interval":   "order-statistic confidence interval of the median",
			"confidence": o.Confidence, "target_rel": o.TargetRel, "round": o.Round,
			"max_samples": o.MaxSamples, "case_budget_s": o.Budget.Seconds(),
		},
		"control": fmt.Sprintf("on every selected control case (else the first selected case) the ratio promoted/promoted-twice must have its interval inside [%g, %g], else inconclusive", ControlLow, ControlHigh),
		"verdict": "failed when any case's output is beyond tolerance or errs; inconclusive when the control is not caught; passed otherwise (the speed comparison is the throughput gate's)",
		"sources": map[string]string{
			"runner/throughput.go": sha256Hex(srcThroughput), "runner/throughput_lane.go": sha256Hex(srcThroughputLane),
			"runner/throughput_lane_case.go": sha256Hex(srcThroughputLaneCase),
			"runner/quant/pack.go":           sha256Hex(srcQuantPack), "runner/quant/float.go": sha256Hex(srcQuantFloat),
		},
	}
	b, _ := ledger.CanonicalBody(def)
	return b
}

// ThroughputOptions returns the measurement options of env (CaseBudget,
// MaxSamples); it fails on a negative value or more samples than a record
// holds (ledger.MaxThroughputSamples).
func ThroughputOptions(env *Env) (MeasureOptions, error) {
	switch {
	case env.CaseBudget < 0:
		return MeasureOptions{}, fmt.Errorf("case budget %s is negative", env.CaseBudget)
	case env.MaxSamples < 0 || env.MaxSamples > ledger.MaxThroughputSamples:
		return MeasureOptions{}, fmt.Errorf("max samples %d: must be 1..%d (0: the default)", env.MaxSamples, ledger.MaxThroughputSamples)
	}
	return MeasureOptions{Budget: env.CaseBudget, MaxSamples: env.MaxSamples}.withDefaults(), nil
}

func (l throughputLane) Run(ctx context.Context, env *Env) (*Result, error) {
	if env == nil || env.Backend == nil {
		return nil, fmt.Errorf("%s: no backend", ThroughputLane)
	}
	tb, ok := env.Backend.(ThroughputBackend)
	if !ok {
		return nil, fmt.Errorf("%s: backend %s cannot time its kernel", ThroughputLane, env.Backend.Name())
	}
	o, err := ThroughputOptions(env)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ThroughputLane, err)
	}
	sel, err := SelectThroughputCases(env.Cases)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ThroughputLane, err)
	}
	ctl := ThroughputControlCases(sel)
	run := ThroughputRun{Clock: tb.Clock(), Candidate: Promoted.String(), Baseline: Narrow.String(),
		Before: tb.DeviceState(), Options: o, Total: len(sel)}
	var outs []ThroughputOutcome
	env.progress(0, len(sel))
	for i, c := range sel {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		out, err := MeasureBackendCase(ctx, tb, c, ctl[i], o)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, err
		case err != nil:
			run.Errors = append(run.Errors, ledger.CaseResult{ID: c.ID, Result: "error", Note: err.Error()})
		default:
			outs = append(outs, out)
		}
		env.progress(i+1, len(sel))
	}
	run.After = tb.DeviceState()
	res, err := ThroughputResult(run, outs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ThroughputLane, err)
	}
	return res, nil
}

// MeasureBackendCase runs case c on tb's own kernel: operands and the
// float64 reference, PrepareQMV, both variants' outputs, then
// RunThroughputCase with arms Promoted and Narrow (and Promoted launched
// twice when control is set). The prepared operands are closed before it
// returns.
func MeasureBackendCase(ctx context.Context, tb ThroughputBackend, c ThroughputCase, control bool, o MeasureOptions) (out ThroughputOutcome, err error) {
	r, xs, err := ThroughputOperands(c)
	if err != nil {
		return out, err
	}
	ref := ThroughputReference(r, xs)
	p, err := tb.PrepareQMV(ctx, r, xs)
	if err != nil {
		return out, fmt.Errorf("case %s: prepare: %w", c.ID, err)
	}
	defer func() {
		if cerr := p.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("case %s: close: %w", c.ID, cerr)
		}
	}()
	cand, err := p.Output(ctx, Promoted)
	if err != nil {
		return out, fmt.Errorf("case %s: %v output: %w", c.ID, Promoted, err)
	}
	base, err := p.Output(ctx, Narrow)
	if err != nil {
		return out, fmt.Errorf("case %s: %v output: %w", c.ID, Narrow, err)
	}
	arms := ThroughputArms{Candidate: p.Arm(Promoted, 1), Baseline: p.Arm(Narrow, 1), Launches: p.LaunchesPerSample()}
	if control {
		arms.Slowed = p.Arm(Promoted, 2)
	}
	return RunThroughputCase(ctx, c, ref, cand, base, arms, o)
}
