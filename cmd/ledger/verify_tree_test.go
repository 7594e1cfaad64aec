package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func gitT(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.org", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.org",
		"GIT_AUTHOR_DATE=2026-11-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-11-01T00:00:00Z")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestVerifyTreeRecordFeedsTheGate: `ledger verify tree --record` records
// tree-equivalence/v1 evidence that a release's tree-equivalence gate
// counts, and a difference outside the pins fails the gate.
func TestVerifyTreeRecordFeedsTheGate(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	repo := t.TempDir()
	gitT(t, repo, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(repo, "main.go"), []byte("package main\n"), 0o644)
	os.WriteFile(filepath.Join(repo, "go.sum"), []byte("a v1\n"), 0o644)
	gitT(t, repo, "add", ".")
	gitT(t, repo, "commit", "-q", "-m", "reviewed")
	reviewed := gitT(t, repo, "rev-parse", "HEAD")
	os.WriteFile(filepath.Join(repo, "go.sum"), []byte("a v2\n"), 0o644)
	gitT(t, repo, "commit", "-q", "-am", "bump pin")
	head := gitT(t, repo, "rev-parse", "HEAD")
	tree := gitT(t, repo, "rev-parse", "HEAD^{tree}")
	os.WriteFile(filepath.Join(repo, "main.go"), []byte("package main // changed\n"), 0o644)
	gitT(t, repo, "commit", "-q", "-am", "sneaky")
	bad := gitT(t, repo, "rev-parse", "HEAD")

	db := filepath.Join(t.TempDir(), "ledger.db")
	out, se, code := runBin(t, "", "--db", db, "verify", "tree", "--repo", repo, "--head", head, "--reviewed", reviewed, "--pins", "go.sum", "--record", "--repository", "example/app")
	if code != 0 || !strings.Contains(out, "equivalent") || !strings.Contains(out, "recorded as") {
		t.Fatalf("verify tree: %d %s %s", code, out, se)
	}
	rel := "version: t1\ncomponents:\n  - name: app\n    repository: example/app\n    reviewed: " + reviewed + "\n    head: " + head + "\n    tree: " + tree + "\n    pins: [go.sum]\ngates:\n  - id: tree\n    kind: tree-equivalence\n"
	relFile := filepath.Join(t.TempDir(), "rel.yaml")
	os.WriteFile(relFile, []byte(rel), 0o644)
	if _, se, code := runBin(t, "", "--db", db, "release", "apply", relFile); code != 0 {
		t.Fatalf("apply: %s", se)
	}
	if out, se, code := runBin(t, "", "--db", db, "release", "check", "t1"); code != 0 {
		t.Fatalf("check: want ready (0), got %d\n%s%s", code, out, se)
	}
	// A head that changes a file outside the pins: recorded as failed.
	out, _, code = runBin(t, "", "--db", db, "verify", "tree", "--repo", repo, "--head", bad, "--reviewed", reviewed, "--pins", "go.sum", "--record", "--repository", "example/app")
	if code != 1 || !strings.Contains(out, "OUTSIDE pins") {
		t.Fatalf("verify tree of a bad head: %d %s", code, out)
	}
}
