package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlstore"
)

// dialect is SQLite's sqlstore.Dialect: "?" placeholders, BINARY
// comparison, indexes scanned as uint64, every Go string storable.
var dialect = &sqlstore.Dialect{True: "1=1", UnsignedIndex: true}

// dbErr translates database errors into application errors, in one place
// (sqlstore.Dialect.Err).
func dbErr(op string, err error) error { return dialect.Err(op, err) }

const leafCols = sqlstore.LeafCols

func scanEntry(sc sqlstore.Scanner) (ledger.Entry, error) { return dialect.ScanEntry(sc) }

var _ ledger.CheckpointLister = (*Store)(nil)

// entryByID finds a leaf by content id through the id tables (ids.go).
func entryByID(ctx context.Context, q queryer, id string) (ledger.Entry, error) {
	e, err := scanEntry(q.QueryRowContext(ctx, "SELECT "+leafCols+" FROM leaves l WHERE l.idx = "+idxOfID+" AND l.id = ?1", id))
	if errors.Is(err, sql.ErrNoRows) {
		return e, ledger.NotFound("entry %q not found", id)
	}
	return e, err
}

// Entry implements ledger.Store.
func (s *Store) Entry(ctx context.Context, id string) (ledger.Entry, error) {
	e, err := entryByID(ctx, s.d.r, id)
	return e, dbErr("entry", err)
}

// EntryAt implements ledger.Store.
func (s *Store) EntryAt(ctx context.Context, index uint64) (ledger.Entry, error) {
	e, err := scanEntry(s.d.r.QueryRowContext(ctx, sqlstore.EntryAtQuery, index))
	if errors.Is(err, sql.ErrNoRows) {
		return e, ledger.NotFound("no entry at index %d", index)
	}
	return e, dbErr("entry", err)
}

// EntriesRange implements tlog.EntryRangeReader: the stored leaves of
// indexes [lo, hi) in index order, in one query (missing ones are absent).
func (s *Store) EntriesRange(ctx context.Context, lo, hi uint64) ([]ledger.Entry, error) {
	rows, err := s.d.r.QueryContext(ctx, "SELECT "+leafCols+" FROM leaves l WHERE l.idx >= ? AND l.idx < ? ORDER BY l.idx", lo, hi)
	if err != nil {
		return nil, dbErr("entries range", err)
	}
	return dialect.ScanEntries(rows, int(hi-lo), "entries range")
}

// EntriesAt implements ledger.EntriesAtReader: the stored leaves at the
// indexes idx, in one query (the list travels as one JSON array
// parameter, so the statement is the same for every list).
func (s *Store) EntriesAt(ctx context.Context, idx []uint64) ([]ledger.Entry, error) {
	if len(idx) == 0 {
		return nil, nil
	}
	list, _ := json.Marshal(idx)
	rows, err := s.d.r.QueryContext(ctx, "SELECT "+leafCols+" FROM leaves l WHERE l.idx IN (SELECT value FROM json_each(?))", string(list))
	if err != nil {
		return nil, dbErr("entries at", err)
	}
	return dialect.ScanEntries(rows, len(idx), "entries at")
}
