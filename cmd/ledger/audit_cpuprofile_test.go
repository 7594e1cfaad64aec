package main

import (
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// audit --cpuprofile writes a CPU profile of the audit (0600, gzip data
// go tool pprof reads) and refuses to replace an existing file, naming
// the flag.
func TestAuditCPUProfile(t *testing.T) {
	dir := t.TempDir()
	db, prof := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "audit.prof")
	if _, se, code := runBin(t, "", "--db", db, "migrate"); code != 0 {
		t.Fatalf("migrate: %s", se)
	}
	if out, se, code := runBin(t, "", "--db", db, "audit", "--cpuprofile", prof); code != 0 || !strings.Contains(out, "audit passed") {
		t.Fatalf("audit --cpuprofile: exit %d %s%s", code, out, se)
	}
	fi, err := os.Stat(prof)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("profile mode %v, want 0600", fi.Mode().Perm())
	}
	f, err := os.Open(prof)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("the profile is not gzip data: %v", err)
	}
	if body, err := io.ReadAll(zr); err != nil || !strings.Contains(string(body), "nanoseconds") {
		t.Fatalf("the profile is not a CPU profile: %d bytes, %v", len(body), err)
	}
	if out, se, code := runBin(t, "", "--db", db, "audit", "--cpuprofile", prof); code != 2 || !strings.Contains(se, "--cpuprofile") {
		t.Fatalf("audit over an existing profile file: exit %d %s%s", code, out, se)
	}
}
