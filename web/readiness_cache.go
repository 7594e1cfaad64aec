package web

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/evidence-ledger/ledger/gates"
	"golang.org/x/sync/singleflight"
)

// readinessMaxAge bounds how long a cached verdict is served at an
// unchanged checkpoint: a verdict also depends on the clock (waivers
// expire), so an idle log still re-evaluates this often.
const readinessMaxAge = time.Second

// readinessCache shares release evaluations among readers: the readiness
// API, the release page and the overview. A verdict is keyed by (release
// entry, checkpoint size): it is served while the latest checkpoint has
// that size and it is younger than readinessMaxAge, and concurrent
// readers of the same key share one evaluation (singleflight). A reader
// never gets a verdict older than the checkpoint it saw on arrival, so a
// client that appended and then asks sees its append. Cached verdicts are
// shared and must not be modified. Safe for concurrent use.
type readinessCache struct {
	mu    sync.Mutex
	byRel map[string]cachedVerdict // release entry id -> newest verdict
	group singleflight.Group
}

type cachedVerdict struct {
	rd *gates.Readiness
	at time.Time
}

// evaluate returns rel's readiness at the latest checkpoint, from the
// cache when it holds it. Errors are Evaluate's and the store's.
func (s *Server) evaluate(ctx context.Context, rel *gates.Release) (*gates.Readiness, error) {
	c := &s.readiness
	cp, err := s.store.Checkpoint(ctx)
	if err != nil {
		return nil, err
	}
	now := s.cfg.Now()
	c.mu.Lock()
	if c.byRel == nil {
		c.byRel = map[string]cachedVerdict{}
	}
	v, ok := c.byRel[rel.EntryID]
	c.mu.Unlock()
	if ok && v.rd.Checkpoint.Size == cp.Size && now.Sub(v.at) < readinessMaxAge && now.Sub(v.at) >= 0 {
		return v.rd, nil
	}
	key := rel.EntryID + "@" + strconv.FormatUint(cp.Size, 10)
	out, err, _ := c.group.Do(key, func() (any, error) {
		// The evaluation outlives a caller that gives up: others share it.
		rd, err := gates.Evaluate(context.WithoutCancel(ctx), s.store, rel, gates.EvalOptions{Now: now, AsOfSize: cp.Size})
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		if old, ok := c.byRel[rel.EntryID]; !ok || old.rd.Checkpoint.Size <= rd.Checkpoint.Size {
			c.byRel[rel.EntryID] = cachedVerdict{rd: rd, at: now}
		}
		c.mu.Unlock()
		return rd, nil
	})
	if err != nil {
		return nil, err
	}
	return out.(*gates.Readiness), nil
}
