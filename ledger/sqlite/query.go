package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/internal/cursor"
)

const leafCols = "l.idx, l.id, l.kind, l.recorded_at, l.leaf, l.leaf_hash"

type scanner interface{ Scan(dest ...any) error }

func scanEntry(sc scanner) (ledger.Entry, error) {
	var e ledger.Entry
	var kind string
	var rec int64
	var lh []byte
	if err := sc.Scan(&e.Index, &e.ID, &kind, &rec, &e.Raw, &lh); err != nil {
		return e, err
	}
	e.Kind = ledger.Kind(kind)
	e.RecordedAt = time.Unix(0, rec).UTC()
	copy(e.LeafHash[:], lh)
	body, err := ledger.LeafBody(e.Raw)
	e.Body = body
	return e, err
}

// entryByID finds a leaf by content id through the id tables (ids.go).
func entryByID(ctx context.Context, q queryer, id string) (ledger.Entry, error) {
	e, err := scanEntry(q.QueryRowContext(ctx, "SELECT "+leafCols+" FROM leaves l WHERE l.idx = "+idxOfID+" AND l.id = ?1", id))
	if errors.Is(err, sql.ErrNoRows) {
		return e, ledger.NotFound("entry %q not found", id)
	}
	return e, err
}

// entryAtQuery selects the leaf at one index.
const entryAtQuery = "SELECT " + leafCols + " FROM leaves l WHERE l.idx = ?"

// Entry implements ledger.Store.
func (s *Store) Entry(ctx context.Context, id string) (ledger.Entry, error) {
	e, err := entryByID(ctx, s.d.r, id)
	return e, dbErr("entry", err)
}

// EntryAt implements ledger.Store.
func (s *Store) EntryAt(ctx context.Context, index uint64) (ledger.Entry, error) {
	e, err := scanEntry(s.d.r.QueryRowContext(ctx, entryAtQuery, index))
	if errors.Is(err, sql.ErrNoRows) {
		return e, ledger.NotFound("no entry at index %d", index)
	}
	return e, dbErr("entry", err)
}

// EntriesRange implements ledger.EntryRangeReader: the stored leaves of
// indexes [lo, hi) in index order, in one query (missing ones are absent).
func (s *Store) EntriesRange(ctx context.Context, lo, hi uint64) ([]ledger.Entry, error) {
	rows, err := s.d.r.QueryContext(ctx, "SELECT "+leafCols+" FROM leaves l WHERE l.idx >= ? AND l.idx < ? ORDER BY l.idx", lo, hi)
	if err != nil {
		return nil, dbErr("entries range", err)
	}
	defer rows.Close()
	out := make([]ledger.Entry, 0, hi-lo)
	for rows.Next() {
		e, err := scanEntry(rows)
		if err != nil {
			return nil, dbErr("entries range", err)
		}
		out = append(out, e)
	}
	return out, dbErr("entries range", rows.Err())
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
	defer rows.Close()
	out := make([]ledger.Entry, 0, len(idx))
	for rows.Next() {
		e, err := scanEntry(rows)
		if err != nil {
			return nil, dbErr("entries at", err)
		}
		out = append(out, e)
	}
	return out, dbErr("entries at", rows.Err())
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
// continuation is lowercase hex: [p, p+"g").
func prefixRange(col, p string) (string, []any) {
	return col + " >= ? AND " + col + " < ?", []any{p, p + "g"}
}

// hexPrefix checks a commit or digest prefix filter: 4 to 64 lowercase hex
// digits. The error names field.
func hexPrefix(field, p string) error {
	if len(p) < 4 {
		return ledger.FieldError(field, "prefix must have at least 4 characters")
	}
	if len(p) > 64 || !ledger.LowerHex(p) {
		// Stored ids and digests are lowercase hex: anything else could
		// never match, and an empty answer would hide the typo.
		if field == "artifact" {
			return ledger.FieldError(field, "must be a sha256 digest prefix: 4 to 64 lowercase hex digits, optionally after \"sha256:\", got %q", p)
		}
		return ledger.FieldError(field, "must be 4 to 64 lowercase hex digits, got %q", p)
	}
	return nil
}

// Evidence implements ledger.Store.
func (s *Store) Evidence(ctx context.Context, f ledger.EvidenceFilter) ([]ledger.EvidenceEntry, string, error) {
	q, args, lim, err := evidenceQuery(f)
	if err != nil {
		return nil, "", err
	}
	rows, err := s.d.r.QueryContext(ctx, q, args...)
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

// evidenceQuery builds the SELECT of Evidence: leaf columns of evidence
// leaves matching f, newest first, one row more than the page (lim) to
// tell whether another page follows. Errors are ledger errors naming the
// bad filter.
func evidenceQuery(f ledger.EvidenceFilter) (q string, args []any, lim int, err error) {
	where := []string{"l.kind = 'evidence'"}
	if f.Lane != "" {
		where, args = append(where, "l.key = ?"), append(args, f.Lane) // the lane is an evidence leaf's key
	}
	if f.Backend != "" {
		where, args = append(where, "l.backend = ?"), append(args, string(f.Backend))
	}
	if f.Status != "" {
		where, args = append(where, "l.status = ?"), append(args, string(f.Status))
		if f.Status != ledger.StatusPassed {
			// Lets SQLite use the partial index evidence_unpassed
			// (migration 6): the rare statuses are found without a scan.
			where = append(where, "l.status <> 'passed'")
		}
	}
	if f.Repository != "" {
		where, args = append(where, "l.repository = ?"), append(args, f.Repository)
	}
	if f.Commit != "" {
		if err := hexPrefix("commit", f.Commit); err != nil {
			return "", nil, 0, err
		}
		if ledger.ValidObjectID(f.Commit) {
			where, args = append(where, "l.commit_id = ?"), append(args, f.Commit)
		} else {
			w, a := prefixRange("l.commit_id", f.Commit)
			where, args = append(where, w), append(args, a...)
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
		w, a := prefixRange("a.digest", d)
		where = append(where, "l.idx IN (SELECT a.idx FROM evidence_artifacts a WHERE "+w+")")
		args = append(args, a...)
	}
	if !f.Since.IsZero() {
		where, args = append(where, "l.recorded_at >= ?"), append(args, f.Since.UnixNano())
	}
	cur, err := bound(f.Cursor, f.AsOfSize)
	if err != nil {
		return "", nil, 0, err
	}
	if cur >= 0 {
		where, args = append(where, "l.idx < ?"), append(args, cur)
	}
	lim = limitOf(f.Limit)
	args = append(args, lim+1)
	q = "SELECT " + leafCols + " FROM leaves l WHERE " + strings.Join(where, " AND ") + " ORDER BY l.idx DESC LIMIT ?"
	return q, args, lim, nil
}

// Entries implements ledger.Store.
func (s *Store) Entries(ctx context.Context, f ledger.EntryFilter) ([]ledger.Entry, string, error) {
	where := []string{"l.kind = ?"}
	args := []any{string(f.Kind)}
	if f.Kind != ledger.KindEvidence {
		// Lets SQLite use the partial index leaves_kind_key, which leaves
		// evidence out (migration 4).
		where = append(where, "l.kind <> 'evidence'")
	}
	if f.Key != "" {
		where, args = append(where, "l.key = ?"), append(args, f.Key)
	}
	cur, err := bound(f.Cursor, f.AsOfSize)
	if err != nil {
		return nil, "", err
	}
	if cur >= 0 {
		where, args = append(where, "l.idx < ?"), append(args, cur)
	}
	lim := limitOf(f.Limit)
	args = append(args, lim+1)
	rows, err := s.d.r.QueryContext(ctx, "SELECT "+leafCols+" FROM leaves l WHERE "+strings.Join(where, " AND ")+" ORDER BY l.idx DESC LIMIT ?", args...)
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
	where := []string{"1=1"}
	var args []any
	if f.Repository != "" {
		where, args = append(where, "h.repository = ?"), append(args, f.Repository)
	}
	if f.Commit != "" {
		if err := hexPrefix("commit", f.Commit); err != nil {
			return nil, "", err
		}
		w, a := prefixRange("h.commit_id", f.Commit)
		where, args = append(where, w), append(args, a...)
	}
	if f.Verdict != "" {
		where, args = append(where, "h.verdict = ?"), append(args, string(f.Verdict))
	}
	cur, err := bound(f.Cursor, f.AsOfSize)
	if err != nil {
		return nil, "", err
	}
	if cur >= 0 {
		where, args = append(where, "h.idx < ?"), append(args, cur)
	}
	lim := limitOf(f.Limit)
	args = append(args, lim+1)
	rows, err := s.d.r.QueryContext(ctx, "SELECT "+leafCols+" FROM heads_index h JOIN leaves l ON l.idx = h.idx WHERE "+strings.Join(where, " AND ")+" ORDER BY h.idx DESC LIMIT ?", args...)
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
