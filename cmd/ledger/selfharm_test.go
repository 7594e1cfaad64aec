package main

import (
	"database/sql"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const approvalReleaseYAML = `version: 1.0.0
title: one manual gate
approval_role: release-manager
components:
  - name: c
    repository: example.com/c
    head: 1111111111111111111111111111111111111111
    reviewed: 1111111111111111111111111111111111111111
gates:
  - id: review
    kind: manual
    role: release-manager
`

// TestApprovalKeepsTheLogAuditable is the reproduction of an approval
// whose leaf the audit could not read (its "decision" is an object, a
// head's is a string): apply, sign off, approve through the real binary,
// then the audit passes, a restarted server serves the release and its
// readiness (no 5xx: the start-up scan does not call it tampered), and
// `ledger backup` audits.
func TestApprovalKeepsTheLogAuditable(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "l.db")
	rel := filepath.Join(dir, "rel.yaml")
	if err := os.WriteFile(rel, []byte(approvalReleaseYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(want int, args ...string) string {
		t.Helper()
		out, se, code := runBin(t, "", append([]string{"--db", db}, args...)...)
		if code != want {
			t.Fatalf("ledger %v: exit %d, want %d\n%s%s", args, code, want, out, se)
		}
		return out + se
	}
	secret := strings.TrimSpace(strings.SplitN(run(0, "token", "create", "--name", "boss", "--scope", "admin", "--role", "release-manager"), "\n", 2)[0])
	run(0, "release", "apply", rel, "--as", "boss")
	run(0, "release", "signoff", "1.0.0", "--gate", "review", "--note", "ok", "--as", "boss")
	run(0, "release", "approve", "1.0.0", "--note", "ship", "--as", "boss")
	if out := run(0, "audit"); !strings.Contains(out, "audit passed: 4 leaves") {
		t.Fatalf("audit: %s", out)
	}

	srv, url := startServer(t, db)
	defer func() { srv.Process.Kill(); srv.Wait() }()
	for _, p := range []string{"/", "/releases/1.0.0", "/api/v1/releases/1.0.0", "/api/v1/releases/1.0.0/readiness", "/api/v1/log/leaves/3", "/healthz"} {
		res, err := http.Get(url + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode >= 500 {
			t.Fatalf("GET %s after an approval: %d %s", p, res.StatusCode, b)
		}
	}
	// An append after the restart is taken (the server is not in the
	// tampered state).
	if o, e, code := runBin(t, releaseEvidence(strings.Repeat("1", 40)), "--server", url, "--token", secret, "record", "-"); code != 0 {
		t.Fatalf("record after restart: %d %s%s", code, o, e)
	}
	srv.Process.Kill()
	srv.Wait()
	backup := filepath.Join(t.TempDir(), "b")
	if out := run(0, "backup", backup); !strings.Contains(out, "audit") {
		t.Fatalf("backup: %s", out)
	}
}

// TestEmptyLedgerAudits: a new ledger (schema, key, no leaf) audits with
// its public key, and `audit --against` a checkpoint of another size
// reports a rollback (exit 1), not an error.
func TestEmptyLedgerAudits(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "l.db")
	if _, se, code := runBin(t, "", "--db", db, "migrate"); code != 0 {
		t.Fatalf("migrate: %s", se)
	}
	if out, se, code := runBin(t, "", "--db", db, "audit"); code != 0 || !strings.Contains(out, "audit passed: 0 leaves") {
		t.Fatalf("audit of an empty ledger: exit %d %s%s", code, out, se)
	}
	// A checkpoint this log signed at size 1, saved by a client; then the
	// database is replaced by an empty one.
	if _, se, code := runBin(t, "", "--db", db, "token", "create", "--name", "a", "--scope", "admin"); code != 0 {
		t.Fatal(se)
	}
	cp := filepath.Join(dir, "cp.json")
	srv, url := startServer(t, db)
	res, err := http.Get(url + "/api/v1/log/checkpoint")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	srv.Process.Kill()
	srv.Wait()
	os.WriteFile(cp, b, 0o644)
	empty := filepath.Join(t.TempDir(), "e.db")
	if _, se, code := runBin(t, "", "--db", empty, "--data-dir", filepath.Dir(empty), "migrate"); code != 0 {
		t.Fatal(se)
	}
	out, se, code := runBin(t, "", "--db", empty, "--data-dir", filepath.Dir(empty), "audit", "--against", cp, "--key", filepath.Join(dir, "ledger.pub"))
	if code != 1 || !strings.Contains(out, "rollback") {
		t.Fatalf("audit --against on an empty log: exit %d %s%s", code, out, se)
	}
}

// TestSecondDatabaseInOneDirectory: a second database in a directory whose
// key and journal belong to a log with signed leaves is refused before
// anything is written, with a message saying how to give it its own; the
// directory named after it (NAME.ledger) is then found by its name, and
// both ledgers audit.
func TestSecondDatabaseInOneDirectory(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.db"), filepath.Join(dir, "b.db")
	if _, se, code := runBin(t, "", "--db", a, "token", "create", "--name", "a", "--scope", "admin"); code != 0 {
		t.Fatal(se)
	}
	_, se, code := runBin(t, "", "--db", b, "token", "create", "--name", "b", "--scope", "admin")
	if code != 2 || !strings.Contains(se, "b.ledger") || !strings.Contains(se, "--data-dir") {
		t.Fatalf("second database: exit %d %s", code, se)
	}
	if _, err := os.Stat(b); err == nil {
		t.Fatal("the refused database file was created")
	}
	if err := os.Mkdir(filepath.Join(dir, "b.ledger"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, se, code := runBin(t, "", "--db", b, "token", "create", "--name", "b", "--scope", "admin"); code != 0 {
		t.Fatalf("second database with its own data directory: %s", se)
	}
	if _, err := os.Stat(filepath.Join(dir, "b.ledger", "ledger.key")); err != nil {
		t.Fatalf("b's key is not in b.ledger: %v", err)
	}
	for _, db := range []string{a, b} {
		if _, se, code := runBin(t, "", "--db", db, "token", "create", "--name", "again", "--scope", "record"); code != 0 {
			t.Fatalf("%s: %s", db, se)
		}
		if out, se, code := runBin(t, "", "--db", db, "audit"); code != 0 || !strings.Contains(out, "2 leaves") {
			t.Fatalf("audit %s: %d %s%s", db, code, out, se)
		}
	}
}

// TestKeyChainOfARecreatedLog: `ledger key chain --server --key OLD.pub`
// for a log that was re-created under another key (no rotation leaf
// links the two) fails (exit 2) naming the chain, and still prints the
// chain of the log's own key.
func TestKeyChainOfARecreatedLog(t *testing.T) {
	old := t.TempDir()
	if _, se, code := runBin(t, "", "--db", filepath.Join(old, "l.db"), "token", "create", "--name", "a", "--scope", "admin"); code != 0 {
		t.Fatal(se)
	}
	oldPub := filepath.Join(old, "ledger.pub")
	fresh := t.TempDir()
	db := filepath.Join(fresh, "l.db")
	if _, se, code := runBin(t, "", "--db", db, "token", "create", "--name", "a", "--scope", "admin"); code != 0 {
		t.Fatal(se)
	}
	srv, url := startServer(t, db)
	defer func() { srv.Process.Kill(); srv.Wait() }()
	if out, se, code := runBin(t, "", "--server", url, "key", "chain", "--key", oldPub); code != 2 || !strings.Contains(se, "not in the log's key chain") {
		t.Fatalf("key chain of a re-created log with the old key: exit %d %s%s", code, out, se)
	}
	own, _ := os.ReadFile(filepath.Join(fresh, "ledger.pub"))
	if out, se, code := runBin(t, "", "--server", url, "key", "chain", "--key", filepath.Join(fresh, "ledger.pub")); code != 0 || strings.TrimSpace(out) != strings.TrimSpace(string(own)) {
		t.Fatalf("key chain with the log's own key: exit %d %q %s, want %q", code, out, se, own)
	}
}

// TestRevocationKindEditUnderARunningServer: a database writer hides a
// token's revocation leaf from kind-column queries (kind set to another
// kind) and clears the tokens row's revocation, under a running server
// with the full scan off. The revoked token stays refused: the token
// projection is folded from the kinds the leaf bytes carry.
func TestRevocationKindEditUnderARunningServer(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "l.db")
	rel := filepath.Join(dir, "rel.yaml")
	os.WriteFile(rel, []byte(approvalReleaseYAML), 0o644)
	run := func(args ...string) string {
		t.Helper()
		out, se, code := runBin(t, "", append([]string{"--db", db}, args...)...)
		if code != 0 {
			t.Fatalf("ledger %v: exit %d %s%s", args, code, out, se)
		}
		return out
	}
	run("token", "create", "--name", "boss", "--scope", "admin", "--role", "release-manager")
	old := strings.TrimSpace(run("token", "create", "--name", "old", "--scope", "admin", "--role", "release-manager"))
	run("token", "revoke", "old")
	run("release", "apply", rel, "--as", "boss")
	srv, url := startServer(t, db, "--full-scan=false")
	defer func() { srv.Process.Kill(); srv.Wait() }()
	signoff := func() (string, int) {
		out, se, code := runBin(t, "", "--server", url, "--token", old, "release", "signoff", "1.0.0", "--gate", "review", "--note", "x")
		return out + se, code
	}
	if out, code := signoff(); code == 0 {
		t.Fatalf("a revoked token signed off: %s", out)
	}
	h, err := sql.Open("sqlite", "file:"+db)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := h.Exec(`UPDATE leaves SET kind = 'release' WHERE kind = 'token-revocation'`); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Exec(`UPDATE tokens SET revoked_at = NULL, revoked_idx = NULL WHERE name = 'old'`); err != nil {
		t.Fatal(err)
	}
	if out, code := signoff(); code == 0 {
		t.Fatalf("the revoked token signed off after its revocation was hidden from kind queries: %s", out)
	}
	if out, se, code := runBin(t, "", "--server", url, "--token", old, "release", "approve", "1.0.0", "--note", "ship"); code == 0 {
		t.Fatalf("the revoked token approved: %s%s", out, se)
	}
}

// TestSecondDatabaseBeforeTheFirstSigns: the key a first database's
// `migrate` made is its own even before it signs a leaf: a second
// database in the directory is refused (nothing written), and the first
// then signs and audits.
func TestSecondDatabaseBeforeTheFirstSigns(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.db"), filepath.Join(dir, "b.db")
	if _, se, code := runBin(t, "", "--db", a, "migrate"); code != 0 {
		t.Fatal(se)
	}
	_, se, code := runBin(t, "", "--db", b, "token", "create", "--name", "b", "--scope", "admin")
	if code != 2 || !strings.Contains(se, "b.ledger") || !strings.Contains(se, "a.db") {
		t.Fatalf("second database before the first signed: exit %d %s", code, se)
	}
	if _, err := os.Stat(b); err == nil {
		t.Fatal("the refused database file was created")
	}
	if _, se, code := runBin(t, "", "--db", a, "token", "create", "--name", "a", "--scope", "admin"); code != 0 {
		t.Fatalf("the first database after the refusal: %s", se)
	}
	if out, se, code := runBin(t, "", "--db", a, "audit"); code != 0 {
		t.Fatalf("audit: %s%s", out, se)
	}
}
