package gates

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// TestApprovalRuleParse: the approval rule parses, round-trips through
// the release's JSON and is validated strictly, naming the member.
func TestApprovalRuleParse(t *testing.T) {
	with := func(rule string) string {
		return strings.Replace(testYAML, "version: 1.0.0-test\n", "version: 1.0.0-test\n"+rule, 1)
	}
	rel, err := ParseRelease([]byte(with("approval: {distinct_from: [waiver, signoff]}\n")))
	if err != nil {
		t.Fatal(err)
	}
	if rel.Approval == nil || strings.Join(rel.Approval.DistinctFrom, ",") != "waiver,signoff" {
		t.Fatalf("approval rule %+v", rel.Approval)
	}
	if plain := testRelease(t); plain.Approval != nil || plain.PinsDigest() != rel.PinsDigest() {
		t.Fatal("the rule is set without approval:, or changed the pins digest")
	}
	for _, tc := range []struct{ name, rule, want, field string }{
		{"unknown member", "approval:\n  distinct_from: [waiver, signof]\n", `line 3: unknown kind of record "signof": one of waiver, signoff, supersede`, "approval.distinct_from[1]"},
		{"twice", "approval: {distinct_from: [signoff, signoff]}\n", `"signoff" is listed twice`, "approval.distinct_from[1]"},
		{"empty", "approval: {distinct_from: []}\n", "line 2: required: the kinds of record whose authors may not approve", "approval.distinct_from"},
		{"no list", "approval: {}\n", "line 2: required: the kinds of record whose authors may not approve", "approval.distinct_from"},
		{"unknown key", "approval: {distinct_form: [waiver]}\n", `unknown key "distinct_form" in the approval rule`, ""},
		{"not a mapping", "approval: waiver\n", "the approval rule (a mapping with distinct_from)", "approval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRelease([]byte(with(tc.rule)))
			var le *ledger.Error
			if !errors.As(err, &le) || le.Code != ledger.CodeInvalid || !strings.Contains(err.Error(), tc.want) || le.Field != tc.field {
				t.Fatalf("err %v (field %q); want %q naming %q", err, fieldOf(le), tc.want, tc.field)
			}
		})
	}
}

func fieldOf(le *ledger.Error) string {
	if le == nil {
		return ""
	}
	return le.Field
}

// twoPersonRelease is a release of gates qmv and platform whose approval
// needs role release-manager, with the two-person rule over kinds (none:
// no rule).
func twoPersonRelease(t *testing.T, kinds ...string) *Release {
	rel := testRelease(t)
	rel.Gates = []Gate{*mustGate(rel, "qmv"), *mustGate(rel, "platform")}
	rel.ApprovalRole = "release-manager"
	if len(kinds) > 0 {
		rel.Approval = &ApprovalRule{DistinctFrom: kinds}
	}
	return rel
}

func logSize(t *testing.T, s ledger.Store) uint64 {
	t.Helper()
	cp, err := s.Checkpoint(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return cp.Size
}

func approvalBy(rd *Readiness, author string) (ApprovalState, bool) {
	for _, a := range rd.Approvals {
		if a.Author == author {
			return a, true
		}
	}
	return ApprovalState{}, false
}

// TestTwoPersonRule: under approval.distinct_from [waiver, signoff] whoever
// waived or signed off for the current pins is refused as approver
// (nothing appended), another person is not; a waiver by the approver
// after the approval makes it stale at the later checkpoint and not at
// the approval's; without the rule the same person may approve.
func TestTwoPersonRule(t *testing.T) {
	ctx := context.Background()
	dana := Actor{Name: "dana", Roles: []string{"release-manager", "platform-reviewer"}}
	erin := Actor{Name: "erin", Roles: []string{"release-manager"}}
	prepare := func(rel *Release) ledger.Store {
		s := openStore(t)
		apply(t, s, rel)
		if _, _, err := RecordWaiver(ctx, s, rel.Version, "qmv", "lab outage", t0.Add(72*time.Hour), dana, t0); err != nil {
			t.Fatal(err)
		}
		if _, _, err := RecordSignoff(ctx, s, rel.Version, "platform", "", dana, t0); err != nil {
			t.Fatal(err)
		}
		return s
	}

	t.Run("without the rule", func(t *testing.T) {
		rel := twoPersonRelease(t)
		s := prepare(rel)
		if _, _, _, err := RecordApproval(ctx, s, rel.Version, "", dana, t0); err != nil {
			t.Fatalf("approval by the waiver's author without the rule: %v", err)
		}
		if rd := evaluate(t, s, rel); !rd.Approved {
			t.Fatalf("approvals %+v", rd.Approvals)
		}
	})

	rel := twoPersonRelease(t, DistinctWaiver, DistinctSignoff)
	s := prepare(rel)
	before := logSize(t, s)
	_, _, sv, err := RecordApproval(ctx, s, rel.Version, "", dana, t0)
	var le *ledger.Error
	if !errors.Is(err, ErrTwoPerson) || !errors.As(err, &le) || le.Code != ledger.CodeForbidden || sv == nil || !sv.Readiness.Ready {
		t.Fatalf("approval by the author of the waiver and the sign-off: %v (verdict %v)", err, sv != nil)
	}
	for _, want := range []string{"approval.distinct_from: [waiver, signoff]", "dana waived gate qmv", "signed off gate platform", "dana may not approve"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q lacks %q", err, want)
		}
	}
	if after := logSize(t, s); after != before {
		t.Fatalf("a refused approval appended: size %d -> %d", before, after)
	}

	_, e, _, err := RecordApproval(ctx, s, rel.Version, "second pair of eyes", erin, t0)
	if err != nil {
		t.Fatalf("approval by another person: %v", err)
	}
	rd := evaluate(t, s, rel)
	if a, ok := approvalBy(rd, "erin"); !ok || a.State != ApprovalCurrent || !rd.Approved {
		t.Fatalf("erin's approval: %+v approved %v", a, rd.Approved)
	}
	approvedAt := e.Index + 1

	// erin signs off afterwards: her approval no longer counts.
	erin.Roles = append(erin.Roles, "platform-reviewer")
	if _, _, err := RecordSignoff(ctx, s, rel.Version, "platform", "looked again", erin, t0); err != nil {
		t.Fatal(err)
	}
	rd = evaluate(t, s, rel)
	a, _ := approvalBy(rd, "erin")
	if a.State != ApprovalStale || rd.Approved || !strings.Contains(a.Why, "two-person rule (approval.distinct_from: [waiver, signoff]): the approver erin also signed off gate platform") {
		t.Fatalf("erin's approval after her sign-off: %+v approved %v", a, rd.Approved)
	}
	// At the approval's checkpoint it was current, and stays so on replay.
	old, err := Evaluate(ctx, s, rel, EvalOptions{Now: t0, AsOfSize: approvedAt})
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := approvalBy(old, "erin"); a.State != ApprovalCurrent || !old.Approved {
		t.Fatalf("erin's approval at its own checkpoint: %+v", a)
	}

	// A redefinition that re-pins lapses the records: dana may approve
	// at the new pins once it is ready again.
	rel.Components[0].Head = otherC
	apply(t, s, rel)
	if _, _, _, err := RecordApproval(ctx, s, rel.Version, "", dana, t0); ledger.ErrorCode(err) != ledger.CodePrecondition {
		t.Fatalf("approval of the re-pinned, unready release: %v", err)
	}
}

// TestTwoPersonRuleSupersede: a rule naming only supersede excludes the
// author of a supersede for the current pins, not a sign-off's author.
func TestTwoPersonRuleSupersede(t *testing.T) {
	ctx := context.Background()
	rel := twoPersonRelease(t, DistinctSupersede)
	s := openStore(t)
	apply(t, s, rel)
	failed := passing("qmv-bias-sum/v1")
	failed.Status, failed.CasesExact = ledger.StatusFailed, 200
	es := record(t, s, failed, passing("qmv-bias-sum/v1"))
	frank := Actor{Name: "frank", Roles: []string{"release-manager"}}
	dana := Actor{Name: "dana", Roles: []string{"release-manager", "platform-reviewer"}}
	if _, _, err := RecordSupersede(ctx, s, rel.Version, es[0].ID, "the host's GPU had an ECC fault", frank, t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := RecordSignoff(ctx, s, rel.Version, "platform", "", dana, t0); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := RecordApproval(ctx, s, rel.Version, "", frank, t0); !errors.Is(err, ErrTwoPerson) || !strings.Contains(err.Error(), "frank superseded entry "+es[0].ID[:12]) {
		t.Fatalf("approval by the supersede's author: %v", err)
	}
	if _, _, _, err := RecordApproval(ctx, s, rel.Version, "", dana, t0); err != nil {
		t.Fatalf("approval by the sign-off's author under a supersede-only rule: %v", err)
	}
}

// TestSignoffOnce: the same sign-off (release, gate, role, author, pins)
// is one fact: answered with the existing entry, nothing appended, even
// with another note; another author or other pins append.
func TestSignoffOnce(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	rel := testRelease(t)
	apply(t, s, rel)
	carol := Actor{Name: "carol", Roles: []string{"platform-reviewer"}}
	first, e1, err := RecordSignoff(ctx, s, rel.Version, "platform", "reviewed the diff", carol, t0)
	if err != nil || e1.Existing {
		t.Fatalf("first sign-off: %v existing %v", err, e1.Existing)
	}
	size := logSize(t, s)
	for _, note := range []string{"reviewed the diff", "again"} {
		again, e2, err := RecordSignoff(ctx, s, rel.Version, "platform", note, carol, t0.Add(time.Hour))
		if err != nil || !e2.Existing || e2.ID != e1.ID || e2.Index != e1.Index || again != first {
			t.Fatalf("the same sign-off again (note %q): %+v %+v %v; want entry %s", note, again, e2, err, e1.ID)
		}
	}
	if logSize(t, s) != size {
		t.Fatal("the same sign-off was appended again")
	}
	if _, e, err := RecordSignoff(ctx, s, rel.Version, "platform", "", Actor{Name: "dave", Roles: []string{"platform-reviewer"}}, t0); err != nil || e.Existing {
		t.Fatalf("another author's sign-off: %v existing %v", err, e.Existing)
	}
	head := rel.Components[0].Head
	rel.Components[0].Head = otherC
	apply(t, s, rel)
	_, e3, err := RecordSignoff(ctx, s, rel.Version, "platform", "", carol, t0)
	if err != nil || e3.Existing || e3.ID == e1.ID {
		t.Fatalf("sign-off at other pins: %+v %v", e3, err)
	}
	// Back at the first pins, the first sign-off is current again.
	rel.Components[0].Head = head
	apply(t, s, rel)
	if _, e4, err := RecordSignoff(ctx, s, rel.Version, "platform", "", carol, t0); err != nil || !e4.Existing || e4.ID != e1.ID {
		t.Fatalf("sign-off back at the first pins: %+v %v; want %s", e4, err, e1.ID)
	}
	if g := evaluate(t, s, only(rel, "platform")).Gates[0]; g.State != StatePassed || len(g.Satisfying) != 2 {
		t.Fatalf("platform gate: %+v", g)
	}
}

// TestExampleApprovalRule: the two-person rule shown commented out in
// examples/release-0.9.0.yaml parses when uncommented.
func TestExampleApprovalRule(t *testing.T) {
	b, err := os.ReadFile("../examples/release-0.9.0.yaml")
	if err != nil {
		t.Skipf("example release not present: %v", err)
	}
	const rule = "# approval:\n#   distinct_from: [waiver, signoff]\n"
	if !strings.Contains(string(b), rule) {
		t.Fatalf("the example does not show the rule as %q", rule)
	}
	rel, err := ParseRelease([]byte(strings.Replace(string(b), rule, "approval:\n  distinct_from: [waiver, signoff]\n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if !rel.Approval.names(DistinctWaiver) || !rel.Approval.names(DistinctSignoff) || rel.Approval.names(DistinctSupersede) {
		t.Fatalf("example rule %+v", rel.Approval)
	}
}
