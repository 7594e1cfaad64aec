package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const supersedeCLIYAML = `version: 4.0.0
approval_role: release-manager
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
`

// failingEvidence is releaseEvidence with 200/216 exact and a failing case.
func failingEvidence(commit string) string {
	var ev map[string]any
	json.Unmarshal([]byte(releaseEvidence(commit)), &ev)
	ev["status"], ev["cases_exact"], ev["failing_cases"] = "failed", 200, []string{"f16/b4/g64/three-way"}
	ev["started_at"] = time.Now().UTC().Add(time.Second).Format(time.RFC3339)
	ev["finished_at"] = ev["started_at"]
	b, _ := json.Marshal(ev)
	return string(b)
}

// TestReleaseCheckFailingApprovalsAndSupersede drives the real binary,
// locally (--db) and through --server: `release check` prints the record
// that keeps a gate failed (its id, lane, backend and why) and each
// approval's state (current, then stale with why after a failing record);
// `ledger supersede` retracts the failing record (attributed, with its
// role and reason) so the release is ready again, and refuses a missing
// reason, an unknown record, a token without admin scope or the role, and
// a second supersede of the same record.
func TestReleaseCheckFailingApprovalsAndSupersede(t *testing.T) {
	dir := t.TempDir()
	relFile := filepath.Join(dir, "release.yaml")
	os.WriteFile(relFile, []byte(supersedeCLIYAML), 0o644)
	head := strings.Repeat("a", 40)
	idOf := func(t *testing.T, out string) string {
		t.Helper()
		var ap struct {
			Entries []struct {
				ID string `json:"id"`
			} `json:"entries"`
		}
		if err := json.Unmarshal([]byte(out), &ap); err != nil || len(ap.Entries) != 1 {
			t.Fatalf("record --json: %v %s", err, out)
		}
		return ap.Entries[0].ID
	}
	approvalLine := regexp.MustCompile(`(?m)^  approval \S+ by rm at \S+ \(checkpoint \d+\): (current|stale)(: .*)?$`)

	// walk runs the scenario through ledger, which prefixes the global
	// flags of one mode; as is the --as flag of a local release action.
	walk := func(t *testing.T, ledger func(want int, stdin string, args ...string) string, as ...string) {
		ledger(0, "", "release", "apply", relFile)
		ledger(0, releaseEvidence(head), "record", "-")
		ledger(0, "", append([]string{"release", "approve", "4.0.0"}, as...)...)
		out := ledger(0, "", "release", "check", "4.0.0")
		if m := approvalLine.FindStringSubmatch(out); m == nil || m[1] != "current" {
			t.Fatalf("check after approval does not show it current:\n%s", out)
		}
		bad := idOf(t, ledger(0, failingEvidence(head), "--json", "record", "-"))
		out = ledger(1, "", "release", "check", "4.0.0")
		if !strings.Contains(out, "failed  qmv") || !regexp.MustCompile(`(?m)^\s+failing `+bad+` \(qmv-bias-sum/v1 on cpu\): \S.*$`).MatchString(out) {
			t.Fatalf("check does not name the failing record %s and why:\n%s", bad, out)
		}
		if m := approvalLine.FindStringSubmatch(out); m == nil || m[1] != "stale" || !strings.Contains(m[2], "gate qmv was passed, now failed") {
			t.Fatalf("check does not show the approval stale with why:\n%s", out)
		}
		if out := ledger(2, "", append([]string{"supersede", "4.0.0", bad}, as...)...); !strings.Contains(out, "reason") {
			t.Fatalf("supersede without --reason: %s", out)
		}
		if out := ledger(2, "", append([]string{"supersede", "4.0.0", "ev_nosuchrecord", "--reason", "x"}, as...)...); !strings.Contains(out, "entry") {
			t.Fatalf("supersede of an unknown record: %s", out)
		}
		out = ledger(0, "", append([]string{"supersede", "4.0.0", bad, "--reason", "the host's GPU had an ECC fault"}, as...)...)
		if !strings.Contains(out, "evidence record "+bad+" superseded for release 4.0.0") || !strings.Contains(out, "by rm (role release-manager)") || !strings.Contains(out, "ECC fault") {
			t.Fatalf("supersede output: %s", out)
		}
		ledger(2, "", append([]string{"supersede", "4.0.0", bad, "--reason", "again"}, as...)...)
		out = ledger(0, "", "release", "check", "4.0.0")
		if !strings.Contains(out, "passed  qmv") || strings.Contains(out, "failing "+bad) {
			t.Fatalf("check after the supersede:\n%s", out)
		}
	}

	t.Run("local", func(t *testing.T) {
		db := filepath.Join(t.TempDir(), "ledger.db")
		local := func(want int, stdin string, args ...string) string {
			t.Helper()
			o, e, code := runBin(t, stdin, append([]string{"--db", db}, args...)...)
			if code != want {
				t.Fatalf("ledger %v: exit %d, want %d\n%s%s", args, code, want, o, e)
			}
			return o + e
		}
		local(0, "", "token", "create", "--name", "rm", "--scope", "admin", "--role", "release-manager")
		local(0, "", "token", "create", "--name", "ci", "--scope", "record", "--role", "release-manager")
		local(0, "", "token", "create", "--name", "ops", "--scope", "admin")
		walk(t, local, "--as", "rm")
		// Admin scope and the release's approval role are both needed.
		bad := idOf(t, local(0, failingEvidence(head), "--json", "record", "-"))
		if out := local(2, "", "supersede", "4.0.0", bad, "--reason", "r", "--as", "ci"); !strings.Contains(out, "admin") {
			t.Fatalf("record token supersedes: %s", out)
		}
		if out := local(2, "", "supersede", "4.0.0", bad, "--reason", "r", "--as", "ops"); !strings.Contains(out, "release-manager") {
			t.Fatalf("admin without the role supersedes: %s", out)
		}
		local(2, "", "supersede", "4.0.0", bad, "--reason", "r") // no --as
	})

	t.Run("server", func(t *testing.T) {
		db := filepath.Join(t.TempDir(), "server.db")
		secret, _, code := runBin(t, "", "--db", db, "token", "create", "--name", "rm", "--scope", "admin", "--role", "release-manager")
		if code != 0 {
			t.Fatal("token create failed")
		}
		ci, _, code := runBin(t, "", "--db", db, "token", "create", "--name", "ci", "--scope", "record", "--role", "release-manager")
		if code != 0 {
			t.Fatal("token create failed")
		}
		srv, url := startServer(t, db)
		defer func() { srv.Process.Kill(); srv.Wait() }()
		as := func(tok string) func(want int, stdin string, args ...string) string {
			return func(want int, stdin string, args ...string) string {
				t.Helper()
				o, e, code := runBin(t, stdin, append([]string{"--server", url, "--token", strings.TrimSpace(tok)}, args...)...)
				if code != want {
					t.Fatalf("ledger --server %v: exit %d, want %d\n%s%s", args, code, want, o, e)
				}
				return o + e
			}
		}
		walk(t, as(secret))
		bad := idOf(t, as(ci)(0, failingEvidence(head), "--json", "record", "-"))
		if out := as(ci)(2, "", "supersede", "4.0.0", bad, "--reason", "r"); !strings.Contains(out, "admin") {
			t.Fatalf("record token supersedes through the API: %s", out)
		}
		if out := as(secret)(2, "", "supersede", "4.0.0", bad, "--reason", "r", "--as", "rm"); !strings.Contains(out, "--as") {
			t.Fatalf("--as with --server: %s", out)
		}
	})
}
