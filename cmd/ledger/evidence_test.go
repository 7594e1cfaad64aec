package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// evidenceJUnit has three cases, two failing with messages.
const evidenceJUnit = `<testsuite name="s" tests="3" failures="2">
<testcase classname="pkg" name="a"><failure message="want 1 got 2">trace</failure></testcase>
<testcase classname="pkg" name="b"><failure message="boom"/></testcase>
<testcase classname="pkg" name="c"/>
</testsuite>`

var recordedIDRe = regexp.MustCompile(`recorded  id=([0-9a-f]+)  index=\d+  leaf=[0-9a-f]+  status=failed cases 1/3 exact, failing: s > pkg > a, s > pkg > b\n`)

// TestEvidenceListShowRecordSummary: record prints each evidence entry's
// decoded status and counts after the `recorded  id=` it always printed;
// `ledger evidence list` filters as GET /api/v1/evidence does and `show`
// prints pins, status, counts, control, recorder and failing cases, on
// --db and on --server alike, with --json in the API's shapes.
func TestEvidenceListShowRecordSummary(t *testing.T) {
	dir := t.TempDir()
	junit := filepath.Join(dir, "r.xml")
	os.WriteFile(junit, []byte(evidenceJUnit), 0o644)
	pins := []string{"--lane", "ci-tests/v1", "--backend", "cpu", "--repository", "github.com/example/repo", "--commit", strings.Repeat("c", 40), "--tree", strings.Repeat("d", 40)}

	db := filepath.Join(dir, "ledger.db")
	out, se, code := runBin(t, "", append([]string{"--db", db, "record", junit}, pins...)...)
	m := recordedIDRe.FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("record: exit %d\n%s%s; want the status line", code, out, se)
	}
	localID := m[1]
	// A passing ledger JSON record as well, in another lane.
	if o, e, code := runBin(t, releaseEvidence(strings.Repeat("a", 40)), "--db", db, "record", "-"); code != 0 || !strings.Contains(o, "status=passed cases 216/216 exact\n") {
		t.Fatalf("record passing: %d %s %s", code, o, e)
	}

	serverDB := filepath.Join(t.TempDir(), "server.db")
	secret, se, code := runBin(t, "", "--db", serverDB, "token", "create", "--name", "ci", "--scope", "record", "--expires", "30d")
	if code != 0 || !strings.Contains(se, "expires "+time.Now().UTC().Add(30*24*time.Hour).Format("2006-01-02")) {
		t.Fatalf("token create --expires 30d: %d %s", code, se)
	}
	srv, url := startServer(t, serverDB)
	defer func() { srv.Process.Kill(); srv.Wait() }()
	remote := []string{"--server", url, "--token", strings.TrimSpace(secret)}
	out, se, code = runBin(t, "", append(append(append([]string(nil), remote...), "record", junit), pins...)...)
	m = recordedIDRe.FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("record --server: exit %d\n%s%s; want the status line", code, out, se)
	}
	remoteID := m[1]

	for _, where := range []struct {
		name string
		args []string
		id   string
	}{{"--db", []string{"--db", db}, localID}, {"--server", remote, remoteID}} {
		run := func(want int, args ...string) string {
			t.Helper()
			o, e, code := runBin(t, "", append(append([]string(nil), where.args...), args...)...)
			if code != want {
				t.Fatalf("%s %v: exit %d, want %d\n%s%s", where.name, args, code, want, o, e)
			}
			return o + e
		}
		out := run(0, "evidence", "list", "--status", "failed")
		if !strings.Contains(out, where.id) || !strings.Contains(out, "ci-tests/v1") || !strings.Contains(out, "1/3") || strings.Contains(out, "qmv-bias-sum") {
			t.Fatalf("%s evidence list --status failed:\n%s", where.name, out)
		}
		if out := run(0, "evidence", "list", "--lane", "nope/v1"); !strings.Contains(out, "no evidence matches") {
			t.Fatalf("%s evidence list --lane nope/v1:\n%s", where.name, out)
		}
		if out := run(0, "evidence", "list", "--repository", "github.com/example/repo", "--commit", strings.Repeat("c", 40), "--backend", "cpu", "--limit", "1"); !strings.Contains(out, where.id) {
			t.Fatalf("%s evidence list with filters:\n%s", where.name, out)
		}
		if where.name == "--db" {
			// Two entries, one a page: the first page names the cursor of
			// the second, which holds the other.
			first := run(0, "evidence", "list", "--limit", "1")
			m := regexp.MustCompile(`more: --cursor (\S+)`).FindStringSubmatch(first)
			if m == nil || !strings.Contains(first, "qmv-bias-sum/v1") {
				t.Fatalf("evidence list --limit 1:\n%s", first)
			}
			if second := run(0, "evidence", "list", "--limit", "1", "--cursor", m[1]); !strings.Contains(second, where.id) || strings.Contains(second, "more:") {
				t.Fatalf("evidence list --cursor %s:\n%s", m[1], second)
			}
		}
		if out := run(2, "evidence", "list", "--status", "nope"); !strings.Contains(out, "--status") {
			t.Fatalf("%s bad --status: %s", where.name, out)
		}
		var list struct {
			Evidence []struct {
				ID       string          `json:"id"`
				Evidence ledger.Evidence `json:"evidence"`
			} `json:"evidence"`
			Next *string `json:"next_cursor"`
		}
		if err := json.Unmarshal([]byte(run(0, "--json", "evidence", "list", "--status", "failed")), &list); err != nil || len(list.Evidence) != 1 || list.Evidence[0].ID != where.id || list.Next == nil {
			t.Fatalf("%s --json evidence list: %v %+v", where.name, err, list)
		}
		out = run(0, "evidence", "show", where.id)
		for _, want := range []string{"status       failed: cases 1/3 exact", "control      none", "github.com/example/repo", strings.Repeat("c", 40), "failing cases (2):", "s > pkg > a", "s > pkg > b"} {
			if !strings.Contains(out, want) {
				t.Fatalf("%s evidence show lacks %q:\n%s", where.name, want, out)
			}
		}
		if where.name == "--server" && !strings.Contains(out, "recorded by  token ci") {
			t.Fatalf("evidence show --server does not name the recorder:\n%s", out)
		}
		var one struct {
			ID       string          `json:"id"`
			Leaf     string          `json:"leaf"`
			Evidence ledger.Evidence `json:"evidence"`
		}
		if err := json.Unmarshal([]byte(run(0, "--json", "evidence", "show", where.id)), &one); err != nil || one.ID != where.id || one.Leaf == "" || one.Evidence.CasesTotal != 3 {
			t.Fatalf("%s --json evidence show: %v %+v", where.name, err, one)
		}
		run(2, "evidence", "show", strings.Repeat("0", 32))
	}
}

// TestEvidenceShowMessages: the failure messages in details.cases[] are
// printed under each failing case, control characters dropped.
func TestEvidenceShowMessages(t *testing.T) {
	ev := ledger.Evidence{Lane: "ci-tests/v1", Status: ledger.StatusFailed, CasesExact: 1, CasesTotal: 3, FailingCases: []string{"a", "b", "c"},
		Details: json.RawMessage(`{"cases":[{"id":"a","outcome":"failed","message":"want 1\ngot 2"},{"id":"b","result":"mismatch","note":"bad \u001b[31mred"},{"id":"c","outcome":"failed"}]}`)}
	var b bytes.Buffer
	printEvidence(&b, ledger.EvidenceEntry{Entry: ledger.Entry{ID: "x", RecordedAt: time.Unix(0, 0)}, Evidence: ev})
	for _, want := range []string{"failing cases (3):\n  a: want 1\n    got 2\n  b: bad [31mred\n  c\n"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("show lacks %q:\n%s", want, b.String())
		}
	}
}

// TestRecordPapercuts: a missing subject field names the flag that sets
// it; truncated JSON names the byte where it ends; --help names every
// format, the Sigstore bundle included.
func TestRecordPapercuts(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "ledger.db")
	junit := filepath.Join(dir, "r.xml")
	os.WriteFile(junit, []byte(evidenceJUnit), 0o644)
	_, se, code := runBin(t, "", "--db", db, "record", junit, "--lane", "ci-tests/v1", "--backend", "cpu")
	if code != 2 || !strings.Contains(se, "subject.repository") || !strings.Contains(se, "--repository, or --from-git") {
		t.Fatalf("record without --repository: %d %s", code, se)
	}
	trunc := filepath.Join(dir, "t.json")
	os.WriteFile(trunc, []byte(`{"lane":"ci-tests/v1","subject":{"repo`), 0o644)
	if _, se, code := runBin(t, "", "--db", db, "record", trunc); code != 2 || !strings.Contains(se, "ends early at byte 38 of 38") {
		t.Fatalf("truncated JSON: %d %s", code, se)
	}
	if _, se, code := runBin(t, "", "--db", db, "record", "--format", "evidence", trunc); code != 2 || !strings.Contains(se, "ends early at byte 38 of 38") {
		t.Fatalf("truncated JSON, --format evidence: %d %s", code, se)
	}
	if out, _, _ := runBin(t, "", "record", "--help"); !strings.Contains(out, "sigstore-bundle") {
		t.Fatalf("record --help omits sigstore-bundle:\n%s", out)
	}
}

// TestReleaseCheckOnlyGate: --only and --gate filter the printed gates;
// the exit code still reads the whole verdict.
func TestReleaseCheckOnlyGate(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "ledger.db")
	relFile := filepath.Join(dir, "release.yaml")
	os.WriteFile(relFile, []byte(releaseCLIYAML), 0o644)
	if o, e, code := runBin(t, "", "--db", db, "release", "apply", relFile); code != 0 {
		t.Fatalf("apply: %s %s", o, e)
	}
	if o, e, code := runBin(t, releaseEvidence(strings.Repeat("a", 40)), "--db", db, "record", "-"); code != 0 {
		t.Fatalf("record: %s %s", o, e)
	}
	out, _, code := runBin(t, "", "--db", db, "release", "check", "3.1.0")
	if code != 1 || !strings.Contains(out, "passed  qmv") || !strings.Contains(out, "open    platform") {
		t.Fatalf("check: %d %s", code, out)
	}
	out, _, code = runBin(t, "", "--db", db, "release", "check", "3.1.0", "--only", "failed,open")
	if code != 1 || strings.Contains(out, "passed  qmv") || !strings.Contains(out, "open    platform") || !strings.Contains(out, "(1 of 2 gates not shown") {
		t.Fatalf("check --only failed,open: %d %s", code, out)
	}
	// Only the passed gate shown, still exit 1: the platform gate is open.
	out, _, code = runBin(t, "", "--db", db, "release", "check", "3.1.0", "--gate", "qmv")
	if code != 1 || !strings.Contains(out, "passed  qmv") || strings.Contains(out, "platform ") || !strings.Contains(out, "NOT READY") {
		t.Fatalf("check --gate qmv: %d %s", code, out)
	}
	if _, se, code := runBin(t, "", "--db", db, "release", "check", "3.1.0", "--gate", "qvm"); code != 2 || !strings.Contains(se, `did you mean "qmv"?`) {
		t.Fatalf("check --gate qvm: %d %s", code, se)
	}
	if _, se, code := runBin(t, "", "--db", db, "release", "check", "3.1.0", "--only", "closed"); code != 2 || !strings.Contains(se, "--only") {
		t.Fatalf("check --only closed: %d %s", code, se)
	}
	if out, _, _ := runBin(t, "", "release", "check", "--help"); !strings.Contains(out, "exit\ncode is computed from the whole verdict") {
		t.Fatalf("check --help does not say the exit code reads the whole verdict:\n%s", out)
	}
}
