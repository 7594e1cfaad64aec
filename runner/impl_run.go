package runner

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// ImplOptions configure RunImpl.
type ImplOptions struct {
	// Lanes to run ("name/vN" or "name"); empty runs every qmv lane. The
	// qmv lanes run through AdapterProtocol; the allocator lanes, selected
	// alone, through AllocAdapterProtocol (not mixed in one call);
	// ThroughputLane, selected alone, through the timing frames
	// (impl_throughput.go).
	Lanes []string
	// Cases selects the throughput lane's cases by id (path.Match globs,
	// "batch1/n4096/*/float16/b4/g64"); empty selects all of
	// ThroughputCases. Other lanes ignore it.
	Cases []string
	// CaseBudget caps the wall time of one throughput case's measurement
	// (0: Measure's 5 s); MaxSamples caps the samples per side of a case
	// (0: Measure's 200; at most ledger.MaxThroughputSamples).
	CaseBudget time.Duration
	MaxSamples int
	// Subject is the implementation's source subject (ResolveSubject);
	// RunImpl adds the artifact pins.
	Subject ledger.Subject
	// OriginalSubject is the original build's subject; required when the
	// implementation names an original.
	OriginalSubject ledger.Subject
	// Control is the ledger's own CPU backend, whose narrow kernel is the
	// negative control of every case (not used by the throughput lane,
	// whose control is the candidate launched twice per product).
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

// RunImpl runs the selected qmv lanes (or, selected alone, the allocator
// lanes or ThroughputLane: runImplThroughput) against the configured
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
	for _, l := range o.Lanes {
		if isThroughputLane(l) { // timed through the adapters' timing frames
			if len(o.Lanes) != 1 {
				return nil, fmt.Errorf("lane %s runs alone: select it without other lanes", ThroughputLane)
			}
			return runImplThroughput(ctx, cfg, name, o)
		}
	}
	if allocLaneNames(o.Lanes) { // the allocator lanes speak AllocAdapterProtocol
		return runAllocImpl(ctx, cfg, name, o)
	}
	if o.Control == nil {
		return nil, fmt.Errorf("run %s: no control backend", name)
	}
	r, err := newImplRunner(cfg, name, &o)
	if err != nil {
		return nil, err
	}
	if r.lanes, err = implLanes(o.Lanes); err != nil {
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
// run (the lanes are the caller's to set).
func newImplRunner(cfg *ImplConfig, name string, o *ImplOptions) (*implRunner, error) {
	r := &implRunner{o: o, now: o.Now, stderr: o.Stderr}
	var err error
	if r.im, err = cfg.Lookup(name); err != nil {
		return nil, err
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

// commonPins pins the ledger binary and the control kernel's sources (none
// when ctl is nil).
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
	if ctl == nil {
		return common, nil
	}
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
