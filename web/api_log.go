package web

import (
	"net/http"
	"strconv"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/go-chi/chi/v5"
)

func init() {
	apiRegistrars = append(apiRegistrars, func(s *Server, r chi.Router) {
		r.With(s.require(ledger.ScopeRead)).Get("/log/checkpoint", s.handleCheckpoint)
		r.With(s.require(ledger.ScopeRead)).Get("/log/proof/consistency", s.handleConsistency)
		r.With(s.require(ledger.ScopeRead)).Get("/log/entries/{id}", s.handleEntry)
		r.With(s.require(ledger.ScopeRead)).Get("/log/key", s.handleKey)
	})
}

// handleCheckpoint answers the latest signed checkpoint, or the one of
// ?size=N.
func (s *Server) handleCheckpoint(w http.ResponseWriter, r *http.Request) {
	var size uint64
	if v := r.URL.Query().Get("size"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			s.writeError(w, r, ledger.FieldError("size", "must be a positive integer"))
			return
		}
		size = n
	}
	cp, err := s.store.CheckpointAt(r.Context(), size)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.metrics.logSize.Set(float64(cp.Size))
	s.writeJSON(w, http.StatusOK, s.withCosignatures(cp))
}

func (s *Server) handleKey(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, http.StatusOK, map[string]string{"verifier_key": s.store.VerifierKey()})
}

func (s *Server) handleConsistency(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	from, err := strconv.ParseUint(q.Get("from"), 10, 64)
	if err != nil {
		s.writeError(w, r, ledger.FieldError("from", "required: a tree size (integer >= 0)"))
		return
	}
	var to uint64
	if v := q.Get("to"); v != "" {
		if to, err = strconv.ParseUint(v, 10, 64); err != nil || to == 0 {
			s.writeError(w, r, ledger.FieldError("to", "must be a positive tree size"))
			return
		}
	}
	p, err := s.store.ConsistencyProof(r.Context(), from, to)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, p)
}

// handleEntry answers any log entry (evidence, head, release, waiver,
// approval) with its exact leaf bytes.
func (s *Server) handleEntry(w http.ResponseWriter, r *http.Request) {
	e, err := s.store.Entry(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"entry": e, "leaf": string(e.Raw)})
}
