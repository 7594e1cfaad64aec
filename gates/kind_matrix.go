package gates

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
)

// KindMatrix is the kind of gates over a matrix of dimension values: every
// combination has passing evidence whose details carry those values.
const KindMatrix = "matrix"

var matrixKind = kindSpec{
	name:     KindMatrix,
	fields:   []string{"lane", "component", "at", "artifacts", "dimensions", "signed_by", "runner", "agent_labels"},
	validate: validateMatrix,
	evaluate: (*evaluator).matrix,
	rule: "Per cell, every run at the pins whose details carry the cell's values counts: " +
		"any run with status failed keeps the cell, and the gate, failed until superseded or waived; " +
		"otherwise the gate passes when every cell has a passing run (clean, all cases exact).",
}

// validateMatrix checks the dimensions: at least one, distinct names, each
// with values, at most 4096 cells.
func validateMatrix(g *Gate, f string) error {
	if len(g.Dimensions) == 0 {
		return ledger.FieldError(f+".dimensions", "list at least one dimension")
	}
	cells := 1
	seen := map[string]bool{}
	for j, d := range g.Dimensions {
		if !roleRe.MatchString(d.Name) || seen[d.Name] {
			return ledger.FieldError(fmt.Sprintf("%s.dimensions[%d].name", f, j), "dimension names must be distinct, 1-64 of [A-Za-z0-9._-], got %q", d.Name)
		}
		seen[d.Name] = true
		if len(d.Values) == 0 {
			return ledger.FieldError(fmt.Sprintf("%s.dimensions[%d].values", f, j), "list at least one value")
		}
		cells *= len(d.Values)
		if cells > 4096 {
			return ledger.FieldError(fmt.Sprintf("%s.dimensions[%d]", f, j), "the matrix has more than 4096 cells")
		}
	}
	return nil
}

func (ev *evaluator) matrix(g *Gate) (GateResult, error) {
	var res GateResult
	b := ev.bindingOf(g)
	comp, commit := b.comp, b.commit
	passing := map[string]ledger.EvidenceEntry{}
	failing := map[string][]ledger.EvidenceEntry{}
	bl := &baselines{limit: ev.baseLim}
	err := ev.forEachEvidence(ledger.EvidenceFilter{Lane: g.Lane, Commit: commit}, func(e ledger.EvidenceEntry) bool {
		if r := ev.excluded(&e, b); r != "" {
			bl.add(e, r)
			return true
		}
		if r := ev.signerMismatch(e.ID, &e.Evidence, g); r != "" {
			bl.add(e, r)
			return true
		}
		var d map[string]any
		if len(e.Evidence.Details) > 0 && json.Unmarshal(e.Evidence.Details, &d) != nil {
			bl.add(e, "details are not a JSON object")
			return true
		}
		key := make([]string, len(g.Dimensions))
		for i, dim := range g.Dimensions {
			v, ok := d[dim.Name]
			var s string
			switch {
			case ok:
				s = fmt.Sprint(v)
			case dim.Name == "backend":
				s = string(e.Evidence.Backend)
			default:
				bl.add(e, fmt.Sprintf("details carry no %q value", dim.Name))
				return true
			}
			if !slices.Contains(dim.Values, s) {
				return true // a cell outside this matrix
			}
			key[i] = dim.Name + "=" + s
		}
		k := strings.Join(key, " ")
		r, failed := ev.quality(&e, g, false)
		switch {
		case failed:
			failing[k] = append(failing[k], e)
		case r != "":
			bl.add(e, k+": "+r)
		default:
			if _, ok := passing[k]; !ok {
				passing[k] = e
			}
		}
		return true
	})
	if err != nil {
		return res, err
	}
	if err := ev.sampleBaseline(g.Lane, b, bl, nil); err != nil {
		return res, err
	}
	var failedCells []string
	total := 0
	eachCell(g.Dimensions, func(cell string) {
		total++
		if fs := failing[cell]; len(fs) > 0 {
			e := fs[0]
			failedCells = append(failedCells, fmt.Sprintf("%s (%s: %d/%d exact)", cell, e.ID, e.Evidence.CasesExact, e.Evidence.CasesTotal))
			for _, f := range fs {
				if len(res.Failing) < 200 {
					r := ref(f)
					r.Summary = cell + ": " + r.Summary
					res.Failing = append(res.Failing, FailingRef{EvidenceRef: r, Reason: fmt.Sprintf("cell %s failed at the release's pins: %d/%d exact", cell, f.Evidence.CasesExact, f.Evidence.CasesTotal)})
				}
			}
			return
		}
		if e, ok := passing[cell]; ok {
			r := ref(e)
			r.Summary = cell + ": " + r.Summary
			res.Satisfying = append(res.Satisfying, r)
			return
		}
		if len(res.Missing) < 200 {
			res.Missing = append(res.Missing, cell)
		} else if len(res.Missing) == 200 {
			res.Missing = append(res.Missing, "… more cells")
		}
	})
	res.Baseline = bl.list
	missing := total - len(res.Satisfying) - len(failedCells)
	switch {
	case len(failedCells) > 0:
		res.State, res.Reason = StateFailed, fmt.Sprintf("%d cell(s) failed at the release's pins: %s", len(failedCells), strings.Join(failedCells, "; "))
	case missing > 0:
		res.State, res.Reason = StateOpen, fmt.Sprintf("%d of %d cells have passing evidence at %s %s; %d missing", len(res.Satisfying), total, comp.Name, short(commit), missing)
	default:
		res.State, res.Reason = StatePassed, fmt.Sprintf("all %d cells have passing evidence", total)
	}
	return res, nil
}

// eachCell calls fn with "a=x b=y ..." for every combination of dims, in
// declaration order.
func eachCell(dims []Dimension, fn func(string)) {
	idx := make([]int, len(dims))
	for {
		parts := make([]string, len(dims))
		for i, d := range dims {
			parts[i] = d.Name + "=" + d.Values[idx[i]]
		}
		fn(strings.Join(parts, " "))
		i := len(dims) - 1
		for ; i >= 0; i-- {
			idx[i]++
			if idx[i] < len(dims[i].Values) {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			return
		}
	}
}
