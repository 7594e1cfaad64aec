package sqlite

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
)

// TestRollbackUnderRunningStoreRefused: leaves and checkpoints deleted by
// raw SQL down to an earlier size while the store is open (a rollback the
// store did not do). The next append must not sign a second root for a
// size it signed: it is refused with CodeUnavailable naming both sizes,
// the log is in the tampered state, and CheckStored (the server's
// watchdog) reports the same.
func TestRollbackUnderRunningStoreRefused(t *testing.T) {
	s, path := openTest(t)
	ctx := context.Background()
	for i := range 6 {
		if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(i))}, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Log.CheckStored(ctx); err != nil {
		t.Fatalf("CheckStored on an untouched log: %v", err)
	}
	h, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"DELETE FROM evidence_artifacts WHERE idx >= 3", "DELETE FROM recent_ids WHERE idx >= 3", "DELETE FROM entry_ids WHERE idx >= 3",
		"DELETE FROM leaves WHERE idx >= 3", "DELETE FROM tree_nodes WHERE ord >= 256", "DELETE FROM checkpoints WHERE size > 3",
	} {
		if _, err := h.Exec(q); err != nil && !strings.Contains(err.Error(), "no such table") {
			t.Fatalf("%s: %v", q, err)
		}
	}
	h.Close()
	if err := s.Log.CheckStored(ctx); ledger.ErrorCode(err) != ledger.CodeUnavailable {
		t.Fatalf("CheckStored after the rollback: %v", err)
	}
	_, err = s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(100))}, "")
	if ledger.ErrorCode(err) != ledger.CodeUnavailable || !strings.Contains(err.Error(), "refusing to sign") {
		t.Fatalf("append after the rollback: %v", err)
	}
	if _, bad := s.Log.Tampered(); !bad {
		t.Fatal("the log is not in the tampered state after the rollback")
	}
	if cp, _ := s.Log.CheckpointAt(ctx, 0); cp.Size != 3 {
		t.Fatalf("a checkpoint was signed after the rollback: size %d", cp.Size)
	}
}

// TestRollbackFoundByTheAppend: the same rollback found by the append's
// own check (checkExtends) when no watchdog ran before it.
func TestRollbackFoundByTheAppend(t *testing.T) {
	s, path := openTest(t)
	ctx := context.Background()
	for i := range 6 {
		if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(i))}, ""); err != nil {
			t.Fatal(err)
		}
	}
	h, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"DELETE FROM evidence_artifacts WHERE idx >= 3", "DELETE FROM leaves WHERE idx >= 3", "DELETE FROM checkpoints WHERE size > 3"} {
		if _, err := h.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	h.Close()
	_, err = s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(100))}, "")
	if ledger.ErrorCode(err) != ledger.CodeUnavailable || !strings.Contains(err.Error(), "fewer than the 6 this process signed") {
		t.Fatalf("append after the rollback: %v", err)
	}
	if _, bad := s.Log.Tampered(); !bad {
		t.Fatal("the log is not in the tampered state after the rollback")
	}
}
