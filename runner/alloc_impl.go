package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// allocLaneNames reports whether names select only allocator lanes (and
// at least one).
func allocLaneNames(names []string) bool {
	if len(names) == 0 {
		return false
	}
	for _, n := range names {
		l, err := LookupLane(n)
		if err != nil || (l.Name() != LaneAllocSnap && l.Name() != LaneAllocFoot) {
			return false
		}
	}
	return true
}

// runAllocImpl runs alloc-snapshot/v1 and alloc-footprint/v1 against the
// implementation's allocator through AllocAdapterProtocol, one adapter
// process per lane (a lane may leave the runtime's counters off: the
// footprint lane's refused request). The verdict of each record is
// computed here from the adapter's readings (JudgeObservation, the
// footprint cases); an adapter that does not speak the protocol fails the
// run before any record.
func runAllocImpl(ctx context.Context, cfg *ImplConfig, name string, o ImplOptions) ([]ImplRun, error) {
	im, err := cfg.Lookup(name)
	if err != nil {
		return nil, err
	}
	if err := o.Subject.Validate("subject."); err != nil {
		return nil, fmt.Errorf("run %s: %w", name, err)
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	arts := map[string]string{}
	if o.Control != nil {
		if arts, err = commonPins(o.BinaryPath, o.Control); err != nil {
			return nil, err
		}
	}
	pins, err := im.Pins()
	if err != nil {
		return nil, err
	}
	for k, v := range pins {
		arts[k] = v
	}
	spec := newImplSession(im, o.Runner, o.Stderr).spec
	var runs []ImplRun
	for _, ln := range o.Lanes {
		l, _ := LookupLane(ln)
		lane := extAllocLane{name: l.Name()}
		start, t0 := now(), time.Now()
		s, err := startAllocSession(ctx, spec)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", im.Name, err)
		}
		hello := s.p.hello
		res, rerr := func() (*Result, error) {
			var info AllocInfo
			if err := s.do(ctx, AllocRequest{Op: "info"}, &info); err != nil {
				return nil, err
			}
			rules, err := RuntimeRulesFor(info.Rules)
			if err != nil {
				return nil, err
			}
			if lane.name == LaneAllocSnap {
				return runExtSnapshot(ctx, s, &info, rules, DefaultSnapshots)
			}
			return runExtFootprint(ctx, s, &info, rules)
		}()
		s.close()
		if rerr != nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if res != nil {
			res.Details["implementation"] = im.Name
			res.Details["adapter_command"] = im.Command
			res.Details["adapter_protocol"] = AllocAdapterProtocol
		}
		changed := changedPins(im, pins)
		ev, err := BuildEvidence(lane, &implBackend{name: im.Backend, device: implDevice(hello)}, o.Subject, arts, o.Runner, res, rerr, start, now())
		if err != nil {
			return runs, err
		}
		if len(changed) > 0 {
			ev.Status = ledger.StatusError
			ev.Normalize()
		}
		runs = append(runs, ImplRun{LaneRun: LaneRun{Lane: lane.name, Evidence: ev, Wall: time.Since(t0), Err: rerr}, Implementation: im.Name, Role: "impl"})
	}
	return runs, nil
}
