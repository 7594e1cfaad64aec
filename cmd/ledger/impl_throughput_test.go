package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestRunImplThroughput: `ledger run --impl reference --lane
// qmv-throughput` times the reference adapter against its original in one
// run, prints the case's medians and ratio, records one record (the
// original's samples are in it) that the audit reads back; a malformed
// --cases glob or --max-samples 0 exits 2 naming the flag.
func TestRunImplThroughput(t *testing.T) {
	cfg := refAdapterConfig(t)
	db := filepath.Join(t.TempDir(), "l.db")
	out, errOut, code := runBin(t, "", "--db", db, "run", "--impl", "reference", "--impls", cfg, "--lane", "qmv-throughput",
		"--cases", "batch1/n4096/k4096/f16/b4", "--case-budget", "3s", "--max-samples", "150")
	if code == 2 || !strings.Contains(out, "recorded 1 evidence records") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"impl  qmv-throughput/v1  1/1", "batch1/n4096/k4096/f16/b4/g64: reference ", "reference-narrow ", "ratio "} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	if out, _, code := runBin(t, "", "--db", db, "audit"); code != 0 {
		t.Fatalf("audit: %s", out)
	}
	if _, errOut, code := runBin(t, "", "--db", db, "run", "--impl", "reference", "--impls", cfg, "--lane", "qmv-throughput", "--cases", "[", "--no-record"); code != 2 || !strings.Contains(errOut, "--cases") {
		t.Fatalf("bad --cases: exit %d %s", code, errOut)
	}
	if _, errOut, code := runBin(t, "", "--db", db, "run", "--impl", "reference", "--impls", cfg, "--lane", "qmv-throughput", "--max-samples", "0", "--no-record"); code != 2 || !strings.Contains(errOut, "--max-samples") {
		t.Fatalf("bad --max-samples: exit %d %s", code, errOut)
	}
}
