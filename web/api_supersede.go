package web

import (
	"net/http"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/go-chi/chi/v5"
)

// Supersede route: POST /releases/{version}/supersedes retracts one
// evidence or head record for the release's current pins (admin scope,
// plus the release's approval_role when it names one), attributed to the
// token and with a reason. It is the only way a failing record at the pins
// stops failing its gate short of a waiver (gates.CountingRule).

// SupersedeRequest is the body of POST /releases/{version}/supersedes: the
// id of the evidence or head record and why it does not speak for the
// pins. The author is the token's name.
type SupersedeRequest struct {
	Entry  string `json:"entry"`
	Reason string `json:"reason"`
}

func (s *Server) handlePostSupersede(w http.ResponseWriter, r *http.Request) {
	var req SupersedeRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	who, err := actorOf(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	sp, e, err := admit.Supersede(r.Context(), s.store, who, chi.URLParam(r, "version"), req.Entry, req.Reason, s.cfg.Now())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.metrics.appended.WithLabelValues(string(ledger.KindSupersede)).Inc()
	s.writeJSON(w, http.StatusCreated, map[string]any{"id": e.ID, "index": e.Index, "supersede": sp})
}
