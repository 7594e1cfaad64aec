package gates

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlog"
)

// indexedOnly is a store that fails the test on any query tlog.VerifiedStore
// would answer from the store's projection columns rather than from its
// index of the verified leaves (tlog.IndexedEvidence, IndexedEntries,
// IndexedHeads), and counts the queries it saw.
type indexedOnly struct {
	ledger.Store
	t       *testing.T
	queries atomic.Int64
}

func (s *indexedOnly) Evidence(ctx context.Context, f ledger.EvidenceFilter) ([]ledger.EvidenceEntry, string, error) {
	s.queries.Add(1)
	if !tlog.IndexedEvidence(f) {
		s.t.Errorf("evidence read by %+v: not a query the verified index answers", f)
	}
	return s.Store.Evidence(ctx, f)
}

func (s *indexedOnly) Entries(ctx context.Context, f ledger.EntryFilter) ([]ledger.Entry, string, error) {
	s.queries.Add(1)
	if !tlog.IndexedEntries(f) {
		s.t.Errorf("entries read by %+v: not a query the verified index answers", f)
	}
	return s.Store.Entries(ctx, f)
}

func (s *indexedOnly) Heads(ctx context.Context, f ledger.HeadFilter) ([]ledger.HeadEntry, string, error) {
	s.queries.Add(1)
	if !tlog.IndexedHeads(f) {
		s.t.Errorf("heads read by %+v: not a query the verified index answers", f)
	}
	return s.Store.Heads(ctx, f)
}

// TestReadinessReadsOnlyIndexedQueries: every query that loading a
// release, evaluating it (every gate kind, a policy named, signed_by with
// runner: agent, waivers, sign-offs, supersedes) and recording an
// approval makes is one tlog.VerifiedStore answers from its index of
// verified leaves, so that on the server no verdict, approval or release
// page counts or omits a record on the strength of a projection row. A
// new query by another filter fails here until the index answers it.
func TestReadinessReadsOnlyIndexedQueries(t *testing.T) {
	s := openStore(t)
	rel := testRelease(t)
	rel.Policy, rel.PolicyDigest = "default", ""
	rel.Gates = append(rel.Gates, Gate{ID: "agent-run", Kind: KindLane, Lane: "qmv-bias-sum/v1", Component: "core", Backends: []string{"metal"}, SignedBy: []string{"ci"}, Runner: ledger.RunnerKindAgent})
	apply(t, s, rel)
	record(t, s, passing("qmv-bias-sum/v1"), passing("fleet/v1"), passing(ledger.TreeEquivalenceLane))
	recordHead(t, s, ledger.HeadVerification{Repository: "example/core", Commit: headA, Verdict: ledger.VerdictGood, Decision: ledger.DecisionTrusted})

	w := &indexedOnly{Store: s, t: t}
	ctx := context.Background()
	loaded, _, err := LoadRelease(ctx, w, rel.Version)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Evaluate(ctx, w, loaded, EvalOptions{Now: t0}); err != nil {
		t.Fatal(err)
	}
	_, _, _, err = RecordApproval(ctx, w, rel.Version, "ship", Actor{Name: "rm", Roles: []string{"platform-reviewer"}}, t0)
	if ledger.ErrorCode(err) != ledger.CodePrecondition {
		t.Fatalf("approval of a release that is not ready: %v", err)
	}
	if w.queries.Load() < 10 {
		t.Fatalf("only %d queries seen: the release was not evaluated through the wrapper", w.queries.Load())
	}
}
