package web

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// storageHealth is the degraded state /healthz reports after a write
// failed on a full disk (CodeStorageFull). It clears by itself: /healthz
// asks the store to probe its disk (StorageProber) at most once per
// probeEvery while degraded, and a store without a probe clears after
// degradedFor. Safe for concurrent use.
type storageHealth struct {
	mu        sync.Mutex
	reason    string // empty: healthy
	since     time.Time
	lastProbe time.Time
}

// StorageProber is implemented by stores that can check, without
// touching the log, that their disk takes writes again (sqlite.Store).
type StorageProber interface {
	ProbeStorage(ctx context.Context) error
}

const (
	probeEvery  = time.Second
	degradedFor = time.Minute
	// healthyProbeEvery bounds the disk probes of a healthy server (each
	// writes and syncs 256 KiB beside the database).
	healthyProbeEvery = 30 * time.Second
)

func (h *storageHealth) degrade(reason string, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reason == "" {
		h.since = now
	}
	h.reason = reason
}

// state returns the current reason ("" when healthy), probing p first
// when a probe is due: every probeEvery while degraded, every
// healthyProbeEvery (and at the first call) while healthy.
func (h *storageHealth) state(ctx context.Context, p StorageProber, now time.Time) (reason string, since time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reason == "" {
		// Healthy as far as any write showed: probe the disk now and then
		// (first at the first /healthz after start), so a server started
		// on a full disk says so before its first append fails.
		if p != nil && (h.lastProbe.IsZero() || now.Sub(h.lastProbe) >= healthyProbeEvery) {
			h.lastProbe = now
			if err := p.ProbeStorage(ctx); err != nil {
				h.since = now
				h.reason = "the database's disk takes no writes (a write probe failed)"
				if ledger.IsStorageFull(err) {
					h.reason = "storage full: the database's disk is full (a write probe failed)"
				}
			}
		}
		return h.reason, h.since
	}
	switch {
	case p != nil && now.Sub(h.lastProbe) >= probeEvery:
		h.lastProbe = now
		if p.ProbeStorage(ctx) == nil {
			h.reason = ""
		}
	case p == nil && now.Sub(h.since) >= degradedFor:
		h.reason = ""
	}
	return h.reason, h.since
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	cp, err := s.store.Checkpoint(r.Context())
	if err != nil {
		s.writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "error": "store not readable"})
		return
	}
	figures := s.healthFigures(w, r)
	if s.cfg.Integrity != nil {
		if ts, bad := s.cfg.Integrity(); bad {
			out := map[string]any{"status": "degraded", "reason": "tampering: the full verification found a stored leaf that fails its check; appends, readiness verdicts and approvals are refused"}
			if figures {
				out["reason"] = fmt.Sprintf("tampering: leaf %d %s; appends, readiness verdicts and approvals are refused until the database is repaired (run `ledger audit`)", ts.Index, ts.Problem)
				out["tampered_index"], out["since"], out["log_size"] = ts.Index, ts.Since.Format(time.RFC3339), cp.Size
			}
			s.writeJSON(w, http.StatusServiceUnavailable, out)
			return
		}
	}
	prober, _ := s.store.(StorageProber)
	reason, since := s.storage.state(r.Context(), prober, s.cfg.Now())
	if !figures {
		if reason != "" {
			s.writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "degraded"})
			return
		}
		s.writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
		return
	}
	out := map[string]any{"status": "ok", "log_size": cp.Size}
	if wh := s.witnessHealth(); wh != nil {
		out["witness"] = wh
	}
	if reason != "" {
		out["status"], out["reason"], out["since"] = "degraded", reason, since.UTC().Format(time.RFC3339)
		s.writeJSON(w, http.StatusServiceUnavailable, out)
		return
	}
	s.writeJSON(w, http.StatusOK, out)
}

// healthFigures reports whether /healthz may show figures (log size,
// witness state) to r: always without --read-auth, else only to a token
// with scope read or higher. Anonymous callers under --read-auth get the
// state alone.
func (s *Server) healthFigures(w http.ResponseWriter, r *http.Request) bool {
	if !s.cfg.ReadAuth {
		return true
	}
	t, ok, err := s.authenticate(w, r)
	return err == nil && ok && t.Scope.Allows(ledger.ScopeRead)
}
