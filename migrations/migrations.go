package migrations

import "embed"

// FS holds the *.sql migrations.
//
//go:embed *.sql
var FS embed.FS

// Shared names the SQL migrations of FS that PostgreSQL runs as they are
// (plain types, no SQLite-only syntax): package migrations/postgres
// serves them under the same names instead of holding copies.
var Shared = []string{
	"00003_fewer_write_indexes.sql",
	"00008_idempotency_expiry.sql",
	"00009_runs.sql",
	"00010_run_selection.sql",
}
