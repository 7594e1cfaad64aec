package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ingest"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
)

// TestRecordDuplicateNamesThroughServer: a JUnit file of 20,000 cases of
// one name, recorded through a real server with a record token, is
// decoded and appended in seconds (numbering duplicates from " #2" each
// time took minutes at this size), with the cases numbered " #2" to " #20000".
func TestRecordDuplicateNamesThroughServer(t *testing.T) {
	const n = 20_000
	dir := t.TempDir()
	db := filepath.Join(dir, "server.db")
	runBin(t, "", "--db", db, "migrate")
	secret, se, code := runBin(t, "", "--db", db, "token", "create", "--name", "ci", "--scope", "record")
	if code != 0 {
		t.Fatalf("token create: %s", se)
	}
	srv, url := startServer(t, db)
	defer srv.Process.Kill()
	report := filepath.Join(dir, "dup.xml")
	os.WriteFile(report, []byte(`<testsuite name="s">`+strings.Repeat(`<testcase name="a"/>`, n)+`</testsuite>`), 0o644)
	start := time.Now()
	out, se, code := runBin(t, "", "--server", url, "--token", strings.TrimSpace(secret), "record", report,
		"--lane", "ci-tests/v1", "--backend", "cpu", "--repository", "example/r", "--commit", strings.Repeat("c", 40), "--tree", strings.Repeat("d", 40))
	took := time.Since(start)
	if code != 0 || strings.Count(out, "recorded") != 2 {
		t.Fatalf("record: %d\n%s%s", code, out, se)
	}
	// Quadratic numbering takes minutes at this size; 60 s leaves room
	// for a loaded machine.
	if took > 60*time.Second {
		t.Fatalf("%d duplicate names through the server took %v", n, took)
	}
	t.Logf("%d duplicate names through the server: %v", n, took)
	st, err := sqlite.Open(context.Background(), sqlite.Options{Path: db})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	evs, _, err := st.Evidence(context.Background(), ledger.EvidenceFilter{Lane: "ci-tests/v1"})
	if err != nil || len(evs) != 1 {
		t.Fatalf("evidence: %v, %d records", err, len(evs))
	}
	var d ingest.Details
	if err := json.Unmarshal(evs[0].Evidence.Details, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Cases) != n || d.Cases[1].ID != "s > a #2" || d.Cases[n-1].ID != fmt.Sprintf("s > a #%d", n) {
		t.Fatalf("%d cases, ids %q ... %q", len(d.Cases), d.Cases[1].ID, d.Cases[len(d.Cases)-1].ID)
	}
}
