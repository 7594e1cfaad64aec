package admit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/storetest/teststore"
)

const twoPersonYAML = `version: 3.0.0
approval_role: release-manager
approval:
  distinct_from: [waiver, signoff]
components:
  - name: core
    repository: example/core
    reviewed: 1111111111111111111111111111111111111111
    head: 2222222222222222222222222222222222222222
gates:
  - id: review
    kind: manual
    role: reviewer
  - id: ci
    kind: manual
    role: reviewer
`

// TestApprovalTwoPerson: admit.Approval refuses the approver the
// release's two-person rule excludes, attributed to ManagerNotReady, and
// admits another; admit.Signoff answers the same sign-off with the
// existing entry.
func TestApprovalTwoPerson(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s := teststore.Open(t, teststore.Options{Now: func() time.Time { return now }})
	rel, err := gates.ParseRelease([]byte(twoPersonYAML))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gates.Apply(ctx, s, rel); err != nil {
		t.Fatal(err)
	}
	ann := gates.Actor{Name: "ann", Roles: []string{"release-manager", "reviewer"}}
	bob := gates.Actor{Name: "bob", Roles: []string{"release-manager"}}
	_, e1, err := Signoff(ctx, s, ann, "3.0.0", "review", "ok", now)
	if err != nil || e1.Existing {
		t.Fatalf("sign-off: %v %+v", err, e1)
	}
	if _, e2, err := Signoff(ctx, s, ann, "3.0.0", "review", "ok", now); err != nil || !e2.Existing || e2.ID != e1.ID {
		t.Fatalf("the same sign-off again: %v %+v; want entry %s", err, e2, e1.ID)
	}
	if _, _, err := Waiver(ctx, s, ann, "3.0.0", "ci", "the CI host is down", now.Add(time.Hour), now); err != nil {
		t.Fatal(err)
	}
	_, _, _, err = Approval(ctx, s, ann, "3.0.0", "", now)
	if rule, ok := RuleOf(err); !ok || rule != ManagerNotReady || ledger.ErrorCode(err) != ledger.CodeForbidden || !errors.Is(err, gates.ErrTwoPerson) {
		t.Fatalf("approval by the sign-off's and waiver's author: %v (rule %q)", err, rule)
	}
	if _, _, _, err := Approval(ctx, s, bob, "3.0.0", "", now); err != nil {
		t.Fatalf("approval by another person: %v", err)
	}
}
