package gates

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// TestEveryPinBindsEveryGate: a bound artifact's digest binds every gate
// that reads evidence, whether or not the gate repeats the release's
// artifacts, and a component's artifacts bind every lane, trajectory and
// matrix gate of the component.
func TestEveryPinBindsEveryGate(t *testing.T) {
	same := tokens64(-1)
	trajectories := func(f func(*ledger.Evidence)) []ledger.Evidence {
		var out []ledger.Evidence
		for _, b := range []string{"contiguous", "paged"} {
			for _, m := range []string{"ordinary", "automatic"} {
				e := trajectoryEv("gemma", m, b, same)
				e.Subject.Artifacts = map[string]string{"lib": digestLib}
				if f != nil {
					f(&e)
				}
				out = append(out, e)
			}
		}
		return out
	}
	matrix := func(f func(*ledger.Evidence)) []ledger.Evidence {
		var out []ledger.Evidence
		for _, m := range []string{"gemma", "qwen"} {
			for _, b := range []ledger.Backend{"metal", "cuda"} {
				out = append(out, fleetEv(m, b, f))
			}
		}
		return out
	}
	otherDigest := func(e *ledger.Evidence) { e.Subject.Artifacts = map[string]string{"lib": digestOld} }
	noArtifact := func(e *ledger.Evidence) { e.Subject.Artifacts = nil }
	lane := func(f func(*ledger.Evidence)) []ledger.Evidence {
		e := passing("qmv-bias-sum/v1")
		if f != nil {
			f(&e)
		}
		return []ledger.Evidence{e}
	}
	cases := []struct {
		name          string
		gate          string
		componentArts bool // the core component lists artifacts: [lib]
		evs           []ledger.Evidence
		want          State
		baseline      string
	}{
		{"lane: counts at the bound digest", "qmv", false, lane(nil), StatePassed, ""},
		{"lane without artifacts: another digest", "qmv", false, lane(otherDigest), StateOpen, "other artifact lib"},
		{"lane without artifacts: none carried, component lists none", "qmv", false, lane(noArtifact), StatePassed, ""},
		{"lane without artifacts: none carried, component binds lib", "qmv", true, lane(noArtifact), StateOpen, "does not carry bound artifact lib"},
		{"trajectory: counts at the bound digest", "traj", true, trajectories(nil), StatePassed, ""},
		{"trajectory: another digest", "traj", false, trajectories(otherDigest), StateOpen, "other artifact lib"},
		{"trajectory: component binds lib", "traj", true, trajectories(noArtifact), StateOpen, "does not carry bound artifact lib"},
		{"matrix: counts at the bound digest", "fleet", true, matrix(nil), StatePassed, ""},
		{"matrix: another digest", "fleet", false, matrix(otherDigest), StateOpen, "other artifact lib"},
		{"matrix: component binds lib", "fleet", true, matrix(noArtifact), StateOpen, "does not carry bound artifact lib"},
		{"tree: another digest", "tree", false, []ledger.Evidence{treeComputed(reviewedA, true, []string{}, otherDigest)}, StateOpen, "other artifact lib"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t)
			rel := testRelease(t)
			if tc.componentArts {
				rel.Components[0].Artifacts = []string{"lib"}
			}
			rel = only(rel, tc.gate)
			rel.Gates[0].Artifacts = nil
			record(t, s, tc.evs...)
			g := evaluate(t, s, rel).Gates[0]
			if g.State != tc.want {
				t.Fatalf("state %s (%s); want %s", g.State, g.Reason, tc.want)
			}
			if tc.baseline != "" && (len(g.Baseline) == 0 || !strings.Contains(g.Baseline[0].Reason, tc.baseline)) {
				t.Fatalf("baseline %+v; want %q", g.Baseline, tc.baseline)
			}
		})
	}
	t.Run("a lane gate over the tree-equivalence lane counts no claim", func(t *testing.T) {
		s := openStore(t)
		rel := only(testRelease(t), "qmv")
		rel.Gates[0].Lane, rel.Gates[0].Backends, rel.Gates[0].Artifacts = DefaultTreeEquivalenceLane, []string{"external"}, nil
		claim := treeEv(reviewedA, true, []string{}, nil)
		claim.Control = ledger.ControlCaught
		record(t, s, claim)
		g := evaluate(t, s, rel).Gates[0]
		if g.State != StateOpen || len(g.Baseline) == 0 || !strings.Contains(g.Baseline[0].Reason, "claimed, not computed") {
			t.Fatalf("state %s baseline %+v", g.State, g.Baseline)
		}
	})
	t.Run("component artifacts must be bound", func(t *testing.T) {
		rel := testRelease(t)
		rel.Components[0].Artifacts = []string{"libmlx.dylib"}
		if err := rel.Validate(); ledger.ErrorCode(err) != ledger.CodeInvalid || !strings.Contains(err.Error(), "not bound") {
			t.Fatalf("unbound component artifact: %v", err)
		}
	})
	t.Run("component artifacts are pins", func(t *testing.T) {
		a, b := testRelease(t), testRelease(t)
		b.Components[0].Artifacts = []string{"lib"}
		if a.PinsDigest() == b.PinsDigest() {
			t.Fatal("listing a component's artifacts does not change the pins digest")
		}
	})
}

func supersede(t *testing.T, s ledger.Store, version, id string) {
	t.Helper()
	if _, _, err := RecordSupersede(context.Background(), s, version, id, "host lost power mid-run", Actor{Name: "dana", Roles: []string{"release-manager"}}, t0); err != nil {
		t.Fatal(err)
	}
}

// TestSupersede: one counting rule for every kind. A failing record at the
// pins keeps the gate failed however many passing records follow it; a
// supersede for the current pins retracts it (it becomes baseline with the
// supersede's author and reason) and the passing records count.
func TestSupersede(t *testing.T) {
	fail := passing("qmv-bias-sum/v1")
	fail.CasesExact, fail.Status = 156, ledger.StatusFailed
	divergent := trajectoryEv("gemma", "automatic", "paged", tokens64(30))
	same := tokens64(-1)
	cell := fleetEv("qwen", "cuda", func(e *ledger.Evidence) { e.CasesExact, e.Status = 3, ledger.StatusFailed })
	cases := []struct {
		gate  string
		evs   []ledger.Evidence // the first one fails and is superseded
		heads []ledger.HeadVerification
	}{
		{"qmv", []ledger.Evidence{fail, passing("qmv-bias-sum/v1")}, nil},
		{"traj", []ledger.Evidence{divergent, trajectoryEv("gemma", "ordinary", "contiguous", same), trajectoryEv("gemma", "automatic", "contiguous", same), trajectoryEv("gemma", "ordinary", "paged", same), trajectoryEv("gemma", "automatic", "paged", same)}, nil},
		{"fleet", []ledger.Evidence{cell, fleetEv("gemma", "metal", nil), fleetEv("gemma", "cuda", nil), fleetEv("qwen", "metal", nil), fleetEv("qwen", "cuda", nil)}, nil},
		{"tree", []ledger.Evidence{treeComputed(reviewedA, false, []string{"src/main.go"}, nil), treeComputed(reviewedA, true, []string{}, nil)}, nil},
		{"heads", nil, []ledger.HeadVerification{
			{Repository: "example/core", Commit: headA, Tree: treeA, Verdict: ledger.VerdictUnknownKey, Decision: ledger.DecisionUntrusted},
			{Repository: "example/core", Commit: headA, Tree: treeA, Verdict: ledger.VerdictGood, Decision: ledger.DecisionTrusted, VerifiedAt: t0.Add(time.Minute)},
			{Repository: "example/app", Commit: headB, Verdict: ledger.VerdictGood, Decision: ledger.DecisionTrusted},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.gate, func(t *testing.T) { checkSupersede(t, tc.gate, tc.evs, tc.heads) })
	}
	t.Run("bad input", func(t *testing.T) {
		ctx := context.Background()
		s := openStore(t)
		rel := testRelease(t)
		apply(t, s, rel)
		ev := record(t, s, fail)[0]
		rm := Actor{Name: "dana"}
		for _, c := range []struct {
			entry, reason, field string
			code                 ledger.Code
		}{
			{ev.ID, "", "reason", ledger.CodeInvalid},
			{"", "why", "entry", ledger.CodeInvalid},
			{"0123456789abcdef0123456789abcdef", "why", "entry", ledger.CodeInvalid},
			{rel.EntryID, "why", "entry", ledger.CodeInvalid}, // a release entry, not evidence
		} {
			_, _, err := RecordSupersede(ctx, s, rel.Version, c.entry, c.reason, rm, t0)
			var le *ledger.Error
			if ledger.ErrorCode(err) != c.code || !asError(err, &le) || le.Field != c.field {
				t.Fatalf("supersede(%q, %q): %v; want %s naming %s", c.entry, c.reason, err, c.code, c.field)
			}
		}
		if _, _, err := RecordSupersede(ctx, s, "9.9.9", ev.ID, "why", rm, t0); ledger.ErrorCode(err) != ledger.CodeNotFound {
			t.Fatalf("unknown release: %v", err)
		}
	})
}

// checkSupersede records evs and heads (the first fails gate), checks the
// gate fails by it, supersedes it and checks the gate passes with it as
// baseline, and that the supersede lapses with the pins.
func checkSupersede(t *testing.T, gate string, evs []ledger.Evidence, heads []ledger.HeadVerification) {
	t.Helper()
	ctx := context.Background()
	s := openStore(t)
	rel := testRelease(t)
	rel.ApprovalRole = "release-manager"
	apply(t, s, rel)
	var first string
	if len(evs) > 0 {
		first = record(t, s, evs...)[0].ID
	}
	for i, h := range heads {
		recordHead(t, s, h)
		if i == 0 {
			hs, _, err := s.Heads(ctx, ledger.HeadFilter{Commit: headA, Limit: 10})
			if err != nil || len(hs) != 1 {
				t.Fatal(hs, err)
			}
			first = hs[0].ID
		}
	}
	g := evaluate(t, s, only(rel, gate)).Gates[0]
	if g.State != StateFailed || len(g.Failing) == 0 || g.Failing[0].ID != first {
		t.Fatalf("before: state %s failing %+v; want failed by %s", g.State, g.Failing, first)
	}
	if _, _, err := RecordSupersede(ctx, s, rel.Version, first, "flaky host", Actor{Name: "eve", Roles: []string{"ci-owner"}}, t0); ledger.ErrorCode(err) != ledger.CodeForbidden {
		t.Fatalf("supersede without the approval role: %v", err)
	}
	supersede(t, s, rel.Version, first)
	g = evaluate(t, s, only(rel, gate)).Gates[0]
	if g.State != StatePassed || len(g.Failing) != 0 {
		t.Fatalf("after: state %s (%s) failing %+v; want passed", g.State, g.Reason, g.Failing)
	}
	found := false
	for _, b := range g.Baseline {
		found = found || (b.ID == first && strings.Contains(b.Reason, "superseded by") && strings.Contains(b.Reason, "dana") && strings.Contains(b.Reason, "host lost power"))
	}
	if !found {
		t.Fatalf("the superseded record is not baseline with the supersede's author and reason: %+v", g.Baseline)
	}
	if _, _, err := RecordSupersede(ctx, s, rel.Version, first, "again", Actor{Name: "dana", Roles: []string{"release-manager"}}, t0); ledger.ErrorCode(err) != ledger.CodeConflict {
		t.Fatalf("second supersede of the same record: %v", err)
	}
	// A supersede is a leaf like any other: the audit covers it.
	if rep, err := s.Audit(ctx); err != nil || !rep.OK {
		t.Fatalf("audit after a supersede: %+v %v", rep, err)
	}
	// A supersede is bound to the pins: re-pinning lapses it.
	rel.Components[1].Reviewed = otherC
	apply(t, s, rel)
	g = evaluate(t, s, only(rel, gate)).Gates[0]
	if g.State != StateFailed {
		t.Fatalf("after re-pin: state %s; want failed again", g.State)
	}
}

func asError(err error, le **ledger.Error) bool {
	e, ok := err.(*ledger.Error)
	if ok {
		*le = e
	}
	return ok
}

// TestTrajectoryEveryRunCounts: an older divergent run of a cell keeps the
// gate failed even when a newer run of the cell agrees; the divergent pair
// is named by id and the compared runs are not listed as satisfying.
func TestTrajectoryEveryRunCounts(t *testing.T) {
	s := openStore(t)
	same := tokens64(-1)
	es := record(t, s,
		trajectoryEv("gemma", "ordinary", "contiguous", same), trajectoryEv("gemma", "automatic", "contiguous", tokens64(30)),
		trajectoryEv("gemma", "ordinary", "paged", same), trajectoryEv("gemma", "automatic", "paged", same),
		trajectoryEv("gemma", "automatic", "contiguous", same)) // newer, agrees
	g := evaluate(t, s, only(testRelease(t), "traj")).Gates[0]
	if g.State != StateFailed || g.Divergence == nil || g.Divergence.Index != 30 {
		t.Fatalf("state %s divergence %+v", g.State, g.Divergence)
	}
	if g.Divergence.AID != es[0].ID || g.Divergence.BID != es[1].ID {
		t.Fatalf("divergent pair %s/%s; want %s/%s", g.Divergence.AID, g.Divergence.BID, es[0].ID, es[1].ID)
	}
	if len(g.Failing) != 1 || g.Failing[0].ID != es[1].ID || g.Failing[0].Pair != es[0].ID || !strings.Contains(g.Failing[0].Reason, "index 30") {
		t.Fatalf("failing %+v", g.Failing)
	}
	if len(g.Satisfying) != 0 {
		t.Fatalf("a failed trajectory gate lists satisfying evidence %+v", g.Satisfying)
	}
}

// TestApprovalGoesStale: an approval names the decision it approved; when
// a later record changes a gate's state, the verdict lists the approval as
// stale with why, and it no longer counts.
func TestApprovalGoesStale(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	rel := only(testRelease(t), "qmv")
	rel.ApprovalRole = "release-manager"
	apply(t, s, rel)
	record(t, s, passing("qmv-bias-sum/v1"))
	rm := Actor{Name: "dana", Roles: []string{"release-manager"}}
	a, e, _, err := RecordApproval(ctx, s, rel.Version, "ship it", rm, t0)
	if err != nil {
		t.Fatal(err)
	}
	if a.Decision == nil || a.DecisionDigest != a.Decision.Digest() || !a.Decision.Ready || a.Checkpoint.Size == 0 {
		t.Fatalf("approval %+v does not name its decision", a)
	}
	rd := evaluate(t, s, rel)
	if !rd.Ready || !rd.Approved || len(rd.Approvals) != 1 || rd.Approvals[0].State != ApprovalCurrent || rd.Approvals[0].ID != e.ID {
		t.Fatalf("right after approval: ready %v approved %v approvals %+v", rd.Ready, rd.Approved, rd.Approvals)
	}
	// Another passing run does not change what was approved.
	more := passing("qmv-bias-sum/v1")
	more.Backend = ledger.BackendCPU
	record(t, s, more)
	if rd = evaluate(t, s, rel); !rd.Approved {
		t.Fatalf("another passing run made the approval stale: %+v", rd.Approvals)
	}
	fail := passing("qmv-bias-sum/v1")
	fail.CasesExact, fail.Status = 150, ledger.StatusFailed
	record(t, s, fail)
	rd = evaluate(t, s, rel)
	if rd.Ready || rd.Approved || len(rd.Approvals) != 1 {
		t.Fatalf("after a failing run: ready %v approved %v", rd.Ready, rd.Approved)
	}
	st := rd.Approvals[0]
	if st.State != ApprovalStale || !strings.Contains(st.Why, "gate qmv was passed, now failed") || !strings.Contains(st.Why, "no longer ready") {
		t.Fatalf("approval state %+v", st)
	}
	verifyAndReplay(t, s, rd)
	checkLegacyApproval(t, s, rel)
}

// verifyAndReplay: a verdict carrying approvals still verifies and
// replays.
func verifyAndReplay(t *testing.T, s ledger.Store, rd *Readiness) {
	t.Helper()
	sv, err := Sign(rd, s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyVerdict([]byte(sv.Note), s.VerifierKey()); err != nil {
		t.Fatal(err)
	}
	if _, diffs, err := Replay(context.Background(), s, rd); err != nil || len(diffs) > 0 {
		t.Fatalf("replay: %v %v", diffs, err)
	}
}

// checkLegacyApproval: an approval record without a decision never
// counts.
func checkLegacyApproval(t *testing.T, s ledger.Store, rel *Release) {
	t.Helper()
	ctx := context.Background()
	old := Approval{Version: rel.Version, Type: TypeApproval, Author: "legacy", PinsDigest: rel.PinsDigest(), CreatedAt: t0}
	b, _ := json.Marshal(old)
	if _, err := s.Append(ctx, []ledger.Record{{Kind: ledger.KindApproval, Body: b}}, ""); err != nil {
		t.Fatal(err)
	}
	rd := evaluate(t, s, rel)
	if rd.Approvals[0].Author != "legacy" || rd.Approvals[0].State != ApprovalStale || !strings.Contains(rd.Approvals[0].Why, "names no decision") {
		t.Fatalf("legacy approval %+v", rd.Approvals[0])
	}
}

func TestRefuseServerMarkers(t *testing.T) {
	for _, c := range []struct {
		body   string
		refuse bool
	}{
		{`{"lane":"tree-equivalence/v1","details":{"reviewed":"x","equivalent":true}}`, false},
		{`{"lane":"tree-equivalence/v1","details":{"reviewed":"x","equivalent":true,"computed_by":"server"}}`, true},
		{`{"details":{"Computed_By":"server"}}`, true},
		{`{"details":{"computed_by":null}}`, true},
		{`{"details":{"\u0063omputed_by":"server"}}`, true},
		{`{"DETAILS":{"computed_by":"server"}}`, true},
		{`{"details":{"notes":"computed_by the server"}}`, false},
		{`{"details":{"nested":{"computed_by":"server"}}}`, false},
		{`[1,2]`, false},
		{`not json computed_by`, false},
	} {
		err := RefuseServerMarkers([]byte(c.body), "")
		if (err != nil) != c.refuse {
			t.Errorf("%s: %v; want refused %v", c.body, err, c.refuse)
		}
		var le *ledger.Error
		if err != nil && (!asError(err, &le) || le.Field != "details.computed_by" || le.Code != ledger.CodeInvalid) {
			t.Errorf("%s: error %v does not name details.computed_by", c.body, err)
		}
	}
	// Whatever the probe lets through, the gate does not read as computed.
	e := treeEv(reviewedA, true, []string{}, func(e *ledger.Evidence) {
		e.Details = json.RawMessage(`{"reviewed":"` + reviewedA + `","equivalent":true,"outside_pins":[],"nested":{"computed_by":"server"}}`)
	})
	if treeClaim(&e) == "" {
		t.Fatal("a nested computed_by made a claim count")
	}
}

func TestContainsFold(t *testing.T) {
	for _, c := range []struct {
		s    string
		want bool
	}{
		{"computed_by", true}, {"xCOMPUTED_BYx", true}, {"_computed_by", true}, {"computed_b", false},
		{"omputed_by", false}, {"___", false}, {"", false}, {"computed-by", false}, {"a_b computed_by", true},
	} {
		if got := containsFold([]byte(c.s), "computed_by"); got != c.want {
			t.Errorf("containsFold(%q) = %v", c.s, got)
		}
	}
}

// BenchmarkRefuseServerMarkers is the cost POST /evidence adds per record
// (a typical evidence body without the marker).
func BenchmarkRefuseServerMarkers(b *testing.B) {
	body, _ := json.Marshal(passing("qmv-bias-sum/v1"))
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if RefuseServerMarkers(body, "") != nil {
			b.Fatal("refused")
		}
	}
}

// TestEveryKindStatesItsRule: every kind reads the one counting rule in
// words, and each names what fails it (manual gates: nothing; provenance
// gates: nothing, what does not pass is baseline, and says so).
func TestEveryKindStatesItsRule(t *testing.T) {
	for _, k := range kinds {
		r := KindRule(k.name)
		if k.name == KindProvenance && !strings.Contains(r, "is baseline, shown with the reason") {
			t.Errorf("kind %s: rule %q", k.name, r)
			continue
		}
		if r == "" || (k.name != KindManual && k.name != KindProvenance && !strings.Contains(r, "failed until superseded or waived")) {
			t.Errorf("kind %s: rule %q", k.name, r)
		}
	}
	if KindRule("nope") != "" || !strings.Contains(CountingRule, "supersede") {
		t.Fatal("rule lookup")
	}
}
