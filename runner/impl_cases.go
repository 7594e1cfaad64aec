package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// caseSet is a lane's cases with their inputs and exact references,
// computed once per run and shared by the implementation, its original
// and the control.
type caseSet struct {
	lane  *qmvLane
	cases []qmvCase
	reqs  []*QMVRequest
	qs    [][]uint8  // unpacked weights, for the reference
	want  [][]uint32 // filled by runImplLane
}

// implSide is what one adapter produced for a lane.
type implSide struct {
	hello    AdapterHello
	answers  []Answer
	restarts int
	wall     time.Duration
}

func prepareCases(l *qmvLane) (*caseSet, error) {
	cs := &caseSet{lane: l, cases: l.cases, reqs: make([]*QMVRequest, len(l.cases)), qs: make([][]uint8, len(l.cases)), want: make([][]uint32, len(l.cases))}
	for i, c := range l.cases {
		req, q, err := buildQMVInputs(c)
		if err != nil {
			return nil, err
		}
		req.Variant = Promoted
		cs.reqs[i], cs.qs[i] = req, q
	}
	return cs, nil
}

// QMVLaneCase is one case of a qmv lane as RunImpl sends it to an
// adapter: the case id, its pattern (PatternExact, ...) and the request
// (variant Promoted) built from the lane's deterministic inputs.
type QMVLaneCase struct {
	ID      string
	Pattern string
	Req     *QMVRequest
}

// QMVLaneCases returns the cases of the qmv lane name ("name/vN" or
// "name") in lane order, with the inputs every run sends to adapters, so
// a test can model an implementation's arithmetic independently of the
// ledger's reference. It fails for an unknown lane or one that does not
// run through the adapter protocol.
func QMVLaneCases(name string) ([]QMVLaneCase, error) {
	lanes, err := implLanes([]string{name})
	if err != nil {
		return nil, err
	}
	cs, err := prepareCases(lanes[0])
	if err != nil {
		return nil, err
	}
	out := make([]QMVLaneCase, len(cs.cases))
	for i, c := range cs.cases {
		out[i] = QMVLaneCase{ID: c.ID, Pattern: c.Pattern, Req: cs.reqs[i]}
	}
	return out, nil
}

// ctlOutcome is the CPU narrow control's outcome for a lane.
type ctlOutcome struct {
	failing, missed, unexpected []string
	predicted                   int
}

// runImplLane sends the lane's cases to the adapters (pipelined, in their
// own goroutines, once wait says they started) while this goroutine
// computes the exact references and the CPU narrow control, then waits for
// the answers.
func runImplLane(ctx context.Context, cs *caseSet, r *implRunner, wait func() error, progress func(int, int)) (*implSide, *implSide, ctlOutcome, error) {
	ctl := r.o.Control
	acs := make([]adapterCase, len(cs.cases))
	for i, c := range cs.cases {
		acs[i] = adapterCase{ID: c.ID, Req: cs.reqs[i]}
	}
	type sideRes struct {
		side *implSide
		err  error
	}
	run := func(session func() *adapterSession) chan sideRes {
		ch := make(chan sideRes, 1)
		go func() {
			if err := wait(); err != nil {
				ch <- sideRes{nil, err}
				return
			}
			s := session()
			t := time.Now()
			ans, err := s.Run(ctx, acs)
			ch <- sideRes{&implSide{hello: *s.hello, answers: ans, restarts: s.restarts, wall: time.Since(t)}, err}
		}()
		return ch
	}
	mainCh := run(func() *adapterSession { return r.sess })
	var otherCh chan sideRes
	if r.orig != nil {
		otherCh = run(func() *adapterSession { return r.origSess })
	}
	var out ctlOutcome
	var refErr error
	for i, c := range cs.cases {
		if refErr = ctx.Err(); refErr != nil {
			break
		}
		want, err := referenceQMV(cs.reqs[i], cs.qs[i])
		if err != nil {
			refErr = fmt.Errorf("case %s: %w", c.ID, err)
			break
		}
		cs.want[i] = want
		nr := *cs.reqs[i]
		nr.Variant = Narrow
		ngot, nerr := ctl.QMV(ctx, &nr)
		nexact := nerr == nil && compareQMV(c.DType, want, ngot).exact
		if !nexact {
			out.failing = append(out.failing, c.ID)
		}
		pred := predictedNarrowFailure(c.DType, c.Bits, c.Pattern)
		if pred {
			out.predicted++
		}
		if pred && nexact {
			out.missed = append(out.missed, c.ID)
		} else if !pred && !nexact {
			out.unexpected = append(out.unexpected, c.ID)
		}
		if progress != nil {
			progress(i+1, len(cs.cases))
		}
	}
	m := <-mainCh
	var other *implSide
	if otherCh != nil {
		other = (<-otherCh).side
	}
	if refErr != nil {
		return nil, nil, out, refErr
	}
	return m.side, other, out, m.err
}

// implResult compares one side's answers with the references.
func implResult(cs *caseSet, side *implSide, ctl ctlOutcome) *Result {
	res := &Result{Total: len(cs.cases)}
	var failing, passing []ledger.CaseResult
	counts := map[string]int{}
	for i, c := range cs.cases {
		a := side.answers[i]
		cr := ledger.CaseResult{ID: c.ID}
		switch a.Kind {
		case AnswerOutput:
			out := compareQMV(c.DType, cs.want[i], a.Out)
			cr.Expected, cr.Got, cr.Note = out.expected, out.got, out.note
			if out.exact {
				cr.Result = "exact"
			} else {
				cr.Result = "mismatch"
			}
		case AnswerUnsupported:
			cr.Result = "unsupported"
			cr.Note = "adapter: unsupported: " + a.Text
		case AnswerError:
			cr.Result = "error"
			cr.Note = "adapter error: " + a.Text
		default:
			cr.Result = "error"
			cr.Note = a.Text
		}
		counts[cr.Result]++
		if cr.Result == "exact" {
			res.Exact++
			passing = append(passing, cr)
		} else {
			failing = append(failing, cr)
			res.Failing = append(res.Failing, c.ID)
		}
	}
	res.Cases = append(failing, passing...)
	ctr := ControlResult{Outcome: ledger.ControlCaught}
	if len(ctl.missed) > 0 || len(ctl.unexpected) > 0 {
		ctr.Outcome = ledger.ControlNotCaught
	}
	n := len(cs.cases)
	ctr.Summary = fmt.Sprintf("cpu narrow: %d/%d exact, %d failing (predicted %d); %d predicted failures not observed, %d unexpected failures",
		n-len(ctl.failing), n, len(ctl.failing), ctl.predicted, len(ctl.missed), len(ctl.unexpected))
	ctr.Details = map[string]any{
		"kernel": "backends/cpu narrow", "variant": Narrow.String(), "exact": n - len(ctl.failing), "total": n,
		"predicted_failures": ctl.predicted, "failing_cases": ctl.failing,
		"missed_predictions": ctl.missed, "unexpected_failures": ctl.unexpected,
	}
	res.Control = ctr
	res.Details = map[string]any{
		"variant_under_test": "implementation",
		"shapes":             cs.lane.shape,
		"case_results":       counts,
		"adapter_restarts":   side.restarts,
		"adapter_wall_ms":    ms(side.wall),
	}
	return res
}

// addOriginalControl folds the original build's outcome into the
// implementation's control: the original must fail exactly the predicted
// cases (and answer every case), or the control is not caught.
func addOriginalControl(res *Result, cs *caseSet, name string, side *implSide, ores *Result) {
	fails := map[string]bool{}
	for _, id := range ores.Failing {
		fails[id] = true
	}
	var missed, unexpected, errs []string
	for i, c := range cs.cases {
		pred := predictedNarrowFailure(c.DType, c.Bits, c.Pattern)
		if k := side.answers[i].Kind; k != AnswerOutput {
			errs = append(errs, c.ID)
			continue
		}
		if pred && !fails[c.ID] {
			missed = append(missed, c.ID)
		} else if !pred && fails[c.ID] {
			unexpected = append(unexpected, c.ID)
		}
	}
	ok := len(missed) == 0 && len(unexpected) == 0 && len(errs) == 0
	if !ok {
		res.Control.Outcome = ledger.ControlNotCaught
	}
	res.Control.Summary += fmt.Sprintf("; original %s: %d/%d exact, %d predicted failures not observed, %d unexpected failures, %d not answered",
		name, ores.Exact, ores.Total, len(missed), len(unexpected), len(errs))
	if d, okd := res.Control.Details.(map[string]any); okd {
		d["original"] = map[string]any{
			"implementation": name, "version": side.hello.Version, "exact": ores.Exact, "total": ores.Total,
			"failing_cases": ores.Failing, "missed_predictions": missed, "unexpected_failures": unexpected,
			"not_answered": errs, "caught": ok,
		}
	}
}
