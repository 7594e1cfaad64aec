package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/keys"
	"github.com/evidence-ledger/ledger/ledger/tlog"
	"golang.org/x/mod/sumdb/note"
)

// TestRotateEngine: a rotation on an empty log and on a grown one; the
// journal's key line survives a reopen; Append refuses a key-rotation
// record; a retired key is refused at start.
func TestRotateEngine(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{0, 5} {
		path := buildLog(t, n)
		dir := filepath.Dir(path)
		old, err := keys.Load(dir, false)
		if err != nil {
			t.Fatal(err)
		}
		state, err := tlog.OpenSignedState(filepath.Join(dir, tlog.SignedStateFile))
		if err != nil {
			t.Fatal(err)
		}
		s, err := Open(ctx, Options{Path: path, Key: old, OnCheckpoint: state.Record})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CheckStart(ctx, s, nil); err != nil { // buildLog keeps no journal
			t.Fatal(err)
		}
		if _, err := s.Append(ctx, []ledger.Record{{Kind: ledger.KindKeyRotation, Body: []byte(`{}`)}}, ""); ledger.ErrorCode(err) != ledger.CodeInvalid {
			t.Fatalf("Append of a key-rotation record: %v", err)
		}
		next, _, err := keys.Generate(s.Origin())
		if err != nil {
			t.Fatal(err)
		}
		e, cp, err := s.Rotate(ctx, next.Signer, next.VerifierKey)
		if err != nil {
			t.Fatal(err)
		}
		if e.Index != uint64(n) || cp.Size != uint64(n)+1 {
			t.Fatalf("rotation at %d, checkpoint %d", e.Index, cp.Size)
		}
		ov, _ := note.NewVerifier(old.VerifierKey)
		if _, err := note.Open([]byte(cp.Note), note.VerifierList(ov)); err != nil {
			t.Fatal("the rotation's checkpoint is not signed by the old key")
		}
		res, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(1000))}, "")
		if err != nil {
			t.Fatal(err)
		}
		nv, _ := note.NewVerifier(next.VerifierKey)
		if _, err := note.Open([]byte(res.Checkpoint.Note), note.VerifierList(nv)); err != nil {
			t.Fatal("the next checkpoint is not signed by the new key")
		}
		if c := s.KeyChain(); len(c) != 2 || c.KeyFor(cp.Size) != old.VerifierKey || c.KeyFor(cp.Size+1) != next.VerifierKey {
			t.Fatalf("chain %+v", c)
		}
		if err := state.RecordKey(cp.Size+1, next.VerifierKey); err != nil {
			t.Fatal(err)
		}
		s.Close()
		again, err := tlog.OpenSignedState(filepath.Join(dir, tlog.SignedStateFile))
		if err != nil {
			t.Fatal(err)
		}
		if k, ok := again.LastKey(); !ok || k.Key != next.VerifierKey || k.Size != cp.Size+1 {
			t.Fatalf("journal key line: %+v %v", k, ok)
		}
		if err := again.RecordKey(1, "not a key"); err == nil {
			t.Fatal("a malformed key line was written")
		}
		// The old key is refused at start; the new key starts.
		s, err = Open(ctx, Options{Path: path, Key: old})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CheckStart(ctx, s, again); err == nil {
			t.Fatal("the retired key was accepted at start")
		}
		s.Close()
		s, err = Open(ctx, Options{Path: path, Key: next})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CheckStart(ctx, s, again); err != nil {
			t.Fatalf("the new key at start: %v", err)
		}
		if rep := mustAudit(t, s); !rep.OK || len(rep.KeyChain) != 2 {
			t.Fatalf("audit: %+v", rep)
		}
		s.Close()
	}
}

func mustAudit(t *testing.T, s *Store) ledger.AuditReport {
	t.Helper()
	rep, err := s.Audit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}
