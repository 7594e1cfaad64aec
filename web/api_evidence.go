package web

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/ingest"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/go-chi/chi/v5"
)

// EvidenceJSON is the API representation of one evidence entry.
type EvidenceJSON struct {
	ID         string          `json:"id"`
	Index      uint64          `json:"index"`
	RecordedAt time.Time       `json:"recorded_at"`
	LeafHash   ledger.Hash     `json:"leaf_hash"`
	Evidence   ledger.Evidence `json:"evidence"`
	// Leaf is the exact canonical bytes that were hashed (a JSON text),
	// present on single-entry responses.
	Leaf string `json:"leaf,omitempty"`
}

func evidenceJSON(e ledger.EvidenceEntry, withLeaf bool) EvidenceJSON {
	out := EvidenceJSON{ID: e.ID, Index: e.Index, RecordedAt: e.RecordedAt, LeafHash: e.LeafHash, Evidence: e.Evidence}
	if withLeaf {
		out.Leaf = string(e.Raw)
	}
	return out
}

// AppendedJSON is one appended (or already present) entry in a POST answer.
type AppendedJSON struct {
	ID             string                `json:"id"`
	Index          uint64                `json:"index"`
	LeafHash       ledger.Hash           `json:"leaf_hash"`
	Existing       bool                  `json:"existing"`
	InclusionProof ledger.InclusionProof `json:"inclusion_proof"`
}

// appendAnswer writes the answer of an append: 201 when anything new was
// appended, 200 when every record was already present (replay).
func (s *Server) appendAnswer(w http.ResponseWriter, res *ledger.AppendResult, single bool) {
	status := http.StatusOK
	entries := make([]AppendedJSON, len(res.Entries))
	var kind ledger.Kind // counted in runs of one kind: one metric lookup per run
	run := 0
	for i, e := range res.Entries {
		entries[i] = AppendedJSON{ID: e.ID, Index: e.Index, LeafHash: e.LeafHash, Existing: e.Existing, InclusionProof: e.Proof}
		if e.Existing {
			continue
		}
		status = http.StatusCreated
		if e.Kind != kind && run > 0 {
			s.metrics.appended.WithLabelValues(string(kind)).Add(float64(run))
			run = 0
		}
		kind = e.Kind
		run++
	}
	if run > 0 {
		s.metrics.appended.WithLabelValues(string(kind)).Add(float64(run))
	}
	s.metrics.logSize.Set(float64(res.Checkpoint.Size))
	b, err := s.checkpointJSON(res.Checkpoint)
	if err == nil {
		if single {
			b, err = appendSingleJSON(entries[0], b)
		} else {
			b, err = appendBatchJSON(entries, b)
		}
	}
	if err != nil {
		if single {
			s.writeJSONCompact(w, status, struct {
				AppendedJSON
				Checkpoint ledger.Checkpoint `json:"checkpoint"`
			}{entries[0], res.Checkpoint})
			return
		}
		s.writeJSONCompact(w, status, map[string]any{"entries": entries, "checkpoint": res.Checkpoint})
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b)
}

// appendBatchJSON encodes the answer of a batch append exactly as
// json.Marshal(map[string]any{"checkpoint": cp, "entries": entries}) plus a
// newline, without reflection for the entries: each carries an inclusion
// proof, the bulk of a batch's answer, so this is on the ingest path (a test
// checks the bytes against encoding/json). Every entry field is a number, a
// boolean or lowercase hex, which need no escaping; cpJSON is
// json.Marshal(cp) (Server.checkpointJSON). The error is a non-hex entry id (the caller then
// falls back to encoding/json).
func appendBatchJSON(entries []AppendedJSON, cpJSON []byte) ([]byte, error) {
	var err error
	n := len(cpJSON) + 32
	for _, e := range entries {
		n += entryJSONSize(e)
	}
	b := make([]byte, 0, n)
	b = append(b, `{"checkpoint":`...)
	b = append(b, cpJSON...)
	b = append(b, `,"entries":[`...)
	for i, e := range entries {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		if b, err = appendEntryFields(b, e); err != nil {
			return nil, err
		}
		b = append(b, '}')
	}
	b = append(b, "]}\n"...)
	return b, nil
}

// checkpointJSON is json.Marshal(cp), kept for the latest checkpoint: the
// answers of one group commit all carry the same one. Safe for concurrent
// use.
func (s *Server) checkpointJSON(cp ledger.Checkpoint) ([]byte, error) {
	if c := s.lastCheckpoint.Load(); c != nil && c.cp == cp {
		return c.b, nil
	}
	b, err := json.Marshal(cp)
	if err != nil {
		return nil, err
	}
	s.lastCheckpoint.Store(&encodedCheckpoint{cp: cp, b: b})
	return b, nil
}

// encodedCheckpoint is a checkpoint with its JSON encoding (read-only once
// stored).
type encodedCheckpoint struct {
	cp ledger.Checkpoint
	b  []byte
}

// appendSingleJSON encodes the answer of a single-record append exactly as
// encoding/json encodes struct{AppendedJSON; Checkpoint `json:"checkpoint"`}
// plus a newline (the fields of e, then the checkpoint), with the same
// fast path and error as appendBatchJSON.
func appendSingleJSON(e AppendedJSON, cpJSON []byte) ([]byte, error) {
	var err error
	b := make([]byte, 0, entryJSONSize(e)+len(cpJSON)+32)
	b = append(b, '{')
	if b, err = appendEntryFields(b, e); err != nil {
		return nil, err
	}
	b = append(b, `,"checkpoint":`...)
	b = append(b, cpJSON...)
	return append(b, "}\n"...), nil
}

// entryJSONSize is an upper bound of the encoded size of e.
func entryJSONSize(e AppendedJSON) int { return 256 + len(e.ID) + 67*len(e.InclusionProof.Hashes) }

// appendEntryFields appends the members of e's JSON object (without the
// braces) in AppendedJSON's field order; a non-hex id is an error.
func appendEntryFields(b []byte, e AppendedJSON) ([]byte, error) {
	hash := func(b []byte, h ledger.Hash) []byte {
		b = append(b, '"')
		b = hex.AppendEncode(b, h[:])
		return append(b, '"')
	}
	if !ledger.LowerHex(e.ID) {
		return nil, fmt.Errorf("entry id %q is not hex", e.ID)
	}
	b = append(b, `"id":"`...)
	b = append(b, e.ID...)
	b = append(b, `","index":`...)
	b = strconv.AppendUint(b, e.Index, 10)
	b = append(b, `,"leaf_hash":`...)
	b = hash(b, e.LeafHash)
	b = append(b, `,"existing":`...)
	b = strconv.AppendBool(b, e.Existing)
	p := e.InclusionProof
	b = append(b, `,"inclusion_proof":{"index":`...)
	b = strconv.AppendUint(b, p.Index, 10)
	b = append(b, `,"tree_size":`...)
	b = strconv.AppendUint(b, p.TreeSize, 10)
	b = append(b, `,"leaf_hash":`...)
	b = hash(b, p.LeafHash)
	b = append(b, `,"root":`...)
	b = hash(b, p.Root)
	b = append(b, `,"hashes":`...)
	if p.Hashes == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for j, h := range p.Hashes {
			if j > 0 {
				b = append(b, ',')
			}
			b = hash(b, h)
		}
		b = append(b, ']')
	}
	return append(b, '}'), nil
}

// handlePostEvidence appends one evidence object or an array of them,
// or one input of a format package ingest decodes (chosen by Content-Type:
// JUnit XML, go test -json, an in-toto Statement, a DSSE envelope of one,
// a Sigstore bundle), atomically. Idempotency-Key replays return the
// original result. An element of a JSON body may be a DSSE envelope of
// evidence signed by a registered runner key (Content-Type
// ledger.ContentTypeDSSE, or detected by its payloadType member): it is
// verified and recorded with its signer (admit.Admit). Every record,
// whatever its format, passes the same checks: server markers refused,
// the token's scope, recorded_by stamped (ingestRecords).
func (s *Server) handlePostEvidence(w http.ResponseWriter, r *http.Request) {
	format, err := evidenceFormat(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	body, err := s.readBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if format == ingest.FormatDSSE && !ingest.IsInTotoEnvelope(body) {
		format = ingest.FormatEvidence // envelopes of ledger evidence
	}
	var recs []ledger.Record
	single := false
	if format == ingest.FormatEvidence {
		recs, single, err = s.nativeRecords(r, body)
	} else {
		recs, err = s.ingestRecords(r, format, body)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	idem, err := idempotencyKey(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	res, err := s.appendGuarded(w, r, recs, idem)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.appendAnswer(w, res, single)
}

// nativeRecords reads a body of the ledger's own JSON: an evidence object,
// an envelope of one, or an array of them (admit.Admit checks each).
// single reports a body that was one object.
func (s *Server) nativeRecords(r *http.Request, body []byte) ([]ledger.Record, bool, error) {
	if err := requireJSON(r); err != nil {
		return nil, false, err
	}
	trimmed := bytes.TrimSpace(body)
	var raws []json.RawMessage
	single := true
	switch {
	case len(trimmed) == 0:
		return nil, false, ledger.FieldError("", "empty body: send an evidence object or an array of them")
	case trimmed[0] == '[':
		single = false
		var err error
		if raws, err = ledger.SplitArray(trimmed); err != nil {
			return nil, false, err
		}
		if len(raws) == 0 {
			return nil, false, ledger.FieldError("", "empty array: nothing to record")
		}
	case trimmed[0] == '{':
		raws = []json.RawMessage{trimmed}
	default:
		return nil, false, ledger.FieldError("", "body must be a JSON object or array")
	}
	dsseOnly := mediaType(r) == ledger.ContentTypeDSSE
	recs, err := admit.Admit(r.Context(), s.store, principalOf(r), admit.Evidence{Raws: raws, DSSEOnly: dsseOnly, Prefix: func(i int) string {
		if single {
			return ""
		}
		return fmt.Sprintf("[%d].", i)
	}})
	return recs, single, err
}

// parseEvidenceFilter reads the list filters from the query string.
func parseEvidenceFilter(r *http.Request) (ledger.EvidenceFilter, error) {
	q := r.URL.Query()
	f := ledger.EvidenceFilter{
		Lane: q.Get("lane"), Backend: ledger.Backend(q.Get("backend")), Status: ledger.Status(q.Get("status")),
		Repository: q.Get("repository"), Commit: q.Get("commit"), ArtifactDigest: q.Get("artifact"), Cursor: q.Get("cursor"),
	}
	var err error
	if f.Limit, err = queryLimit(r); err != nil {
		return f, err
	}
	if f.AsOfSize, err = queryAsOf(r); err != nil {
		return f, err
	}
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return f, ledger.FieldError("since", "must be an RFC 3339 time such as 2026-11-29T00:00:00Z")
		}
		f.Since = t
	}
	if f.Backend != "" && !f.Backend.Valid() {
		return f, ledger.FieldError("backend", "must be one of %s", ledger.BackendList())
	}
	switch f.Status {
	case "", ledger.StatusPassed, ledger.StatusFailed, ledger.StatusInconclusive, ledger.StatusError:
	default:
		return f, ledger.FieldError("status", "must be passed, failed, inconclusive or error")
	}
	return f, nil
}

func (s *Server) handleListEvidence(w http.ResponseWriter, r *http.Request) {
	f, err := parseEvidenceFilter(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	streamPage(s, w, r, "evidence", f.Cursor, f.Limit,
		func(ctx context.Context, cursor string, limit int) ([]ledger.EvidenceEntry, string, error) {
			g := f
			g.Cursor, g.Limit = cursor, limit
			return s.store.Evidence(ctx, g)
		},
		func(e ledger.EvidenceEntry) uint64 { return e.Index },
		func(e ledger.EvidenceEntry) any { return evidenceJSON(e, false) })
}

// evidenceByID loads one evidence entry, 404 when absent or not evidence.
func (s *Server) evidenceByID(r *http.Request, id string) (ledger.EvidenceEntry, error) {
	e, err := s.store.Entry(r.Context(), id)
	if err != nil {
		return ledger.EvidenceEntry{}, err
	}
	if e.Kind != ledger.KindEvidence {
		return ledger.EvidenceEntry{}, ledger.NotFound("entry %q is a %s entry, not evidence", id, e.Kind)
	}
	ev, err := ledger.ParseEvidence(e.Body)
	if err != nil {
		return ledger.EvidenceEntry{}, err
	}
	return ledger.EvidenceEntry{Entry: e, Evidence: ev}, nil
}

func (s *Server) handleGetEvidence(w http.ResponseWriter, r *http.Request) {
	e, err := s.evidenceByID(r, chi.URLParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if s.serveEvidenceFormat(w, r, e) {
		return
	}
	s.writeJSON(w, http.StatusOK, evidenceJSON(e, true))
}

func (s *Server) handleEvidenceProof(w http.ResponseWriter, r *http.Request) {
	e, err := s.store.Entry(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	size, err := queryUint(r.URL.Query().Get("size"), "size", 1, false)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	switch f := r.URL.Query().Get("format"); f {
	case "", "json":
	case "tlog-proof":
		s.serveTLogProof(w, r, e, size)
		return
	default:
		s.writeError(w, r, ledger.FieldError("format", "must be json or tlog-proof"))
		return
	}
	p, err := s.store.InclusionProof(r.Context(), e.Index, size)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := map[string]any{"proof": p}
	// Most proofs are of the latest tree, whose checkpoint the last append
	// answered with; one size has one signed checkpoint.
	if c := s.lastCheckpoint.Load(); c != nil && c.cp.Size == p.TreeSize {
		out["checkpoint"] = c.cp
	} else if cp, err := s.store.CheckpointAt(r.Context(), p.TreeSize); err == nil {
		out["checkpoint"] = cp
	}
	s.writeJSON(w, http.StatusOK, out)
}
