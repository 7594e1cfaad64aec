package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// ErrCorrupt is wrapped by CheckFile's error when SQLite reports the file
// itself damaged (not a changed log: a broken page, index or record).
var ErrCorrupt = errors.New("database file is corrupt")

// CheckFile runs PRAGMA quick_check (full false) or PRAGMA
// integrity_check (full true) on the database file at path through its
// own read-only connection; other connections may read the file
// meanwhile (ledger audit runs it beside the log's audit). A damaged
// file is an error wrapping ErrCorrupt with SQLite's first message (which
// names pages and tables, never row content); a file SQLite cannot read
// as a database at all wraps ErrCorrupt too.
func CheckFile(ctx context.Context, path string, full bool) error {
	db, err := sql.Open("sqlite", dsn(path, true))
	if err != nil {
		return fmt.Errorf("check %s: %w", path, err)
	}
	defer db.Close()
	pragma := "PRAGMA quick_check(1)"
	if full {
		pragma = "PRAGMA integrity_check(1)"
	}
	var msg string
	if err := db.QueryRowContext(ctx, pragma).Scan(&msg); err != nil {
		if isCorruptErr(err) {
			return fmt.Errorf("%w: %s: %s", ErrCorrupt, path, firstLine(err.Error()))
		}
		return fmt.Errorf("check %s: %w", path, err)
	}
	if msg != "ok" {
		return fmt.Errorf("%w: %s: %s", ErrCorrupt, path, firstLine(msg))
	}
	return nil
}

// isCorruptErr tells SQLite's "malformed" and "not a database" errors
// (SQLITE_CORRUPT, SQLITE_NOTADB) from others.
func isCorruptErr(err error) bool {
	s := err.Error()
	return strings.Contains(s, "malformed") || strings.Contains(s, "not a database") || strings.Contains(s, "SQLITE_CORRUPT") || strings.Contains(s, "SQLITE_NOTADB")
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}
