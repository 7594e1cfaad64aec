package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/storetest"
)

// buildLog makes a closed database of n leaves appended one by one.
func buildLog(t *testing.T, n int) (path string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(context.Background(), Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := s.Append(context.Background(), []ledger.Record{evRecord(t, sampleEvidence(i))}, ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func rawExec(t *testing.T, path string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range stmts {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func auditPath(t *testing.T, path string) ledger.AuditReport {
	t.Helper()
	s, err := Open(context.Background(), Options{Path: path, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rep, err := s.Audit(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TamperCases are raw-SQL edits done behind the service's back, with the
// leaf index the audit must name. Shared with the CLI test.
var TamperCases = []struct {
	Name  string
	SQL   []string
	Index int64
}{
	{"edit-a-byte", []string{"UPDATE leaves SET leaf = CAST(replace(CAST(leaf AS TEXT), '\"cases_exact\":216', '\"cases_exact\":215') AS BLOB) WHERE idx = 7"}, 7},
	{"edit-a-byte-and-rehash", []string{"UPDATE leaves SET leaf = CAST(replace(CAST(leaf AS TEXT), 'test', 'tess') AS BLOB) WHERE idx = 9"}, 9},
	{"delete-a-row", []string{"DELETE FROM evidence_artifacts WHERE idx = 5", "DELETE FROM leaves WHERE idx = 5"}, 5},
	{"swap-two-rows", []string{
		"UPDATE leaves SET idx = -1 WHERE idx = 3",
		"UPDATE leaves SET idx = 3 WHERE idx = 11",
		"UPDATE leaves SET idx = 11 WHERE idx = -1",
	}, 3},
	{"insert-a-row", []string{"INSERT INTO leaves(idx, id, kind, key, recorded_at, leaf, leaf_hash) SELECT 20, 'forged', kind, key, recorded_at, leaf, leaf_hash FROM leaves WHERE idx = 2"}, 20},
	{"truncate-the-tail", []string{"DELETE FROM evidence_artifacts WHERE idx >= 17", "DELETE FROM leaves WHERE idx >= 17"}, 17},
	{"edit-projection", []string{"UPDATE leaves SET status = 'failed' WHERE idx = 4"}, 4},
	{"clear-projection", []string{"UPDATE leaves SET commit_id = NULL WHERE idx = 6"}, 6},
	{"delete-an-artifact-row", []string{"DELETE FROM evidence_artifacts WHERE idx = 5"}, -1},
	{"edit-an-artifact-digest", []string{"UPDATE evidence_artifacts SET digest = 'sha256:' || hex(zeroblob(32)) WHERE idx = 5"}, 5},
	{"move-an-artifact-row", []string{"UPDATE evidence_artifacts SET idx = 8 WHERE idx = 5"}, 5},
	{"replace-an-artifact-row", []string{"DELETE FROM evidence_artifacts WHERE idx = 12", "INSERT INTO evidence_artifacts(digest, idx, name) VALUES ('sha256:' || hex(zeroblob(32)), 12, 'libmlx.so')"}, 12},
	{"rename-an-artifact", []string{"UPDATE evidence_artifacts SET name = 'other.so' WHERE idx = 3"}, 3},
	{"edit-checkpoint", []string{"UPDATE checkpoints SET root = zeroblob(32) WHERE size = 13"}, 12},
}

func TestAuditDetectsTampering(t *testing.T) {
	base := buildLog(t, 20)
	if rep := auditPath(t, base); !rep.OK || rep.Leaves != 20 {
		t.Fatalf("clean log does not audit: %+v", rep)
	}
	for _, tc := range TamperCases {
		t.Run(tc.Name, func(t *testing.T) {
			path := buildLog(t, 20)
			rawExec(t, path, tc.SQL...)
			if tc.Name == "edit-a-byte-and-rehash" {
				// The attacker also fixes the stored leaf hash: the tree
				// nodes and the signed checkpoints still catch it.
				rawExec(t, path, "UPDATE leaves SET leaf_hash = (SELECT leaf_hash FROM leaves WHERE idx = 9) WHERE idx = 9")
				fixLeafHash(t, path, 9)
				fixID(t, path, 9)
			}
			rep := auditPath(t, path)
			if rep.OK {
				t.Fatalf("audit passed after %s", tc.Name)
			}
			if rep.FirstBadIndex != tc.Index {
				t.Fatalf("%s: audit names index %d, want %d (%s)", tc.Name, rep.FirstBadIndex, tc.Index, rep.Problem)
			}
			if tc.Index < 0 && (rep.Leaves != 20 || rep.Root == (ledger.Hash{})) {
				t.Fatalf("%s: every leaf verified, yet the report has %d leaves, root %s", tc.Name, rep.Leaves, rep.Root)
			}
			t.Logf("%s: %s", tc.Name, rep.Problem)
			if rep.Problem == "" {
				t.Fatalf("no problem text")
			}
		})
	}
}

// fixLeafHash recomputes the stored leaf hash of idx from its (edited)
// bytes, as a careful attacker would.
func fixLeafHash(t *testing.T, path string, idx int) {
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var raw []byte
	if err := db.QueryRow("SELECT leaf FROM leaves WHERE idx = ?", idx).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	h := ledger.LeafHash(raw)
	if _, err := db.Exec("UPDATE leaves SET leaf_hash = ? WHERE idx = ?", h[:], idx); err != nil {
		t.Fatal(err)
	}
}

func TestMigrateTwiceIsNoop(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "m.db")
	db, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	v1, err := MigrateTo(ctx, db, 0)
	if err != nil {
		t.Fatal(err)
	}
	var schema1 string
	db.QueryRow("SELECT group_concat(sql, ';') FROM (SELECT sql FROM sqlite_master ORDER BY name)").Scan(&schema1)
	v2, err := MigrateTo(ctx, db, 0)
	if err != nil {
		t.Fatal(err)
	}
	var schema2 string
	db.QueryRow("SELECT group_concat(sql, ';') FROM (SELECT sql FROM sqlite_master ORDER BY name)").Scan(&schema2)
	if v1 != v2 || schema1 != schema2 || v1 < 2 {
		t.Fatalf("second migration changed something: v%d -> v%d", v1, v2)
	}
}

func TestOlderDatabaseUpgradedOnStart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := MigrateTo(ctx, db, 1); err != nil || v != 1 {
		t.Fatalf("migrate to 1: %v %v", v, err)
	}
	// A version-1 token row (no roles column yet).
	if _, err := db.Exec("INSERT INTO tokens(id, name, scope, secret_hash, created_at) VALUES ('tok_old', 'old', 'record', x'00', 1)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := Open(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cur, latest, err := MigrationStatus(ctx, s.DB())
	if err != nil || cur != latest || cur < 2 {
		t.Fatalf("not upgraded: %d/%d %v", cur, latest, err)
	}
	ts, err := s.Tokens(ctx)
	if err != nil || len(ts) != 1 || ts[0].Name != "old" {
		t.Fatalf("old token lost: %+v %v", ts, err)
	}
	if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(1))}, "idem"); err != nil {
		t.Fatalf("append with idempotency key after upgrade: %v", err)
	}
}

// fixID recomputes the id column and the id inside the leaf bytes.
func fixID(t *testing.T, path string, idx int) {
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	storetest.FixIDAndHash(t, db, int64(idx), dialect.SQL)
}
