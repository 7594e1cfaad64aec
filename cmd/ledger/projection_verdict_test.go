package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger/storetest/pgtest"
)

// TestNoVerdictOnEditedProjection: a database writer edits only the
// commit_id projection column of a failing evidence record, so that a
// query by the release's commit no longer returns it, and the leaf stays
// intact. With the full verification off (it would find the edit, but
// only later: up to an hour for an edit under a running server), the
// server's readiness, its signed verdict, an approval, the release page
// and `release check --server` must still count the failing record: not
// ready, no approval appended. The edit is made under the running server
// ("live") and while it is stopped, asked right after the restart
// ("stopped"); on SQLite and on PostgreSQL (pgtest; skipped when it is
// not installed).
func TestNoVerdictOnEditedProjection(t *testing.T) {
	for _, when := range []string{"live", "stopped"} {
		t.Run("sqlite/"+when, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "ledger.db")
			testEditedProjectionVerdict(t, when, db, nil, func() (*sql.DB, error) { return sql.Open("sqlite", "file:"+db) }, "?")
		})
		t.Run("postgres/"+when, func(t *testing.T) {
			dsn := pgtest.NewDatabase(t)
			testEditedProjectionVerdict(t, when, dsn, []string{"--data-dir", t.TempDir()}, func() (*sql.DB, error) { return sql.Open("pgx", dsn) }, "$1")
		})
	}
}

// testEditedProjectionVerdict is TestNoVerdictOnEditedProjection with the
// edit made when ("live" or "stopped") on the database db (the --db
// argument, with the extra global flags) opened by open; param is the
// driver's placeholder.
func testEditedProjectionVerdict(t *testing.T, when, db string, extra []string, open func() (*sql.DB, error), param string) {
	relFile := filepath.Join(t.TempDir(), "release.yaml")
	rel := strings.Replace(releaseCLIYAML, "  - id: platform\n    kind: manual\n    role: platform-reviewer\n", "", 1)
	if err := os.WriteFile(relFile, []byte(rel), 0o644); err != nil {
		t.Fatal(err)
	}
	global := append([]string{"--db", db}, extra...)
	local := func(want int, stdin string, args ...string) string {
		t.Helper()
		o, e, code := runBin(t, stdin, append(global, args...)...)
		if code != want {
			t.Fatalf("ledger %v: exit %d, want %d\n%s%s", args, code, want, o, e)
		}
		return o
	}
	secret := strings.TrimSpace(local(0, "", "token", "create", "--name", "rm", "--scope", "admin"))
	local(0, "", "release", "apply", relFile)
	head := strings.Repeat("a", 40)
	local(0, releaseEvidence(head), "record", "-")
	local(0, strings.Replace(releaseEvidence(head), `"status":"passed"`, `"status":"failed"`, 1), "record", "-")

	// edit moves the failing record's commit_id off the release's head
	// and checks that a query by the head no longer returns it.
	edit := func() {
		t.Helper()
		h, err := open()
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		var idx int64
		if err := h.QueryRow("SELECT idx FROM leaves WHERE kind = 'evidence' AND status = 'failed'").Scan(&idx); err != nil {
			t.Fatal(err)
		}
		if _, err := h.Exec(fmt.Sprintf("UPDATE leaves SET commit_id = '%s' WHERE idx = %d", strings.Repeat("0", 40), idx)); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := h.QueryRow("SELECT count(*) FROM leaves WHERE kind = 'evidence' AND commit_id = "+param, head).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("after the edit the projection returns %d records at the head, want only the passing one", n)
		}
	}
	serve := func() (*exec.Cmd, string) {
		return startServer(t, db, append(append([]string{}, extra...), "--full-scan=false")...)
	}

	var srv *exec.Cmd
	var base string
	if when == "live" {
		srv, base = serve()
		// Before the edit, a first answer (which also builds whatever the
		// server keeps between requests).
		if ready, _ := readinessOf(t, base, secret); ready {
			t.Fatal("ready before the edit, with a failing record at the head")
		}
		edit()
	} else {
		edit()
		srv, base = serve()
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()

	ready, note := readinessOf(t, base, secret)
	if ready || note == "" {
		t.Fatalf("signed readiness after the projection edit: ready %v, note %q; want a signed not-ready verdict", ready, note)
	}

	sizeBefore := checkpointSize(t, base)
	req, _ := http.NewRequest("POST", base+"/api/v1/releases/3.1.0/approvals", strings.NewReader(`{"note":"ship"}`))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(b), "qmv (failed)") {
		t.Fatalf("approval after the projection edit: %d %s; want 409 naming the failed gate", resp.StatusCode, b)
	}
	if got := checkpointSize(t, base); got != sizeBefore {
		t.Fatalf("a refused approval appended %d leaves", got-sizeBefore)
	}

	resp, err = http.Get(base + "/releases/3.1.0")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.Contains(string(page), "Ready: every gate") || !strings.Contains(string(page), "Not ready") {
		t.Fatalf("release page after the projection edit: %d %.400s", resp.StatusCode, page)
	}

	o, e, code := runBin(t, "", "--server", base, "--token", secret, "release", "check", "3.1.0")
	if code != 1 || !strings.Contains(o, "NOT READY") {
		t.Fatalf("release check --server after the projection edit: exit %d: %s%s", code, o, e)
	}
}

// readinessOf returns the ready flag and the signed note of the readiness
// API's answer for release 3.1.0.
func readinessOf(t *testing.T, base, secret string) (bool, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/api/v1/releases/3.1.0/readiness", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("readiness: %d %s", resp.StatusCode, b)
	}
	var sv struct {
		Readiness struct {
			Ready bool `json:"ready"`
		} `json:"readiness"`
		Note string `json:"note"`
	}
	if err := json.Unmarshal(b, &sv); err != nil {
		t.Fatalf("readiness: %v: %s", err, b)
	}
	return sv.Readiness.Ready, sv.Note
}

// checkpointSize returns the size of the server's latest checkpoint.
func checkpointSize(t *testing.T, base string) uint64 {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/log/checkpoint")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var cp struct {
		Size uint64 `json:"size"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&cp); err != nil {
		t.Fatal(err)
	}
	return cp.Size
}
