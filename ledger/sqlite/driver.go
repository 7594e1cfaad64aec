package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlog"
	"github.com/transparency-dev/merkle/compact"
)

// ReadNodes implements tlog.NodeReader on the read pool (recently
// committed nodes come from its cache).
func (d *driver) ReadNodes(ctx context.Context, ids []compact.NodeID) ([][]byte, error) {
	return fetchNodes(ctx, d.r, ids)
}

// AnswerNodes implements tlog.AnswerNodeReader: the append answers'
// own read pool, so that their proofs do not wait behind page readers.
func (d *driver) AnswerNodes() tlog.NodeReader { return answerNodes{d.proofs} }

type answerNodes struct{ db *stmtDB }

func (a answerNodes) ReadNodes(ctx context.Context, ids []compact.NodeID) ([][]byte, error) {
	return fetchNodes(ctx, a.db, ids)
}

// StoredCheckpoint implements tlog.Driver.
func (d *driver) StoredCheckpoint(ctx context.Context, size uint64) (ledger.Checkpoint, error) {
	return checkpointAt(ctx, d.r, size)
}

// SignedSize implements tlog.Driver.
func (d *driver) SignedSize(ctx context.Context) (uint64, error) {
	var n uint64
	err := d.r.QueryRowContext(ctx, "SELECT COALESCE(MAX(size), 0) FROM checkpoints").Scan(&n)
	return n, dbErr("size", err)
}

// LookupIDs implements tlog.Driver: it starts the content-id filter's
// builder with the first append and returns the caller's lookup
// (*callerLookup, see lookupIDs).
func (d *driver) LookupIDs(ctx context.Context, recs []ledger.Prepared) any {
	d.startIDFilter()
	var l callerLookup
	if d.lookupHook != nil {
		l = d.lookupHook(recs)
	} else {
		l = d.lookupIDs(ctx, recs)
	}
	return &l
}

// checkpointAt reads the stored checkpoint of size (0: the largest).
func checkpointAt(ctx context.Context, q queryer, size uint64) (ledger.Checkpoint, error) {
	var row *sql.Row
	if size == 0 {
		row = q.QueryRowContext(ctx, "SELECT size, root, note, created_at FROM checkpoints ORDER BY size DESC LIMIT 1")
	} else {
		row = q.QueryRowContext(ctx, "SELECT size, root, note, created_at FROM checkpoints WHERE size = ?", size)
	}
	var cp ledger.Checkpoint
	var root []byte
	var created int64
	if err := row.Scan(&cp.Size, &root, &cp.Note, &created); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			if size == 0 {
				return cp, ledger.NotFound("the log is empty")
			}
			return cp, ledger.NotFound("no checkpoint of size %d", size)
		}
		return cp, dbErr("checkpoint", err)
	}
	copy(cp.Root[:], root)
	cp.CreatedAt = time.Unix(0, created).UTC()
	return cp, nil
}
