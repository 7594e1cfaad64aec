package gates

import (
	"context"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/storetest/teststore"
)

// witnessedStore is a store whose witnesses last met the quorum at size.
type witnessedStore struct {
	*teststore.Store
	size uint64
	root ledger.Hash
}

func (w witnessedStore) LastWitnessed() (uint64, ledger.Hash, bool) {
	return w.size, w.root, w.size > 0
}

// TestRequireWitnessed: a release with require_witnessed is evaluated at
// the last witnessed checkpoint (evidence recorded after it does not
// count yet), is not ready with the reason when no checkpoint met the
// quorum or the store runs no witnesses, and cannot be approved then.
func TestRequireWitnessed(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	rel := testRelease(t)
	rel.Gates = []Gate{*mustGate(rel, "qmv")}
	rel.RequireWitnessed = true
	apply(t, s, rel)
	rd := evaluate(t, s, rel)
	if rd.Ready || !strings.Contains(rd.Witnessing, "runs no witnesses") || !strings.Contains(strings.Join(rd.Blockers(), ";"), "unwitnessed") {
		t.Fatalf("no witnesses: %+v", rd)
	}
	before, err := s.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	record(t, s, passing("qmv-bias-sum/v1"))
	after, _ := s.Checkpoint(ctx)
	for _, tc := range []struct {
		name  string
		ws    witnessedStore
		ready bool
		size  uint64
		why   string
	}{
		{"never witnessed", witnessedStore{s, 0, ledger.Hash{}}, false, after.Size, "no checkpoint has met the witness quorum"},
		{"witnessed before the pass", witnessedStore{s, before.Size, before.Root}, false, before.Size, ""},
		{"witnessed after the pass", witnessedStore{s, after.Size, after.Root}, true, after.Size, ""},
		{"witnessed root of another history", witnessedStore{s, after.Size, ledger.Hash{1}}, false, after.Size, "not in this log's history"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rd, err := Evaluate(ctx, tc.ws, rel, EvalOptions{Now: t0})
			if err != nil {
				t.Fatal(err)
			}
			if rd.Ready != tc.ready || rd.Checkpoint.Size != tc.size || !strings.Contains(rd.Witnessing, tc.why) {
				t.Fatalf("ready %v at %d (%q), want %v at %d (%q)", rd.Ready, rd.Checkpoint.Size, rd.Witnessing, tc.ready, tc.size, tc.why)
			}
		})
	}
	if _, _, _, err := RecordApproval(ctx, witnessedStore{s, 0, ledger.Hash{}}, rel.Version, "", Actor{Name: "dana", Roles: []string{"release-manager"}}, t0); ledger.ErrorCode(err) != ledger.CodePrecondition || !strings.Contains(err.Error(), "unwitnessed") {
		t.Fatalf("approval on an unwitnessed log: %v", err)
	}
}
