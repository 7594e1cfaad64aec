package gates

import (
	"fmt"
	"slices"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
)

// KindLane is the kind of gates over runs of one lane on listed backends.
const KindLane = "lane"

var laneKind = kindSpec{
	name:   KindLane,
	fields: []string{"lane", "component", "at", "backends", "all_backends", "artifacts", "min_runs", "freshness", "cases", "signed_by", "runner", "agent_labels"},
	validate: func(g *Gate, f string) error {
		if len(g.Backends) == 0 {
			return ledger.FieldError(f+".backends", "lane gates list the backends whose runs count")
		}
		return nil
	},
	evaluate: (*evaluator).lane,
	rule: "At the pins, any run with status failed keeps the gate failed until superseded or waived; " +
		"otherwise runs on the listed backends that are clean, all cases exact (and as many as cases, when set), " +
		"control caught and fresh (measured from the earlier of finished_at and when the log recorded it) count toward min_runs, " +
		"each run once: a record repeating an earlier one (the same DSSE payload by the same signer key, or the same evidence apart from recorded_by) is a duplicate. " +
		"Inconclusive, error, partial and duplicate runs are baseline.",
}

// laneTally is what the runs of a lane at a gate's commit show.
type laneTally struct {
	perBackend map[string]int
	failing    []FailingRef // newest first
	// duplicates counts the records that repeat a counted or excluded
	// run (runSet); they are baseline.
	duplicates int
}

// laneCandidate is a record a lane gate read, with why it does not count
// ("" when that depends on its backend, quality and duplicates).
type laneCandidate struct {
	e   ledger.EvidenceEntry
	why string
	run bool // registered in the run set
}

// laneCandidates reads every record of g's lane at b's commit, each with
// why its pins, claim, signer or a supersede excludes it, and registers
// the records at the pins whose signer the gate accepts as runs
// (superseded ones too: a copy of a retracted run must not count in its
// place), so that each run counts once, in its first record, whichever
// copy is read first.
func (ev *evaluator) laneCandidates(g *Gate, b binding) ([]laneCandidate, *runSet, error) {
	var cands []laneCandidate
	runs := newRunSet()
	err := ev.forEachEvidence(ledger.EvidenceFilter{Lane: g.Lane, Commit: b.commit}, func(e ledger.EvidenceEntry) bool {
		why := ev.pinMismatch(&e.Evidence, b)
		if why == "" {
			why = laneClaim(&e.Evidence)
		}
		run := false
		if why == "" {
			why = ev.signerMismatch(e.ID, &e.Evidence, g)
			run = why == ""
			if r, ok := ev.supersededBy(e.ID); ok {
				why = r
			}
		}
		cands = append(cands, laneCandidate{e, why, run})
		return true
	})
	// Registered from the slice, once it is read: the callback's record
	// then does not escape to the heap.
	for i := range cands {
		if cands[i].run {
			runs.add(&cands[i].e)
		}
	}
	return cands, runs, err
}

func (ev *evaluator) lane(g *Gate) (GateResult, error) {
	var res GateResult
	b := ev.bindingOf(g)
	bl := &baselines{limit: ev.baseLim}
	t := laneTally{perBackend: map[string]int{}}
	cands, runs, err := ev.laneCandidates(g, b)
	if err != nil {
		return res, err
	}
	for _, c := range cands {
		e := c.e
		if c.why != "" {
			bl.add(e, c.why)
			continue
		}
		if d := runs.duplicate(&e); d != "" {
			bl.add(e, d)
			t.duplicates++
			continue
		}
		if !slices.Contains(g.Backends, string(e.Evidence.Backend)) {
			bl.add(e, fmt.Sprintf("other backend %s (gate counts %s)", e.Evidence.Backend, strings.Join(g.Backends, ", ")))
			continue
		}
		r, failed := ev.quality(&e, g, true)
		switch {
		case failed:
			if len(t.failing) < 50 {
				t.failing = append(t.failing, FailingRef{EvidenceRef: ref(e), Reason: r})
			}
		case r != "":
			bl.add(e, r)
		default:
			t.perBackend[string(e.Evidence.Backend)]++
			if len(res.Satisfying) < 50 {
				res.Satisfying = append(res.Satisfying, ref(e))
			}
		}
	}
	if err := ev.sampleBaseline(g.Lane, b, bl, nil); err != nil {
		return res, err
	}
	res.Baseline = bl.list
	what := fmt.Sprintf("run of %s at %s %s %s", g.Lane, b.comp.Name, atName(g.At), short(b.commit))
	if len(b.required) > 0 {
		what += " with " + ev.artifactList(b.required)
	}
	laneVerdict(&res, g, t, what, len(bl.list)+bl.more)
	return res, nil
}

// laneVerdict sets res's state, reason and missing runs from the tally;
// what names a run that would count, others is the number of runs that do
// not count.
func laneVerdict(res *GateResult, g *Gate, t laneTally, what string, others int) {
	minRuns := max(g.MinRuns, 1)
	total := 0
	for _, b := range g.Backends {
		total += t.perBackend[b]
	}
	switch {
	case len(t.failing) > 0:
		f := t.failing[0]
		res.State, res.Failing = StateFailed, t.failing
		res.Reason = fmt.Sprintf("%d run(s) at the release's pins failed (each keeps the gate failed until superseded or waived); newest %s on %s: %s", len(t.failing), f.ID, f.Backend, f.Reason)
		return
	case g.AllBackends:
		for _, b := range g.Backends {
			if n := t.perBackend[b]; n < minRuns {
				res.Missing = append(res.Missing, fmt.Sprintf("%d more passing %s on %s (clean, all cases exact, control caught)", minRuns-n, what, b))
			}
		}
		if len(res.Missing) == 0 {
			res.State, res.Reason = StatePassed, fmt.Sprintf("%d passing run(s) at the release's pins on every listed backend (%s; min %d each)", total, strings.Join(g.Backends, ", "), minRuns)+dupNote(t.duplicates)
			return
		}
		var have []string
		for _, b := range g.Backends {
			have = append(have, fmt.Sprintf("%s %d/%d", b, t.perBackend[b], minRuns))
		}
		res.Reason = fmt.Sprintf("passing runs at the release's pins per backend: %s (every listed backend needs %d)", strings.Join(have, ", "), minRuns)
	case total >= minRuns:
		res.State, res.Reason = StatePassed, fmt.Sprintf("%d passing run(s) at the release's pins (min %d)", total, minRuns)+dupNote(t.duplicates)
		return
	default:
		res.Missing = append(res.Missing, fmt.Sprintf("%d more passing %s on %s (clean, all cases exact, control caught)", minRuns-total, what, strings.Join(g.Backends, " or ")))
		res.Reason = fmt.Sprintf("%d of %d required passing run(s) at the release's pins", total, minRuns)
	}
	res.State = StateOpen
	if others > 0 {
		res.Reason += fmt.Sprintf("; %d other run(s) of the lane do not count (see baseline)", others)
	}
	res.Reason += dupNote(t.duplicates)
}

// dupNote is the part of a lane gate's reason that says how many records
// were not counted as repeats of another record's run.
func dupNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d duplicate record(s) of one run not counted again", n)
}
