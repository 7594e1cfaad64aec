package web

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVerifyHeadAPI: POST /heads/verify verifies a repository on the
// server's disk, records the verification, and GET /heads lists it; bad
// requests are 4xx and record nothing.
func TestVerifyHeadAPI(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	repo := t.TempDir()
	run := func(args ...string) {
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.org", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.org")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	run("init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(repo, "f"), []byte("x\n"), 0o644)
	run("add", ".")
	run("commit", "-q", "-m", "unsigned")

	e := newAPIEnv(t, Config{})
	policy := "version: 1\nrules:\n  - repositories: [\"example/app\"]\n    refs: [\"HEAD\", \"refs/heads/*\"]\n    schemes: [ssh]\n    ssh:\n      allowed_signers: " + filepath.Join(repo, "f") + "\n"
	for _, bad := range []struct {
		body   any
		status int
		field  string
	}{
		{map[string]any{}, 400, "repo_path"},
		{map[string]any{"repo_path": filepath.Join(repo, "nope")}, 400, "repo_path"},
		{map[string]any{"repo_path": repo, "policy": "version: 1\nrules: [{colour: red}]\n"}, 400, "policy"},
		{map[string]any{"repo_path": repo, "unknown": 1}, 400, "unknown"},
	} {
		code, body := e.do(t, "POST", "/api/v1/heads/verify", e.record, bad.body)
		var ae APIError
		json.Unmarshal(body, &ae)
		if code != bad.status || ae.Field != bad.field {
			t.Fatalf("%v: %d %s", bad.body, code, body)
		}
	}
	if e.size(t) != 0 {
		t.Fatal("a bad request recorded something")
	}
	code, body := e.do(t, "POST", "/api/v1/heads/verify", e.record, map[string]any{"repo_path": repo, "repository": "example/app", "ref": "HEAD", "policy": policy})
	if code != 201 {
		t.Fatalf("verify: %d %s", code, body)
	}
	var res struct {
		Head struct {
			Verdict, Decision, Repository, Commit string
		} `json:"head"`
		ID string `json:"id"`
	}
	json.Unmarshal(body, &res)
	if res.Head.Verdict != "unsigned" || res.Head.Repository != "example/app" || res.ID == "" {
		t.Fatalf("verification: %s", body)
	}
	code, body = e.do(t, "GET", "/api/v1/heads?repository=example/app", "", nil)
	if code != 200 || !strings.Contains(string(body), res.ID) || !strings.Contains(string(body), `"verdict":"unsigned"`) {
		t.Fatalf("list: %d %s", code, body)
	}
	if code, _ := e.do(t, "POST", "/api/v1/heads/verify", e.read, map[string]any{"repo_path": repo}); code != 403 {
		t.Fatalf("read token may not record: %d", code)
	}
}
