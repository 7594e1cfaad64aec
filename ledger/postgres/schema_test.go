package postgres

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger/storetest/pgtest"
)

var updateSchema = flag.Bool("update", false, "rewrite testdata/schema.golden")

// TestMigratedSchemaIsGolden pins what the migrations build: every
// column (type, nullability, default), index and constraint, and goose's
// version rows. testdata/schema.golden was written by the migrations as
// first shipped (each file of migrations/postgres); serving a shared
// SQLite migration instead of a copy must build the same schema under the
// same versions, so that a database migrated by an earlier ledger opens
// as up to date.
func TestMigratedSchemaIsGolden(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	ctx := context.Background()
	db, _, err := Connect(ctx, dsn, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, q := range []string{
		`SELECT table_name || '.' || column_name || ' ' || data_type || ' null=' || is_nullable || ' default=' || COALESCE(column_default, '-')
			FROM information_schema.columns WHERE table_schema = 'public' ORDER BY table_name, column_name`,
		`SELECT tablename || ' ' || indexname || ': ' || indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY tablename, indexname`,
		`SELECT c.conrelid::regclass::text || ' ' || c.conname || ': ' || pg_get_constraintdef(c.oid)
			FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = 'public' ORDER BY 1`,
		`SELECT 'goose ' || version_id || ' ' || is_applied FROM goose_db_version WHERE version_id > 0 ORDER BY version_id`,
	} {
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			b.WriteString(line + "\n")
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
	}
	golden := filepath.Join("testdata", "schema.golden")
	if *updateSchema {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != string(want) {
		t.Fatalf("migrated schema differs from %s:\ngot:\n%s\nwant:\n%s", golden, got, want)
	}
}
