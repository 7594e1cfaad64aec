package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner/alloc"
)

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
