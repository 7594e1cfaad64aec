package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/internal/cursor"
)

const leafCols = "l.idx, l.id, l.kind, l.recorded_at, l.leaf, l.leaf_hash"

type scanner interface{ Scan(dest ...any) error }

func scanEntry(sc scanner) (ledger.Entry, error) {
	var e ledger.Entry
	var kind string
	var idx, rec int64
	var lh []byte
	if err := sc.Scan(&idx, &e.ID, &kind, &rec, &e.Raw, &lh); err != nil {
		return e, lost("read", err)
	}
	e.Index = uint64(idx)
	e.Kind = ledger.Kind(kind)
	e.RecordedAt = time.Unix(0, rec).UTC()
	copy(e.LeafHash[:], lh)
	body, err := ledger.LeafBody(e.Raw)
	e.Body = body
	return e, err
}

// entryByID finds a leaf by content id (the leaves_id_key index).
func entryByID(ctx context.Context, q queryer, id string) (ledger.Entry, error) {
	e, err := scanEntry(q.QueryRowContext(ctx, "SELECT "+leafCols+" FROM leaves l WHERE l.id = $1", id))
	if errors.Is(err, sql.ErrNoRows) {
		return e, ledger.NotFound("entry %q not found", id)
	}
	return e, lost("read", err)
}

// entryAtQuery selects the leaf at one index.
const entryAtQuery = "SELECT " + leafCols + " FROM leaves l WHERE l.idx = $1"

// EntriesRange implements ledger.EntryRangeReader: the stored leaves of
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
	return scanEntries(rows, int(hi-lo))
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
	return scanEntries(rows, len(idx))
}

// scanEntries reads and closes rows of leafCols.
func scanEntries(rows *sql.Rows, n int) ([]ledger.Entry, error) {
	defer rows.Close()
	out := make([]ledger.Entry, 0, min(n, 4096))
	for rows.Next() {
		e, err := scanEntry(rows)
		if err != nil {
			return nil, dbErr("entries", err)
		}
		out = append(out, e)
	}
	return out, dbErr("entries", rows.Err())
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

func limitOf(n int) int {
	switch {
	case n <= 0:
		return 50
	case n > 1000:
		return 1000
	}
	return n
}

// bound returns the exclusive upper index of a page: below the cursor's
// index and below asOf (when not 0), -1 when neither bounds it.
func bound(c string, asOf uint64) (int64, error) {
	idx, ok := cursor.Decode(c)
	if !ok {
		return 0, ledger.FieldError("cursor", "malformed cursor")
	}
	if asOf > 0 && asOf < idx {
		idx = asOf
	}
	if idx > math.MaxInt64 {
		return -1, nil
	}
	return int64(idx), nil
}

// prefixRange returns bounds matching every string with prefix p whose
// continuation is lowercase hex: [p, p+"g"), compared bytewise (COLLATE
// "C", whatever the database's collation).
func prefixRange(a *args, col, p string) string {
	return col + ` >= ` + a.add(p) + ` COLLATE "C" AND ` + col + ` < ` + a.add(p+"g") + ` COLLATE "C"`
}

// hexPrefix checks a commit or digest prefix filter: 4 to 64 lowercase hex
// digits. The error names field.
func hexPrefix(field, p string) error {
	if len(p) < 4 {
		return ledger.FieldError(field, "prefix must have at least 4 characters")
	}
	if len(p) > 64 || !ledger.LowerHex(p) {
		if field == "artifact" {
			return ledger.FieldError(field, "must be a sha256 digest prefix: 4 to 64 lowercase hex digits, optionally after \"sha256:\", got %q", p)
		}
		return ledger.FieldError(field, "must be 4 to 64 lowercase hex digits, got %q", p)
	}
	return nil
}

// Evidence implements ledger.Store.
func (s *Store) Evidence(ctx context.Context, f ledger.EvidenceFilter) ([]ledger.EvidenceEntry, string, error) {
	q, a, lim, err := evidenceQuery(f)
	if err != nil {
		return nil, "", err
	}
	if unstorable(f.Lane, string(f.Backend), string(f.Status), f.Repository) {
		return nil, "", nil
	}
	rows, err := s.d.db.QueryContext(ctx, q, a...)
	if err != nil {
		return nil, "", dbErr("list evidence", err)
	}
	defer rows.Close()
	var out []ledger.EvidenceEntry
	for rows.Next() {
		e, err := scanEntry(rows)
		if err != nil {
			return nil, "", dbErr("list evidence", err)
		}
		ev, err := ledger.ParseEvidence(e.Body)
		if err != nil {
			return nil, "", dbErr("list evidence", err)
		}
		out = append(out, ledger.EvidenceEntry{Entry: e, Evidence: ev})
	}
	if err := rows.Err(); err != nil {
		return nil, "", dbErr("list evidence", err)
	}
	next := ""
	if len(out) > lim {
		out = out[:lim]
		next = cursor.Encode(out[lim-1].Index)
	}
	return out, next, nil
}

// evidenceQuery builds the SELECT of Evidence, one row more than the page
// (lim). Errors are ledger errors naming the bad filter.
func evidenceQuery(f ledger.EvidenceFilter) (q string, a args, lim int, err error) {
	where := []string{"l.kind = 'evidence'"}
	if f.Lane != "" {
		where = append(where, "l.key = "+a.add(f.Lane))
	}
	if f.Backend != "" {
		where = append(where, "l.backend = "+a.add(string(f.Backend)))
	}
	if f.Status != "" {
		where = append(where, "l.status = "+a.add(string(f.Status)))
		if f.Status != ledger.StatusPassed {
			where = append(where, "l.status <> 'passed'") // the partial index evidence_unpassed
		}
	}
	if f.Repository != "" {
		where = append(where, "l.repository = "+a.add(f.Repository))
	}
	if f.Commit != "" {
		if err := hexPrefix("commit", f.Commit); err != nil {
			return "", nil, 0, err
		}
		if ledger.ValidObjectID(f.Commit) {
			where = append(where, "l.commit_id = "+a.add(f.Commit))
		} else {
			where = append(where, prefixRange(&a, "l.commit_id", f.Commit))
		}
	}
	if f.ArtifactDigest != "" {
		d := f.ArtifactDigest
		if !strings.HasPrefix(d, "sha256:") {
			d = "sha256:" + d
		}
		if err := hexPrefix("artifact", strings.TrimPrefix(d, "sha256:")); err != nil {
			return "", nil, 0, err
		}
		where = append(where, "l.idx IN (SELECT a.idx FROM evidence_artifacts a WHERE "+prefixRange(&a, "a.digest", d)+")")
	}
	if !f.Since.IsZero() {
		where = append(where, "l.recorded_at >= "+a.add(f.Since.UnixNano()))
	}
	cur, err := bound(f.Cursor, f.AsOfSize)
	if err != nil {
		return "", nil, 0, err
	}
	if cur >= 0 {
		where = append(where, "l.idx < "+a.add(cur))
	}
	lim = limitOf(f.Limit)
	q = "SELECT " + leafCols + " FROM leaves l WHERE " + strings.Join(where, " AND ") + " ORDER BY l.idx DESC LIMIT " + a.add(lim+1)
	return q, a, lim, nil
}

// Entries implements ledger.Store.
func (s *Store) Entries(ctx context.Context, f ledger.EntryFilter) ([]ledger.Entry, string, error) {
	var a args
	where := []string{"l.kind = " + a.add(string(f.Kind))}
	if f.Kind != ledger.KindEvidence {
		where = append(where, "l.kind <> 'evidence'") // the partial index leaves_kind_key
	}
	if f.Key != "" {
		where = append(where, "l.key = "+a.add(f.Key))
	}
	cur, err := bound(f.Cursor, f.AsOfSize)
	if err != nil {
		return nil, "", err
	}
	if cur >= 0 {
		where = append(where, "l.idx < "+a.add(cur))
	}
	lim := limitOf(f.Limit)
	if unstorable(string(f.Kind), f.Key) {
		return nil, "", nil
	}
	rows, err := s.d.db.QueryContext(ctx, "SELECT "+leafCols+" FROM leaves l WHERE "+strings.Join(where, " AND ")+" ORDER BY l.idx DESC LIMIT "+a.add(lim+1), a...)
	if err != nil {
		return nil, "", dbErr("list entries", err)
	}
	defer rows.Close()
	var out []ledger.Entry
	for rows.Next() {
		e, err := scanEntry(rows)
		if err != nil {
			return nil, "", dbErr("list entries", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, "", dbErr("list entries", err)
	}
	next := ""
	if len(out) > lim {
		out = out[:lim]
		next = cursor.Encode(out[lim-1].Index)
	}
	return out, next, nil
}

// Heads implements ledger.Store.
func (s *Store) Heads(ctx context.Context, f ledger.HeadFilter) ([]ledger.HeadEntry, string, error) {
	var a args
	where := []string{"TRUE"}
	if f.Repository != "" {
		where = append(where, "h.repository = "+a.add(f.Repository))
	}
	if f.Commit != "" {
		if err := hexPrefix("commit", f.Commit); err != nil {
			return nil, "", err
		}
		where = append(where, prefixRange(&a, "h.commit_id", f.Commit))
	}
	if f.Verdict != "" {
		where = append(where, "h.verdict = "+a.add(string(f.Verdict)))
	}
	cur, err := bound(f.Cursor, f.AsOfSize)
	if err != nil {
		return nil, "", err
	}
	if cur >= 0 {
		where = append(where, "h.idx < "+a.add(cur))
	}
	lim := limitOf(f.Limit)
	if unstorable(f.Repository, string(f.Verdict)) {
		return nil, "", nil
	}
	rows, err := s.d.db.QueryContext(ctx, "SELECT "+leafCols+" FROM heads_index h JOIN leaves l ON l.idx = h.idx WHERE "+strings.Join(where, " AND ")+" ORDER BY h.idx DESC LIMIT "+a.add(lim+1), a...)
	if err != nil {
		return nil, "", dbErr("list heads", err)
	}
	defer rows.Close()
	var out []ledger.HeadEntry
	for rows.Next() {
		e, err := scanEntry(rows)
		if err != nil {
			return nil, "", dbErr("list heads", err)
		}
		var h ledger.HeadVerification
		if err := json.Unmarshal(e.Body, &h); err != nil {
			return nil, "", dbErr("list heads", err)
		}
		out = append(out, ledger.HeadEntry{Entry: e, Head: h})
	}
	if err := rows.Err(); err != nil {
		return nil, "", dbErr("list heads", err)
	}
	next := ""
	if len(out) > lim {
		out = out[:lim]
		next = cursor.Encode(out[lim-1].Index)
	}
	return out, next, nil
}

// Checkpoints implements ledger.CheckpointLister over the checkpoints
// table (one indexed range read per page).
func (s *Store) Checkpoints(ctx context.Context, f ledger.CheckpointFilter) ([]ledger.Checkpoint, string, error) {
	below, ok := cursor.Decode(f.Cursor)
	if !ok {
		return nil, "", ledger.FieldError("cursor", "malformed cursor")
	}
	lim := f.Limit
	if lim <= 0 {
		lim = 50
	}
	if lim > 1000 {
		return nil, "", ledger.FieldError("limit", "at most 1000")
	}
	if below > 1<<62 {
		below = 1 << 62
	}
	rows, err := s.d.db.QueryContext(ctx, "SELECT size, root, note, created_at FROM checkpoints WHERE size < $1 ORDER BY size DESC LIMIT $2", int64(below), lim+1)
	if err != nil {
		return nil, "", dbErr("list checkpoints", err)
	}
	defer rows.Close()
	var out []ledger.Checkpoint
	for rows.Next() {
		var cp ledger.Checkpoint
		var root []byte
		var size, created int64
		if err := rows.Scan(&size, &root, &cp.Note, &created); err != nil {
			return nil, "", dbErr("list checkpoints", err)
		}
		cp.Size = uint64(size)
		copy(cp.Root[:], root)
		cp.CreatedAt = time.Unix(0, created).UTC()
		cp.Origin = s.Origin()
		out = append(out, cp)
	}
	if err := rows.Err(); err != nil {
		return nil, "", dbErr("list checkpoints", err)
	}
	next := ""
	if len(out) > lim {
		out = out[:lim]
		next = cursor.Encode(out[lim-1].Size)
	}
	return out, next, nil
}
