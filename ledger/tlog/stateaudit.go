package tlog

import (
	"context"
	"fmt"
	"github.com/evidence-ledger/ledger/ledger"
)

// CheckpointAtReader reads stored checkpoints by size (a ledger.LogReader's
// CheckpointAt).
type CheckpointAtReader interface {
	CheckpointAt(ctx context.Context, size uint64) (ledger.Checkpoint, error)
}

// AuditSignedState accounts for every checkpoint of the signed-state
// journal ents (ReadSignedState's answer): each size the log signed must
// be stored, with the same root, in a log of size size. It returns ""
// when all are, else the problem with the first size concerned: a log
// behind the journal (its tail dropped, or an older copy restored) or a
// deleted or replaced checkpoint row. Read failures are errors.
func AuditSignedState(ctx context.Context, r CheckpointAtReader, size uint64, ents []SignedEntry) (problem string, at uint64, err error) {
	for _, e := range ents {
		if e.Size == 0 || e.Key != "" {
			continue
		}
		if e.Size > size {
			return fmt.Sprintf("the log has %d signed leaves but the signed-state journal records a checkpoint of size %d: the log was cut back or an older copy restored", size, e.Size), e.Size, nil
		}
		cp, err := r.CheckpointAt(ctx, e.Size)
		if ledger.ErrorCode(err) == ledger.CodeNotFound {
			return fmt.Sprintf("the checkpoint of size %d, recorded in the signed-state journal, is missing from the database: a checkpoint row was deleted", e.Size), e.Size, nil
		}
		if err != nil {
			return "", 0, err
		}
		if cp.Root != e.Root {
			return fmt.Sprintf("the checkpoint of size %d has root %s but the signed-state journal recorded %s: another history", e.Size, cp.Root, e.Root), e.Size, nil
		}
	}
	return "", 0, nil
}
