package runs_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/postgres"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
	"github.com/evidence-ledger/ledger/ledger/storetest/pgtest"
	"github.com/evidence-ledger/ledger/runs"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestMain(m *testing.M) { pgtest.Main(m) }

// open returns a run store on a new SQLite database or, under
// LEDGER_TEST_STORE=postgres, on a new PostgreSQL database, migrated by
// the ledger's store.
func open(t *testing.T) (*runs.Store, *clock) {
	t.Helper()
	ctx := context.Background()
	c := &clock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	if os.Getenv("LEDGER_TEST_STORE") == "postgres" {
		dsn := pgtest.NewDatabase(t)
		st, err := postgres.Open(ctx, postgres.Options{DSN: dsn, KeyDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		db, _, err := postgres.Connect(ctx, dsn, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		rs := runs.NewPostgres(db, c.now)
		t.Cleanup(func() { rs.Close() })
		return rs, c
	}
	path := filepath.Join(t.TempDir(), "ledger.db")
	st, err := sqlite.Open(ctx, sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	db, err := sqlite.OpenAux(path)
	if err != nil {
		t.Fatal(err)
	}
	rs := runs.New(db, c.now)
	t.Cleanup(func() { rs.Close() })
	return rs, c
}

func queue(t *testing.T, rs *runs.Store, spec runs.Spec) runs.Run {
	t.Helper()
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	r, err := rs.Create(context.Background(), spec, "ci")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func serves(backend ledger.Backend, labels map[string]string) func(runs.Run) bool {
	return func(r runs.Run) bool { return runs.Serves(r, backend, labels, "") }
}

func TestClaimMatchesLabelsAndBackend(t *testing.T) {
	rs, _ := open(t)
	ctx := context.Background()
	r := queue(t, rs, runs.Spec{Lanes: []string{"alloc-snapshot"}, Backend: ledger.BackendCPU, Labels: map[string]string{"gpu": "h200"}})
	for _, f := range []func(runs.Run) bool{serves(ledger.BackendCPU, map[string]string{"gpu": "a100"}), serves(ledger.BackendCPU, nil), serves(ledger.BackendCUDA, map[string]string{"gpu": "h200"})} {
		got, err := rs.Claim(ctx, "wrong", f, time.Minute)
		if err != nil || got != nil {
			t.Fatalf("a non-matching agent took the run: %+v %v", got, err)
		}
	}
	got, err := rs.Claim(ctx, "right", serves(ledger.BackendCPU, map[string]string{"gpu": "h200", "host": "x"}), time.Minute)
	if err != nil || got == nil || got.ID != r.ID || got.State != runs.Leased || got.Attempt != 1 || got.Agent != "right" {
		t.Fatalf("claim = %+v, %v", got, err)
	}
	again, err := rs.Claim(ctx, "right2", serves(ledger.BackendCPU, map[string]string{"gpu": "h200"}), time.Minute)
	if err != nil || again != nil {
		t.Fatalf("a leased run was claimed twice: %+v %v", again, err)
	}
}

func TestConcurrentClaimsOneWinner(t *testing.T) {
	rs, _ := open(t)
	queue(t, rs, runs.Spec{Lanes: []string{"l"}, Backend: ledger.BackendCPU})
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range 8 {
		wg.Go(func() {
			got, err := rs.Claim(context.Background(), "a"+string(rune('0'+i)), serves(ledger.BackendCPU, nil), time.Minute)
			if err != nil {
				t.Error(err)
			}
			if got != nil {
				mu.Lock()
				won++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d claims won one run", won)
	}
}

func TestExpiredLeaseRequeuesAsNextAttemptThenExpires(t *testing.T) {
	rs, c := open(t)
	ctx := context.Background()
	r := queue(t, rs, runs.Spec{Lanes: []string{"l"}, Backend: ledger.BackendCPU, MaxAttempts: 2})
	a1, _ := rs.Claim(ctx, "a1", serves(ledger.BackendCPU, nil), 10*time.Second)
	if _, err := rs.Extend(ctx, r.ID, "a1", 1, a1.LeaseID, &runs.Progress{Lane: "l", Done: 1, Total: 3}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	c.add(11 * time.Second)
	final, requeued, err := rs.ExpireLeases(ctx)
	if err != nil || len(final) != 0 || requeued != 1 {
		t.Fatalf("expire: %v %d %v", final, requeued, err)
	}
	// Queued again: the expired attempt's 1/3 is not the run's progress.
	if g, _ := rs.Get(ctx, r.ID); g.State != runs.Queued || g.Progress != (runs.Progress{}) {
		t.Fatalf("the requeued run shows %s with progress %+v, want queued with none", g.State, g.Progress)
	}
	// The expired holder can neither extend nor finish.
	if _, err := rs.Extend(ctx, r.ID, "a1", 1, a1.LeaseID, nil, time.Minute); !errors.Is(err, runs.ErrLeaseNotHeld) {
		t.Fatalf("extend of an expired lease: %v", err)
	}
	if _, err := rs.Finish(ctx, r.ID, a1.LeaseID, runs.Done, nil, nil, "", ""); !errors.Is(err, runs.ErrLeaseNotHeld) {
		t.Fatalf("finish of an expired lease: %v", err)
	}
	a2, _ := rs.Claim(ctx, "a2", serves(ledger.BackendCPU, nil), 10*time.Second)
	if a2 == nil || a2.Attempt != 2 || len(a2.Attempts) != 1 || a2.Attempts[0].Outcome != "infrastructure" || a2.Attempts[0].Agent != "a1" {
		t.Fatalf("attempt 2 = %+v", a2)
	}
	if _, err := rs.Extend(ctx, r.ID, "a2", 2, a2.LeaseID, &runs.Progress{Lane: "l", Done: 2, Total: 3}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if g, _ := rs.Get(ctx, r.ID); g.State != runs.Running || g.Progress.Done != 2 {
		t.Fatalf("a running run shows %+v", g)
	}
	c.add(11 * time.Second)
	final, _, err = rs.ExpireLeases(ctx)
	if err != nil || len(final) != 1 || final[0].State != runs.Expired || len(final[0].Attempts) != 2 {
		t.Fatalf("after the last attempt: %+v %v", final, err)
	}
	// A final run shows no progress: the last heartbeat's 2/3 would read
	// as a run stopped part-way.
	if g, _ := rs.Get(ctx, r.ID); g.Progress != (runs.Progress{}) {
		t.Fatalf("the expired run shows progress %+v", g.Progress)
	}
	o := final[0].Outcome(c.now())
	if err := o.Validate(); err != nil {
		t.Fatalf("outcome of an expired run does not validate: %v", err)
	}
}

func TestCancel(t *testing.T) {
	rs, _ := open(t)
	ctx := context.Background()
	q := queue(t, rs, runs.Spec{Lanes: []string{"l"}, Backend: ledger.BackendCPU})
	got, final, err := rs.Cancel(ctx, q.ID)
	if err != nil || !final || got.State != runs.Canceled {
		t.Fatalf("cancel of a queued run: %+v %v %v", got, final, err)
	}
	if c, _ := rs.Claim(ctx, "a", serves(ledger.BackendCPU, nil), time.Minute); c != nil {
		t.Fatal("a canceled run was claimed")
	}
	r := queue(t, rs, runs.Spec{Lanes: []string{"l"}, Backend: ledger.BackendCPU})
	l, _ := rs.Claim(ctx, "a", serves(ledger.BackendCPU, nil), time.Minute)
	if got, final, err = rs.Cancel(ctx, r.ID); err != nil || final || got.State != runs.Canceling {
		t.Fatalf("cancel of a leased run: %+v %v %v", got, final, err)
	}
	hb, err := rs.Extend(ctx, r.ID, "a", 1, l.LeaseID, &runs.Progress{}, time.Minute)
	if err != nil || hb.State != runs.Canceling {
		t.Fatalf("the heartbeat after a cancel says %q (%v), want canceling", hb.State, err)
	}
}

func TestSpecValidate(t *testing.T) {
	for _, tc := range []struct {
		spec  runs.Spec
		field string
	}{
		{runs.Spec{Backend: ledger.BackendCPU}, "lanes"},
		{runs.Spec{Lanes: []string{"A B"}, Backend: ledger.BackendCPU}, "lanes[0]"},
		{runs.Spec{Lanes: []string{"l"}, Backend: "tpu"}, "backend"},
		{runs.Spec{Lanes: []string{"l"}, Backend: ledger.BackendCPU, Labels: map[string]string{"Bad Key": "x"}}, "labels"},
		{runs.Spec{Lanes: []string{"l"}, Backend: ledger.BackendCPU, Commit: "abc"}, "commit"},
		{runs.Spec{Lanes: []string{"l"}, Backend: ledger.BackendCPU, MaxAttempts: 11}, "max_attempts"},
		{runs.Spec{Lanes: []string{"l"}, Backend: ledger.BackendCPU, Repository: "github.com/o/r"}, ""},
		{runs.Spec{Lanes: []string{"l"}, Backend: ledger.BackendCPU}, ""},
		// A repository no agent can declare (runs.ValidateRepository).
		{runs.Spec{Lanes: []string{"l"}, Backend: ledger.BackendCPU, Repository: "/etc/passwd"}, "repository"},
		{runs.Spec{Lanes: []string{"l"}, Backend: ledger.BackendCPU, Repository: "github.com/a/b?x=1"}, "repository"},
		{runs.Spec{Lanes: []string{"l"}, Backend: ledger.BackendCPU, Repository: "github.com/x/y.git"}, "repository"},
		{runs.Spec{Lanes: []string{"l"}, Backend: ledger.BackendCPU, Repository: "mlx"}, "repository"},
		{runs.Spec{Lanes: []string{"l"}, Backend: ledger.BackendCPU, Repository: "github.com/o/r\u200b"}, "repository"},
	} {
		err := tc.spec.Validate()
		if tc.field == "" {
			if err != nil {
				t.Errorf("%+v: %v, want valid", tc.spec, err)
			}
			continue
		}
		var le *ledger.Error
		if !errors.As(err, &le) || le.Field != tc.field {
			t.Errorf("%+v: error %v, want one naming %s", tc.spec, err, tc.field)
		}
	}
}

// TestAbandonedRunQueuedWithoutProgress: a run whose agent abandons the
// attempt (an infrastructure failure) is queued again without the
// abandoned attempt's progress.
func TestAbandonedRunQueuedWithoutProgress(t *testing.T) {
	rs, _ := open(t)
	ctx := context.Background()
	r := queue(t, rs, runs.Spec{Lanes: []string{"l"}, Backend: ledger.BackendCPU, MaxAttempts: 2})
	a1, _ := rs.Claim(ctx, "a1", serves(ledger.BackendCPU, nil), 10*time.Second)
	if _, err := rs.Extend(ctx, r.ID, "a1", 1, a1.LeaseID, &runs.Progress{Lane: "l", Done: 2847, Total: 5508}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	g, err := rs.Abandon(ctx, r.ID, a1.LeaseID, ledger.RunAttempt{Attempt: 1, Agent: "a1", Outcome: "infrastructure", Reason: "device lost", At: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	if g.State != runs.Queued || g.Progress != (runs.Progress{}) {
		t.Fatalf("the abandoned run is %s with progress %+v, want queued with none", g.State, g.Progress)
	}
}

// TestProgressLane: progress names a lane of the run as the run names it,
// by name without the version, or, for a run lane named without one, as
// name/vN; anything else (another lane, text after the version, a version
// the run lane does not have) is refused naming progress.lane.
func TestProgressLane(t *testing.T) {
	for _, c := range []struct {
		run, lane string
		ok        bool
	}{
		{"alloc-footprint/v1", "alloc-footprint/v1", true},
		{"alloc-footprint/v1", "alloc-footprint", true},
		{"alloc-footprint", "alloc-footprint/v1", true},
		{"alloc-footprint", "alloc-footprint/v2", true},
		{"alloc-footprint/v1", "alloc-footprint/v2", false},
		{"alloc-footprint/v1", "alloc-footprint/v1\x1b]0;x\a", false},
		{"alloc-footprint", "alloc-footprint/v1\u202e", false},
		{"alloc-footprint", "alloc-footprint/vx", false},
		{"alloc-footprint/v1", "qmv-bias-sum/v1", false},
	} {
		err := runs.Progress{Lane: c.lane}.Validate([]string{c.run})
		var le *ledger.Error
		if c.ok != (err == nil) || err != nil && (!errors.As(err, &le) || le.Field != "progress.lane") {
			t.Errorf("progress lane %q of run lane %q: %v, want ok=%v", c.lane, c.run, err, c.ok)
		}
	}
}
