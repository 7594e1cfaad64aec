package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `ledger backup`: a consistent, audited copy with its keys; a directory
// given with a trailing slash is made; a directory holding another
// ledger's keys, or an existing file, is refused and nothing is written.
func TestBackupCLI(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "a", "ledger.db")
	for i := 0; i < 5; i++ {
		if _, se, code := runBin(t, string(crashEvidence(int64(i))), "--db", db, "record", "-"); code != 0 {
			t.Fatalf("record: %s", se)
		}
	}
	dest := filepath.Join(dir, "copy") + string(filepath.Separator)
	out, se, code := runBin(t, "", "--db", db, "backup", dest)
	if code != 0 || !strings.Contains(out, "5 leaves, audit passed") {
		t.Fatalf("backup: %d %s %s", code, out, se)
	}
	for _, f := range []string{"ledger.db", "ledger.key", "ledger.pub"} {
		if _, err := os.Stat(filepath.Join(dest, f)); err != nil {
			t.Fatalf("backup lacks %s: %v", f, err)
		}
	}
	if out, _, code := runBin(t, "", "--db", filepath.Join(dest, "ledger.db"), "audit"); code != 0 || !strings.Contains(out, "audit passed: 5 leaves") {
		t.Fatalf("audit of the copy: %d %s", code, out)
	}
	if _, se, code := runBin(t, "", "--db", db, "backup", dest); code != 2 || !strings.Contains(se, "already exists") {
		t.Fatalf("backup over an existing copy: %d %s", code, se)
	}
	// Another ledger's directory.
	other := filepath.Join(dir, "b", "ledger.db")
	if _, se, code := runBin(t, "", "--db", other, "migrate"); code != 0 {
		t.Fatalf("migrate: %s", se)
	}
	target := filepath.Join(dir, "b", "copy.db")
	if _, se, code := runBin(t, "", "--db", db, "backup", target); code != 2 || !strings.Contains(se, "belongs to another ledger") {
		t.Fatalf("backup beside another ledger's key: %d %s", code, se)
	}
	if _, err := os.Stat(target); err == nil {
		t.Fatal("a copy was written beside another ledger's key")
	}
}
