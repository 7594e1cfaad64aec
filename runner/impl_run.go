package runner

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner/alloc"
)

// ImplOptions configure RunImpl.
type ImplOptions struct {
	// Lanes to run ("name/vN" or "name"); empty runs every qmv lane. The
	// qmv lanes run through AdapterProtocol; the allocator lanes, selected
	// alone, through AllocAdapterProtocol (not mixed in one call).
	Lanes []string
	// Subject is the implementation's source subject (ResolveSubject);
	// RunImpl adds the artifact pins.
	Subject ledger.Subject
	// OriginalSubject is the original build's subject; required when the
	// implementation names an original.
	OriginalSubject ledger.Subject
	// Control is the ledger's own CPU backend, whose narrow kernel is the
	// negative control of every case.
	Control Backend
	// BinaryPath is the ledger binary pinned as "bin/ledger" (empty:
	// os.Executable()).
	BinaryPath string
	// Runner identifies the runner build.
	Runner ledger.RunnerBuild
	// Stderr receives the adapters' stderr (nil: os.Stderr).
	Stderr io.Writer
	// Progress, when not nil, gets each lane's progress.
	Progress func(lane string, done, total int)
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// ImplRun is one evidence record of an implementation run: Role is "impl"
// for the implementation under test and "original" for its original
// build's negative evidence.
type ImplRun struct {
	LaneRun
	Implementation string
	Role           string
}

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

// RunImpl runs the selected qmv lanes against the configured
// implementation name through its adapter, with the narrow kernel of the
// ledger's CPU backend (o.Control) as every case's negative control and,
// when configured, the implementation's original build as a second
// control. For each lane it returns the implementation's evidence and, with
// an original, the original's evidence (Role "original").
//
// Verdict of the implementation's evidence: error when any case's answer
// failed or the adapter reported an error (timeout, crash, malformed or
// wrong-length answer), or when an artifact's digest changed during the
// run; failed when any case was not bit-exact (including cases the
// adapter declared unsupported); inconclusive when the CPU narrow kernel
// did not fail exactly the predicted cases, or the original build did not;
// passed otherwise. It fails before running anything on an unknown lane
// or implementation, a lane that is not a qmv lane, an invalid subject, a
// pin that cannot be read, or an adapter that does not start or whose hello
// contradicts the subject's commit. Cancelling ctx stops the adapters and
// the run; RunImpl then returns ctx's error (or the records of the lanes
// that finished, the cancelled one with status error, when the
// cancellation came during the last lane). RunImpl is safe for concurrent
// use with distinct options; adapters are started per call.
func RunImpl(ctx context.Context, cfg *ImplConfig, name string, o ImplOptions) ([]ImplRun, error) {
	if allocLaneNames(o.Lanes) { // the allocator lanes speak AllocAdapterProtocol
		return runAllocImpl(ctx, cfg, name, o)
	}
	r, err := newImplRunner(cfg, name, &o)
	if err != nil {
		return nil, err
	}
	defer r.close()
	// The adapters start (process, hello, subject check) while the first
	// lane's cases, exact references and CPU control are computed, so their
	// start-up costs no wall time of its own; every lane's adapter side
	// waits for it, and a start that fails fails the run before any record.
	started := make(chan struct{})
	var startErr error
	go func() {
		defer close(started)
		startErr = r.start(ctx)
	}()
	defer func() { <-started }() // before r.close: the sessions are set
	wait := func() error { <-started; return startErr }
	var outs []laneOut
	for _, l := range r.lanes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		lo := r.runLane(ctx, l, wait)
		if err := wait(); err != nil {
			return nil, err
		}
		outs = append(outs, lo)
	}
	// The pins must not have changed while the adapters ran.
	changed := changedPins(r.im, r.pins)
	if r.orig != nil {
		changed = append(changed, changedPins(r.orig, r.origPins)...)
	}
	var runs []ImplRun
	for _, lo := range outs {
		rs, err := r.evidence(lo, changed)
		if err != nil {
			return runs, err
		}
		runs = append(runs, rs...)
	}
	return runs, nil
}

// implRunner is one RunImpl call's state.
type implRunner struct {
	o              *ImplOptions
	im, orig       *Implementation
	lanes          []*qmvLane
	now            func() time.Time
	stderr         io.Writer
	common         map[string]string // bin/ledger and the control kernel's sources
	pins, origPins map[string]string // the implementations' artifacts and adapter sources
	sess, origSess *adapterSession
}

// laneOut is what one lane produced before evidence is built.
type laneOut struct {
	lane        *qmvLane
	cs          *caseSet
	start, end  time.Time
	wall        time.Duration
	main, other *implSide
	ctl         ctlOutcome
	err         error
}

// newImplRunner checks the options and pins everything pinned before the
// run.
func newImplRunner(cfg *ImplConfig, name string, o *ImplOptions) (*implRunner, error) {
	r := &implRunner{o: o, now: o.Now, stderr: o.Stderr}
	var err error
	if r.im, err = cfg.Lookup(name); err != nil {
		return nil, err
	}
	if o.Control == nil {
		return nil, fmt.Errorf("run %s: no control backend", name)
	}
	if err := o.Subject.Validate("subject."); err != nil {
		return nil, fmt.Errorf("run %s: %w", name, err)
	}
	if r.im.Original != "" {
		if r.orig, err = cfg.Lookup(r.im.Original); err != nil {
			return nil, err
		}
		if err := o.OriginalSubject.Validate("original subject."); err != nil {
			return nil, fmt.Errorf("run %s: %w", name, err)
		}
	}
	if r.lanes, err = implLanes(o.Lanes); err != nil {
		return nil, err
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.stderr == nil {
		r.stderr = os.Stderr
	}
	if r.common, err = commonPins(o.BinaryPath, o.Control); err != nil {
		return nil, err
	}
	if r.pins, err = r.im.Pins(); err != nil {
		return nil, err
	}
	if r.orig != nil {
		if r.origPins, err = r.orig.Pins(); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// implLanes resolves lane names to qmv lanes (default: both).
func implLanes(names []string) ([]*qmvLane, error) {
	if len(names) == 0 {
		names = []string{LaneQMV, LaneQMVPaths}
	}
	var lanes []*qmvLane
	for _, n := range names {
		l, err := LookupLane(n)
		if err != nil {
			return nil, err
		}
		ql, ok := l.(*qmvLane)
		if !ok {
			return nil, fmt.Errorf("lane %s does not run through the adapter protocol (only the qmv lanes do)", l.Name())
		}
		lanes = append(lanes, ql)
	}
	return lanes, nil
}

// commonPins pins the ledger binary and the control kernel's sources.
func commonPins(bin string, ctl Backend) (map[string]string, error) {
	var err error
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("run: locate the running binary: %w", err)
		}
	}
	d, err := FileDigest(bin)
	if err != nil {
		return nil, fmt.Errorf("run: hash the running binary: %w", err)
	}
	common := map[string]string{"bin/ledger": d}
	for src, b := range ctl.Sources() {
		common["backends/"+string(ctl.Name())+"/"+src] = sha256Hex(b)
	}
	return common, nil
}

// start starts the adapters and checks their hellos against the subjects.
func (r *implRunner) start(ctx context.Context) error {
	var err error
	if r.sess, err = startSession(ctx, r.im, r.o.Subject, r.o.Runner, r.stderr); err != nil {
		return err
	}
	if r.orig != nil {
		if r.origSess, err = startSession(ctx, r.orig, r.o.OriginalSubject, r.o.Runner, r.stderr); err != nil {
			return fmt.Errorf("original of %s: %w", r.im.Name, err)
		}
	}
	return nil
}

func startSession(ctx context.Context, im *Implementation, subj ledger.Subject, rb ledger.RunnerBuild, stderr io.Writer) (*adapterSession, error) {
	s := newImplSession(im, rb, stderr)
	h, err := s.Hello(ctx)
	if err == nil {
		err = checkHelloSource(h, subj)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("%s: %w", im.Name, err)
	}
	return s, nil
}

func (r *implRunner) close() {
	if r.sess != nil {
		r.sess.Close()
	}
	if r.origSess != nil {
		r.origSess.Close()
	}
}

// runLane runs one lane; wait blocks until the adapters have started and
// returns the start's error.
func (r *implRunner) runLane(ctx context.Context, l *qmvLane, wait func() error) laneOut {
	lo := laneOut{lane: l, start: r.now()}
	t0 := time.Now()
	var progress func(done, total int)
	if r.o.Progress != nil {
		progress = func(done, total int) { r.o.Progress(l.name, done, total) }
	}
	if cs, err := prepareCases(l); err != nil {
		lo.err = err
	} else {
		lo.cs = cs
		lo.main, lo.other, lo.ctl, lo.err = runImplLane(ctx, cs, r, wait, progress)
	}
	lo.wall = time.Since(t0)
	lo.end = r.now()
	return lo
}

// evidence builds a lane's records: the implementation's and, with an
// original, the original's.
func (r *implRunner) evidence(lo laneOut, changed []string) ([]ImplRun, error) {
	rb := r.o.Runner
	mk := func(im *Implementation, ev ledger.Evidence, role string) ImplRun {
		return ImplRun{LaneRun: LaneRun{Lane: lo.lane.name, Evidence: ev, Wall: lo.wall, Err: lo.err}, Implementation: im.Name, Role: role}
	}
	if lo.main == nil {
		ev, err := buildImplEvidence(lo.lane, r.im, r.o.Subject, r.common, r.pins, rb, nil, nil, lo.err, changed, "impl", lo.start, lo.end)
		if err != nil {
			return nil, err
		}
		return []ImplRun{mk(r.im, ev, "impl")}, nil
	}
	res := implResult(lo.cs, lo.main, lo.ctl)
	var origRes *Result
	if lo.other != nil {
		origRes = implResult(lo.cs, lo.other, lo.ctl)
		addOriginalControl(res, lo.cs, r.orig.Name, lo.other, origRes)
	}
	ev, err := buildImplEvidence(lo.lane, r.im, r.o.Subject, r.common, r.pins, rb, lo.main, res, lo.err, changed, "impl", lo.start, lo.end)
	if err != nil {
		return nil, err
	}
	out := []ImplRun{mk(r.im, ev, "impl")}
	if lo.other != nil {
		origRes.Details["negative_evidence_of"] = r.im.Name
		ev, err := buildImplEvidence(lo.lane, r.orig, r.o.OriginalSubject, r.common, r.origPins, rb, lo.other, origRes, lo.err, changed, "original", lo.start, lo.end)
		if err != nil {
			return nil, err
		}
		out = append(out, mk(r.orig, ev, "original"))
	}
	return out, nil
}

func newImplSession(im *Implementation, rb ledger.RunnerBuild, stderr io.Writer) *adapterSession {
	spec := im.Spec()
	spec.Stderr = stderr
	spec.LedgerVersion = rb.Version
	return newAdapterSession(spec)
}

// checkHelloSource refuses an adapter whose claimed source is the
// subject's repository at another commit.
func checkHelloSource(h AdapterHello, s ledger.Subject) error {
	if h.Source == nil || h.Source.Commit == "" || h.Source.Repository == "" {
		return nil
	}
	if ledger.NormalizeRepository(h.Source.Repository) != ledger.NormalizeRepository(s.Repository) {
		return nil
	}
	if h.Source.Commit != s.Commit {
		return fmt.Errorf("the adapter reports commit %s of %s, the subject names %s", clipText(h.Source.Commit), s.Repository, s.Commit)
	}
	return nil
}

func changedPins(im *Implementation, before map[string]string) []string {
	after, err := im.Pins()
	var out []string
	for _, k := range sortedKeys(before) {
		if err != nil || after[k] != before[k] {
			out = append(out, im.Name+":"+k)
		}
	}
	return out
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

// implDevice is the evidence's device: the adapter's hello.
func implDevice(h AdapterHello) ledger.Device {
	d := h.Device
	d.Attrs = map[string]string{}
	for k, v := range h.Device.Attrs {
		d.Attrs[k] = v
	}
	for k, v := range h.Runtime {
		d.Attrs["runtime."+k] = v
	}
	d.Attrs["implementation"] = h.Implementation
	d.Attrs["implementation.version"] = h.Version
	d.Attrs["adapter.protocol"] = h.Protocol
	if h.Source != nil {
		if h.Source.Repository != "" {
			d.Attrs["source.repository"] = h.Source.Repository
		}
		if h.Source.Commit != "" {
			d.Attrs["source.commit"] = h.Source.Commit
		}
	}
	return d
}

// buildImplEvidence builds one implementation evidence record.
func buildImplEvidence(l *qmvLane, im *Implementation, subj ledger.Subject, common, pins map[string]string, rb ledger.RunnerBuild,
	side *implSide, res *Result, runErr error, changed []string, role string, start, end time.Time) (ledger.Evidence, error) {
	arts := map[string]string{}
	for k, v := range common {
		arts[k] = v
	}
	for k, v := range pins {
		arts[k] = v
	}
	b := &implBackend{name: im.Backend}
	if side != nil {
		b.device = implDevice(side.hello)
	}
	errored := 0
	if res != nil {
		res.Details["implementation"] = im.Name
		res.Details["role"] = role
		res.Details["adapter_command"] = im.Command
		if runErr != nil {
			res.Details["error"] = runErr.Error()
		}
		if len(changed) > 0 {
			res.Details["artifacts_changed"] = changed
		}
		if c, ok := res.Details["case_results"].(map[string]int); ok {
			errored = c["error"]
		}
		runErr = nil
	}
	ev, err := BuildEvidence(l, b, subj, arts, rb, res, runErr, start, end)
	if err != nil {
		return ev, err
	}
	if res != nil && (errored > 0 || len(changed) > 0 || ev.Status == ledger.StatusPassed && res.Details["error"] != nil) {
		ev.Status = ledger.StatusError
		ev.Normalize()
		if err := ev.Validate(); err != nil {
			return ev, err
		}
	}
	return ev, nil
}

// implBackend carries an implementation's backend name and device into
// BuildEvidence; it runs nothing.
type implBackend struct {
	name   ledger.Backend
	device ledger.Device
}

var errImplBackend = fmt.Errorf("an external implementation runs only through its adapter")

func (b *implBackend) Name() ledger.Backend                          { return b.name }
func (b *implBackend) Device() ledger.Device                         { return b.device }
func (b *implBackend) Alloc(int) (alloc.Buffer, error)               { return alloc.Buffer{}, errImplBackend }
func (b *implBackend) Free(alloc.Buffer) error                       { return errImplBackend }
func (b *implBackend) QMV(context.Context, *QMVRequest) (Vec, error) { return Vec{}, errImplBackend }
func (b *implBackend) Sources() map[string][]byte                    { return nil }
func (b *implBackend) Close() error                                  { return nil }
