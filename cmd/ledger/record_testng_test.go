package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRecordTestNG records TestNG's testng-results.xml (package ingest's
// test file, counts worked out there) with ledger record --db, named by
// --format testng and detected from the file, and shows its status and
// counts; a file whose root counts disagree records as inconclusive, and
// --format junit on it still records TestNG's (the same original).
func TestRecordTestNG(t *testing.T) {
	doc, err := os.ReadFile("../../ingest/testdata/testng/dataprovider-retried.xml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "ledger.db")
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pins := []string{"--lane", "ci-tests/v1", "--backend", "cpu", "--repository", "github.com/example/repo",
		"--commit", strings.Repeat("c", 40), "--tree", strings.Repeat("d", 40)}
	if _, _, code := runBin(t, "", "--db", db, "migrate"); code != 0 {
		t.Fatalf("migrate: %d", code)
	}
	results := write("testng-results.xml", string(doc))
	out, se, code := runBin(t, "", append([]string{"--db", db, "record", "--format", "testng", results}, pins...)...)
	if code != 0 || strings.Count(out, "recorded") != 2 || !strings.Contains(out, "(original)") ||
		!strings.Contains(out, "status=failed") || !strings.Contains(out, "cases 4/7 exact") {
		t.Fatalf("record --format testng: %d\n%s%s", code, out, se)
	}
	// Detected from the file: the same records, already present.
	out, se, code = runBin(t, "", append([]string{"--db", db, "record", results}, pins...)...)
	if code != 0 || strings.Count(out, "already present") != 2 {
		t.Fatalf("record (detected): %d\n%s%s", code, out, se)
	}
	off := write("off.xml", `<testng-results total="3" passed="2" failed="0" skipped="0" ignored="0"><suite name="s"><test name="t"><class name="C">`+
		`<test-method name="a" status="PASS"/><test-method name="b" status="PASS"/></class></test></suite></testng-results>`)
	for i, format := range []string{"testng", "junit"} {
		out, se, code = runBin(t, "", append([]string{"--db", db, "record", "--format", format, off}, pins...)...)
		if code != 0 || !strings.Contains(out, "status=inconclusive") || (i == 1) != strings.Contains(out, "already present  id=") {
			t.Fatalf("record --format %s of a file whose counts disagree: %d\n%s%s", format, code, out, se)
		}
	}
	if _, se, code := runBin(t, "", append([]string{"--db", db, "record", "--format", "testng", write("bad.xml", "<testng-results><suite>")}, pins...)...); code != 2 || !strings.Contains(se, "malformed XML") {
		t.Fatalf("malformed: %d %s", code, se)
	}
	if _, se, code := runBin(t, "", append([]string{"--db", db, "record", "--format", "testng", write("j.xml", "<testsuites/>")}, pins...)...); code != 2 || !strings.Contains(se, "not TestNG's") {
		t.Fatalf("JUnit as testng: %d %s", code, se)
	}
}
