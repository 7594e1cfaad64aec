package main

import (
	"strings"
	"testing"
)

// TestParseSize: plain bytes and IEC / SI units are read; anything else
// is refused naming the text and the accepted shape.
func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4194304": 4 << 20, "8MiB": 8 << 20, "64 MiB": 64 << 20, "1GB": 1e9, "2GiB": 2 << 30, "0": 0} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "8XB", "lots", "99999999999999999999"} {
		if _, err := parseSize(in); err == nil || !strings.Contains(err.Error(), "8MiB") {
			t.Errorf("parseSize(%q): err = %v, want a refusal showing the accepted shape", in, err)
		}
	}
}

// TestMaxBodyTakesUnits: `ledger record --max-body 8MiB` and `ledger
// serve --max-body 64MiB` parse (the flag error of a bad size exits 2).
func TestMaxBodyTakesUnits(t *testing.T) {
	db := t.TempDir() + "/l.db"
	if _, se, code := runBin(t, "", "--db", db, "record", "--max-body", "8MiB", "/nonexistent.xml"); code != 2 || strings.Contains(se, "max-body") {
		t.Fatalf("record --max-body 8MiB: exit %d %s (want the missing file refused, not the flag)", code, se)
	}
	if _, se, code := runBin(t, "", "--db", db, "record", "--max-body", "8XB", "/nonexistent.xml"); code != 2 || !strings.Contains(se, "8XB") {
		t.Fatalf("record --max-body 8XB: exit %d %s", code, se)
	}
}
