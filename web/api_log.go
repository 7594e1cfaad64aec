package web

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strconv"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/go-chi/chi/v5"
)

// handleCheckpoint answers the latest signed checkpoint, or the one of
// ?size=N.
func (s *Server) handleCheckpoint(w http.ResponseWriter, r *http.Request) {
	size, err := queryUint(r.URL.Query().Get("size"), "size", 1, false)
	if err != nil {
		s.writeError(w, r, err)
		return
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

// handleKeys answers the log's key chain (ledger.LogKeys): every signing
// key with the size it signs from, and the rotation leaves that link them.
func (s *Server) handleKeys(w http.ResponseWriter, r *http.Request) {
	lk, err := ledger.LogKeysOf(r.Context(), s.store, s.store.VerifierKey())
	if err != nil {
		s.writeError(w, r, ledger.Errorf(ledger.CodeInternal, "key chain: %v", err))
		return
	}
	s.writeJSON(w, http.StatusOK, lk)
}

func (s *Server) handleConsistency(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	from, err := queryUint(q.Get("from"), "from", 0, true)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	to, err := queryUint(q.Get("to"), "to", 1, false)
	if err != nil {
		s.writeError(w, r, err)
		return
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
	s.writeEntry(w, r, e)
}

// writeEntry answers one entry as EntryJSON, compact and without HTML
// escaping: the leaf is there twice (the entry's body and the leaf text),
// and indentation of a body's arrays, or "\u003c" for each "<", would
// make the answer many times the leaf's size (a leaf of numbers indented
// came to about eight times). Clients read it as JSON either way.
func (s *Server) writeEntry(w http.ResponseWriter, r *http.Request, e ledger.Entry) {
	var buf bytes.Buffer
	buf.Grow(2*len(e.Raw) + 512)
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(EntryJSON{Entry: e, Leaf: string(e.Raw)}); err != nil {
		s.writeError(w, r, ledger.Errorf(ledger.CodeInternal, "encode entry %d: %v", e.Index, err))
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	w.Write(buf.Bytes())
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
		s.writeError(w, r, ledger.FieldError("kind", "required, one of: %s", ledger.KindList()))
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
	streamPage(s, w, r, "entries", f.Cursor, f.Limit,
		func(ctx context.Context, cursor string, limit int) ([]ledger.Entry, string, error) {
			g := f
			g.Cursor, g.Limit = cursor, limit
			return s.store.Entries(ctx, g)
		},
		func(e ledger.Entry) uint64 { return e.Index },
		func(e ledger.Entry) any { return EntryJSON{Entry: e, Leaf: string(e.Raw)} })
}

// handleLeaf answers the entry at a leaf index, shaped as handleEntry's.
func (s *Server) handleLeaf(w http.ResponseWriter, r *http.Request) {
	idx, err := queryUint(chi.URLParam(r, "index"), "index", 0, true)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	e, err := s.store.EntryAt(r.Context(), idx)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeEntry(w, r, e)
}

// handleInclusion answers the inclusion proof of leaf ?index= in the tree
// of ?size= (default: the latest checkpoint's).
func (s *Server) handleInclusion(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	idx, err := queryUint(q.Get("index"), "index", 0, true)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	size, err := queryUint(q.Get("size"), "size", 1, false)
	if err != nil {
		s.writeError(w, r, err)
		return
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
	return queryUint(r.URL.Query().Get("as_of"), "as_of", 1, false)
}

// maxIndex is the largest leaf index or tree size a query may name: the
// stores keep indexes as signed 64-bit integers.
const maxIndex = math.MaxInt64

// queryUint parses v, the value of query or path parameter field, as a
// decimal integer in min..maxIndex. An absent value is 0 unless required.
// Every failure is a CodeInvalid error naming field.
func queryUint(v, field string, min uint64, required bool) (uint64, error) {
	if v == "" {
		if required {
			return 0, ledger.FieldError(field, "required: an integer in %d..%d", min, uint64(maxIndex))
		}
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n < min || n > maxIndex {
		return 0, ledger.FieldError(field, "must be an integer in %d..%d", min, uint64(maxIndex))
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
