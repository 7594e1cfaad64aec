package runs_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runs"
)

var testCaseLanes = runs.CaseLanes{"qmv-throughput/v1": {"batch1/n4096/k4096/f16/b4/g64", "batch1/n4096/k4096/f32/b4/g64", "batch2/n8192/k8192/f16/b2/g64"}}

// TestCaseSelectionStored: a run's case selection is stored with it and
// comes back from Get, List, a claim (what an agent's lease carries) and
// the outcome leaf body; a run without one has none.
func TestCaseSelectionStored(t *testing.T) {
	rs, _ := open(t)
	ctx := context.Background()
	sel := ledger.CaseSelection{Cases: []string{"batch1/n4096/k4096/f32/b4/g64"}, CaseBudget: "1s", MaxSamples: 20}
	spec := runs.Spec{Lanes: []string{"qmv-throughput/v1"}, Backend: ledger.BackendCPU, CaseSelection: sel}
	if err := spec.CheckCases(testCaseLanes); err != nil {
		t.Fatal(err)
	}
	r := queue(t, rs, spec)
	plain := queue(t, rs, runs.Spec{Lanes: []string{"alloc-footprint/v1"}, Backend: ledger.BackendCPU, Labels: map[string]string{"gpu": "x"}})
	same := func(where string, got ledger.CaseSelection) {
		t.Helper()
		if !slices.Equal(got.Cases, sel.Cases) || got.CaseBudget != sel.CaseBudget || got.MaxSamples != sel.MaxSamples {
			t.Fatalf("%s: selection %+v, want %+v", where, got, sel)
		}
	}
	got, err := rs.Get(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	same("get", got.CaseSelection)
	list, err := rs.List(ctx, "", 10)
	if err != nil || len(list) != 2 {
		t.Fatalf("list: %v %v", list, err)
	}
	for _, l := range list {
		if l.ID == plain.ID && !l.CaseSelection.Empty() {
			t.Fatalf("a run without a selection lists %+v", l.CaseSelection)
		}
	}
	claimed, err := rs.Claim(ctx, "a1", serves(ledger.BackendCPU, nil), time.Minute)
	if err != nil || claimed == nil || claimed.ID != r.ID {
		t.Fatalf("claim = %+v, %v", claimed, err)
	}
	same("claim", claimed.CaseSelection)
	same("outcome", claimed.Outcome(time.Now()).CaseSelection)
}

func TestCheckCases(t *testing.T) {
	for _, tc := range []struct {
		lanes []string
		sel   ledger.CaseSelection
		field string // "" passes
	}{
		{[]string{"alloc-footprint/v1"}, ledger.CaseSelection{}, ""},
		{[]string{"qmv-throughput/v1"}, ledger.CaseSelection{Cases: []string{"batch1"}}, ""},
		{[]string{"alloc-footprint/v1", "qmv-throughput"}, ledger.CaseSelection{Cases: []string{"batch*/n*/k*/f16"}}, ""},
		{[]string{"qmv-throughput/v1"}, ledger.CaseSelection{Cases: []string{"batch1", "batch4"}}, "cases[1]"},
		{[]string{"alloc-footprint/v1"}, ledger.CaseSelection{Cases: []string{"batch1"}}, "cases"},
		{[]string{"alloc-footprint/v1"}, ledger.CaseSelection{CaseBudget: "1s"}, "case_budget"},
		{[]string{"alloc-footprint/v1"}, ledger.CaseSelection{MaxSamples: 10}, "max_samples"},
		{[]string{"qmv-throughput/v2"}, ledger.CaseSelection{MaxSamples: 10}, "max_samples"},
	} {
		err := runs.Spec{Lanes: tc.lanes, CaseSelection: tc.sel}.CheckCases(testCaseLanes)
		if tc.field == "" {
			if err != nil {
				t.Errorf("%v %+v: %v", tc.lanes, tc.sel, err)
			}
			continue
		}
		if f := errField(err); f != tc.field {
			t.Errorf("%v %+v: %v (field %q), want one naming %s", tc.lanes, tc.sel, err, f, tc.field)
		}
	}
	if err := (runs.Spec{Lanes: []string{"qmv-throughput/v1"}, CaseSelection: ledger.CaseSelection{Cases: []string{"batch1"}}}).CheckCases(nil); errField(err) != "cases" {
		t.Fatalf("a server without case lanes: %v", err)
	}
}

// errField is the field err names ("" when it is not a *ledger.Error).
func errField(err error) string {
	var le *ledger.Error
	if errors.As(err, &le) {
		return le.Field
	}
	return ""
}
