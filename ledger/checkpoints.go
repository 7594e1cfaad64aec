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

// Checkpoints implements CheckpointLister when the wrapped store does
// (CodeInternal otherwise); each checkpoint's origin is the log's.
func (v *VerifiedStore) Checkpoints(ctx context.Context, f CheckpointFilter) ([]Checkpoint, string, error) {
	cl, ok := v.Store.(CheckpointLister)
	if !ok {
		return nil, "", Errorf(CodeInternal, "the store keeps no checkpoint history")
	}
	return cl.Checkpoints(ctx, f)
}
