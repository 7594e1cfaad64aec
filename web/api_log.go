package web

import (
	"net/http"
	"strconv"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/go-chi/chi/v5"
)

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

// EntryJSON is one log entry with the exact bytes its leaf hash covers.
type EntryJSON struct {
	Entry ledger.Entry `json:"entry"`
	// Leaf is the canonical leaf (a JSON text) whose RFC 6962 leaf hash is
	// Entry.LeafHash.
	Leaf string `json:"leaf"`
}

// handleListEntries answers one page of the entries of ?kind= (required),
// optionally of one index key (?key=), newest first, as of ?as_of= when
// given.
func (s *Server) handleListEntries(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := ledger.EntryFilter{Kind: ledger.Kind(q.Get("kind")), Key: q.Get("key"), Cursor: q.Get("cursor")}
	if !ledger.ValidKind(f.Kind) {
		s.writeError(w, r, ledger.FieldError("kind", "required: evidence, head, release, waiver or approval"))
		return
	}
	var err error
	if f.Limit, err = queryLimit(r); err != nil {
		s.writeError(w, r, err)
		return
	}
	if f.AsOfSize, err = queryAsOf(r); err != nil {
		s.writeError(w, r, err)
		return
	}
	list, next, err := s.store.Entries(r.Context(), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]EntryJSON, len(list))
	for i, e := range list {
		out[i] = EntryJSON{Entry: e, Leaf: string(e.Raw)}
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"entries": out, "next_cursor": next})
}

// handleLeaf answers the entry at a leaf index, shaped as handleEntry's.
func (s *Server) handleLeaf(w http.ResponseWriter, r *http.Request) {
	idx, err := strconv.ParseUint(chi.URLParam(r, "index"), 10, 64)
	if err != nil {
		s.writeError(w, r, ledger.FieldError("index", "must be a leaf index (integer >= 0)"))
		return
	}
	e, err := s.store.EntryAt(r.Context(), idx)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"entry": e, "leaf": string(e.Raw)})
}

// handleInclusion answers the inclusion proof of leaf ?index= in the tree
// of ?size= (default: the latest checkpoint's).
func (s *Server) handleInclusion(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	idx, err := strconv.ParseUint(q.Get("index"), 10, 64)
	if err != nil {
		s.writeError(w, r, ledger.FieldError("index", "required: a leaf index (integer >= 0)"))
		return
	}
	var size uint64
	if v := q.Get("size"); v != "" {
		if size, err = strconv.ParseUint(v, 10, 64); err != nil || size == 0 {
			s.writeError(w, r, ledger.FieldError("size", "must be a positive tree size"))
			return
		}
	}
	p, err := s.store.InclusionProof(r.Context(), idx, size)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, p)
}

// queryLimit reads ?limit= (0 when absent: the store's default).
func queryLimit(r *http.Request) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		return 0, ledger.FieldError("limit", "must be an integer in 1..1000")
	}
	return n, nil
}

// queryAsOf reads ?as_of= (a tree size; 0 when absent: the whole log).
func queryAsOf(r *http.Request) (uint64, error) {
	v := r.URL.Query().Get("as_of")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n == 0 {
		return 0, ledger.FieldError("as_of", "must be a positive tree size")
	}
	return n, nil
}

// handleCheckpoints answers one page of the signed checkpoint history,
// newest first, each with the cosignatures the server holds for it:
// {"checkpoints": [...], "next_cursor": "..."} ("" after the last page).
func (s *Server) handleCheckpoints(w http.ResponseWriter, r *http.Request) {
	cl, ok := s.store.(ledger.CheckpointLister)
	if !ok {
		s.writeError(w, r, ledger.Errorf(ledger.CodeInternal, "the store keeps no checkpoint history"))
		return
	}
	f := ledger.CheckpointFilter{Cursor: r.URL.Query().Get("cursor")}
	var err error
	if f.Limit, err = queryLimit(r); err != nil {
		s.writeError(w, r, err)
		return
	}
	cps, next, err := cl.Checkpoints(r.Context(), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]any, len(cps))
	for i, cp := range cps {
		out[i] = s.withCosignatures(cp)
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"checkpoints": out, "next_cursor": next})
}
