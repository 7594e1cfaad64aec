package main

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/keys"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
	"github.com/evidence-ledger/ledger/ledger/tlog"
	"golang.org/x/mod/sumdb/note"
)

func readTrim(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// maxCheckpoint returns the largest stored checkpoint size of db.
func maxCheckpoint(t *testing.T, db string) uint64 {
	t.Helper()
	h, err := sql.Open("sqlite", "file:"+db+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var n uint64
	if err := h.QueryRow("SELECT MAX(size) FROM checkpoints").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestKeyRotation rotates a real log's key with the real binary and
// checks what the rotation must and must not allow: later checkpoints
// are signed by the new key, the audit walks the chain from either key,
// the server restarts, a checkpoint the old key signed past the rotation
// fails the audit, a retired or a foreign key is refused at start, and a
// saved pre-rotation checkpoint audits against the chain.
func TestKeyRotation(t *testing.T) {
	tmpl := integrityTemplate(t, 6)
	db := copyDir(t, tmpl)
	dir := filepath.Dir(db)
	oldPub := readTrim(t, filepath.Join(dir, "ledger.pub"))
	oldSkey := readTrim(t, filepath.Join(dir, "ledger.key"))
	oldPubFile := filepath.Join(t.TempDir(), "old.pub")
	os.WriteFile(oldPubFile, []byte(oldPub+"\n"), 0o644)
	before := maxCheckpoint(t, db)
	savedCP := filepath.Join(t.TempDir(), "saved.checkpoint")
	{
		h, _ := sql.Open("sqlite", "file:"+db+"?mode=ro")
		var n string
		h.QueryRow("SELECT note FROM checkpoints WHERE size = ?", before).Scan(&n)
		h.Close()
		os.WriteFile(savedCP, []byte(n), 0o644)
	}

	out, se, code := runBin(t, "", "--db", db, "key", "rotate")
	if code != 0 {
		t.Fatalf("key rotate: %d %s %s", code, out, se)
	}
	newPub := readTrim(t, filepath.Join(dir, "ledger.pub"))
	if newPub == oldPub || !strings.Contains(out, "witnessctl add-key") || !strings.Contains(out, newPub) || !strings.Contains(out, "from size "+itoa(before+2)) {
		t.Fatalf("rotate output or ledger.pub: %s (pub %s)", out, newPub)
	}
	if st, err := os.Stat(filepath.Join(dir, "ledger.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("new ledger.key: %v %v", st, err)
	}
	if readTrim(t, filepath.Join(dir, "ledger.key")) == oldSkey {
		t.Fatal("ledger.key was not replaced")
	}
	if _, err := os.Stat(filepath.Join(dir, tlog.NextKeyFile)); err == nil {
		t.Fatal("ledger.key.next left behind")
	}
	if j := readTrim(t, filepath.Join(dir, tlog.SignedStateFile)); !strings.Contains(j, "key "+itoa(before+2)+" "+newPub) {
		t.Fatalf("journal lacks the key line: %s", j)
	}

	// Appends after the rotation: a local one, then through a restarted
	// server.
	if _, se, code := runBin(t, string(crashEvidence(100)), "--db", db, "record", "-"); code != 0 {
		t.Fatalf("record after rotation: %s", se)
	}
	secret, se, code := runBin(t, "", "--db", db, "token", "create", "--name", "ci2", "--scope", "record")
	if code != 0 {
		t.Fatalf("token create: %s", se)
	}
	for round := range 2 {
		srv, base := startServer(t, db)
		postEvidence(t, base, strings.TrimSpace(secret), int64(200+round))
		var lk ledger.LogKeys
		if c := getJSON(t, base+"/api/v1/log/keys", &lk); c != 200 || len(lk.Keys) != 2 || lk.Keys[0].Key != oldPub || lk.Keys[1].Key != newPub || lk.Keys[1].From != before+2 || len(lk.Rotations) != 1 {
			t.Fatalf("GET /log/keys: %d %+v", c, lk)
		}
		var cp ledger.Checkpoint
		getJSON(t, base+"/api/v1/log/checkpoint", &cp)
		nv, _ := note.NewVerifier(newPub)
		if _, err := note.Open([]byte(cp.Note), note.VerifierList(nv)); err != nil {
			t.Fatalf("checkpoint %d after the rotation is not signed by the new key: %v", cp.Size, err)
		}
		srv.Process.Kill()
		srv.Wait()
	}
	size := maxCheckpoint(t, db)

	// The audit walks the chain from the new key (ledger.pub) or the old.
	for _, k := range []string{filepath.Join(dir, "ledger.pub"), oldPubFile} {
		if out, se, code := runBin(t, "", "--db", db, "audit", "--key", k); code != 0 || !strings.Contains(out, "audit passed") || !strings.Contains(out, "2 keys") {
			t.Fatalf("audit --key %s: %d %s %s", k, code, out, se)
		}
	}
	// A client holding the old key learns the chain and audits its saved
	// pre-rotation checkpoint against the rotated log.
	chainOut, se, code := runBin(t, "", "--db", db, "key", "chain", "--key", oldPubFile)
	if code != 0 || chainOut != oldPub+"\n"+newPub+"\n" {
		t.Fatalf("key chain: %d %q %s", code, chainOut, se)
	}
	chainFile := filepath.Join(t.TempDir(), "chain.pub")
	os.WriteFile(chainFile, []byte(chainOut), 0o644)
	if out, se, code := runBin(t, "", "--db", db, "audit", "--against", savedCP, "--key", chainFile); code != 0 {
		t.Fatalf("audit --against with the chain: %d %s %s", code, out, se)
	}
	if out, _, code := runBin(t, "", "--db", db, "audit", "--against", savedCP, "--key", filepath.Join(dir, "ledger.pub")); code != 1 || !strings.Contains(out, "signed by another key") {
		t.Fatalf("audit --against with the new key alone accepted the old-key checkpoint: %d %s", code, out)
	}

	t.Run("old-key-signs-past-rotation", func(t *testing.T) {
		cp := copyDir(t, dir)
		old, err := keys.Parse(oldSkey)
		if err != nil {
			t.Fatal(err)
		}
		// The first checkpoint the new key must sign, re-signed by the
		// old key with its text unchanged.
		at := before + 2
		h, _ := sql.Open("sqlite", "file:"+cp)
		var n string
		if err := h.QueryRow("SELECT note FROM checkpoints WHERE size = ?", at).Scan(&n); err != nil {
			t.Fatal(err)
		}
		text := n[:strings.Index(n, "\n\n")+1]
		forged, err := note.Sign(&note.Note{Text: text}, old.Signer)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.Exec("UPDATE checkpoints SET note = ? WHERE size = ?", string(forged), at); err != nil {
			t.Fatal(err)
		}
		h.Close()
		auditFails(t, cp, nil, "checkpoint of size "+itoa(at)+": signature does not verify", "a retired key signed past its rotation")
		auditFails(t, cp, []string{"--key", oldPubFile}, "checkpoint of size "+itoa(at)+": signature does not verify")
	})

	t.Run("retired-key-put-back", func(t *testing.T) {
		cp := copyDir(t, dir)
		os.WriteFile(filepath.Join(filepath.Dir(cp), "ledger.key"), []byte(oldSkey+"\n"), 0o600)
		serveRefused(t, cp, "was retired by the key rotation leaf "+itoa(before), "the log's key since size "+itoa(before+2))
	})

	t.Run("foreign-key-without-rotation", func(t *testing.T) {
		cp := copyDir(t, dir)
		k, skey, err := keys.Generate(strings.SplitN(oldPub, "+", 2)[0])
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(filepath.Dir(cp), "ledger.key"), []byte(skey+"\n"), 0o600)
		os.WriteFile(filepath.Join(filepath.Dir(cp), "ledger.pub"), []byte(k.VerifierKey+"\n"), 0o644)
		serveRefused(t, cp, "is not a key of the log's key chain", "a log keeps its key until `ledger key rotate` records a new one")
		auditFails(t, cp, nil, "is not in the log's key chain")
	})

	if size <= before+2 {
		t.Fatalf("log did not grow past the rotation: %d", size)
	}
}

// rotationSigner signs like its key, except that RotationMessage bytes
// get a flipped signature or, with drop, none: a key-rotation leaf
// whose one signature is bad, appended and checkpointed by the real
// engine.
type rotationSigner struct {
	note.Signer
	drop bool
}

func (s rotationSigner) Sign(msg []byte) ([]byte, error) {
	sig, err := s.Signer.Sign(msg)
	if err != nil || !bytes.HasPrefix(msg, []byte("ledger key rotation v1\n")) {
		return sig, err
	}
	if s.drop {
		return nil, nil
	}
	sig[0] ^= 1
	return sig, nil
}

// TestKeyRotationBadSignature appends, through the real engine, a
// rotation leaf with one signature flipped or missing (by the old key or
// the new), puts the new key in place as `ledger key rotate` does, and
// checks that the real binary's audit fails naming the leaf and the
// server refuses to start.
func TestKeyRotationBadSignature(t *testing.T) {
	tmpl := integrityTemplate(t, 4)
	for _, tc := range []struct {
		name         string
		oldBad, drop bool
		want         string
	}{
		{"new-flipped", false, false, "the new key's signature does not verify"},
		{"new-missing", false, true, "the new key's signature is missing"},
		{"old-flipped", true, false, "the old key's signature does not verify"},
		{"old-missing", true, true, "the old key's signature is missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			db := copyDir(t, tmpl)
			dir := filepath.Dir(db)
			old, err := keys.Load(dir, false)
			if err != nil {
				t.Fatal(err)
			}
			state, err := tlog.OpenSignedState(filepath.Join(dir, tlog.SignedStateFile))
			if err != nil {
				t.Fatal(err)
			}
			signer := old
			if tc.oldBad {
				signer.Signer = rotationSigner{Signer: old.Signer, drop: tc.drop}
			}
			st, err := sqlite.Open(ctx, sqlite.Options{Path: db, Key: signer, OnCheckpoint: state.Record})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.CheckStart(ctx, st, state); err != nil {
				t.Fatal(err)
			}
			next, skey, err := keys.Generate(st.Origin())
			if err != nil {
				t.Fatal(err)
			}
			var ns note.Signer = next.Signer
			if !tc.oldBad {
				ns = rotationSigner{Signer: next.Signer, drop: tc.drop}
			}
			e, _, err := st.Rotate(ctx, ns, next.VerifierKey)
			if err != nil {
				t.Fatal(err)
			}
			st.Close()
			if _, err := ledger.ParseKeyRotation(e.Body, e.Index, next.Signer.Name(), old.VerifierKey); err == nil {
				t.Fatal("the bad rotation verifies")
			}
			os.WriteFile(filepath.Join(dir, tlog.NextKeyFile), []byte(skey+"\n"), 0o600)
			if err := finishRotation(dir, rotation{NewKey: next.VerifierKey, TakeoverSize: e.Index + 2}); err != nil {
				t.Fatal(err)
			}
			auditFails(t, db, nil, "FAILED at index "+itoa(e.Index), "key rotation leaf "+itoa(e.Index)+": "+tc.want)
			serveRefused(t, db, "the log's key chain does not verify", tc.want)
		})
	}
}
