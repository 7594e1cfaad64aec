package ledger_test

import (
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

func TestCaseSelectionValidate(t *testing.T) {
	ok := ledger.CaseSelection{Cases: []string{"batch1/n4096", "batch*/n8192/*/f16/b4/*"}, CaseBudget: "90s", MaxSamples: 6}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if ok.CaseBudget != "1m30s" || ok.Budget() != 90*time.Second {
		t.Fatalf("budget not canonical: %q", ok.CaseBudget)
	}
	for _, tc := range []struct {
		sel   ledger.CaseSelection
		field string
	}{
		{ledger.CaseSelection{Cases: []string{""}}, "cases[0]"},
		{ledger.CaseSelection{Cases: []string{"a", "batch1/[x"}}, "cases[1]"},
		{ledger.CaseSelection{Cases: []string{"batch1//n4096"}}, "cases[0]"},
		{ledger.CaseSelection{Cases: make([]string, ledger.MaxCaseGlobs+1)}, "cases"},
		{ledger.CaseSelection{CaseBudget: "5"}, "case_budget"},
		{ledger.CaseSelection{CaseBudget: "0s"}, "case_budget"},
		{ledger.CaseSelection{CaseBudget: "-1s"}, "case_budget"},
		{ledger.CaseSelection{CaseBudget: "11m"}, "case_budget"},
		{ledger.CaseSelection{MaxSamples: 5}, "max_samples"},
		{ledger.CaseSelection{MaxSamples: ledger.MaxThroughputSamples + 1}, "max_samples"},
		{ledger.CaseSelection{MaxSamples: -1}, "max_samples"},
	} {
		err := tc.sel.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), tc.field+":") && !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: err = %v, want one naming %s", tc.sel, err, tc.field)
		}
	}
}

// TestRunOutcomeSelection: an outcome leaf carries the run's case
// selection inline, and one without a selection has none of its members
// (old leaves stay byte for byte what they were).
func TestRunOutcomeSelection(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	o := ledger.RunOutcome{Run: "run_" + strings.Repeat("a", 32), State: ledger.RunCanceled, Backend: ledger.BackendCPU, Lanes: []string{"qmv-throughput/v1"},
		Evidence: []string{}, Attempts: []ledger.RunAttempt{}, By: "ci", At: at}
	body, err := ledger.CanonicalBody(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"cases", "case_budget", "max_samples"} {
		if strings.Contains(string(body), m) {
			t.Fatalf("an outcome without a selection has %s: %s", m, body)
		}
	}
	if _, _, err := ledger.PrepareRunOutcome(body); err != nil {
		t.Fatal(err)
	}
	o.CaseSelection = ledger.CaseSelection{Cases: []string{"batch1/n4096/k4096/f32/b4/g64"}, CaseBudget: "1s", MaxSamples: 20}
	body, err = ledger.CanonicalBody(o)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(body), `"cases":["batch1/n4096/k4096/f32/b4/g64"]`) || !strings.Contains(string(body), `"case_budget":"1s"`) || !strings.Contains(string(body), `"max_samples":20`) {
		t.Fatalf("selection not inline: %s", body)
	}
	got, _, err := ledger.PrepareRunOutcome(body)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Cases) != 1 || got.CaseBudget != "1s" || got.MaxSamples != 20 {
		t.Fatalf("decoded %+v", got.CaseSelection)
	}
	bad := strings.Replace(string(body), `"max_samples":20`, `"max_samples":2`, 1)
	if _, _, err := ledger.PrepareRunOutcome([]byte(bad)); err == nil || !strings.Contains(err.Error(), "max_samples") {
		t.Fatalf("a leaf with max_samples 2: %v", err)
	}
}
