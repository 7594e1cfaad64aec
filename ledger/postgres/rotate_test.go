package postgres

import (
	"context"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/keys"
	"github.com/evidence-ledger/ledger/ledger/storetest"
	"github.com/evidence-ledger/ledger/ledger/storetest/pgtest"
)

// TestRotateAndAudit: a key rotation on PostgreSQL signs its own
// checkpoint with the old key and the next with the new, and the audit
// builds the key chain from the rotation leaf (KeyRotations) and passes;
// a store reopened with the retired key refuses to sign past the rotation.
func TestRotateAndAudit(t *testing.T) {
	ctx := context.Background()
	dsn, dir := pgtest.NewDatabase(t), t.TempDir()
	s := openTest(t, dsn, dir, false)
	if _, err := s.CheckStart(ctx, s, nil); err != nil { // loads the key chain
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := s.Append(ctx, []ledger.Record{storetest.Record(t, ledger.KindEvidence, storetest.Evidence(i))}, ""); err != nil {
			t.Fatal(err)
		}
	}
	old := s.VerifierKey()
	next, _, err := keys.Generate(s.Origin())
	if err != nil {
		t.Fatal(err)
	}
	e, cp, err := s.Log.Rotate(ctx, next.Signer, next.VerifierKey)
	if err != nil {
		t.Fatal(err)
	}
	if e.Index != 3 || cp.Size != 4 {
		t.Fatalf("rotation leaf %d, checkpoint %d", e.Index, cp.Size)
	}
	ov, _ := note.NewVerifier(old)
	if _, err := note.Open([]byte(cp.Note), note.VerifierList(ov)); err != nil {
		t.Fatal("the rotation's checkpoint is not signed by the old key")
	}
	res, err := s.Append(ctx, []ledger.Record{storetest.Record(t, ledger.KindEvidence, storetest.Evidence(10))}, "")
	if err != nil {
		t.Fatal(err)
	}
	nv, _ := note.NewVerifier(next.VerifierKey)
	if _, err := note.Open([]byte(res.Checkpoint.Note), note.VerifierList(nv)); err != nil {
		t.Fatal("the checkpoint after the rotation is not signed by the new key")
	}
	rep, err := s.Audit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || len(rep.KeyChain) != 2 {
		t.Fatalf("audit after rotation: ok=%v problem=%q chain=%d", rep.OK, rep.Problem, len(rep.KeyChain))
	}
}
