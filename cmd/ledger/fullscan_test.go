package main

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/storetest/pgtest"
)

// TestFullScanCatchesMiddleEdit edits a leaf below the journal's last
// size (which the start-up tail check does not read) on a stopped copy,
// starts the real server and wants the background full verification to
// put it in the tampered state: /healthz degraded naming the leaf and
// appends refused with 503. With --full-scan=false the same copy still
// refuses appends naming the leaf: the token check reads the token leaves
// through the verified query index, whose fold of the log at start finds
// the leaf that no longer gives the signed root.
func TestFullScanCatchesMiddleEdit(t *testing.T) {
	tmpl := integrityTemplate(t, 40)
	db := copyDir(t, tmpl)
	secret, se, code := runBin(t, "", "--db", db, "token", "create", "--name", "ci2", "--scope", "record")
	if code != 0 {
		t.Fatalf("token create: %s", se)
	}
	token := strings.TrimSpace(secret)
	sqlExec(t, db, "UPDATE leaves SET leaf = CAST(replace(CAST(leaf AS TEXT), '\"status\":\"passed\"', '\"status\":\"failed\"') AS BLOB) WHERE idx = 7")
	h, _ := sql.Open("sqlite", "file:"+db)
	var raw []byte
	h.QueryRow("SELECT leaf FROM leaves WHERE idx = 7").Scan(&raw)
	lh := ledger.LeafHash(raw)
	h.Exec("UPDATE leaves SET leaf_hash = ? WHERE idx = 7", lh[:])
	h.Close()

	post := func(base string, n int64) (int, string) {
		req, _ := http.NewRequest("POST", base+"/api/v1/evidence", bytes.NewReader(crashEvidence(n)))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	health := func(base string) (int, map[string]any) {
		var out map[string]any
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(b, &out)
		return resp.StatusCode, out
	}

	t.Run("scan-off", func(t *testing.T) {
		off := copyDir(t, filepath.Dir(db))
		srv, base := startServer(t, off, "--full-scan=false")
		defer func() { srv.Process.Kill(); srv.Wait() }()
		time.Sleep(500 * time.Millisecond)
		if c, out := health(base); c != 200 || out["status"] != "ok" {
			t.Fatalf("healthz with the scan off: %d %v", c, out)
		}
		if c, b := post(base, 500); c/100 == 2 || !strings.Contains(b, "leaf 7") {
			t.Fatalf("append with the scan off: %d %s, want it refused naming leaf 7 (the query index's fold)", c, b)
		}
	})

	srv, base := startServer(t, db)
	defer func() { srv.Process.Kill(); srv.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, out := health(base)
		if c == 503 && out["status"] == "degraded" {
			if r, _ := out["reason"].(string); !strings.Contains(r, "leaf 7 ") || out["tampered_index"] != float64(7) {
				t.Fatalf("healthz degraded without naming leaf 7: %v", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("healthz never degraded: %d %v", c, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c, b := post(base, 501)
	if c != 503 || !strings.Contains(b, "refusing to sign") || !strings.Contains(b, "leaf 7") || strings.Contains(b, `"status":"failed"`) {
		t.Fatalf("append on the tampered log: %d %s", c, b)
	}
}

// TestFullScanCatchesProjectionEdit edits the commit_id column of a
// failing record's leaves row on a stopped server: the leaf is intact,
// but every query of the projection by the release's commit stops
// returning it. Without the full verification the restarted server still
// reports the release not ready (readiness reads its index of the verified
// leaves, not the projection); with it, the background scan compares the row with
// its leaf, /healthz turns degraded naming the leaf and the readiness
// check is refused rather than reported passed. On SQLite and on
// PostgreSQL (pgtest; skipped when it is not installed).
func TestFullScanCatchesProjectionEdit(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		db := filepath.Join(t.TempDir(), "ledger.db")
		testProjectionEdit(t, db, nil, func() (*sql.DB, error) { return sql.Open("sqlite", "file:"+db) })
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := pgtest.NewDatabase(t)
		testProjectionEdit(t, dsn, []string{"--data-dir", t.TempDir()}, func() (*sql.DB, error) { return sql.Open("pgx", dsn) })
	})
}

// testProjectionEdit is TestFullScanCatchesProjectionEdit on the database
// db (the --db argument, with the extra global flags) opened by open.
func testProjectionEdit(t *testing.T, db string, extra []string, open func() (*sql.DB, error)) {
	relFile := filepath.Join(t.TempDir(), "release.yaml")
	rel := strings.Replace(releaseCLIYAML, "  - id: platform\n    kind: manual\n    role: platform-reviewer\n", "", 1)
	if err := os.WriteFile(relFile, []byte(rel), 0o644); err != nil {
		t.Fatal(err)
	}
	global := append([]string{"--db", db}, extra...)
	local := func(want int, stdin string, args ...string) (string, string) {
		t.Helper()
		o, e, code := runBin(t, stdin, append(global, args...)...)
		if code != want {
			t.Fatalf("ledger %v: exit %d, want %d\n%s%s", args, code, want, o, e)
		}
		return o, e
	}
	so, _ := local(0, "", "token", "create", "--name", "rm", "--scope", "admin")
	secret := strings.TrimSpace(so)
	local(0, "", "release", "apply", relFile)
	head := strings.Repeat("a", 40)
	local(0, releaseEvidence(head), "record", "-")
	local(0, strings.Replace(releaseEvidence(head), `"status":"passed"`, `"status":"failed"`, 1), "record", "-")
	if o, _ := local(1, "", "release", "check", "3.1.0"); !strings.Contains(o, "NOT READY") {
		t.Fatalf("check with the failing record: %s", o)
	}
	h, err := open()
	if err != nil {
		t.Fatal(err)
	}
	var idx int64
	if err := h.QueryRow("SELECT idx FROM leaves WHERE kind = 'evidence' AND status = 'failed'").Scan(&idx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Exec(fmt.Sprintf("UPDATE leaves SET commit_id = '%s' WHERE idx = %d", strings.Repeat("0", 40), idx)); err != nil {
		t.Fatal(err)
	}
	h.Close()

	remote := func(base string, args ...string) (string, int) {
		t.Helper()
		o, e, code := runBin(t, "", append([]string{"--server", base, "--token", secret}, args...)...)
		return o + e, code
	}
	// The scan off first: the edit hides the failing record from the
	// projection, but readiness reads the server's own index of the
	// verified leaves and still counts it.
	srv, base := startServer(t, db, append(extra, "--full-scan=false")...)
	out, code := remote(base, "release", "check", "3.1.0")
	srv.Process.Kill()
	srv.Wait()
	if code != 1 || !strings.Contains(out, "NOT READY") {
		t.Fatalf("an unscanned server counted the projection, not the leaves (exit %d): %s", code, out)
	}

	srv, base = startServer(t, db, extra...)
	defer func() { srv.Process.Kill(); srv.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		_ = json.Unmarshal(b, &out)
		if resp.StatusCode == 503 && out["status"] == "degraded" {
			r, _ := out["reason"].(string)
			if out["tampered_index"] != float64(idx) || !strings.Contains(r, "projection columns do not match the leaf") {
				t.Fatalf("healthz degraded without naming leaf %d and the projection: %v", idx, out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("healthz never degraded after the projection edit: %d %s", resp.StatusCode, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, code = remote(base, "release", "check", "3.1.0")
	if code == 0 || !strings.Contains(out, "refusing to sign") {
		t.Fatalf("readiness on the tampered log: exit %d: %s", code, out)
	}
	// The views computed from the projections are refused too: the
	// overview and the release page would count the hidden record out.
	for _, p := range []string{"/api/v1/overview", "/releases/3.1.0"} {
		resp, err := http.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		vb, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 503 || strings.Contains(string(vb), `"ready": true`) {
			t.Fatalf("GET %s on the tampered log: %d %.300s", p, resp.StatusCode, vb)
		}
	}
	req, _ := http.NewRequest("GET", base+"/api/v1/releases/3.1.0/readiness", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || strings.Contains(string(b), `"ready":true`) {
		t.Fatalf("readiness API on the tampered log: %d %s", resp.StatusCode, b)
	}
}

// TestFullScanLaterScanCatchesLiveEdit edits the commit_id column of a
// failing record's row while the server runs, after its first full
// verification passed: a later scan (--full-scan-every) must find it and
// put the server in the tampered state.
func TestFullScanLaterScanCatchesLiveEdit(t *testing.T) {
	db := filepath.Join(t.TempDir(), "ledger.db")
	so, se, code := runBin(t, "", "--db", db, "token", "create", "--name", "ci", "--scope", "record")
	if code != 0 {
		t.Fatalf("token create: %s", se)
	}
	if o, e, code := runBin(t, strings.Replace(releaseEvidence(strings.Repeat("a", 40)), `"status":"passed"`, `"status":"failed"`, 1), "--db", db, "record", "-"); code != 0 {
		t.Fatalf("record: %s %s", o, e)
	}
	srv, base := startServer(t, db, "--full-scan-every", "100ms")
	defer func() { srv.Process.Kill(); srv.Wait() }()
	postEvidence(t, base, strings.TrimSpace(so), 1)
	health := func() (int, map[string]any) {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		b, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(b, &out)
		return resp.StatusCode, out
	}
	time.Sleep(300 * time.Millisecond)
	if c, out := health(); c != 200 || out["status"] != "ok" {
		t.Fatalf("healthz before the edit: %d %v", c, out)
	}
	sqlExec(t, db, "UPDATE leaves SET commit_id = '"+strings.Repeat("0", 40)+"' WHERE idx = 1")
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, out := health()
		if c == 503 && out["status"] == "degraded" {
			if r, _ := out["reason"].(string); out["tampered_index"] != float64(1) || !strings.Contains(r, "projection columns do not match the leaf") {
				t.Fatalf("healthz degraded without naming leaf 1 and the projection: %v", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no later scan found the live edit: %d %v", c, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	req, _ := http.NewRequest("POST", base+"/api/v1/evidence", bytes.NewReader(crashEvidence(2)))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(so))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(b), "refusing to sign") {
		t.Fatalf("append after the later scan found the edit: %d %s", resp.StatusCode, b)
	}
}

// waitTamperMarker waits (up to 30 s) for the tampered marker in dir and
// returns its path: the marker is written right after a finding is
// published (the in-memory state comes first, so signing stops at once).
func waitTamperMarker(t *testing.T, dir string) string {
	t.Helper()
	marker := filepath.Join(dir, TamperMarkerFile)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, err := os.Stat(marker)
		if err == nil {
			return marker
		}
		if time.Now().After(deadline) {
			t.Fatalf("no tampered marker 30 s after the finding: %v", err)
		}
	}
}

// TestTamperedStateOutlivesRestart: a finding of the full verification
// leaves the tampered marker beside the key, so the next start verifies
// the whole log before it serves: killed and restarted (its background
// scan slowed to a chunk of one leaf per 500 ms, so that without the
// marker the first requests would come before any finding), the server
// refuses the first append and /healthz is degraded from the start. Once
// the edit is repaired the next start's verification passes, removes the
// marker and appends are taken again.
func TestTamperedStateOutlivesRestart(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "ledger.db")
	so, se, code := runBin(t, "", "--db", db, "token", "create", "--name", "ci", "--scope", "record")
	if code != 0 {
		t.Fatalf("token create: %s", se)
	}
	secret := strings.TrimSpace(so)
	srv, base := startServer(t, db, "--full-scan=false")
	for i := range 6 {
		postEvidence(t, base, secret, int64(i))
	}
	srv.Process.Kill()
	srv.Wait()
	var idx int64
	var commit string
	h, err := sql.Open("sqlite", "file:"+db)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.QueryRow("SELECT idx, commit_id FROM leaves WHERE kind = 'evidence' ORDER BY idx LIMIT 1").Scan(&idx, &commit); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Exec(fmt.Sprintf("UPDATE leaves SET commit_id = '%s' WHERE idx = %d", strings.Repeat("0", 40), idx)); err != nil {
		t.Fatal(err)
	}
	h.Close()

	healthz := func(base string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		b, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(b, &out)
		return resp.StatusCode, out
	}
	srv, base = startServer(t, db)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if code, out := healthz(base); code == 503 && out["status"] == "degraded" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("healthz never degraded after the projection edit")
		}
	}
	marker := waitTamperMarker(t, dir)
	srv.Process.Kill()
	srv.Wait()

	slow := []string{"--full-scan-chunk", "1", "--full-scan-pause", "500ms"}
	srv, base = startServer(t, db, slow...)
	if code, body := postStatus(t, base, secret, 100); code != http.StatusServiceUnavailable || !strings.Contains(body, "refusing to sign") {
		t.Fatalf("first append after the restart of a tampered server: %d %s", code, body)
	}
	if code, out := healthz(base); code != 503 || out["tampered_index"] != float64(idx) {
		t.Fatalf("healthz right after the restart: %d %v", code, out)
	}
	srv.Process.Kill()
	srv.Wait()

	sqlExec(t, db, fmt.Sprintf("UPDATE leaves SET commit_id = '%s' WHERE idx = %d", commit, idx))
	srv, base = startServer(t, db, slow...)
	defer func() { srv.Process.Kill(); srv.Wait() }()
	if code, body := postStatus(t, base, secret, 101); code != http.StatusCreated {
		t.Fatalf("append after the repair: %d %s", code, body)
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("the tampered marker stays after a passing verification: %v", err)
	}
}
