package web

import (
	"net/http"
	"strings"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/auth"
	"github.com/go-chi/chi/v5"
)

// RunnerAddRequest is the body of POST /api/v1/runners (admin): a runner
// name and its Ed25519 public key as an OpenSSH line or a PEM PUBLIC KEY.
type RunnerAddRequest struct {
	Name      string `json:"name"`
	PublicKey string `json:"public_key"`
}

// RunnerRevokeRequest is the body of POST /api/v1/runners/{name}/revoke
// (admin).
type RunnerRevokeRequest struct {
	Reason string `json:"reason"`
}

// RunnerAnswer is the answer of a runner-key append: the runner's state
// and the appended entry.
type RunnerAnswer struct {
	Runner auth.RunnerState `json:"runner"`
	Entry  AppendedJSON     `json:"entry"`
}

func (s *Server) handleAddRunner(w http.ResponseWriter, r *http.Request) {
	var req RunnerAddRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	who, err := actorOf(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	st, res, err := admit.AddRunner(r.Context(), s.store, req.Name, []byte(req.PublicKey), who.Name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.runnerAnswer(w, st, res)
}

func (s *Server) handleRevokeRunner(w http.ResponseWriter, r *http.Request) {
	var req RunnerRevokeRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	who, err := actorOf(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	st, res, err := admit.RevokeRunner(r.Context(), s.store, chi.URLParam(r, "name"), req.Reason, who.Name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.runnerAnswer(w, st, res)
}

func (s *Server) runnerAnswer(w http.ResponseWriter, st auth.RunnerState, res *ledger.AppendResult) {
	status, a := s.runnerAnswerOf(st, res)
	s.writeJSON(w, status, a)
}

// runnerAnswerOf is the status (201, or 200 when nothing was appended)
// and answer of a runner-key append, counting the leaf in the metrics.
func (s *Server) runnerAnswerOf(st auth.RunnerState, res *ledger.AppendResult) (int, RunnerAnswer) {
	e := res.Entries[0]
	status := http.StatusOK
	if !e.Existing {
		status = http.StatusCreated
		s.metrics.appended.WithLabelValues(string(ledger.KindRunnerKey)).Inc()
	}
	return status, RunnerAnswer{Runner: st, Entry: AppendedJSON{ID: e.ID, Index: e.Index, LeafHash: e.LeafHash, Existing: e.Existing, InclusionProof: e.Proof}}
}

func (s *Server) handleListRunners(w http.ResponseWriter, r *http.Request) {
	asOf, err := queryAsOf(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	reg, err := auth.LoadRunnerKeys(r.Context(), s.store, asOf)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"runners": nonNilSlice(reg.Runners)})
}

// mediaType is the request's Content-Type without parameters, lowercase.
func mediaType(r *http.Request) string {
	mt, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	return strings.ToLower(strings.TrimSpace(mt))
}
