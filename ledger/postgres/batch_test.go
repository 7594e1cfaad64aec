package postgres

import (
	"context"
	"database/sql"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/storetest"
	"github.com/evidence-ledger/ledger/ledger/storetest/pgtest"
)

// TestFailedCommitStoresNothing: the checkpoint and idempotency rows go to
// PostgreSQL in one pipeline with COMMIT; when one of them fails (here a
// checkpoint row of the batch's size planted behind the server's back),
// the append is answered with an error and nothing of the batch stays:
// no leaf, no idempotency key, no checkpoint. Once the planted row is
// gone the next append succeeds on the same pool and the audit is clean.
func TestFailedCommitStoresNothing(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t)
	s := openTest(t, dsn, t.TempDir(), false)
	rec := func(i int) []ledger.Record {
		return []ledger.Record{storetest.Record(t, ledger.KindEvidence, storetest.Evidence(i))}
	}
	for i := range 2 {
		if _, err := s.Append(ctx, rec(i), ""); err != nil {
			t.Fatal(err)
		}
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("INSERT INTO checkpoints(size, root, note, created_at) VALUES (3, $1, 'planted', 0)", make([]byte, 32)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, rec(2), "key-1"); err == nil {
		t.Fatal("append whose checkpoint INSERT fails was acknowledged")
	}
	count := func(q string) int {
		var n int
		if err := db.QueryRow(q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, c := range []struct {
		q    string
		want int
	}{
		{"SELECT count(*) FROM leaves", 2},
		{"SELECT count(*) FROM idempotency", 0},
		{"SELECT count(*) FROM checkpoints WHERE note <> 'planted'", 2},
	} {
		if n := count(c.q); n != c.want {
			t.Fatalf("after the failed batch, %s = %d, want %d", c.q, n, c.want)
		}
	}
	if _, err := db.Exec("DELETE FROM checkpoints WHERE note = 'planted'"); err != nil {
		t.Fatal(err)
	}
	res, err := s.Append(ctx, rec(2), "key-1")
	if err != nil {
		t.Fatal(err)
	}
	if res.Checkpoint.Size != 3 {
		t.Fatalf("size %d after the retried append, want 3", res.Checkpoint.Size)
	}
	if n := count("SELECT count(*) FROM idempotency"); n != 1 {
		t.Fatalf("%d idempotency rows after the retried append, want 1", n)
	}
	if rep, err := s.Audit(ctx); err != nil || !rep.OK {
		t.Fatalf("audit: %+v %v", rep, err)
	}
}
