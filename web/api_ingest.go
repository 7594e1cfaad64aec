package web

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/evidence-ledger/ledger/ingest"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/go-chi/chi/v5"
)

// ingestParams reads what a format lacks from the query string of
// POST /api/v1/evidence: lane, backend, repository, commit, tree, and
// artifact=NAME=sha256:HEX (repeatable). DSSE envelopes are verified
// against the runner keys the server holds (none until runner keys are
// registered: every envelope is then refused).
func (s *Server) ingestParams(r *http.Request) (ingest.Params, error) {
	q := r.URL.Query()
	p := ingest.Params{Lane: q.Get("lane"), Backend: ledger.Backend(q.Get("backend")),
		Repository: q.Get("repository"), Commit: q.Get("commit"), Tree: q.Get("tree"), Now: s.cfg.Now()}
	arts, err := ingest.ParseArtifacts(q["artifact"])
	if err != nil {
		return p, err
	}
	p.Artifacts = arts
	return p, nil
}

// decodeEvidenceBody is the one content-type dispatch of POST
// /api/v1/evidence: the body, sent as Content-Type, becomes the records to
// append (for formats other than the native JSON, the original first).
// single reports a native body that was one JSON object.
func (s *Server) decodeEvidenceBody(r *http.Request, body []byte) (recs []ledger.Record, single bool, err error) {
	p, err := s.ingestParams(r)
	if err != nil {
		return nil, false, err
	}
	res, err := ingest.Decode(r.Context(), r.Header.Get("Content-Type"), body, p)
	if err != nil {
		return nil, false, err
	}
	single = res.Format == ingest.FormatEvidence && len(res.Records) == 1 && strings.HasPrefix(strings.TrimSpace(string(body)), "{")
	return res.Records, single, nil
}

// originalByID loads the original an id names: an original entry's own
// id, or an evidence entry's id whose details name an original (checked
// against the named digest).
func (s *Server) originalByID(r *http.Request, id string) (ledger.Entry, ledger.Original, error) {
	e, err := s.store.Entry(r.Context(), id)
	if err != nil {
		return e, ledger.Original{}, err
	}
	var want string
	if e.Kind == ledger.KindEvidence {
		ev, err := ledger.ParseEvidence(e.Body)
		if err != nil {
			return e, ledger.Original{}, err
		}
		var d struct {
			Original *ingest.OriginalRef `json:"original"`
		}
		if len(ev.Details) == 0 || json.Unmarshal(ev.Details, &d) != nil || d.Original == nil {
			return e, ledger.Original{}, ledger.NotFound("evidence %q names no original: it was recorded as the ledger's own JSON", id)
		}
		want = d.Original.Digest
		if e, err = s.store.Entry(r.Context(), d.Original.ID); err != nil {
			return e, ledger.Original{}, err
		}
	}
	if e.Kind != ledger.KindOriginal {
		return e, ledger.Original{}, ledger.NotFound("entry %q is a %s entry, not an original", id, e.Kind)
	}
	var o ledger.Original
	if err := json.Unmarshal(e.Body, &o); err != nil {
		return e, o, err
	}
	if want != "" && o.Digest != want {
		return e, o, ledger.Errorf(ledger.CodeInternal, "original %s does not have the digest its evidence names", e.ID)
	}
	return e, o, nil
}

// handleGetOriginal serves the exact bytes of an original (GET
// /api/v1/originals/{id}; id of the original or of evidence decoded from
// it) as an attachment of its media type, with its digest in the
// Digest header (RFC 3230 "sha-256=" base64 form) and X-Ledger-Entry.
func (s *Server) handleGetOriginal(w http.ResponseWriter, r *http.Request) {
	e, o, err := s.originalByID(r, chi.URLParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	hexsum := strings.TrimPrefix(o.Digest, "sha256:")
	sum, _ := hex.DecodeString(hexsum)
	w.Header().Set("Content-Type", o.MediaType)
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s.%s"`, e.ID, originalExt(o.Format)))
	w.Header().Set("Digest", "sha-256="+base64.StdEncoding.EncodeToString(sum))
	w.Header().Set("X-Ledger-Entry", e.ID)
	w.Header().Set("Content-Length", strconv.Itoa(len(o.Content)))
	w.WriteHeader(http.StatusOK)
	w.Write(o.Content)
}

func originalExt(format string) string {
	switch format {
	case ingest.FormatJUnit:
		return "xml"
	case ingest.FormatGoTest:
		return "jsonl"
	}
	return "json"
}
