package migrations

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/pressly/goose/v3"
)

// Go holds the migrations written in Go, registered with goose beside the
// *.sql files.
var Go = []*goose.Migration{
	goose.NewGoMigration(5, &goose.GoFunc{RunDB: up5}, &goose.GoFunc{RunDB: down5}),
	goose.NewGoMigration(6, &goose.GoFunc{RunDB: up6}, &goose.GoFunc{RunDB: down6}),
}

// Migration 5: content ids leave the leaves table's UNIQUE index. Ids are
// hashes, so each appended record landed on a random page of that index and
// a batch of 100 records dirtied about 100 index pages (100 WAL frames) per
// commit. Ids now live in two tables the writer keeps (ledger/sqlite,
// ids.go):
//
//	recent_ids  the ids of the newest leaves, appended in leaf order (one
//	            sequential insert per record), scanned by lookups;
//	entry_ids   every older id, keyed by id; recent_ids are merged into it
//	            in sorted runs of a few thousand.
//
// Together they hold each leaf's id exactly once (`ledger audit` checks).
//
// SQLite cannot drop a UNIQUE constraint, so the leaves table is rebuilt
// (https://sqlite.org/lang_altertable.html#otheralter, the 12 steps):
// foreign keys off on one connection, then in one transaction create the
// new table, copy, drop the old one, rename, check the foreign keys.
// PRAGMA foreign_keys cannot change inside a transaction, hence a Go
// migration without goose's transaction. If the process dies after the
// transaction commits but before goose records version 5, the next run
// finds entry_ids and only records the version.
var up5Stmts = []string{
	`CREATE TABLE leaves_v5 (
    idx         INTEGER PRIMARY KEY,          -- 0-based leaf index
    id          TEXT    NOT NULL,             -- content id (ledger.EntryID); looked up through entry_ids/recent_ids
    kind        TEXT    NOT NULL,
    key         TEXT    NOT NULL DEFAULT '',  -- ledger.EntryKey
    recorded_at INTEGER NOT NULL,             -- unix nanoseconds, UTC
    leaf        BLOB    NOT NULL,
    leaf_hash   BLOB    NOT NULL
) STRICT`,
	`INSERT INTO leaves_v5(idx, id, kind, key, recorded_at, leaf, leaf_hash)
    SELECT idx, id, kind, key, recorded_at, leaf, leaf_hash FROM leaves ORDER BY idx`,
	`DROP TABLE leaves`,
	`ALTER TABLE leaves_v5 RENAME TO leaves`,
	`CREATE INDEX leaves_kind_key ON leaves(kind, key, idx) WHERE kind <> 'evidence'`,
	`CREATE TABLE entry_ids (
    id  TEXT    PRIMARY KEY,
    idx INTEGER NOT NULL
) STRICT, WITHOUT ROWID`,
	`CREATE TABLE recent_ids (
    idx INTEGER PRIMARY KEY,
    id  TEXT    NOT NULL
) STRICT`,
	`INSERT INTO entry_ids(id, idx) SELECT id, idx FROM leaves ORDER BY id`,
}

var down5Stmts = []string{
	`CREATE TABLE leaves_v4 (
    idx         INTEGER PRIMARY KEY,
    id          TEXT    NOT NULL UNIQUE,
    kind        TEXT    NOT NULL,
    key         TEXT    NOT NULL DEFAULT '',
    recorded_at INTEGER NOT NULL,
    leaf        BLOB    NOT NULL,
    leaf_hash   BLOB    NOT NULL
) STRICT`,
	`INSERT INTO leaves_v4 SELECT idx, id, kind, key, recorded_at, leaf, leaf_hash FROM leaves ORDER BY idx`,
	`DROP TABLE leaves`,
	`ALTER TABLE leaves_v4 RENAME TO leaves`,
	`CREATE INDEX leaves_kind_key ON leaves(kind, key, idx) WHERE kind <> 'evidence'`,
	`DROP TABLE recent_ids`,
	`DROP TABLE entry_ids`,
}

func up5(ctx context.Context, db *sql.DB) error {
	return rebuild(ctx, db, "entry_ids", true, up5Stmts)
}

func down5(ctx context.Context, db *sql.DB) error {
	return rebuild(ctx, db, "entry_ids", false, down5Stmts)
}

// rebuild runs stmts in one IMMEDIATE transaction on one connection with
// foreign keys off, then checks them. It does nothing when table marker
// already exists (wantAfter true) or is already gone (wantAfter false).
func rebuild(ctx context.Context, db *sql.DB, marker string, wantAfter bool, stmts []string) (err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var n int
	if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", marker).Scan(&n); err != nil {
		return err
	}
	if (n == 1) == wantAfter {
		return nil
	}
	var fk int
	if err := conn.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, "PRAGMA foreign_keys = OFF"); err != nil {
		return err
	}
	defer func() {
		if _, e := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA foreign_keys = %d", fk)); e != nil && err == nil {
			err = e
		}
	}()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	rollback := func(err error) error {
		conn.ExecContext(ctx, "ROLLBACK")
		return err
	}
	for _, q := range stmts {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return rollback(fmt.Errorf("%.60s...: %w", q, err))
		}
	}
	rows, err := conn.QueryContext(ctx, "PRAGMA foreign_key_check")
	if err != nil {
		return rollback(err)
	}
	bad := rows.Next()
	rows.Close()
	if bad {
		return rollback(fmt.Errorf("foreign key check failed after rebuilding leaves"))
	}
	_, err = conn.ExecContext(ctx, "COMMIT")
	if err != nil {
		return rollback(err)
	}
	return nil
}
