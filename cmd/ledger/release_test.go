package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const releaseCLIYAML = `version: 3.1.0
components:
  - name: core
    repository: example/core
    reviewed: bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb
    head: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa
gates:
  - id: qmv
    kind: lane
    lane: qmv-bias-sum/v1
    component: core
    backends: [cpu]
  - id: platform
    kind: manual
    role: platform-reviewer
`

func releaseEvidence(commit string) string {
	now := time.Now().UTC().Format(time.RFC3339)
	ev := map[string]any{
		"lane": "qmv-bias-sum/v1", "backend": "cpu", "cases_exact": 216, "cases_total": 216, "control": "caught", "status": "passed",
		"subject":    map[string]any{"repository": "example/core", "commit": commit, "tree": strings.Repeat("c", 40)},
		"started_at": now, "finished_at": now,
	}
	b, _ := json.Marshal(ev)
	return string(b)
}

// TestReleaseCheckExitCodes drives `ledger release` through the real binary:
// exit 2 on errors, 1 when not ready, 0 when ready; verdict verification and
// replay; the same through --server.
func TestReleaseCheckExitCodes(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "ledger.db")
	relFile := filepath.Join(dir, "release.yaml")
	os.WriteFile(relFile, []byte(releaseCLIYAML), 0o644)
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte(strings.Replace(releaseCLIYAML, "  - id: qmv\n", "  - id: qmv\n    colour: red\n", 1)), 0o644)

	expect := func(want int, args ...string) string {
		t.Helper()
		out, errOut, code := runBin(t, "", append([]string{"--db", db}, args...)...)
		if code != want {
			t.Fatalf("ledger %v: exit %d, want %d\nstdout: %s\nstderr: %s", args, code, want, out, errOut)
		}
		return out + errOut
	}
	if out := expect(2, "release", "apply", bad); !strings.Contains(out, "line 9") || !strings.Contains(out, "colour") {
		t.Fatalf("bad YAML error does not name line and field: %s", out)
	}
	expect(2, "release", "check", "3.1.0") // not defined
	expect(0, "release", "apply", relFile)
	out := expect(1, "release", "check", "3.1.0")
	if !strings.Contains(out, "NOT READY") || !strings.Contains(out, "open    qmv") {
		t.Fatalf("check output: %s", out)
	}
	// Evidence about another commit is baseline; the release stays unready.
	record := func(commit string) {
		t.Helper()
		if o, e, code := runBin(t, releaseEvidence(commit), "--db", db, "record", "-"); code != 0 {
			t.Fatalf("record: %d %s %s", code, o, e)
		}
	}
	record(strings.Repeat("b", 40))
	if out := expect(1, "release", "check", "3.1.0"); !strings.Contains(out, "reviewed source") {
		t.Fatalf("baseline reason missing: %s", out)
	}
	record(strings.Repeat("a", 40))
	expect(0, "token", "create", "--name", "pr", "--scope", "record", "--role", "platform-reviewer")
	expect(2, "release", "signoff", "3.1.0", "--gate", "platform") // no --as
	expect(0, "token", "create", "--name", "rm", "--scope", "admin", "--role", "release-manager")
	expect(2, "release", "approve", "3.1.0", "--as", "pr") // a record token may not approve (admin, as over the API)
	expect(1, "release", "approve", "3.1.0", "--as", "rm") // not ready: platform is open
	expect(0, "release", "signoff", "3.1.0", "--gate", "platform", "--as", "pr", "--note", "reviewed")
	verdict := filepath.Join(dir, "verdict.note")
	out = expect(0, "--json", "release", "check", "3.1.0", "--verdict", verdict)
	var sv struct {
		Readiness struct {
			Ready bool `json:"ready"`
		} `json:"readiness"`
		Note string `json:"note"`
	}
	if err := json.Unmarshal([]byte(out), &sv); err != nil || !sv.Readiness.Ready || sv.Note == "" {
		t.Fatalf("check --json: %v %s", err, out)
	}
	expect(0, "release", "verify-verdict", verdict)
	expect(0, "release", "verify-verdict", "--replay", verdict)
	note, _ := os.ReadFile(verdict)
	tampered := filepath.Join(dir, "tampered.note")
	os.WriteFile(tampered, []byte(strings.Replace(string(note), `"ready":true`, `"ready":false`, 1)), 0o644)
	expect(1, "release", "verify-verdict", tampered)
	expect(0, "release", "approve", "3.1.0", "--as", "rm")
	if out := expect(0, "release", "show", "3.1.0"); !strings.Contains(out, "APPROVED by rm") {
		t.Fatalf("show: %s", out)
	}

	// The same through the API.
	db2 := filepath.Join(t.TempDir(), "server.db")
	secret, _, code := runBin(t, "", "--db", db2, "token", "create", "--name", "rm", "--scope", "admin", "--role", "platform-reviewer")
	if code != 0 {
		t.Fatal("token create failed")
	}
	srv, url := startServer(t, db2)
	defer func() { srv.Process.Kill(); srv.Wait() }()
	remote := func(want int, stdin string, args ...string) string {
		t.Helper()
		o, e, code := runBin(t, stdin, append([]string{"--server", url, "--token", strings.TrimSpace(secret)}, args...)...)
		if code != want {
			t.Fatalf("ledger --server %v: exit %d, want %d\n%s%s", args, code, want, o, e)
		}
		return o + e
	}
	remote(2, "", "release", "check", "3.1.0")
	remote(0, "", "release", "apply", relFile)
	remote(1, "", "release", "check", "3.1.0")
	remote(0, releaseEvidence(strings.Repeat("a", 40)), "record", "-")
	remote(1, "", "release", "approve", "3.1.0")
	remote(0, "", "release", "signoff", "3.1.0", "--gate", "platform")
	remote(0, "", "release", "check", "3.1.0", "--verdict", verdict)
	if o, e, code := runBin(t, "", "--data-dir", filepath.Dir(db2), "release", "verify-verdict", verdict); code != 0 {
		t.Fatalf("verify server verdict: %d %s %s", code, o, e)
	}
	if _, _, code := runBin(t, "", "--data-dir", filepath.Dir(db), "release", "verify-verdict", verdict); code != 1 {
		t.Fatalf("server verdict verified with another key: exit %d", code)
	}
	remote(0, "", "release", "approve", "3.1.0")
}

// TestReleasePolicyApplyNonYAMLQuotesNoContent: release apply and policy apply of a
// file that is not a release or policy (a credentials file given by
// mistake) exit non-zero naming the line and what was expected, and no
// part of the file's content, not even its first characters, is in
// stderr.
func TestReleasePolicyApplyNonYAMLQuotesNoContent(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "ledger.db")
	const secret = "SECRETLEAKTOKEN=ghp_abcd1234efgh"
	for _, body := range []string{secret + "\n", "version: " + secret + "\ncomponents: " + secret + "\n", "rules: " + secret + "\n", "- " + secret + "\n"} {
		file := filepath.Join(dir, "creds.env")
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, cmd := range [][]string{{"release", "apply", file}, {"policy", "apply", file, "--name", "core"}} {
			_, se, code := runBin(t, "", append([]string{"--db", db}, cmd...)...)
			if code == 0 || !strings.Contains(se, "line ") {
				t.Fatalf("%s of %q: exit %d, stderr %q; want a refusal naming the line", cmd[0], body, code, se)
			}
			for n := 4; n <= len(secret); n++ {
				if strings.Contains(se, secret[:n]) || strings.Contains(se, "ghp_") {
					t.Fatalf("%s of %q: stderr %q quotes the file's content", cmd[0], body, se)
				}
			}
		}
	}
}
