package web

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
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

// verdict is a cached readiness with the readiness API's answer (the
// signed verdict as indented JSON), built once on first use.
type verdict struct {
	rd     *gates.Readiness
	once   sync.Once
	answer []byte
	err    error
}

// readinessAnswer returns the body of GET /api/v1/releases/{version}/readiness
// for v: the signed verdict (gates.Sign with the server's key) as
// writeJSON encodes it, built on first use. Safe for concurrent use.
func (s *Server) readinessAnswer(v *verdict) ([]byte, error) {
	v.once.Do(func() {
		sv, err := gates.Sign(v.rd, s.store)
		if err != nil {
			v.err = err
			return
		}
		if v.answer, v.err = json.MarshalIndent(sv, "", "  "); v.err == nil {
			v.answer = append(v.answer, '\n')
		}
	})
	return v.answer, v.err
}

// sharedRelease is gates.LoadRelease of version at the latest checkpoint
// or a newer one, shared with concurrent readers through s.releases (the
// readiness API and the release page load the definition on every
// request). The release must not be modified.
func (s *Server) sharedRelease(ctx context.Context, version string) (*loadedRelease, error) {
	if !gates.ValidVersion(version) {
		_, _, err := gates.LoadRelease(ctx, s.store, version) // its error names the field
		return nil, err
	}
	return s.releases.get(ctx, version, func(ctx context.Context, _ uint64, _ time.Time) (*loadedRelease, error) {
		rel, e, err := gates.LoadRelease(ctx, s.store, version)
		if err != nil {
			return nil, err
		}
		return &loadedRelease{rel: rel, entry: e}, nil
	})
}

// loadedRelease is a release definition with its entry.
type loadedRelease struct {
	rel   *gates.Release
	entry ledger.Entry
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
