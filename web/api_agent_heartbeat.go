package web

import (
	"net/http"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/go-chi/chi/v5"
)

func (s *Server) handleAgentHeartbeat(w http.ResponseWriter, r *http.Request) {
	a, body, err := s.agentBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req runs.HeartbeatRequest
	if err := ledger.DecodeStrict(body, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	id := chi.URLParam(r, "id")
	if err := admit.LeaseHolder(principalOf(r), req.Lease); err != nil {
		s.writeError(w, r, err)
		return
	}
	run, err := s.runs.store.Extend(r.Context(), id, a.Name, req.Attempt, req.Lease, req.Progress, s.runs.ttl)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.runs.changed.wakeAll()
	_ = s.runs.store.Seen(r.Context(), a.Name, "", id)
	s.writeJSON(w, http.StatusOK, runs.HeartbeatAnswer{State: run.State, Cancel: run.State == runs.Canceling, LeaseUntil: run.LeaseUntil})
}
