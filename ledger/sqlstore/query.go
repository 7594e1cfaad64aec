package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"math"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/internal/cursor"
)

// LeafCols are the leaves columns ScanEntry reads, of the table aliased l.
const LeafCols = "l.idx, l.id, l.kind, l.recorded_at, l.leaf, l.leaf_hash"

// EntryAtQuery selects the leaf at one index ("?" placeholder).
const EntryAtQuery = "SELECT " + LeafCols + " FROM leaves l WHERE l.idx = ?"

// ScanEntry reads one row of LeafCols. Its errors are the scan's (a lost
// connection translated by the dialect's Lost) or the leaf's body not
// decoding (ledger.LeafBody).
func (d *Dialect) ScanEntry(sc Scanner) (ledger.Entry, error) {
	var e ledger.Entry
	var kind string
	var rec int64
	var lh []byte
	if d.UnsignedIndex {
		if err := sc.Scan(&e.Index, &e.ID, &kind, &rec, &e.Raw, &lh); err != nil {
			return e, d.lost("read", err)
		}
	} else {
		var idx int64
		if err := sc.Scan(&idx, &e.ID, &kind, &rec, &e.Raw, &lh); err != nil {
			return e, d.lost("read", err)
		}
		e.Index = uint64(idx)
	}
	e.Kind = ledger.Kind(kind)
	e.RecordedAt = time.Unix(0, rec).UTC()
	copy(e.LeafHash[:], lh)
	body, err := ledger.LeafBody(e.Raw)
	e.Body = body
	return e, err
}

// ScanEntries reads and closes rows of LeafCols, with room for n entries
// at first; errors are translated by Err naming op.
func (d *Dialect) ScanEntries(rows *sql.Rows, n int, op string) ([]ledger.Entry, error) {
	defer rows.Close()
	out := make([]ledger.Entry, 0, n)
	for rows.Next() {
		e, err := d.ScanEntry(rows)
		if err != nil {
			return nil, d.Err(op, err)
		}
		out = append(out, e)
	}
	return out, d.Err(op, rows.Err())
}

// Queries are the projection queries of ledger.Store and
// ledger.CheckpointLister over one database. A driver's Store embeds them.
// Safe for concurrent use when DB is.
type Queries struct {
	DB      Queryer
	Dialect *Dialect
	// LogOrigin names the log in the checkpoints listed.
	LogOrigin func() string
}

// limitOf is a page's size: 50 by default, at most 1000.
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

// filter is a WHERE clause under construction: conditions joined by AND,
// "?" for each of args.
type filter struct {
	where []string
	args  []any
}

func (f *filter) add(cond string, args ...any) {
	f.where = append(f.where, cond)
	f.args = append(f.args, args...)
}

// prefix adds bounds matching every string of col with prefix p whose
// continuation is lowercase hex: [p, p+"g"), compared bytewise.
func (f *filter) prefix(d *Dialect, col, p string) {
	f.add(col+" >= ?"+d.Collate+" AND "+col+" < ?"+d.Collate, p, p+"g")
}

// page adds the cursor's and asOf's bound on col.
func (f *filter) page(col, c string, asOf uint64) error {
	cur, err := bound(c, asOf)
	if err != nil {
		return err
	}
	if cur >= 0 {
		f.add(col+" < ?", cur)
	}
	return nil
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

// page runs the page query q (LeafCols first, one row more than lim) and
// returns its rows decoded by dec, with the cursor of the next page ("" on
// the last). Errors are translated by Err naming op.
func page[T any](ctx context.Context, q *Queries, op, query string, args []any, lim int, dec func(ledger.Entry) (T, error), index func(T) uint64) ([]T, string, error) {
	d := q.Dialect
	rows, err := q.DB.QueryContext(ctx, d.SQL(query), args...)
	if err != nil {
		return nil, "", d.Err(op, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		e, err := d.ScanEntry(rows)
		if err != nil {
			return nil, "", d.Err(op, err)
		}
		v, err := dec(e)
		if err != nil {
			return nil, "", d.Err(op, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, "", d.Err(op, err)
	}
	next := ""
	if len(out) > lim {
		out = out[:lim]
		next = cursor.Encode(index(out[lim-1]))
	}
	return out, next, nil
}

// Evidence implements ledger.Store.
func (q *Queries) Evidence(ctx context.Context, f ledger.EvidenceFilter) ([]ledger.EvidenceEntry, string, error) {
	query, args, lim, err := q.Dialect.EvidenceQuery(f)
	if err != nil {
		return nil, "", err
	}
	if q.Dialect.unstorable(f.Lane, string(f.Backend), string(f.Status), f.Repository) {
		return nil, "", nil
	}
	return page(ctx, q, "list evidence", query, args, lim, func(e ledger.Entry) (ledger.EvidenceEntry, error) {
		ev, err := ledger.ParseEvidence(e.Body)
		return ledger.EvidenceEntry{Entry: e, Evidence: ev}, err
	}, func(e ledger.EvidenceEntry) uint64 { return e.Index })
}

// EvidenceQuery builds the SELECT of Evidence ("?" placeholders, in
// args): leaf columns of evidence leaves matching f, newest first, one
// row more than the page (lim) to tell whether another page follows.
// Errors are ledger errors naming the bad filter.
func (d *Dialect) EvidenceQuery(f ledger.EvidenceFilter) (q string, args []any, lim int, err error) {
	w := filter{where: []string{"l.kind = 'evidence'"}}
	if f.Lane != "" {
		w.add("l.key = ?", f.Lane) // the lane is an evidence leaf's key
	}
	if f.Backend != "" {
		w.add("l.backend = ?", string(f.Backend))
	}
	if f.Status != "" {
		w.add("l.status = ?", string(f.Status))
		if f.Status != ledger.StatusPassed {
			// Lets the engine use the partial index evidence_unpassed
			// (migration 6): the rare statuses are found without a scan.
			w.add("l.status <> 'passed'")
		}
	}
	if f.Repository != "" {
		w.add("l.repository = ?", f.Repository)
	}
	if f.Commit != "" {
		if err := hexPrefix("commit", f.Commit); err != nil {
			return "", nil, 0, err
		}
		if ledger.ValidObjectID(f.Commit) {
			w.add("l.commit_id = ?", f.Commit)
		} else {
			w.prefix(d, "l.commit_id", f.Commit)
		}
	}
	if f.ArtifactDigest != "" {
		dg := f.ArtifactDigest
		if !strings.HasPrefix(dg, "sha256:") {
			dg = "sha256:" + dg
		}
		if err := hexPrefix("artifact", strings.TrimPrefix(dg, "sha256:")); err != nil {
			return "", nil, 0, err
		}
		var a filter
		a.prefix(d, "a.digest", dg)
		w.add("l.idx IN (SELECT a.idx FROM evidence_artifacts a WHERE "+a.where[0]+")", a.args...)
	}
	if !f.Since.IsZero() {
		w.add("l.recorded_at >= ?", f.Since.UnixNano())
	}
	if err := w.page("l.idx", f.Cursor, f.AsOfSize); err != nil {
		return "", nil, 0, err
	}
	lim = limitOf(f.Limit)
	q = "SELECT " + LeafCols + " FROM leaves l WHERE " + strings.Join(w.where, " AND ") + " ORDER BY l.idx DESC LIMIT ?"
	return q, append(w.args, lim+1), lim, nil
}

// Entries implements ledger.Store.
func (q *Queries) Entries(ctx context.Context, f ledger.EntryFilter) ([]ledger.Entry, string, error) {
	var w filter
	w.add("l.kind = ?", string(f.Kind))
	if f.Kind != ledger.KindEvidence {
		// Lets the engine use the partial index leaves_kind_key, which
		// leaves evidence out (migration 4).
		w.add("l.kind <> 'evidence'")
	}
	if f.Key != "" {
		w.add("l.key = ?", f.Key)
	}
	if err := w.page("l.idx", f.Cursor, f.AsOfSize); err != nil {
		return nil, "", err
	}
	lim := limitOf(f.Limit)
	if q.Dialect.unstorable(string(f.Kind), f.Key) {
		return nil, "", nil
	}
	query := "SELECT " + LeafCols + " FROM leaves l WHERE " + strings.Join(w.where, " AND ") + " ORDER BY l.idx DESC LIMIT ?"
	return page(ctx, q, "list entries", query, append(w.args, lim+1), lim,
		func(e ledger.Entry) (ledger.Entry, error) { return e, nil }, func(e ledger.Entry) uint64 { return e.Index })
}

// Heads implements ledger.Store.
func (q *Queries) Heads(ctx context.Context, f ledger.HeadFilter) ([]ledger.HeadEntry, string, error) {
	d := q.Dialect
	w := filter{where: []string{d.True}}
	if f.Repository != "" {
		w.add("h.repository = ?", f.Repository)
	}
	if f.Commit != "" {
		if err := hexPrefix("commit", f.Commit); err != nil {
			return nil, "", err
		}
		w.prefix(d, "h.commit_id", f.Commit)
	}
	if f.Verdict != "" {
		w.add("h.verdict = ?", string(f.Verdict))
	}
	if err := w.page("h.idx", f.Cursor, f.AsOfSize); err != nil {
		return nil, "", err
	}
	lim := limitOf(f.Limit)
	if d.unstorable(f.Repository, string(f.Verdict)) {
		return nil, "", nil
	}
	query := "SELECT " + LeafCols + " FROM heads_index h JOIN leaves l ON l.idx = h.idx WHERE " + strings.Join(w.where, " AND ") + " ORDER BY h.idx DESC LIMIT ?"
	return page(ctx, q, "list heads", query, append(w.args, lim+1), lim, func(e ledger.Entry) (ledger.HeadEntry, error) {
		var h ledger.HeadVerification
		err := json.Unmarshal(e.Body, &h)
		return ledger.HeadEntry{Entry: e, Head: h}, err
	}, func(e ledger.HeadEntry) uint64 { return e.Index })
}

// Checkpoints implements ledger.CheckpointLister over the checkpoints
// table (one indexed range read per page). Errors: CodeInvalid naming
// cursor or limit (at most 1000).
func (q *Queries) Checkpoints(ctx context.Context, f ledger.CheckpointFilter) ([]ledger.Checkpoint, string, error) {
	d := q.Dialect
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
	rows, err := q.DB.QueryContext(ctx, d.SQL("SELECT size, root, note, created_at FROM checkpoints WHERE size < ? ORDER BY size DESC LIMIT ?"), int64(below), lim+1)
	if err != nil {
		return nil, "", d.Err("list checkpoints", err)
	}
	defer rows.Close()
	var out []ledger.Checkpoint
	for rows.Next() {
		var cp ledger.Checkpoint
		var root []byte
		var created int64
		if err := d.scanSize(rows, &cp.Size, &root, &cp.Note, &created); err != nil {
			return nil, "", d.Err("list checkpoints", err)
		}
		copy(cp.Root[:], root)
		cp.CreatedAt = time.Unix(0, created).UTC()
		cp.Origin = q.LogOrigin()
		out = append(out, cp)
	}
	if err := rows.Err(); err != nil {
		return nil, "", d.Err("list checkpoints", err)
	}
	next := ""
	if len(out) > lim {
		out = out[:lim]
		next = cursor.Encode(out[lim-1].Size)
	}
	return out, next, nil
}

// scanSize scans a row whose first column is an index or size into size
// (UnsignedIndex) and the rest into dest.
func (d *Dialect) scanSize(sc Scanner, size *uint64, dest ...any) error {
	if d.UnsignedIndex {
		return sc.Scan(append([]any{size}, dest...)...)
	}
	var n int64
	if err := sc.Scan(append([]any{&n}, dest...)...); err != nil {
		return err
	}
	*size = uint64(n)
	return nil
}
