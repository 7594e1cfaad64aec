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

// treeOf reads the tree-equivalence evidence about c's signed head, newest
// first, to the first record at the release's pins that decides
// (ledger.JudgeTreeEquivalence). It adds to res and returns why c fails,
// or "".
func (ev *evaluator) treeOf(g *Gate, c Component, res *GateResult) (string, error) {
	bl := &baselines{limit: ev.baseLim}
	var decided bool
	var failed string
	err := ev.forEachEvidence(ledger.EvidenceFilter{Lane: g.Lane, Commit: c.Head}, func(e ledger.EvidenceEntry) bool {
		if r := ev.pinMismatch(&e.Evidence, c, "head", c.Head, c.Tree, nil); r != "" {
			bl.add(e, r)
			return true
		}
		f := ledger.JudgeTreeEquivalence(&e.Evidence, c.Reviewed)
		if !f.Decides {
			bl.add(e, f.Why)
			return true
		}
		decided = true
		if f.Equal {
			r := ref(e)
			r.Summary = fmt.Sprintf("%s: head %s equals reviewed %s apart from pins", c.Name, short(c.Head), short(c.Reviewed))
			res.Satisfying = append(res.Satisfying, r)
			return false
		}
		failed = fmt.Sprintf("%s: head %s differs from reviewed %s", c.Name, short(c.Head), short(c.Reviewed))
		if len(f.Details.OutsidePins) > 0 {
			failed += " outside its pins: " + strings.Join(f.Details.OutsidePins, ", ")
		}
		bl.add(e, "shows a difference outside the pins")
		return false // the newest applicable record decides
	})
	if err != nil {
		return "", err
	}
	res.Baseline = append(res.Baseline, bl.list...)
	if !decided {
		res.Missing = append(res.Missing, fmt.Sprintf("%s evidence that %s's signed head %s equals reviewed source %s apart from its pins", g.Lane, c.Name, short(c.Head), short(c.Reviewed)))
	}
	return failed, nil
}
