package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunRecordsFourLanesLocally: `ledger run --backend cpu` with no flags
// but the checkout records four evidence records into the local database
// (created under ./var), they are listed by GET /api/v1/evidence, and the
// audit passes.
func TestRunRecordsFourLanesLocally(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	cmd := exec.Command(ledgerBin, "run", "--backend", "cpu", "--repo-path", root, "--repository", "github.com/evidence-ledger/ledger")
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "LEDGER_DB=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ledger run: %v\n%s", err, out)
	}
	for _, lane := range []string{"qmv-bias-sum/v1", "qmv-bias-sum-paths/v1", "alloc-snapshot/v1", "alloc-footprint/v1"} {
		if !strings.Contains(string(out), lane) {
			t.Fatalf("summary lacks %s:\n%s", lane, out)
		}
	}
	db := filepath.Join(work, "var", "ledger.db")
	srv, base := startServer(t, db)
	defer func() { srv.Process.Kill(); srv.Wait() }()
	resp, err := http.Get(base + "/api/v1/evidence")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var list struct {
		Evidence []struct {
			Evidence struct {
				Lane   string `json:"lane"`
				Status string `json:"status"`
			} `json:"evidence"`
		} `json:"evidence"`
	}
	if err := json.Unmarshal(body, &list); err != nil || len(list.Evidence) != 4 {
		t.Fatalf("GET /api/v1/evidence: %d records (%v)\n%s", len(list.Evidence), err, body)
	}
	for _, e := range list.Evidence {
		if e.Evidence.Status != "passed" {
			t.Fatalf("%s: %s", e.Evidence.Lane, e.Evidence.Status)
		}
	}
	if out, _, code := runBin(t, "", "--db", db, "audit"); code != 0 {
		t.Fatalf("audit: %s", out)
	}
}
