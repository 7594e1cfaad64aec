package web

import (
	"context"
	"net/http"
	"time"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/go-chi/chi/v5"
)

// RunAnswer is a run as the API answers it. Version, in the answers of
// GET /api/v1/runs/{id}, is the run's version (32 hex): passed back as
// since with wait, the request is answered as soon as the run's version
// differs, or when wait ends.
type RunAnswer struct {
	Run     runs.Run `json:"run"`
	Version string   `json:"version,omitempty"`
}

func (s *Server) handleCreateRun(w http.ResponseWriter, r *http.Request) {
	var spec runs.Spec
	if err := s.decodeJSON(w, r, &spec); err != nil {
		s.writeError(w, r, err)
		return
	}
	t, _ := TokenFrom(r.Context())
	run, err := s.queueRun(r.Context(), t, spec)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusCreated, RunAnswer{Run: run})
}

// queueRun admits spec (admit.QueueRun: validated, its case selection
// checked against Config.CaseLanes, token t's scope covering every lane
// of it on its backend and repository), queues it as created by t and wakes
// the agents' long polls. It is the one path that queues a run: POST
// /api/v1/runs and the release page's run form both call it. Errors:
// CodeNotFound without a run store, CodeInvalid naming the field,
// CodeForbidden naming the member out of t's scope (nothing queued).
func (s *Server) queueRun(ctx context.Context, t ledger.Token, spec runs.Spec) (runs.Run, error) {
	rs, err := s.runsOrErr()
	if err != nil {
		return runs.Run{}, err
	}
	if err := admit.QueueRun(t, &spec, s.cfg.CaseLanes); err != nil {
		return runs.Run{}, err
	}
	run, err := rs.store.Create(ctx, spec, t.Name)
	if err != nil {
		return run, err
	}
	rs.wakeAll()
	return run, nil
}

func (s *Server) handleListRuns(w http.ResponseWriter, r *http.Request) {
	rs, err := s.runsOrErr()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	state := r.URL.Query().Get("state")
	switch state {
	case "", "active", runs.Queued, runs.Leased, runs.Running, runs.Canceling, runs.Done, runs.Failed, runs.Canceled, runs.Expired:
	default:
		s.writeError(w, r, ledger.FieldError("state", "must be active or a run state (queued, leased, running, canceling, done, failed, canceled, expired)"))
		return
	}
	limit, err := queryLimit(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	list, err := rs.store.List(r.Context(), state, limit)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"runs": list})
}

func (s *Server) handleGetRun(w http.ResponseWriter, r *http.Request) {
	rs, err := s.runsOrErr()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	wait, since, err := runWait(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	id := chi.URLParam(r, "id")
	var deadline <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		deadline = t.C
	}
	for {
		woken := rs.changed.woken()
		run, err := rs.store.Get(r.Context(), id)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		v := runVersion(run)
		if wait == 0 || v != since || runs.Final(run.State) {
			w.Header().Set("ETag", `"`+v+`"`)
			s.writeJSON(w, http.StatusOK, RunAnswer{Run: run, Version: v})
			return
		}
		select {
		case <-woken:
		case <-deadline:
			wait = 0 // answer the run as it is
		case <-r.Context().Done():
			return
		}
	}
}

func (s *Server) handleCancelRun(w http.ResponseWriter, r *http.Request) {
	rs, err := s.runsOrErr()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	id := chi.URLParam(r, "id")
	cur, err := rs.store.Get(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	t, _ := TokenFrom(r.Context())
	if err := admit.CancelInScope(t, id, cur.Repository, cur.Lanes, cur.Backend); err != nil {
		s.writeError(w, r, err)
		return
	}
	rs.mu.Lock()
	rs.staged.drop(id, nil)
	run, final, err := rs.store.Cancel(r.Context(), id)
	rs.changed.wakeAll()
	if err == nil && final {
		err = s.appendOutcome(r.Context(), run)
		if err == nil {
			run, err = rs.store.Get(r.Context(), id)
		}
	}
	rs.mu.Unlock()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, RunAnswer{Run: run})
}
