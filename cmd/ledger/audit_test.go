package main

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	_ "modernc.org/sqlite"
)

// TestAuditCLINamesTamperedIndex: raw-SQL tampering on a closed database
// makes `ledger audit` exit 1 and name the first bad index.
func TestAuditCLINamesTamperedIndex(t *testing.T) {
	cases := []struct {
		name  string
		sql   []string
		index int
	}{
		{"edit-a-byte", []string{"UPDATE leaves SET leaf = CAST(replace(CAST(leaf AS TEXT), 'passed', 'passex') AS BLOB) WHERE idx = 6"}, 6},
		{"delete-a-row", []string{"DELETE FROM leaves WHERE idx = 4"}, 4},
		{"swap-two-rows", []string{"UPDATE leaves SET idx = -1 WHERE idx = 2", "UPDATE leaves SET idx = 2 WHERE idx = 8", "UPDATE leaves SET idx = 8 WHERE idx = -1"}, 2},
		{"insert-a-row", []string{"INSERT INTO leaves(idx, id, kind, key, recorded_at, leaf, leaf_hash) SELECT 12, 'x', kind, key, recorded_at, leaf, leaf_hash FROM leaves WHERE idx = 1"}, 12},
		{"truncate-the-tail", []string{"DELETE FROM leaves WHERE idx >= 9"}, 9},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "ledger.db")
			for i := 0; i < 12; i++ {
				_, se, code := runBin(t, string(crashEvidence(int64(i))), "--db", db, "record", "-")
				if code != 0 {
					t.Fatalf("record: %s", se)
				}
			}
			if out, _, code := runBin(t, "", "--db", db, "audit"); code != 0 || !strings.Contains(out, "audit passed: 12 leaves") {
				t.Fatalf("clean audit: %d %s", code, out)
			}
			raw, err := sql.Open("sqlite", "file:"+db)
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range tc.sql {
				if _, err := raw.Exec(q); err != nil {
					t.Fatal(err)
				}
			}
			raw.Close()
			out, _, code := runBin(t, "", "--db", db, "audit")
			if code != 1 || !strings.Contains(out, fmt.Sprintf("at index %d:", tc.index)) {
				t.Fatalf("audit after %s: exit %d, %s", tc.name, code, out)
			}
		})
	}
}
