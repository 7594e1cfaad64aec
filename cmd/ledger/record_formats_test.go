package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
	"github.com/evidence-ledger/ledger/verify"
)

const cliJUnit = `<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="pkg" tests="2" failures="0" errors="0" skipped="0" timestamp="2026-11-29T10:00:00" time="1">
  <testcase classname="pkg" name="TestA" time="0.5"/>
  <testcase classname="pkg" name="TestB" time="0.5"/>
</testsuite>
`

const cliStream = `{"Time":"2026-11-29T10:00:00Z","Action":"start","Package":"p"}
{"Time":"2026-11-29T10:00:00Z","Action":"run","Package":"p","Test":"TestA"}
{"Time":"2026-11-29T10:00:00Z","Action":"output","Package":"p","Test":"TestA","Output":"no newline"}
{"Time":"2026-11-29T10:00:01Z","Action":"pass","Package":"p","Test":"TestA","Elapsed":1}
{"Time":"2026-11-29T10:00:01Z","Action":"pass","Package":"p","Elapsed":1}
`

// TestRecordFormats records JUnit XML, a go test -json stream and an
// in-toto Statement with ledger record, locally (with --from-git too) and
// through a server, and checks the refusals: a missing lane, and a
// statement whose commit disagrees with --commit.
func TestRecordFormats(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "ledger.db")
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	junit, stream := write("report.xml", cliJUnit), write("stream.json", cliStream)
	commit, tree := strings.Repeat("c", 40), strings.Repeat("d", 40)
	pins := []string{"--lane", "ci-tests/v1", "--backend", "cpu", "--repository", "github.com/example/repo", "--commit", commit, "--tree", tree}
	if _, _, code := runBin(t, "", "--db", db, "migrate"); code != 0 {
		t.Fatalf("migrate: %d", code)
	}
	for _, f := range []string{junit, stream} {
		out, se, code := runBin(t, "", append([]string{"--db", db, "record", f}, pins...)...)
		if code != 0 || strings.Count(out, "recorded") != 2 || !strings.Contains(out, "(original)") {
			t.Fatalf("record %s: %d\n%s%s", f, code, out, se)
		}
	}
	if _, se, code := runBin(t, "", "--db", db, "record", junit, "--backend", "cpu"); code != 2 || !strings.Contains(se, "lane") {
		t.Fatalf("record without --lane: %d %s", code, se)
	}
	statement := write("st.json", `{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"github.com/example/repo","digest":{"gitCommit":"`+
		strings.Repeat("e", 40)+`"}}],"predicateType":"https://in-toto.io/attestation/test-result/v0.1","predicate":{"result":"PASSED","passedTests":["a"],"warnedTests":[],"failedTests":[]}}`)
	if _, se, code := runBin(t, "", append([]string{"--db", db, "record", statement}, pins...)...); code != 2 || !strings.Contains(se, "commit") {
		t.Fatalf("statement whose commit disagrees with --commit: %d %s", code, se)
	}

	// --from-git reads the checkout in the working directory.
	repo := filepath.Join(dir, "repo")
	gitRun := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	os.MkdirAll(repo, 0o755)
	gitRun("init", "-q")
	os.WriteFile(filepath.Join(repo, "f"), []byte("x"), 0o644)
	gitRun("add", "f")
	gitRun("commit", "-qm", "c")
	gitRun("remote", "add", "origin", "https://example.com/repo.git")
	cmd := exec.Command(ledgerBin, "--db", db, "--json", "record", junit, "--lane", "ci-tests/v1", "--backend", "cpu", "--from-git", "--idempotency-key", "git-1")
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("record --from-git: %v %s", err, out)
	}
	head := gitRun("rev-parse", "HEAD")
	st, err := sqlite.Open(context.Background(), sqlite.Options{Path: db})
	if err != nil {
		t.Fatal(err)
	}
	evs, _, err := st.Evidence(context.Background(), ledger.EvidenceFilter{Commit: head})
	st.Close()
	if err != nil || len(evs) != 1 || evs[0].Evidence.Subject.Repository != "example.com/repo" || evs[0].Evidence.Subject.Tree != gitRun("rev-parse", "HEAD^{tree}") {
		t.Fatalf("evidence of --from-git: %v %+v", err, evs)
	}
	// The recorded report itself may lie untracked in the checkout; any
	// other untracked file makes the tree dirty, as for `ledger run`.
	inside := filepath.Join(repo, "report.xml")
	jb, _ := os.ReadFile(junit)
	os.WriteFile(inside, bytes.Replace(jb, []byte("ci"), []byte("cj"), 1), 0o644)
	cmd = exec.Command(ledgerBin, "--db", db, "record", "report.xml", "--lane", "ci-tests/v1", "--backend", "cpu", "--from-git")
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("record --from-git of the untracked report itself: %v %s", err, out)
	}
	os.WriteFile(filepath.Join(repo, "evil.go"), []byte("package x"), 0o644)
	cmd = exec.Command(ledgerBin, "--db", db, "record", "report.xml", "--lane", "ci-tests/v1", "--backend", "cpu", "--from-git")
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "dirty (evil.go)") {
		t.Fatalf("record --from-git with an untracked source file: %v %s", err, out)
	}
	os.Remove(filepath.Join(repo, "evil.go"))
	os.Remove(inside)
	os.WriteFile(filepath.Join(repo, "f"), []byte("dirty"), 0o644)
	cmd = exec.Command(ledgerBin, "--db", db, "record", junit, "--lane", "ci-tests/v1", "--backend", "cpu", "--from-git")
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "dirty (f") {
		t.Fatalf("record --from-git of a dirty tree: %v %s", err, out)
	}

	// Through a server: the server decodes.
	// An in-toto DSSE envelope by a key the local registry does not hold.
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	good := `{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"github.com/example/repo","digest":{"gitCommit":"` + commit +
		`"}}],"predicateType":"https://in-toto.io/attestation/test-result/v0.1","predicate":{"result":"PASSED","passedTests":["a"],"warnedTests":[],"failedTests":[]}}`
	envBytes, err := verify.SignRunnerEnvelope(context.Background(), priv, ledger.PayloadTypeInToto, []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	env := write("env.json", string(envBytes))
	if _, se, code := runBin(t, "", append([]string{"--db", db, "record", env}, pins...)...); code != 2 || !strings.Contains(se, "no registered runner key") {
		t.Fatalf("envelope by an unregistered key: %d %s", code, se)
	}
	if _, se, code := runBin(t, "", append([]string{"--db", db, "record", "--sign-key", env, junit}, pins...)...); code != 2 || !strings.Contains(se, "sign-key") {
		t.Fatalf("--sign-key with JUnit: %d %s", code, se)
	}

	// A server on its own database (and data directory: its signed state).
	dir2 := t.TempDir()
	db2 := filepath.Join(dir2, "server.db")
	runBin(t, "", "--db", db2, "migrate")
	secret, se, code := runBin(t, "", "--db", db2, "token", "create", "--name", "ci", "--scope", "record")
	if code != 0 {
		t.Fatalf("token create: %s", se)
	}
	srv, url := startServer(t, db2)
	defer srv.Process.Kill()
	remote := []string{"--server", url, "--token", strings.TrimSpace(secret), "record", "--format", "gotest", stream}
	out, se, code := runBin(t, "", append(remote, pins...)...)
	if code != 0 || strings.Count(out, "recorded") != 2 {
		t.Fatalf("remote record: %d\n%s%s", code, out, se)
	}
	if _, se, code := runBin(t, "", append([]string{"--server", url, "--token", strings.TrimSpace(secret), "record", "--format", "junit", stream}, pins...)...); code != 2 || !strings.Contains(se, "XML") {
		t.Fatalf("remote record of a stream as junit: %d %s", code, se)
	}
}
