package gates

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

func TestLaneGate(t *testing.T) {
	const lane = "qmv-bias-sum/v1"
	mod := func(f func(*ledger.Evidence)) ledger.Evidence {
		e := passing(lane)
		f(&e)
		return e
	}
	cases := []struct {
		name     string
		evs      []ledger.Evidence
		minRuns  int
		fresh    string
		want     State
		reason   string // substring of the gate reason
		baseline string // substring of the first baseline reason ("" = no baseline)
	}{
		{"satisfying", []ledger.Evidence{passing(lane)}, 0, "", StatePassed, "1 passing run", ""},
		{"no evidence", nil, 0, "", StateOpen, "0 of 1", ""},
		{"baseline other commit", []ledger.Evidence{mod(func(e *ledger.Evidence) { e.Subject.Commit, e.Subject.Tree = otherC, otherC })}, 0, "", StateOpen, "do not count", "other commit"},
		{"reviewed source not head", []ledger.Evidence{mod(func(e *ledger.Evidence) { e.Subject.Commit = reviewedA })}, 0, "", StateOpen, "0 of 1", "reviewed source"},
		{"one pin off: artifact", []ledger.Evidence{mod(func(e *ledger.Evidence) { e.Subject.Artifacts["lib"] = digestOld })}, 0, "", StateOpen, "0 of 1", "other artifact lib"},
		{"one pin off: artifact missing", []ledger.Evidence{mod(func(e *ledger.Evidence) { e.Subject.Artifacts = nil })}, 0, "", StateOpen, "0 of 1", "does not carry bound artifact lib"},
		{"one pin off: repository", []ledger.Evidence{mod(func(e *ledger.Evidence) { e.Subject.Repository = "github.com/attacker/mlx" })}, 0, "", StateOpen, "0 of 1", "other repository"},
		{"one pin off: tree", []ledger.Evidence{mod(func(e *ledger.Evidence) { e.Subject.Tree = otherC })}, 0, "", StateOpen, "0 of 1", "other tree"},
		{"one pin off: dirty", []ledger.Evidence{mod(func(e *ledger.Evidence) { e.Subject.Dirty = true })}, 0, "", StateOpen, "0 of 1", "dirty"},
		{"one pin off: backend", []ledger.Evidence{mod(func(e *ledger.Evidence) { e.Backend = ledger.BackendCUDA })}, 0, "", StateOpen, "0 of 1", "other backend cuda"},
		{"one pin off: lane version", []ledger.Evidence{mod(func(e *ledger.Evidence) { e.Lane = "qmv-bias-sum/v2" })}, 0, "", StateOpen, "0 of 1", ""},
		{"control caught", []ledger.Evidence{mod(func(e *ledger.Evidence) { e.Control = ledger.ControlCaught })}, 0, "", StatePassed, "1 passing", ""},
		{"control not caught", []ledger.Evidence{mod(func(e *ledger.Evidence) { e.Control, e.Status = ledger.ControlNotCaught, ledger.StatusInconclusive })}, 0, "", StateOpen, "0 of 1", "control not caught"},
		{"no control", []ledger.Evidence{mod(func(e *ledger.Evidence) { e.Control = ledger.ControlNone })}, 0, "", StateOpen, "0 of 1", "no negative control"},
		// A failing run at the pins is listed as failing, not as
		// baseline, and keeps the gate failed whatever came before or
		// after it (CountingRule).
		{"failure at the pins", []ledger.Evidence{passing(lane), mod(func(e *ledger.Evidence) { e.CasesExact, e.Status = 156, ledger.StatusFailed; e.FailingCases = nil })}, 0, "", StateFailed, "156/216", ""},
		{"failure then a newer pass", []ledger.Evidence{mod(func(e *ledger.Evidence) { e.CasesExact, e.Status = 156, ledger.StatusFailed; e.FailingCases = nil }), passing(lane)}, 0, "", StateFailed, "156/216", ""},
		{"error status", []ledger.Evidence{mod(func(e *ledger.Evidence) { e.CasesExact, e.Status = 0, ledger.StatusError })}, 0, "", StateOpen, "0 of 1", "status error"},
		{"min runs", []ledger.Evidence{passing(lane)}, 2, "", StateOpen, "1 of 2", ""},
		{"min runs met", []ledger.Evidence{passing(lane), mod(func(e *ledger.Evidence) { e.Backend = ledger.BackendCPU })}, 2, "", StatePassed, "2 passing", ""},
		{"wrong case count", []ledger.Evidence{mod(func(e *ledger.Evidence) { e.CasesExact, e.CasesTotal = 1, 1 })}, 0, "", StateOpen, "0 of 1", "ran 1 cases, the lane has 216"},
		{"stale", []ledger.Evidence{passing(lane)}, 0, "30m", StateOpen, "0 of 1", "stale"},
		{"fresh", []ledger.Evidence{passing(lane)}, 0, "2h", StatePassed, "1 passing", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t)
			rel := only(testRelease(t), "qmv")
			rel.Gates[0].MinRuns, rel.Gates[0].Freshness = tc.minRuns, tc.fresh
			rel.Gates[0].Cases = 216
			if len(tc.evs) > 0 {
				record(t, s, tc.evs...)
			}
			g := evaluate(t, s, rel).Gates[0]
			if g.State != tc.want || !strings.Contains(g.Reason, tc.reason) {
				t.Fatalf("state %s reason %q; want %s containing %q", g.State, g.Reason, tc.want, tc.reason)
			}
			if tc.want == StatePassed && len(g.Satisfying) == 0 {
				t.Fatal("passed without satisfying evidence")
			}
			if (tc.want == StateFailed) != (len(g.Failing) > 0) || (len(g.Failing) > 0 && !strings.Contains(g.Failing[0].Reason, "failed at the release's pins")) {
				t.Fatalf("state %s with failing %+v", g.State, g.Failing)
			}
			if g.Rule == "" || g.Rule != KindRule(KindLane) {
				t.Fatalf("rule %q", g.Rule)
			}
			if tc.want == StateOpen && tc.minRuns < 2 && len(g.Satisfying) > 0 {
				t.Fatalf("not passed but lists satisfying evidence %+v", g.Satisfying)
			}
			if tc.baseline == "" {
				if tc.want != StateFailed && len(g.Baseline) > 0 && tc.name != "min runs met" {
					t.Fatalf("unexpected baseline %+v", g.Baseline)
				}
				return
			}
			if len(g.Baseline) == 0 || !strings.Contains(g.Baseline[0].Reason, tc.baseline) {
				t.Fatalf("baseline %+v; want a reason containing %q", g.Baseline, tc.baseline)
			}
		})
	}
}

func TestLaneGateAllBackends(t *testing.T) {
	s := openStore(t)
	rel := only(testRelease(t), "qmv")
	rel.Gates[0].AllBackends = true
	record(t, s, passing("qmv-bias-sum/v1"))
	g := evaluate(t, s, rel).Gates[0]
	if g.State != StateOpen || len(g.Missing) != 1 || !strings.Contains(g.Missing[0], "on cpu") {
		t.Fatalf("got %s %q missing %v", g.State, g.Reason, g.Missing)
	}
}

func TestWaivers(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name    string
		expires time.Duration // from t0
		now     time.Duration // evaluation time from t0
		repin   bool
		want    State
		whyNot  string
	}{
		{"applies", 48 * time.Hour, 0, false, StateWaived, ""},
		{"expired", 48 * time.Hour, 72 * time.Hour, false, StateOpen, "expired"},
		{"pins changed", 48 * time.Hour, 0, true, StateOpen, "pins changed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t)
			rel := testRelease(t)
			apply(t, s, rel)
			if _, _, err := RecordWaiver(ctx, s, rel.Version, "qmv", "CUDA host not attached", t0.Add(tc.expires), Actor{Name: "alice"}, t0); err != nil {
				t.Fatal(err)
			}
			if tc.repin {
				rel.Artifacts = map[string]string{"lib": digestOld}
				apply(t, s, rel)
			}
			cur, _, err := LoadRelease(ctx, s, rel.Version)
			if err != nil {
				t.Fatal(err)
			}
			rd, err := Evaluate(ctx, s, cur, EvalOptions{Now: t0.Add(tc.now)})
			if err != nil {
				t.Fatal(err)
			}
			g := rd.Gates[0]
			if g.State != tc.want || len(g.Waivers) != 1 {
				t.Fatalf("state %s waivers %+v; want %s with one waiver", g.State, g.Waivers, tc.want)
			}
			w := g.Waivers[0]
			if w.Applies != (tc.whyNot == "") || w.WhyNot != tc.whyNot || w.Author != "alice" {
				t.Fatalf("waiver %+v; want why_not %q", w, tc.whyNot)
			}
			if tc.want == StateWaived && !strings.Contains(g.Reason, "CUDA host not attached") {
				t.Fatalf("waived reason %q lacks the waiver's reason", g.Reason)
			}
		})
	}
	t.Run("bad input", func(t *testing.T) {
		s := openStore(t)
		rel := testRelease(t)
		apply(t, s, rel)
		for _, c := range []struct {
			gate, reason string
			exp          time.Time
		}{{"nope", "r", t0.Add(time.Hour)}, {"qmv", " ", t0.Add(time.Hour)}, {"qmv", "r", t0.Add(-time.Hour)}, {"qmv", "r", t0.Add(400 * 24 * time.Hour)}} {
			if _, _, err := RecordWaiver(ctx, s, rel.Version, c.gate, c.reason, c.exp, Actor{Name: "a"}, t0); ledger.ErrorCode(err) != ledger.CodeInvalid {
				t.Errorf("waiver %+v: err %v, want invalid", c, err)
			}
		}
	})
}

func TestSignedHeadsGate(t *testing.T) {
	good := ledger.HeadVerification{Repository: "example/core", Commit: headA, Tree: treeA, Verdict: ledger.VerdictGood, Decision: ledger.DecisionTrusted, Scheme: "ssh", Signer: "rel@example.org"}
	goodB := good
	goodB.Repository, goodB.Commit, goodB.Tree = "example/app", headB, ""
	with := func(f func(*ledger.HeadVerification)) ledger.HeadVerification {
		h := good
		f(&h)
		return h
	}
	cases := []struct {
		name   string
		heads  []ledger.HeadVerification
		policy string
		want   State
		reason string
	}{
		{"satisfying", []ledger.HeadVerification{good, goodB}, "", StatePassed, "all 2"},
		{"one missing", []ledger.HeadVerification{good}, "", StateOpen, "1 of 2"},
		{"other commit", []ledger.HeadVerification{with(func(h *ledger.HeadVerification) { h.Commit = reviewedA }), goodB}, "", StateOpen, "1 of 2"},
		{"bad signature", []ledger.HeadVerification{with(func(h *ledger.HeadVerification) { h.Verdict = ledger.VerdictBad }), goodB}, "", StateFailed, "verdict bad"},
		{"unsigned head stays open", []ledger.HeadVerification{with(func(h *ledger.HeadVerification) {
			h.Verdict = ledger.VerdictUnsigned
			h.Decision = ledger.DecisionUntrusted
			h.Scheme = ""
		}), goodB}, "", StateOpen, "unsigned"},
		{"untrusted", []ledger.HeadVerification{with(func(h *ledger.HeadVerification) { h.Decision = ledger.DecisionUntrusted }), goodB}, "", StateFailed, "decision untrusted"},
		{"newest decides", []ledger.HeadVerification{good, goodB, with(func(h *ledger.HeadVerification) { h.Verdict = ledger.VerdictRevoked; h.VerifiedAt = t0.Add(time.Hour) })}, "", StateFailed, "revoked"},
		{"other repository", []ledger.HeadVerification{with(func(h *ledger.HeadVerification) { h.Repository = "github.com/attacker/core" }), goodB}, "", StateOpen, "not verified"},
		// A verification at another tree is at other pins: baseline,
		// like evidence at another tree (CountingRule).
		{"tree pin differs", []ledger.HeadVerification{with(func(h *ledger.HeadVerification) { h.Tree = otherC }), goodB}, "", StateOpen, "not verified"},
		// Every verification at the pins counts, not only the newest: an
		// older failure is not cleared by a newer good verification.
		{"older failure is not cleared by a newer good one", []ledger.HeadVerification{with(func(h *ledger.HeadVerification) { h.Decision = ledger.DecisionUntrusted }), goodB, with(func(h *ledger.HeadVerification) { h.VerifiedAt = t0.Add(time.Hour) })}, "", StateFailed, "decision untrusted"},
		{"other policy", []ledger.HeadVerification{with(func(h *ledger.HeadVerification) { h.Policy = digestOld }), goodB}, digestLib, StateOpen, "not verified"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t)
			rel := only(testRelease(t), "heads")
			if tc.policy != "" {
				rel.PolicyDigest = tc.policy
				for _, h := range tc.heads {
					if h.Commit == headB {
						h.Policy = tc.policy
						recordHead(t, s, h)
					}
				}
			}
			for _, h := range tc.heads {
				if tc.policy == "" || h.Commit != headB {
					recordHead(t, s, h)
				}
			}
			g := evaluate(t, s, rel).Gates[0]
			if g.State != tc.want || !strings.Contains(g.Reason, tc.reason) {
				t.Fatalf("state %s reason %q; want %s with %q", g.State, g.Reason, tc.want, tc.reason)
			}
			if tc.policy != "" && (len(g.Baseline) == 0 || !strings.Contains(g.Baseline[0].Reason, "policy")) {
				t.Fatalf("baseline %+v lacks the policy reason", g.Baseline)
			}
		})
	}
}

// TestSignedHeadsGateWithoutPolicy: a release that binds no policy counts
// no head verification, whichever policy it was made under (TRUST.md rule
// 2); the gate stays open naming why, also over a failing verification.
func TestSignedHeadsGateWithoutPolicy(t *testing.T) {
	for _, v := range []ledger.Verdict{ledger.VerdictGood, ledger.VerdictBad} {
		s := openStore(t)
		rel := only(testRelease(t), "heads")
		rel.PolicyDigest = ""
		recordHead(t, s, ledger.HeadVerification{Repository: "example/core", Commit: headA, Tree: treeA, Verdict: v, Decision: ledger.DecisionTrusted, Policy: digestOld})
		recordHead(t, s, ledger.HeadVerification{Repository: "example/app", Commit: headB, Verdict: v, Decision: ledger.DecisionTrusted})
		g := evaluate(t, s, rel).Gates[0]
		if g.State != StateOpen || g.Reason != ReasonNoPolicy || len(g.Satisfying)+len(g.Failing) != 0 || len(g.Baseline) != 2 || g.Baseline[0].Reason != ReasonNoPolicy {
			t.Errorf("verdict %s: %s %q, satisfying %d, failing %d, baseline %+v; want open, both baseline, naming that the release binds no policy", v, g.State, g.Reason, len(g.Satisfying), len(g.Failing), g.Baseline)
		}
	}
}

func treeEv(reviewed string, equivalent bool, outside []string, f func(*ledger.Evidence)) ledger.Evidence {
	e := passing(DefaultTreeEquivalenceLane)
	e.Backend, e.Control, e.CasesExact, e.CasesTotal = ledger.BackendExternal, ledger.ControlNone, 1, 1
	e.Subject.Artifacts = nil
	if !equivalent {
		e.Status, e.CasesExact = ledger.StatusFailed, 0
	}
	d, _ := json.Marshal(ledger.TreeEquivalence{Reviewed: reviewed, Equivalent: &equivalent, OutsidePins: outside})
	e.Details = d
	if f != nil {
		f(&e)
	}
	return e
}

// computed marks tree-equivalence evidence as the server's own computation
// (ledger.TreeEquivalence.ComputedBy), the only kind the gate counts.
func computed(e *ledger.Evidence) {
	var d ledger.TreeEquivalence
	if err := json.Unmarshal(e.Details, &d); err != nil {
		panic(err)
	}
	d.ComputedBy = ledger.ComputedByServer
	e.Details, _ = json.Marshal(d)
}

// treeComputed is tree-equivalence evidence the server computed for
// testYAML's component core at its pins.
func treeComputed(reviewed string, equivalent bool, outside []string, f func(*ledger.Evidence)) ledger.Evidence {
	return treeEv(reviewed, equivalent, outside, func(e *ledger.Evidence) {
		computed(e)
		var d ledger.TreeEquivalence
		if err := json.Unmarshal(e.Details, &d); err != nil {
			panic(err)
		}
		d.Pins, d.Release, d.Component = []string{"deps/*.lock", "Package.resolved"}, "1.0.0-test", "core"
		e.Details, _ = json.Marshal(d)
		if f != nil {
			f(e)
		}
	})
}

// treeAt returns an edit of treeComputed's details: pins (when not nil),
// release and component (when not "") replaced.
func treeAt(pins []string, release, component string) func(*ledger.Evidence) {
	return func(e *ledger.Evidence) {
		var d ledger.TreeEquivalence
		if err := json.Unmarshal(e.Details, &d); err != nil {
			panic(err)
		}
		if pins != nil {
			d.Pins = pins
		}
		if release != "" {
			d.Release = release
		}
		if component != "" {
			d.Component = component
		}
		e.Details, _ = json.Marshal(d)
	}
}

func TestTreeEquivalenceGate(t *testing.T) {
	cases := []struct {
		name     string
		evs      []ledger.Evidence
		want     State
		reason   string
		baseline string
	}{
		{"satisfying", []ledger.Evidence{treeComputed(reviewedA, true, []string{}, nil)}, StatePassed, "all 2", ""},
		{"missing", nil, StateOpen, "1 of 2", ""},
		// A record token's own "equivalent": true is a claim: baseline.
		{"posted claim", []ledger.Evidence{treeEv(reviewedA, true, []string{}, nil)}, StateOpen, "1 of 2", "claimed, not computed"},
		{"other reviewed source", []ledger.Evidence{treeComputed(otherC, true, nil, nil)}, StateOpen, "1 of 2", "compares against"},
		{"one pin off: tree", []ledger.Evidence{treeComputed(reviewedA, true, nil, func(e *ledger.Evidence) { e.Subject.Tree = otherC })}, StateOpen, "1 of 2", "other tree"},
		{"one pin off: dirty", []ledger.Evidence{treeComputed(reviewedA, true, nil, func(e *ledger.Evidence) { e.Subject.Dirty = true })}, StateOpen, "1 of 2", "dirty"},
		{"differs outside pins", []ledger.Evidence{treeComputed(reviewedA, false, []string{"Sources/Kernel.metal"}, nil)}, StateFailed, "Sources/Kernel.metal", ""},
		// A newer equal computation does not clear an older difference.
		{"older difference is not cleared", []ledger.Evidence{treeComputed(reviewedA, false, []string{"Sources/Kernel.metal"}, nil), treeComputed(reviewedA, true, []string{}, func(e *ledger.Evidence) { e.FinishedAt = e.FinishedAt.Add(time.Second) })}, StateFailed, "Sources/Kernel.metal", ""},
		// A posted "differs" claim does not fail the gate either.
		{"posted difference claim", []ledger.Evidence{treeEv(reviewedA, false, []string{"x"}, nil), treeComputed(reviewedA, true, []string{}, nil)}, StatePassed, "all 2", ""},
		// A computation counts only at the pins it was made with, for the
		// release and component it names (TRUST.md rule 3).
		{"computed at wider pins", []ledger.Evidence{treeComputed(reviewedA, true, []string{}, treeAt([]string{"Package.resolved", "deps/*.lock", "Sources/*"}, "", ""))}, StateOpen, "1 of 2",
			"computed at pins [Package.resolved Sources/* deps/*.lock]; release 1.0.0-test pins core at [Package.resolved deps/*.lock]"},
		{"computed without pins", []ledger.Evidence{treeComputed(reviewedA, true, []string{}, treeAt([]string{}, "", ""))}, StateOpen, "1 of 2", "computed at pins []"},
		{"a difference at other pins does not fail", []ledger.Evidence{treeComputed(reviewedA, false, []string{"Sources/Kernel.metal"}, treeAt([]string{"x"}, "", ""))}, StateOpen, "1 of 2", "computed at pins [x]"},
		{"computed for another release", []ledger.Evidence{treeComputed(reviewedA, true, []string{}, treeAt(nil, "0.9.0", ""))}, StateOpen, "1 of 2", "computed for release 0.9.0, not 1.0.0-test"},
		{"computed for another component", []ledger.Evidence{treeComputed(reviewedA, true, []string{}, treeAt(nil, "", "app"))}, StateOpen, "1 of 2", "computed for component app, not core"},
		{"pins in another order, repeated", []ledger.Evidence{treeComputed(reviewedA, true, []string{}, treeAt([]string{"Package.resolved", "deps/*.lock", "Package.resolved"}, "", ""))}, StatePassed, "all 2", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t)
			rel := only(testRelease(t), "tree")
			if len(tc.evs) > 0 {
				record(t, s, tc.evs...)
			}
			g := evaluate(t, s, rel).Gates[0]
			if g.State != tc.want || !strings.Contains(g.Reason, tc.reason) {
				t.Fatalf("state %s reason %q; want %s with %q", g.State, g.Reason, tc.want, tc.reason)
			}
			// app's head is its reviewed commit: satisfied without evidence.
			if !strings.Contains(g.Satisfying[len(g.Satisfying)-1].Summary, "app: the signed head is the reviewed commit") {
				t.Fatalf("satisfying %+v", g.Satisfying)
			}
			if tc.baseline != "" && (len(g.Baseline) == 0 || !strings.Contains(g.Baseline[0].Reason, tc.baseline)) {
				t.Fatalf("baseline %+v; want %q", g.Baseline, tc.baseline)
			}
		})
	}
}

func tokens64(divergeAt int) []int64 {
	out := make([]int64, 64)
	for i := range out {
		out[i] = int64(1000 + i*7)
		if divergeAt >= 0 && i >= divergeAt {
			out[i] = int64(50000 + i)
		}
	}
	return out
}

func TestTrajectoryGate(t *testing.T) {
	same := tokens64(-1)
	all := func(auto []int64) []ledger.Evidence {
		return []ledger.Evidence{
			trajectoryEv("gemma", "ordinary", "contiguous", same), trajectoryEv("gemma", "automatic", "contiguous", auto),
			trajectoryEv("gemma", "ordinary", "paged", same), trajectoryEv("gemma", "automatic", "paged", auto),
		}
	}
	cases := []struct {
		name     string
		evs      []ledger.Evidence
		want     State
		index    int
		baseline string
	}{
		{"identical", all(same), StatePassed, 0, ""},
		{"differs from index 30", all(tokens64(30)), StateFailed, 30, ""},
		{"missing cell", all(same)[:3], StateOpen, 0, ""},
		{"one pin off: commit", append(all(same)[:3], func() ledger.Evidence {
			e := trajectoryEv("gemma", "automatic", "paged", same)
			e.Subject.Commit, e.Subject.Tree = otherC, otherC
			return e
		}()), StateOpen, 0, "other commit"},
		// One meaning of a divergence (ledger.FirstDivergence): a strict
		// prefix diverges where the shorter sequence ends.
		{"length only", all(same[:40]), StateFailed, 40, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t)
			rel := only(testRelease(t), "traj")
			record(t, s, tc.evs...)
			g := evaluate(t, s, rel).Gates[0]
			if g.State != tc.want {
				t.Fatalf("state %s reason %q; want %s", g.State, g.Reason, tc.want)
			}
			if tc.want == StateFailed {
				d := g.Divergence
				if d == nil || d.Index != tc.index || d.Trajectory != "gemma" || d.A != "ordinary/contiguous" || d.B != "automatic/contiguous" {
					t.Fatalf("divergence %+v; want index %d between ordinary/contiguous and automatic/contiguous", d, tc.index)
				}
				if tc.index == 40 && (d.TokenA == nil || *d.TokenA != same[40] || d.TokenB != nil || !strings.Contains(g.Reason, "index 40 (ended vs token")) {
					t.Fatalf("length-only divergence %+v, reason %q: want A's token %d and B ended", d, g.Reason, same[40])
				}
				if tc.index == 30 {
					if *d.TokenA != same[30] || *d.TokenB != 50030 {
						t.Fatalf("tokens %d vs %d", *d.TokenA, *d.TokenB)
					}
					if !strings.Contains(g.Reason, "index 30") || !strings.Contains(g.Reason, "automatic/paged") {
						t.Fatalf("reason %q should name index 30 on both backends", g.Reason)
					}
				}
			}
			if tc.want == StateOpen && (len(g.Missing) != 1 || !strings.Contains(g.Missing[0], "mode automatic backend paged")) {
				t.Fatalf("missing %v", g.Missing)
			}
			if tc.baseline != "" && (len(g.Baseline) == 0 || !strings.Contains(g.Baseline[0].Reason, tc.baseline)) {
				t.Fatalf("baseline %+v", g.Baseline)
			}
		})
	}
}

func fleetEv(model string, backend ledger.Backend, f func(*ledger.Evidence)) ledger.Evidence {
	e := passing("fleet/v1")
	e.Backend = backend
	d, _ := json.Marshal(map[string]string{"model": model})
	e.Details = d
	if f != nil {
		f(&e)
	}
	return e
}

func TestMatrixGate(t *testing.T) {
	three := []ledger.Evidence{fleetEv("gemma", "metal", nil), fleetEv("gemma", "cuda", nil), fleetEv("qwen", "metal", nil)}
	cases := []struct {
		name     string
		evs      []ledger.Evidence
		want     State
		reason   string
		baseline string
	}{
		{"complete", append(three, fleetEv("qwen", "cuda", nil)), StatePassed, "all 4", ""},
		{"missing cell", three, StateOpen, "3 of 4", ""},
		{"one pin off: commit", append(three, fleetEv("qwen", "cuda", func(e *ledger.Evidence) { e.Subject.Commit = reviewedA })), StateOpen, "3 of 4", "reviewed source"},
		{"control not caught", append(three, fleetEv("qwen", "cuda", func(e *ledger.Evidence) { e.Control, e.Status = ledger.ControlNotCaught, ledger.StatusInconclusive })), StateOpen, "3 of 4", "control not caught"},
		{"failed cell", append(three, fleetEv("qwen", "cuda", func(e *ledger.Evidence) { e.CasesExact, e.Status = 3, ledger.StatusFailed })), StateFailed, "model=qwen backend=cuda", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t)
			rel := only(testRelease(t), "fleet")
			record(t, s, tc.evs...)
			g := evaluate(t, s, rel).Gates[0]
			if g.State != tc.want || !strings.Contains(g.Reason, tc.reason) {
				t.Fatalf("state %s reason %q; want %s with %q", g.State, g.Reason, tc.want, tc.reason)
			}
			if tc.want == StateOpen && (len(g.Missing) != 1 || g.Missing[0] != "model=qwen backend=cuda") {
				t.Fatalf("missing %v", g.Missing)
			}
			if tc.baseline != "" && (len(g.Baseline) == 0 || !strings.Contains(g.Baseline[0].Reason, tc.baseline)) {
				t.Fatalf("baseline %+v", g.Baseline)
			}
		})
	}
}

func TestManualGate(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	rel := testRelease(t)
	apply(t, s, rel)
	if _, _, err := RecordSignoff(ctx, s, rel.Version, "platform", "ok", Actor{Name: "bob", Roles: []string{"release-manager"}}, t0); ledger.ErrorCode(err) != ledger.CodeForbidden {
		t.Fatalf("sign-off without the role: %v", err)
	}
	if _, _, err := RecordSignoff(ctx, s, rel.Version, "qmv", "ok", Actor{Name: "bob", Roles: []string{"platform-reviewer"}}, t0); ledger.ErrorCode(err) != ledger.CodeInvalid {
		t.Fatalf("sign-off of a lane gate: %v", err)
	}
	g := evaluate(t, s, only(rel, "platform")).Gates[0]
	if g.State != StateOpen || !strings.Contains(g.Missing[0], "platform-reviewer") {
		t.Fatalf("before sign-off: %+v", g)
	}
	if _, _, err := RecordSignoff(ctx, s, rel.Version, "platform", "reviewed the diff", Actor{Name: "carol", Roles: []string{"platform-reviewer"}}, t0); err != nil {
		t.Fatal(err)
	}
	g = evaluate(t, s, only(rel, "platform")).Gates[0]
	if g.State != StatePassed || !strings.Contains(g.Reason, "carol") {
		t.Fatalf("after sign-off: %+v", g)
	}
	rel.Components[0].Head = otherC
	apply(t, s, rel)
	g = evaluate(t, s, only(rel, "platform")).Gates[0]
	if g.State != StateOpen || len(g.Baseline) != 1 || !strings.Contains(g.Baseline[0].Reason, "other pins") {
		t.Fatalf("after re-pin: %+v", g)
	}
}

func TestApprovalOnlyWhenReady(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	rel := testRelease(t)
	rel.Gates = []Gate{*mustGate(rel, "qmv"), *mustGate(rel, "platform")}
	rel.ApprovalRole = "release-manager"
	apply(t, s, rel)
	rm := Actor{Name: "dana", Roles: []string{"release-manager", "platform-reviewer"}}
	_, _, sv, err := RecordApproval(ctx, s, rel.Version, "", rm, t0)
	var le *ledger.Error
	if !errors.As(err, &le) || le.Code != ledger.CodePrecondition || !strings.Contains(le.Message, "qmv (open)") || !strings.Contains(le.Message, "platform (open)") || sv == nil {
		t.Fatalf("approval of an unready release: %v", err)
	}
	record(t, s, passing("qmv-bias-sum/v1"))
	if _, _, err := RecordSignoff(ctx, s, rel.Version, "platform", "", rm, t0); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := RecordApproval(ctx, s, rel.Version, "", Actor{Name: "eve", Roles: []string{"platform-reviewer"}}, t0); ledger.ErrorCode(err) != ledger.CodeForbidden {
		t.Fatalf("approval without the approval role: %v", err)
	}
	a, e, sv, err := RecordApproval(ctx, s, rel.Version, "ship it", rm, t0)
	if err != nil {
		t.Fatal(err)
	}
	if e.Kind != ledger.KindApproval || a.VerdictSHA256 != sv.TextSHA256() || !sv.Readiness.Ready {
		t.Fatalf("approval %+v entry %+v", a, e)
	}
	as, ss, err := Approvals(ctx, s, rel.Version)
	if err != nil || len(as) != 1 || len(ss) != 1 || as[0].Author != "dana" {
		t.Fatalf("approvals %v %v %v", as, ss, err)
	}
}

func mustGate(r *Release, id string) *Gate {
	g, ok := r.gate(id)
	if !ok {
		panic(id)
	}
	return g
}

func TestReadinessOverall(t *testing.T) {
	s := openStore(t)
	rel := testRelease(t)
	apply(t, s, rel)
	rd := evaluate(t, s, rel)
	if rd.Ready || len(rd.Gates) != 6 || rd.Counts[StateOpen] != 6 || rd.Release.ID == "" || rd.Checkpoint.Size == 0 {
		t.Fatalf("readiness %+v", rd)
	}
	if len(rd.Blockers()) != 6 {
		t.Fatalf("blockers %v", rd.Blockers())
	}
}

func TestListAndLoadReleases(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	a := testRelease(t)
	apply(t, s, a)
	b := testRelease(t)
	b.Version = "2.0.0"
	apply(t, s, b)
	a.Title = "redefined"
	apply(t, s, a)
	rs, err := ListReleases(ctx, s)
	if err != nil || len(rs) != 2 || rs[0].Version != a.Version || rs[0].Title != "redefined" || rs[1].Version != "2.0.0" {
		t.Fatalf("list %v %v", rs, err)
	}
	got, e, err := LoadRelease(ctx, s, a.Version)
	if err != nil || got.Title != "redefined" || e.ID != got.EntryID {
		t.Fatalf("load %+v %v", got, err)
	}
	h, err := ReleaseHistory(ctx, s, a.Version)
	if err != nil || len(h) != 2 {
		t.Fatalf("history %d %v", len(h), err)
	}
	if _, _, err := LoadRelease(ctx, s, "9.9.9"); ledger.ErrorCode(err) != ledger.CodeNotFound {
		t.Fatalf("missing release: %v", err)
	}
}

func TestApplySameDefinitionAppendsNothing(t *testing.T) {
	s := openStore(t)
	rel := testRelease(t)
	e1, err := Apply(context.Background(), s, rel)
	if err != nil {
		t.Fatal(err)
	}
	again := testRelease(t)
	e2, err := Apply(context.Background(), s, again)
	if err != nil {
		t.Fatal(err)
	}
	if e1.ID != e2.ID || e1.Index != e2.Index {
		t.Fatalf("re-applying the same definition appended %s after %s", e2.ID, e1.ID)
	}
	changed := testRelease(t)
	changed.Title = "changed title"
	e3, err := Apply(context.Background(), s, changed)
	if err != nil {
		t.Fatal(err)
	}
	if e3.ID == e1.ID {
		t.Fatal("a changed definition was not appended")
	}
}
