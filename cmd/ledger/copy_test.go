package main

import (
	"context"
	"database/sql"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger/sqlite"

	"github.com/evidence-ledger/ledger/ledger/storetest/pgtest"
)

// TestCopyTablesKinds checks that copyTables names every column of every
// table of a migrated SQLite schema, with a kind for each, and that every
// other table is in copyDerived: a table a migration adds fails it until
// `ledger copy` moves it or says why not.
func TestCopyTablesKinds(t *testing.T) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := sqlite.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
	if err != nil {
		t.Fatal(err)
	}
	schema := map[string]bool{}
	for rows.Next() {
		var n string
		rows.Scan(&n)
		schema[n] = true
	}
	rows.Close()
	for _, tb := range copyTables {
		if n, k := len(strings.Split(tb.cols, ",")), len(tb.kinds); n != k {
			t.Errorf("%s: %d columns, %d kinds", tb.name, n, k)
		}
		if !schema[tb.name] {
			t.Errorf("copyTables names %s, which the schema lacks", tb.name)
		}
		var cols []string
		crows, err := db.Query("SELECT name FROM pragma_table_info(?) ORDER BY cid", tb.name)
		if err != nil {
			t.Fatal(err)
		}
		for crows.Next() {
			var c string
			crows.Scan(&c)
			cols = append(cols, c)
		}
		crows.Close()
		listed := strings.Split(strings.ReplaceAll(tb.cols, " ", ""), ",")
		slices.Sort(listed)
		slices.Sort(cols)
		if !slices.Equal(listed, cols) {
			t.Errorf("%s: copyTables lists columns %v, the schema has %v", tb.name, listed, cols)
		}
		delete(schema, tb.name)
	}
	for _, n := range copyDerived {
		delete(schema, n)
	}
	for n := range schema {
		t.Errorf("table %s is neither copied (copyTables) nor derived (copyDerived)", n)
	}
}

// TestCopySQLiteToPostgresAndBack moves a ledger (evidence, tokens, a
// revocation, idempotency keys) from SQLite to PostgreSQL and from there
// to a new SQLite file with `ledger copy`; every copy audits clean with
// the source's size and root, the token still authenticates on the copy
// (its hash moved), and a non-empty destination is refused.
func TestCopySQLiteToPostgresAndBack(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "ledger.db")
	for i := range 12 {
		if _, se, code := runBin(t, string(crashEvidence(int64(i))), "--db", db, "record", "-"); code != 0 {
			t.Fatalf("record: %s", se)
		}
	}
	if _, se, code := runBin(t, "", "--db", db, "token", "create", "--name", "gone", "--scope", "read"); code != 0 {
		t.Fatal(se)
	}
	if _, se, code := runBin(t, "", "--db", db, "token", "revoke", "gone"); code != 0 {
		t.Fatal(se)
	}
	secret, se, code := runBin(t, "", "--db", db, "token", "create", "--name", "ci", "--scope", "record")
	if code != 0 {
		t.Fatal(se)
	}
	pg := pgtest.NewDatabase(t)
	out, se, code := runBin(t, "", "--data-dir", dir, "copy", "--from", db, "--to", pg)
	if code != 0 {
		t.Fatalf("copy to PostgreSQL: %d %s %s", code, out, se)
	}
	t.Log(out)
	if !strings.Contains(out, "copied 15 leaves") || strings.Count(out, "ok=true, 15 leaves") != 2 {
		t.Fatalf("copy output: %s", out)
	}
	// The copy is the same log: its audit (on its own) and its tokens.
	if out, _, code := runBin(t, "", "--db", pg, "--data-dir", dir, "audit"); code != 0 {
		t.Fatalf("audit of the copy: %s", out)
	}
	srv, base := startServer(t, pg, "--data-dir", dir)
	defer func() { srv.Process.Kill(); srv.Wait() }()
	if _, se, code := runBin(t, string(crashEvidence(99)), "--server", base, "--token", strings.TrimSpace(secret), "record", "-"); code != 0 {
		t.Fatalf("record through a server on the copy with the copied token: %s", se)
	}
	srv.Process.Kill()
	srv.Wait()
	// Non-empty destination refused, nothing written.
	if _, se, code := runBin(t, "", "--data-dir", dir, "copy", "--from", db, "--to", pg); code != 2 || !strings.Contains(se, "not empty") {
		t.Fatalf("copy into a non-empty database: %d %s", code, se)
	}
	back := filepath.Join(t.TempDir(), "back.db")
	out, se, code = runBin(t, "", "--data-dir", dir, "copy", "--from", pg, "--to", "sqlite://"+back)
	if code != 0 || !strings.Contains(out, "copied 16 leaves") {
		t.Fatalf("copy back to SQLite: %d %s %s", code, out, se)
	}
	// The SQLite copy takes appends, and finds a record it already holds
	// (its content-id tables were built): 17 leaves, not 18.
	if _, se, code := runBin(t, string(crashEvidence(100)), "--db", back, "--data-dir", dir, "record", "-"); code != 0 {
		t.Fatalf("record into the SQLite copy: %s", se)
	}
	if _, se, code := runBin(t, string(crashEvidence(1)), "--db", back, "--data-dir", dir, "record", "-"); code != 0 {
		t.Fatalf("re-record into the SQLite copy: %s", se)
	}
	if out, _, code := runBin(t, "", "--db", back, "--data-dir", dir, "audit"); code != 0 || !strings.Contains(out, "17 leaves") {
		t.Fatalf("audit of the SQLite copy: %s", out)
	}
	if _, se, code := runBin(t, "", "--data-dir", dir, "copy", "--from", pg, "--to", back); code != 2 || !strings.Contains(se, "exists") {
		t.Fatalf("copy onto an existing file: %d %s", code, se)
	}
}
