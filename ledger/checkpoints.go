package ledger

import "context"

// CheckpointFilter selects stored checkpoints, newest (largest size)
// first. Cursor is the opaque Next value of a previous page; Limit
// defaults to 50, at most 1000.
type CheckpointFilter struct {
	Cursor string
	Limit  int
}

// CheckpointLister lists the signed checkpoints a store holds (the
// checkpoint history). Implementations are safe for concurrent use.
type CheckpointLister interface {
	// Checkpoints returns one page, newest first, with the cursor of the
	// next page ("" after the last); a malformed cursor is a CodeInvalid
	// error naming "cursor".
	Checkpoints(ctx context.Context, f CheckpointFilter) (cps []Checkpoint, next string, err error)
}
