package keys

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
)

// A generated key is written 0600 with its verifier key beside it, loads
// back as the same identity, and signs notes its verifier key opens.
func TestGenerateAndLoad(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	k, err := Load(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v; want 0600", st.Mode().Perm(), err)
	}
	pub, err := os.ReadFile(filepath.Join(dir, PubFile))
	if err != nil || strings.TrimSpace(string(pub)) != k.VerifierKey {
		t.Fatalf("ledger.pub %q, verifier key %q (%v)", pub, k.VerifierKey, err)
	}
	again, err := Load(dir, false)
	if err != nil || again.VerifierKey != k.VerifierKey || again.Signer.Name() != k.Signer.Name() {
		t.Fatalf("reload: %+v %v", again, err)
	}
	if !strings.HasPrefix(k.Signer.Name(), "ledger.") {
		t.Fatalf("key name %q", k.Signer.Name())
	}
	v, err := note.NewVerifier(k.VerifierKey)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := note.Sign(&note.Note{Text: "hello\n"}, again.Signer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := note.Open(msg, note.VerifierList(v)); err != nil {
		t.Fatalf("a note signed with the loaded key does not open: %v", err)
	}
}

// A missing key is an error without create; a key readable by others and
// a malformed or non-Ed25519 key are refused, naming the file but not its
// content.
func TestLoadRefuses(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir, false); err == nil || !strings.Contains(err.Error(), KeyFile) {
		t.Fatalf("missing key without create: %v", err)
	}
	if _, err := Load(dir, true); err != nil {
		t.Fatal(err)
	}
	kp := filepath.Join(dir, KeyFile)
	if err := os.Chmod(kp, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir, false); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("key readable by others: %v", err)
	}
	secret := "PRIVATE+KEY+ledger.x+00000000+notbase64!!"
	if err := os.WriteFile(kp, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(dir, false)
	if err == nil || strings.Contains(err.Error(), "notbase64") || !strings.Contains(err.Error(), KeyFile) {
		t.Fatalf("malformed key: %v", err)
	}
	if _, err := Parse("not a key"); err == nil {
		t.Fatal("Parse accepted a non-key")
	}
}
