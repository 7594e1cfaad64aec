package postgres

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlstore"
)

// dialect is PostgreSQL's sqlstore.Dialect: $n placeholders, prefix
// bounds compared bytewise (COLLATE "C"), indexes scanned as BIGINT, the
// strings TEXT cannot hold matched by nothing, lost connections and full
// disks translated (connLost, dbErr).
var dialect = &sqlstore.Dialect{Numbered: true, True: "TRUE", Collate: ` COLLATE "C"`, Unstorable: unstorable, Engine: engineErr, Lost: lost}

const leafCols = sqlstore.LeafCols

// entryAtQuery selects the leaf at one index.
var entryAtQuery = dialect.SQL(sqlstore.EntryAtQuery)

func scanEntry(sc sqlstore.Scanner) (ledger.Entry, error) { return dialect.ScanEntry(sc) }

// entryByID finds a leaf by content id (the leaves_id_key index).
func entryByID(ctx context.Context, q queryer, id string) (ledger.Entry, error) {
	e, err := scanEntry(q.QueryRowContext(ctx, "SELECT "+leafCols+" FROM leaves l WHERE l.id = $1", id))
	if errors.Is(err, sql.ErrNoRows) {
		return e, ledger.NotFound("entry %q not found", id)
	}
	return e, lost("read", err)
}

// EntriesRange implements tlog.EntryRangeReader: the stored leaves of
// indexes [lo, hi) in index order, in one query (missing ones are absent).
func (s *Store) EntriesRange(ctx context.Context, lo, hi uint64) ([]ledger.Entry, error) {
	if lo >= hi || lo > math.MaxInt64 {
		return nil, nil
	}
	hi = min(hi, math.MaxInt64)
	rows, err := s.d.db.QueryContext(ctx, "SELECT "+leafCols+" FROM leaves l WHERE l.idx >= $1 AND l.idx < $2 ORDER BY l.idx", int64(lo), int64(hi))
	if err != nil {
		return nil, dbErr("entries range", err)
	}
	return dialect.ScanEntries(rows, min(int(hi-lo), 4096), "entries")
}

// EntriesAt implements ledger.EntriesAtReader: the stored leaves at the
// indexes idx, in one query (the list travels as one array parameter).
func (s *Store) EntriesAt(ctx context.Context, idx []uint64) ([]ledger.Entry, error) {
	var b strings.Builder
	b.WriteByte('{')
	for _, x := range idx {
		if x > math.MaxInt64 {
			continue
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(x, 10))
	}
	b.WriteByte('}')
	if b.Len() == 2 {
		return nil, nil
	}
	rows, err := s.d.db.QueryContext(ctx, "SELECT "+leafCols+" FROM leaves l WHERE l.idx = ANY($1::bigint[])", b.String())
	if err != nil {
		return nil, dbErr("entries at", err)
	}
	return dialect.ScanEntries(rows, min(len(idx), 4096), "entries")
}

// unstorable reports whether any of vs is a string PostgreSQL's TEXT
// cannot hold (invalid UTF-8, or a NUL): no stored value equals it (every
// appended text field was checked free of both), so a filter on it
// matches nothing, as in SQLite, instead of failing the query.
func unstorable(vs ...string) bool {
	for _, v := range vs {
		if !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
			return true
		}
	}
	return false
}

// Entry implements ledger.Store.
func (s *Store) Entry(ctx context.Context, id string) (ledger.Entry, error) {
	if unstorable(id) {
		return ledger.Entry{}, ledger.NotFound("entry %q not found", id)
	}
	e, err := entryByID(ctx, s.d.db, id)
	return e, dbErr("entry", err)
}

// EntryAt implements ledger.Store.
func (s *Store) EntryAt(ctx context.Context, index uint64) (ledger.Entry, error) {
	if index > math.MaxInt64 {
		return ledger.Entry{}, ledger.NotFound("no entry at index %d", index)
	}
	e, err := scanEntry(s.d.db.QueryRowContext(ctx, entryAtQuery, int64(index)))
	if errors.Is(err, sql.ErrNoRows) {
		return e, ledger.NotFound("no entry at index %d", index)
	}
	return e, dbErr("entry", err)
}
