package sqlite

import (
	"context"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/internal/cursor"
)

var _ ledger.CheckpointLister = (*Store)(nil)

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
	rows, err := s.d.r.QueryContext(ctx, "SELECT size, root, note, created_at FROM checkpoints WHERE size < ? ORDER BY size DESC LIMIT ?", int64(below), lim+1)
	if err != nil {
		return nil, "", dbErr("list checkpoints", err)
	}
	defer rows.Close()
	var out []ledger.Checkpoint
	for rows.Next() {
		var cp ledger.Checkpoint
		var root []byte
		var created int64
		if err := rows.Scan(&cp.Size, &root, &cp.Note, &created); err != nil {
			return nil, "", dbErr("list checkpoints", err)
		}
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
