package admit

import (
	"errors"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
)

// TestRulesTable: every rule has a distinct ID, an actor, a clause and a
// place where it is enforced, and RuleByID finds it.
func TestRulesTable(t *testing.T) {
	seen := map[RuleID]bool{}
	for _, r := range Rules {
		if seen[r.ID] || r.Actor == "" || r.MustNot == "" || len(r.Where) == 0 {
			t.Errorf("rule %+v: duplicate or incomplete", r)
		}
		seen[r.ID] = true
		if got, ok := RuleByID(r.ID); !ok || got.ID != r.ID {
			t.Errorf("RuleByID(%s) = %+v, %v", r.ID, got, ok)
		}
	}
	if _, ok := RuleByID("no/such-rule"); ok {
		t.Error("RuleByID found a rule that is not in the table")
	}
}

// TestRefusalIsTheLedgerError: a refusal reads as its *ledger.Error (text,
// code, field) and carries its rule; prefixing keeps both.
func TestRefusalIsTheLedgerError(t *testing.T) {
	tok := ledger.Token{Name: "ci", Scope: ledger.ScopeRecord, Lanes: []string{"a"}}
	err := checkPosted(tok, []byte(`{"lane":"b"}`), "[1].")
	var le *ledger.Error
	if !errors.As(err, &le) || le.Code != ledger.CodeForbidden || le.Field != "[1].lane" {
		t.Fatalf("out of scope: %v", err)
	}
	if err.Error() != le.Error() {
		t.Errorf("refusal text %q, its error's %q", err.Error(), le.Error())
	}
	if rule, ok := RuleOf(err); !ok || rule != CIScope {
		t.Errorf("RuleOf = %q, %v; want %s", rule, ok, CIScope)
	}
	p := prefixed(err, "x.")
	if rule, _ := RuleOf(p); rule != CIScope || ledger.ErrorCode(p) != ledger.CodeForbidden || !errors.As(p, &le) || le.Field != "x.[1].lane" {
		t.Errorf("prefixed refusal: %v", p)
	}
	if err := RepositoryInScope(ByToken(ledger.Token{Name: "ci", Repositories: []string{"a/b"}}), "repository", "c/d"); ledger.ErrorCode(err) != ledger.CodeForbidden {
		t.Errorf("repository out of scope: %v", err)
	}
	if err := RepositoryInScope(Anon(), "repository", "c/d"); err != nil {
		t.Errorf("anonymous: %v", err)
	}
}

// TestRequire: the reader changes nothing, the local administrator
// anything.
func TestRequire(t *testing.T) {
	reader := ByToken(ledger.Token{Name: "r", Scope: ledger.ScopeRead})
	for _, c := range []struct {
		p    Principal
		code ledger.Code
	}{
		{Anon(), ledger.CodeUnauthorized},
		{reader, ledger.CodeForbidden},
		{ByToken(ledger.Token{Name: "ci", Scope: ledger.ScopeRecord}), ""},
		{Administrator(), ""},
	} {
		err := Require(c.p, ledger.ScopeRecord)
		if ledger.ErrorCode(err) != c.code {
			t.Errorf("Require(%+v) = %v, want code %q", c.p, err, c.code)
		}
		if rule, ok := RuleOf(err); err != nil && (!ok || rule != ReviewerChange) {
			t.Errorf("Require(%+v): rule %q", c.p, rule)
		}
	}
}
