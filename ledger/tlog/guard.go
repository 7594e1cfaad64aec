package tlog

import (
	"context"
)

// An AppendGuard is a condition an append holds only while it is still
// true under the store's write lock, checked in the batch that appends
// it (after the batch's transaction began, before any of the request's
// writes): the authorization a request was admitted with, say, so that
// what the request was checked against cannot change between the check
// and the append. Key names the condition: a batch checks each distinct
// key once, and every request of the batch carrying that key gets its
// answer. Check reads through the driver's Batch (which may implement
// ledger.TokenRowBatch); its error becomes the request's answer and the request
// writes nothing. Check runs on the log's sequencer goroutine.
type AppendGuard interface {
	Key() string
	Check(ctx context.Context, b Batch) error
}

type guardKey struct{}

// WithAppendGuard returns ctx carrying g: an Append called with it is
// checked against g in its batch (see AppendGuard).
func WithAppendGuard(ctx context.Context, g AppendGuard) context.Context {
	return context.WithValue(ctx, guardKey{}, g)
}

func guardFrom(ctx context.Context) AppendGuard {
	g, _ := ctx.Value(guardKey{}).(AppendGuard)
	return g
}
