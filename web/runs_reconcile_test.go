package web

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
	"github.com/evidence-ledger/ledger/runs"
)

// TestStartRunsAdoptsLoggedOutcome: a finish whose append (evidence and
// run-outcome leaf) reached the log while the run's row stayed leased (a
// crash between the two) is not run again: at start-up the row takes the
// leaf's final state, so the lease's expiry cannot queue attempt 2. A
// final run whose outcome leaf is missing gets it appended.
func TestStartRunsAdoptsLoggedOutcome(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	st, err := sqlite.Open(ctx, sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	db, err := sqlite.OpenAux(path)
	if err != nil {
		t.Fatal(err)
	}
	rs := runs.New(db, nil)
	defer rs.Close()
	spec := runs.Spec{Lanes: []string{"alloc-footprint/v1"}, Backend: ledger.BackendCPU, MaxAttempts: 2}
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	crashed, _ := rs.Create(ctx, spec, "ci")
	lease, err := rs.Claim(ctx, "a1", func(runs.Run) bool { return true }, 50*time.Millisecond)
	if err != nil || lease == nil {
		t.Fatal(lease, err)
	}
	// The finish's append, as appendFinish makes it, without the row update.
	done := *lease
	done.State, done.Attempts = runs.Done, []ledger.RunAttempt{{Attempt: 1, Agent: "a1", Outcome: "finished", At: time.Now()}}
	body, err := ledger.CanonicalBody(new(done.Outcome(time.Now())))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Append(ctx, []ledger.Record{{Kind: ledger.KindRunOutcome, Body: body}}, ""); err != nil {
		t.Fatal(err)
	}
	// A queued run canceled with its row changed but no leaf yet.
	q, _ := rs.Create(ctx, spec, "ci")
	if _, final, err := rs.Cancel(ctx, q.ID); err != nil || !final {
		t.Fatal(final, err)
	}
	s, err := New(Config{Store: st, Runs: rs, LeaseTTL: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	if err := s.StartRuns(sctx, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // several sweeps past the lease's end
	got, err := rs.Get(ctx, crashed.ID)
	if err != nil || got.State != runs.Done || got.OutcomeEntry == "" || len(got.Attempts) != 1 {
		t.Fatalf("the crashed finish's run: %+v %v; want done from its logged outcome, not queued again", got, err)
	}
	c, err := rs.Get(ctx, q.ID)
	if err != nil || c.State != runs.Canceled || c.OutcomeEntry == "" {
		t.Fatalf("the canceled run: %+v %v; want its outcome leaf appended", c, err)
	}
}
