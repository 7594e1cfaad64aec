package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestRecordLocalCap: `ledger record --db` refuses an input over the
// server's default body cap (4 MiB) before decoding it, a file by its
// size and stdin once the cap is passed, naming the input, its size and
// --max-body, and appends nothing; with --max-body raised the same file
// is recorded.
func TestRecordLocalCap(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "l.db")
	if _, se, code := runBin(t, "", "--db", db, "migrate"); code != 0 {
		t.Fatalf("migrate: %s", se)
	}
	report := `<testsuite name="s"><testcase name="a"><system-out>` + strings.Repeat("x", 4<<20) + `</system-out></testcase></testsuite>`
	file := filepath.Join(dir, "big.xml")
	if err := os.WriteFile(file, []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--lane", "ci-tests/v1", "--backend", "cpu", "--repository", "example/r", "--commit", strings.Repeat("c", 40), "--tree", strings.Repeat("d", 40)}
	size := strconv.Itoa(len(report))
	before := logSize(t, db)
	for _, c := range []struct{ input, stdin, says string }{
		{file, "", file + " is " + size + " bytes"},
		{"-", report, "- is more than 4194304 bytes"},
	} {
		_, se, code := runBin(t, c.stdin, append([]string{"--db", db, "record", c.input, "--format", "junit"}, flags...)...)
		if code != 2 || !strings.Contains(se, c.says) || !strings.Contains(se, "cap of 4194304 bytes") || !strings.Contains(se, "--max-body") {
			t.Fatalf("record %s over the cap: exit %d\n%s\nwant exit 2 saying %q, the cap and --max-body", c.input, code, se, c.says)
		}
	}
	if n := logSize(t, db); n != before {
		t.Fatalf("refused records appended %d leaves", n-before)
	}
	out, se, code := runBin(t, "", append([]string{"--db", db, "record", file, "--max-body", "5000000"}, flags...)...)
	if code != 0 || strings.Count(out, "recorded") != 2 {
		t.Fatalf("record with --max-body raised: exit %d\n%s%s", code, out, se)
	}
}
