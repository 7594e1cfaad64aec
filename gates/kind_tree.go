package gates

import (
	"fmt"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
)

// KindTreeEquivalence is the kind of gates over tree-equivalence evidence
// (ledger.TreeEquivalence): each signed head equals its reviewed source
// apart from the component's pins.
const KindTreeEquivalence = "tree-equivalence"

// DefaultTreeEquivalenceLane is the lane of a tree-equivalence gate that
// names none.
const DefaultTreeEquivalenceLane = ledger.TreeEquivalenceLane

var treeEquivalenceKind = kindSpec{
	name:        KindTreeEquivalence,
	fields:      []string{"components", "lane"},
	defaultLane: DefaultTreeEquivalenceLane,
	evaluate:    (*evaluator).treeEquivalence,
	rule: "Per component, only tree checks the server computed at the signed head (and its tree pin) against the reviewed source count, " +
		"and only those computed at the component's current pins for this release and component (a check at other pins, or for another release, is baseline); " +
		"posted claims are baseline. Any computed check showing a path that differs outside the pins keeps the gate failed until superseded or waived; " +
		"otherwise a computed check finding them equal passes. A head that is the reviewed commit needs none.",
}

func (ev *evaluator) treeEquivalence(g *Gate) (GateResult, error) {
	var res GateResult
	var failed []string
	comps := ev.components(g)
	for _, c := range comps {
		if c.Head == c.Reviewed {
			res.Satisfying = append(res.Satisfying, EvidenceRef{Summary: c.Name + ": the signed head is the reviewed commit"})
			continue
		}
		why, err := ev.treeOf(g, c, &res)
		if err != nil {
			return res, err
		}
		if why != "" {
			failed = append(failed, why)
		}
	}
	n := len(comps)
	switch {
	case len(failed) > 0:
		res.State, res.Reason = StateFailed, strings.Join(failed, "; ")
	case len(res.Missing) > 0:
		res.State, res.Reason = StateOpen, fmt.Sprintf("%d of %d components shown tree-equivalent; %d without evidence", n-len(res.Missing), n, len(res.Missing))
	default:
		res.State, res.Reason = StatePassed, fmt.Sprintf("all %d signed heads equal their reviewed sources apart from pins", n)
	}
	return res, nil
}

// treeOf reads every tree-equivalence record about c's signed head. Those
// at other pins, claims (treeClaim), superseded ones, those comparing
// against another commit and those computed at other path pins or for
// another release or component (ledger.TreeEquivalence.BindingMismatch)
// are baseline; of the rest, any that shows a
// difference outside the pins fails c (CountingRule), else an equal one
// satisfies it. It adds to res and returns why c fails, or "".
func (ev *evaluator) treeOf(g *Gate, c Component, res *GateResult) (string, error) {
	bl := &baselines{limit: ev.baseLim}
	b := headBinding(c)
	var equal *ledger.EvidenceEntry
	var failing []FailingRef
	var outside []string
	err := ev.forEachEvidence(ledger.EvidenceFilter{Lane: g.Lane, Commit: c.Head}, func(e ledger.EvidenceEntry) bool {
		if r := ev.excluded(&e, b); r != "" {
			bl.add(e, r)
			return true
		}
		if r := treeClaim(&e.Evidence); r != "" {
			bl.add(e, r)
			return true
		}
		f := ledger.JudgeTreeEquivalence(&e.Evidence, c.Reviewed)
		if f.Decides {
			if r := f.Details.BindingMismatch(ev.rel.Version, c.Name, c.Pins); r != "" {
				bl.add(e, r)
				return true
			}
		}
		switch {
		case !f.Decides:
			bl.add(e, f.Why)
		case f.Equal:
			if equal == nil {
				equal = &e
			}
		default:
			r := "shows a difference outside the pins"
			if len(f.Details.OutsidePins) > 0 {
				r += ": " + strings.Join(f.Details.OutsidePins, ", ")
				if outside == nil {
					outside = f.Details.OutsidePins
				}
			}
			failing = append(failing, FailingRef{EvidenceRef: ref(e), Reason: r})
		}
		return true
	})
	if err != nil {
		return "", err
	}
	res.Baseline = append(res.Baseline, bl.list...)
	switch {
	case len(failing) > 0:
		res.Failing = append(res.Failing, failing...)
		why := fmt.Sprintf("%s: head %s differs from reviewed %s", c.Name, short(c.Head), short(c.Reviewed))
		if len(outside) > 0 {
			why += " outside its pins: " + strings.Join(outside, ", ")
		}
		return why, nil
	case equal != nil:
		r := ref(*equal)
		r.Summary = fmt.Sprintf("%s: head %s equals reviewed %s apart from pins (computed by the server)", c.Name, short(c.Head), short(c.Reviewed))
		res.Satisfying = append(res.Satisfying, r)
	default:
		res.Missing = append(res.Missing, fmt.Sprintf("a server-computed %s check that %s's signed head %s equals reviewed source %s apart from its pins", g.Lane, c.Name, short(c.Head), short(c.Reviewed)))
	}
	return "", nil
}
