package runner

import (
	"context"
	"fmt"
	"math"
	"path"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
)

// SelectThroughputCases returns the cases of ThroughputCases whose id
// matches any of globs, in matrix order; no globs select every case. A
// glob is a path.Match pattern ("batch1/n4096/*/f16/b4/*"); one of fewer
// "/"-separated segments than the ids matches their leading segments
// ("batch1/n4096" selects every B1 4096 x 4096 case). It fails on a
// malformed glob and when no case matches, naming the globs.
func SelectThroughputCases(globs []string) ([]ThroughputCase, error) {
	all := ThroughputCases()
	if len(globs) == 0 {
		return all, nil
	}
	for _, g := range globs {
		if _, err := path.Match(g, ""); err != nil {
			return nil, fmt.Errorf("case glob %q: %w", g, err)
		}
	}
	var sel []ThroughputCase
	used := make([]bool, len(globs))
	for _, c := range all {
		matched := false
		for i, g := range globs {
			if matchCase(g, c.ID) {
				used[i], matched = true, true
			}
		}
		if matched {
			sel = append(sel, c)
		}
	}
	if len(sel) > 0 {
		for i, g := range globs {
			if !used[i] {
				return nil, fmt.Errorf("case glob %q matches none of the %d throughput cases (ids look like %s)", g, len(all), all[0].ID)
			}
		}
	}
	if len(sel) == 0 {
		return nil, fmt.Errorf("case globs %q match none of the %d throughput cases (ids look like %s)", globs, len(all), all[0].ID)
	}
	return sel, nil
}

// matchCase reports whether glob g matches id or, with fewer segments
// than id, its leading segments.
func matchCase(g, id string) bool { return ledger.MatchCaseGlob(g, id) }

// ThroughputControlCases reports, for each case of sel, whether it runs
// the negative control: every control case of sel, or the first case
// when sel holds none.
func ThroughputControlCases(sel []ThroughputCase) []bool {
	ctl := make([]bool, len(sel))
	has := false
	for i, c := range sel {
		ctl[i] = c.Control
		has = has || c.Control
	}
	if !has && len(sel) > 0 {
		ctl[0] = true
	}
	return ctl
}

// ThroughputArms are the timed sides of one case: the candidate, the
// baseline (nil in a run of one side) and, on a control case, the
// candidate launched twice per product (Slowed; nil elsewhere). Launches
// is the products one sample times.
type ThroughputArms struct {
	Candidate, Baseline, Slowed Arm
	Launches                    int
}

// ThroughputOutcome is one checked and measured case.
type ThroughputOutcome struct {
	Case ThroughputCase
	// Record is the case as details.throughput records it.
	Record ledger.ThroughputCase
	// Result is the case as details.cases lists it ("exact" when the
	// candidate's and the baseline's outputs are within tolerance,
	// "mismatch" otherwise).
	Result ledger.CaseResult
	// Slowed holds the control arm's samples (paired with
	// Record.CandidateS); nil on a case without the control.
	Slowed []float64
}

// Exact reports whether both outputs were within tolerance.
func (o *ThroughputOutcome) Exact() bool { return o.Result.Result == "exact" }

// RunThroughputCase checks the outputs of case c, cand (the candidate's)
// and base (the baseline's; nil without a baseline), each batch rows of N
// raw values, against the float64 reference ref (ThroughputReference), then
// measures arms with Measure (candidate, baseline, slowed) and summarizes
// the samples. A case whose output is beyond tolerance is still measured
// (its record shows what was timed) and is a "mismatch". Errors: an output
// of the wrong shape, a failing arm, ctx cancelled.
func RunThroughputCase(ctx context.Context, c ThroughputCase, ref [][]float64, cand, base []Vec, arms ThroughputArms, o MeasureOptions) (ThroughputOutcome, error) {
	o = o.withDefaults()
	out := ThroughputOutcome{Case: c}
	oc, err := CheckThroughputOutput(c.DType, ref, cand)
	if err != nil {
		return out, fmt.Errorf("case %s: candidate output: %w", c.ID, err)
	}
	oc.RelL2 = finite(oc.RelL2)
	exact := oc.RelL2 <= oc.Tolerance
	var baseL2 float64
	if arms.Baseline != nil {
		boc, err := CheckThroughputOutput(c.DType, ref, base)
		if err != nil {
			return out, fmt.Errorf("case %s: baseline output: %w", c.ID, err)
		}
		baseL2 = finite(boc.RelL2)
		oc.BaselineRelL2 = &baseL2
		exact = exact && baseL2 <= boc.Tolerance
	}
	if arms.Candidate == nil || arms.Launches < 1 {
		return out, fmt.Errorf("case %s: no candidate arm or launches per sample < 1", c.ID)
	}
	list := []Arm{arms.Candidate}
	if arms.Baseline != nil {
		list = append(list, arms.Baseline)
	}
	if arms.Slowed != nil {
		list = append(list, arms.Slowed)
	}
	samples, conv, err := Measure(ctx, list, o)
	if err != nil {
		return out, fmt.Errorf("case %s: measure: %w", c.ID, err)
	}
	for _, s := range samples {
		for i, x := range s {
			s[i] = math.Round(x*1e12) / 1e12 // the picosecond: far below any clock's resolution
		}
	}
	sides := samples[:1]
	if arms.Baseline != nil {
		sides = samples[:2]
	}
	if arms.Slowed != nil {
		out.Slowed = samples[len(samples)-1]
	}
	out.Record = SummarizeThroughput(c, arms.Launches, sides, conv, o.Confidence, oc)
	out.Result = ledger.CaseResult{ID: c.ID, Result: "exact"}
	if !exact {
		out.Result.Result = "mismatch"
		out.Result.Expected = fmt.Sprintf("rel_l2 <= %g", oc.Tolerance)
		out.Result.Got = fmt.Sprintf("rel_l2 %.3g", oc.RelL2)
		if oc.BaselineRelL2 != nil {
			out.Result.Got += fmt.Sprintf(", baseline rel_l2 %.3g", *oc.BaselineRelL2)
		}
	}
	return out, nil
}

// finite maps NaN and infinities (an output of NaNs) to the largest
// float64, which JSON can carry and every tolerance is below.
func finite(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return math.MaxFloat64
	}
	return x
}

// throughputNote renders a case's summary for sides cand and base:
// "promoted 18.64 µs [18.60, 18.69], narrow 18.71 µs, ratio 1.004 [0.999,
// 1.009]; 42 samples x 64 products; converged".
func throughputNote(cand, base string, tc ledger.ThroughputCase) string {
	us := func(s float64) string { return fmt.Sprintf("%.4g", s*1e6) }
	m := tc.CandidateMedian
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s µs [%s, %s]", cand, us(m.Estimate), us(m.Low), us(m.High))
	if tc.BaselineMedian != nil {
		fmt.Fprintf(&b, ", %s %s µs, ratio %.3f [%.3f, %.3f]", base, us(tc.BaselineMedian.Estimate),
			tc.Ratio.Estimate, tc.Ratio.Low, tc.Ratio.High)
	}
	fmt.Fprintf(&b, "; %d samples x %d products; ", len(tc.CandidateS), tc.LaunchesPerSample)
	if tc.Converged {
		b.WriteString("converged")
	} else {
		b.WriteString("the sample cap or the case budget ended it before convergence")
	}
	return b.String()
}

// ThroughputRun names what a throughput lane run measured, for
// ThroughputResult.
type ThroughputRun struct {
	// Clock names the samples' clock; Candidate and Baseline the two
	// sides ("promoted", "narrow"; Baseline "" in a run of one side).
	Clock, Candidate, Baseline string
	// BaselineArtifacts pins the baseline when it differs from the subject.
	BaselineArtifacts map[string]string
	// Before and After are the device state read before the first case and
	// after the last (recorded as "before.<key>" and "after.<key>").
	Before, After map[string]string
	// Options are the measurement options the cases ran with.
	Options MeasureOptions
	// Total is the number of selected cases (errored cases included).
	Total int
	// Errors lists cases that could not be checked or measured (Result
	// "error"); they count as not exact.
	Errors []ledger.CaseResult
}

// ThroughputResult assembles a lane result from the measured cases:
// Total and Exact over r.Total, failing ids (mismatches and errors), the
// negative control (caught when every outcome with Slowed samples has its
// ratio interval inside [ControlLow, ControlHigh]; not caught when there
// is none) and details.throughput. It fails when no case was measured (a
// throughput record needs at least one) or the record does not validate.
func ThroughputResult(r ThroughputRun, outs []ThroughputOutcome) (*Result, error) {
	if len(outs) == 0 {
		msgs := make([]string, len(r.Errors))
		for i, e := range r.Errors {
			msgs[i] = e.ID + ": " + e.Note
		}
		return nil, fmt.Errorf("no case could be measured: %s", strings.Join(msgs, "; "))
	}
	o := r.Options.withDefaults()
	res := &Result{Total: r.Total}
	var failing, passing []ledger.CaseResult
	tp := ledger.Throughput{Clock: r.Clock, Candidate: r.Candidate, Confidence: o.Confidence, TargetRel: o.TargetRel,
		DeviceState: map[string]string{}}
	if r.Baseline != "" {
		tp.Baseline = &ledger.ThroughputBaseline{Name: r.Baseline, Artifacts: r.BaselineArtifacts}
	}
	for k, v := range r.Before {
		tp.DeviceState["before."+k] = v
	}
	for k, v := range r.After {
		tp.DeviceState["after."+k] = v
	}
	type ctlCase struct {
		ID     string          `json:"id"`
		Caught bool            `json:"caught"`
		Ratio  ledger.Interval `json:"ratio"`
	}
	var ctls []ctlCase
	caught := true
	for i := range outs {
		oc := &outs[i]
		tp.Cases = append(tp.Cases, oc.Record)
		oc.Result.Note = throughputNote(r.Candidate, r.Baseline, oc.Record)
		if oc.Exact() {
			res.Exact++
			passing = append(passing, oc.Result)
		} else {
			res.Failing = append(res.Failing, oc.Case.ID)
			failing = append(failing, oc.Result)
		}
		if oc.Slowed != nil {
			ok, iv := ControlCaught(oc.Record.CandidateS, oc.Slowed, o.Confidence)
			ctls = append(ctls, ctlCase{ID: oc.Case.ID, Caught: ok, Ratio: iv})
			caught = caught && ok
		}
	}
	for _, e := range r.Errors {
		res.Failing = append(res.Failing, e.ID)
		failing = append(failing, e)
	}
	if res.Exact > res.Total {
		return nil, fmt.Errorf("%d exact cases of %d", res.Exact, res.Total)
	}
	res.Cases = append(failing, passing...)
	res.Control = ControlResult{Outcome: ledger.ControlCaught}
	if len(ctls) == 0 || !caught {
		res.Control.Outcome = ledger.ControlNotCaught
	}
	n := 0
	parts := make([]string, len(ctls))
	for i, c := range ctls {
		if c.Caught {
			n++
		}
		parts[i] = fmt.Sprintf("%s %.3f [%.3f, %.3f]", c.ID, c.Ratio.Estimate, c.Ratio.Low, c.Ratio.High)
	}
	res.Control.Summary = fmt.Sprintf("%s launched twice per product: caught on %d/%d control cases (ratio interval inside [%g, %g]): %s",
		r.Candidate, n, len(ctls), ControlLow, ControlHigh, strings.Join(parts, "; "))
	res.Control.Details = map[string]any{"slowdown": 2, "bounds": []float64{ControlLow, ControlHigh}, "cases": ctls}
	if err := tp.Validate(); err != nil {
		return nil, err
	}
	res.Details = map[string]any{
		ledger.ThroughputField: tp,
		"measure":              map[string]any{"round": o.Round, "max_samples": o.MaxSamples, "case_budget_s": o.Budget.Seconds()},
	}
	return res, nil
}
