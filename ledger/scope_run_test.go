package ledger

import (
	"testing"
	"time"
)

// TestRunScope: a run token queues and cancels runs and reads; it cannot
// record or administer, and a record token cannot queue runs.
func TestRunScope(t *testing.T) {
	for _, c := range []struct {
		have, need Scope
		ok         bool
	}{
		{ScopeRun, ScopeRun, true}, {ScopeRun, ScopeRead, true}, {ScopeRun, ScopeRecord, false}, {ScopeRun, ScopeAdmin, false},
		{ScopeAdmin, ScopeRun, true}, {ScopeRecord, ScopeRun, false}, {ScopeRead, ScopeRun, false},
		{ScopeRecord, ScopeRead, true}, {ScopeAdmin, ScopeRecord, true},
	} {
		if got := c.have.Allows(c.need); got != c.ok {
			t.Errorf("%s allows %s = %v, want %v", c.have, c.need, got, c.ok)
		}
	}
	s := TokenSpec{Name: "rel", Scope: ScopeRun, Lanes: []string{"qmv-bias-sum"}}
	if err := s.Validate(time.Now()); err != nil {
		t.Fatalf("a run token spec: %v", err)
	}
}
