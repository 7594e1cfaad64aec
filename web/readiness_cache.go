package web

import (
	"context"
	"sync"
	"time"

	"github.com/evidence-ledger/ledger/gates"
)

// freshMaxAge bounds how long a cached answer is served at an unchanged
// checkpoint: verdicts also depend on the clock (waivers expire), so an
// idle log still re-evaluates this often.
const freshMaxAge = time.Second

// freshMinGap is the least time between the starts of two computations of
// one cached answer while appends keep moving the checkpoint (see
// freshCache): it bounds the CPU readers take from the writer, and adds at
// most itself to a reader's wait.
const freshMinGap = 100 * time.Millisecond

// verdict is a cached readiness with its signed form, signed once on
// first use (the readiness API's answer).
type verdict struct {
	rd   *gates.Readiness
	once sync.Once
	sv   gates.SignedVerdict
	err  error
}

// signed returns v's signed verdict, signing it with the server's key on
// first use. Safe for concurrent use.
func (s *Server) signed(v *verdict) (gates.SignedVerdict, error) {
	v.once.Do(func() { v.sv, v.err = gates.Sign(v.rd, s.store) })
	return v.sv, v.err
}

// newFreshCache returns a freshCache on the server's clock and store.
func newFreshCache[V any](s *Server) *freshCache[V] {
	return &freshCache[V]{maxAge: freshMaxAge, minGap: freshMinGap, now: s.cfg.Now,
		latest: func(ctx context.Context) (uint64, error) {
			cp, err := s.store.Checkpoint(ctx)
			return cp.Size, err
		}}
}

// evaluate returns rel's readiness at the latest checkpoint or a newer
// one, shared with concurrent readers (the readiness API, the release page
// and the overview) through s.readiness, keyed by the release's entry id.
// Errors are Evaluate's and the store's.
func (s *Server) evaluate(ctx context.Context, rel *gates.Release) (*gates.Readiness, error) {
	v, err := s.evaluateVerdict(ctx, rel)
	if err != nil {
		return nil, err
	}
	return v.rd, nil
}

// evaluateVerdict is evaluate with the cached verdict (for its signature).
func (s *Server) evaluateVerdict(ctx context.Context, rel *gates.Release) (*verdict, error) {
	return s.readiness.get(ctx, rel.EntryID, func(ctx context.Context, size uint64, now time.Time) (*verdict, error) {
		rd, err := gates.Evaluate(ctx, s.store, rel, gates.EvalOptions{Now: now, AsOfSize: size})
		if err != nil {
			return nil, err
		}
		return &verdict{rd: rd}, nil
	})
}
