package gates

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// pagedReader serves every query in pages of at most limit records, so
// an evaluation over it reads each answer through many opaque cursors.
type pagedReader struct {
	ledger.Reader
	limit int
}

func (p pagedReader) Entries(ctx context.Context, f ledger.EntryFilter) ([]ledger.Entry, string, error) {
	f.Limit = p.limit
	return p.Reader.Entries(ctx, f)
}

func (p pagedReader) Evidence(ctx context.Context, f ledger.EvidenceFilter) ([]ledger.EvidenceEntry, string, error) {
	f.Limit = p.limit
	return p.Reader.Evidence(ctx, f)
}

func (p pagedReader) Heads(ctx context.Context, f ledger.HeadFilter) ([]ledger.HeadEntry, string, error) {
	f.Limit = p.limit
	return p.Reader.Heads(ctx, f)
}

func appendBodies(t *testing.T, s ledger.LogWriter, k ledger.Kind, bodies []any) {
	t.Helper()
	recs := make([]ledger.Record, len(bodies))
	for i, b := range bodies {
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = ledger.Record{Kind: k, Body: j}
	}
	if _, err := s.Append(context.Background(), recs, ""); err != nil {
		t.Fatal(err)
	}
}

// TestDeepQueries records, for one release, more waivers (1,050 newer
// expired ones above the one that applies), more sign-offs (1,050 with
// another role above the one that counts) and more head verifications
// (150 for another repository above the good one) than one page holds,
// and checks the answer against what the facts say when read whole: the
// lane gate is waived by the oldest waiver, the manual gate passed by the
// oldest sign-off, the heads gate passed by the oldest verification. A
// reader that stops at the first 1,000 records (or 100 heads) answers
// open for all three. It then checks that reading every query in pages of
// one record gives the same verdict, byte for byte.
func TestDeepQueries(t *testing.T) {
	if testing.Short() {
		t.Skip("appends 2,300 records")
	}
	const deep = 1050
	s := openStore(t)
	rel := testRelease(t)
	rel.Gates = []Gate{*mustGate(rel, "qmv"), *mustGate(rel, "heads"), *mustGate(rel, "platform")}
	apply(t, s, rel)
	pins := rel.PinsDigest()

	waivers := []any{Waiver{Version: rel.Version, Gate: "qmv", Reason: "the one that applies", Author: "rm", Expires: t0.Add(24 * time.Hour), PinsDigest: pins, CreatedAt: t0.Add(-72 * time.Hour)}}
	signoffs := []any{Signoff{Version: rel.Version, Type: TypeSignoff, Gate: "platform", Role: "platform-reviewer", Author: "pr", PinsDigest: pins, CreatedAt: t0.Add(-72 * time.Hour)}}
	for i := range deep {
		at := t0.Add(-48*time.Hour + time.Duration(i)*time.Second)
		waivers = append(waivers, Waiver{Version: rel.Version, Gate: "qmv", Reason: fmt.Sprintf("expired %d", i), Author: "rm", Expires: t0.Add(-time.Hour), PinsDigest: pins, CreatedAt: at})
		signoffs = append(signoffs, Signoff{Version: rel.Version, Type: TypeSignoff, Gate: "platform", Role: "someone-else", Author: "x", PinsDigest: pins, CreatedAt: at})
	}
	appendBodies(t, s, ledger.KindWaiver, waivers)
	appendBodies(t, s, ledger.KindApproval, signoffs)

	good := func(repo, commit string, at time.Time) ledger.HeadVerification {
		return ledger.HeadVerification{Repository: repo, Object: commit, ObjectType: "commit", Commit: commit, Tree: treeA, Scheme: "ssh", Signer: "rm",
			Verdict: ledger.VerdictGood, Decision: ledger.DecisionTrusted, Policy: digestPolicy, VerifiedAt: at}
	}
	app := good("example/app", headB, t0)
	app.Tree = ""
	heads := []any{good("example/core", headA, t0.Add(-72*time.Hour)), app}
	for i := range 150 {
		heads = append(heads, good("example/fork", headA, t0.Add(-48*time.Hour+time.Duration(i)*time.Second)))
	}
	appendBodies(t, s, ledger.KindHead, heads)

	rd := evaluate(t, s, rel)
	byID := map[string]GateResult{}
	for _, g := range rd.Gates {
		byID[g.ID] = g
	}
	if g := byID["qmv"]; g.State != StateWaived || len(g.Waivers) != deep+1 || !strings.Contains(g.Reason, "the one that applies") {
		t.Errorf("qmv: %s (%d waivers listed) %q; want waived by the oldest waiver with all %d listed", g.State, len(g.Waivers), g.Reason, deep+1)
	}
	if g := byID["platform"]; g.State != StatePassed || len(g.Baseline) != deep {
		t.Errorf("platform: %s, %d baseline sign-offs, %q; want passed by the oldest sign-off, %d others as baseline", g.State, len(g.Baseline), g.Reason, deep)
	}
	if g := byID["heads"]; g.State != StatePassed || len(g.Baseline) != 150 {
		t.Errorf("heads: %s, %d baseline, %q; want passed with the 150 other-repository verifications as baseline", g.State, len(g.Baseline), g.Reason)
	}
	as, ss, err := Approvals(context.Background(), s, rel.Version)
	if err != nil || len(as) != 0 || len(ss) != deep+1 {
		t.Errorf("Approvals: %d approvals, %d sign-offs, %v; want 0 and %d", len(as), len(ss), err, deep+1)
	}

	paged, err := Evaluate(context.Background(), pagedReader{s, 1}, rel, EvalOptions{Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := VerdictText(rd)
	got, _ := VerdictText(paged)
	if got != want {
		i := 0
		for i < min(len(got), len(want)) && got[i] == want[i] {
			i++
		}
		t.Errorf("pages of one record give another verdict (%d bytes, want %d): first difference at byte %d: %q, want %q",
			len(got), len(want), i, got[i:min(len(got), i+80)], want[i:min(len(want), i+80)])
	}
}

// TestUndecodableRecordIsAnError appends a waiver whose body is not a
// waiver and checks that Evaluate fails naming its entry rather than
// skipping it.
func TestUndecodableRecordIsAnError(t *testing.T) {
	for _, tc := range []struct {
		kind ledger.Kind
		body string
	}{
		{ledger.KindWaiver, `{"version": "1.0.0-test", "gate": "platform", "expires": "not a time"}`},
		{ledger.KindApproval, `{"version": "1.0.0-test", "type": "rubber-stamp"}`},
	} {
		s := openStore(t)
		rel := only(testRelease(t), "platform")
		apply(t, s, rel)
		res, err := s.Append(context.Background(), []ledger.Record{{Kind: tc.kind, Body: json.RawMessage(tc.body)}}, "")
		if err != nil {
			t.Fatalf("append %s: %v", tc.kind, err)
		}
		e := res.Entries[0]
		_, err = Evaluate(context.Background(), s, rel, EvalOptions{Now: t0})
		if err == nil || !strings.Contains(err.Error(), e.ID) || !strings.Contains(err.Error(), fmt.Sprintf("index %d", e.Index)) {
			t.Fatalf("%s: Evaluate error %v; want one naming entry %s at index %d", tc.kind, err, e.ID, e.Index)
		}
		if strings.Contains(err.Error(), "not a time") || strings.Contains(err.Error(), "rubber-stamp") {
			t.Fatalf("%s: the error %q quotes the record's body", tc.kind, err)
		}
		if tc.kind == ledger.KindApproval {
			if _, _, err := Approvals(context.Background(), s, rel.Version); err == nil || !strings.Contains(err.Error(), e.ID) {
				t.Fatalf("Approvals error %v; want one naming entry %s", err, e.ID)
			}
		}
	}
}
