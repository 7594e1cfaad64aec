package runner

import (
	"context"
	"errors"
	"fmt"

	"github.com/evidence-ledger/ledger/ledger"
)

var extInvariants = []string{
	"active + cache == raw bytes held (when the reading has cache and the traffic is closed: raw measured quiescent before and after, equal, no fresh buffer)",
	"active <= reserved (when the reading has reserved)",
	"peak >= active (when the reading has peak; no reset during the observation)",
}

// checkReading returns the first invariant a reading violates, "" if none.
func checkReading(f map[string]int, r []int64, raw int64) string {
	get := func(k string) (int64, bool) {
		i, ok := f[k]
		if !ok || i >= len(r) {
			return 0, false
		}
		return r[i], true
	}
	a, okA := get("active")
	if c, ok := get("cache"); ok && okA && raw >= 0 && a+c != raw {
		return fmt.Sprintf("active %d + cache %d = %d, raw bytes held %d", a, c, a+c, raw)
	}
	if v, ok := get("reserved"); ok && okA && a > v {
		return fmt.Sprintf("active %d > reserved %d", a, v)
	}
	if p, ok := get("peak"); ok && okA && p < a {
		return fmt.Sprintf("peak %d < active %d", p, a)
	}
	return ""
}

// ObservationVerdict is the ledger's reading of one observation.
type ObservationVerdict struct {
	Readings   int      `json:"readings"`
	Violations int      `json:"violations"`
	Bad        []int    `json:"-"`
	Examples   []string `json:"examples,omitempty"`
	// Raw is the raw bytes held (quiescent active + cache) when the
	// traffic was closed (equal before and after, no fresh buffer), else -1.
	Raw        int64  `json:"raw"`
	MutatorOps int    `json:"mutator_ops"`
	Valid      bool   `json:"valid"`
	Why        string `json:"why,omitempty"`
}

// JudgeObservation applies the invariants to an adapter's observation.
// minOps is the number of mutator operations the readings must have
// overlapped. Valid says whether the observation raced real traffic (enough
// operations, not stalled, and, where cache is read, a closed traffic).
func JudgeObservation(o *AllocObservation, minOps int) ObservationVerdict {
	f := map[string]int{}
	for i, k := range o.Fields {
		f[k] = i
	}
	v := ObservationVerdict{Readings: len(o.Readings), Raw: -1, MutatorOps: o.MutatorOps, Valid: true}
	if _, hasCache := f["cache"]; hasCache {
		qb, qa := o.QuiescentBefore, o.QuiescentAfter
		rb, ra := qb["active"]+qb["cache"], qa["active"]+qa["cache"]
		if rb == ra && o.FreshBuffers == 0 && qb != nil && qa != nil {
			v.Raw = rb
		} else {
			v.Valid, v.Why = false, fmt.Sprintf("traffic not closed: raw bytes %d before, %d after, %d fresh buffers", rb, ra, o.FreshBuffers)
		}
	}
	if o.Stalled {
		v.Valid, v.Why = false, "traffic stalled"
	}
	if o.MutatorOps < minOps {
		v.Valid, v.Why = false, fmt.Sprintf("only %d mutator operations during the readings, fewer than %d", o.MutatorOps, minOps)
	}
	for i, r := range o.Readings {
		if msg := checkReading(f, r, v.Raw); msg != "" {
			v.Violations++
			v.Bad = append(v.Bad, i)
			if len(v.Examples) < 10 {
				v.Examples = append(v.Examples, fmt.Sprintf("reading %d: %s", i, msg))
			}
		}
	}
	return v
}

// extTraffic is the observe request of both phases.
func extTraffic(mode string, readings int, rules *RuntimeAllocRules) AllocRequest {
	sizes := []int{}
	mut := 4
	for m := 0; m < mut; m++ {
		if rules == PyTorchCUDARules {
			// Large-pool requests of whole 2 MiB segments (>= 10 MiB): with
			// the cache emptied, reserved tracks allocated tightly.
			sizes = append(sizes, (6+m)*ptRoundLarge)
		} else {
			// Sizes far apart (beyond each other's reuse window).
			sizes = append(sizes, (m+1)*64*1024+8*m)
		}
	}
	return AllocRequest{Op: "observe", Mode: mode, Readings: readings, Mutators: mut, Sizes: sizes, Live: 4, MinOps: max(1, readings/10)}
}

// runExtSnapshot is alloc-snapshot/v1 against an adapter.
func runExtSnapshot(ctx context.Context, s *allocSession, info *AllocInfo, rules *RuntimeAllocRules, count int) (*Result, error) {
	minOps := max(1, count/10)
	res := &Result{Total: count}
	var coh AllocObservation
	err := s.do(ctx, extTraffic("coherent", count, rules), &coh)
	var unsup *allocUnsupported
	details := map[string]any{"rules": rules.Name, "counters": info.Counters, "coherent_call": info.Coherent, "independent_calls": info.Independent, "readings": count}
	switch {
	case errors.As(err, &unsup):
		res.Failing = []string{"snapshot/*"}
		res.Cases = []ledger.CaseResult{{ID: "snapshot/*", Result: "unsupported",
			Note: "the runtime offers no coherent snapshot, so no reading can pass: " + unsup.reason}}
		details["coherent"] = "unsupported: " + unsup.reason
	case err != nil:
		return nil, err
	default:
		v := JudgeObservation(&coh, minOps)
		if len(coh.Readings) != count {
			return nil, fmt.Errorf("observe coherent: %d readings, asked for %d", len(coh.Readings), count)
		}
		res.Exact = count - v.Violations
		for i, idx := range v.Bad {
			id := fmt.Sprintf("snapshot/%05d", idx)
			res.Failing = append(res.Failing, id)
			if i < 100 {
				res.Cases = append(res.Cases, ledger.CaseResult{ID: id, Result: "mismatch", Note: "incoherent reading"})
			}
		}
		details["coherent"] = v
		if !v.Valid {
			details["coherent_traffic"] = v.Why
		}
	}
	var cv ObservationVerdict
	round := 0
	for round = 1; round <= controlRounds; round++ {
		var o AllocObservation
		if err := s.do(ctx, extTraffic("independent", count, rules), &o); err != nil {
			return nil, fmt.Errorf("control: %w", err)
		}
		if len(o.Readings) != count && !o.Stalled {
			return nil, fmt.Errorf("observe independent: %d readings, asked for %d", len(o.Readings), count)
		}
		cv = JudgeObservation(&o, minOps)
		if cv.Valid && cv.Violations > 0 {
			break
		}
	}
	round = min(round, controlRounds)
	ctl := ControlResult{Outcome: ledger.ControlCaught, Details: map[string]any{"rounds": round, "last": cv}}
	ctl.Summary = fmt.Sprintf("independent reads (%s): %d of %d readings incoherent under %d mutator operations (round %d of at most %d)",
		info.Independent, cv.Violations, cv.Readings, cv.MutatorOps, round, controlRounds)
	if !cv.Valid || cv.Violations == 0 {
		ctl.Outcome = ledger.ControlNotCaught
		if cv.Why != "" {
			ctl.Summary += "; " + cv.Why
		} else {
			ctl.Summary += " (the traffic did not race: inconclusive)"
		}
	}
	res.Control = ctl
	res.Details = details
	return res, nil
}
