package web

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ingest"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/verify"
	"github.com/go-chi/chi/v5"
)

// evidenceFormat is the format the Content-Type of a POST
// /api/v1/evidence names (ingest's media types; none, application/json
// and other +json types are the ledger's own JSON, which requireJSON then
// checks). A DSSE envelope is in-toto or native by its payload type
// (inTotoEnvelope).
func evidenceFormat(r *http.Request) (string, error) {
	mt := mediaType(r)
	if mt == "" || mt == "application/json" {
		return ingest.FormatEvidence, nil
	}
	f, err := ingest.FormatOf(r.Header.Get("Content-Type"))
	if err != nil {
		if strings.HasSuffix(mt, "+json") {
			return ingest.FormatEvidence, nil // requireJSON answers it
		}
		return "", err
	}
	return f, nil
}

// ingestParams reads what a format lacks from the query string of
// POST /api/v1/evidence: lane, backend, repository, commit, tree, and
// artifact=NAME=sha256:HEX (repeatable); and wires what the server
// holds: the runner-key registry for DSSE envelopes (runnerEnvelopes) and
// the Sigstore trust setting for bundles.
func (s *Server) ingestParams(r *http.Request) (ingest.Params, error) {
	q := r.URL.Query()
	p := ingest.Params{Lane: q.Get("lane"), Backend: ledger.Backend(q.Get("backend")),
		Repository: q.Get("repository"), Commit: q.Get("commit"), Tree: q.Get("tree"), Now: s.cfg.Now(),
		Envelopes: RunnerEnvelopes(s.store), SigstoreTrust: s.cfg.Sigstore}
	if t, ok := TokenFrom(r.Context()); ok {
		p.Token = t.Name
	}
	arts, err := ingest.ParseArtifacts(q["artifact"])
	if err != nil {
		return p, err
	}
	p.Artifacts = arts
	return p, nil
}

// RunnerEnvelopes is the ingest.EnvelopeVerifier over the runner-key
// registry of log (ledger.LoadRunnerKeys at the latest size) and the
// ledger's one DSSE verifier (verify.VerifyRunnerEnvelope): the same
// registry and checks as an envelope of native evidence, and an approved
// agent's signature refused as there (refuseAgentSigner,
// RefuseAgentSignature).
func RunnerEnvelopes(log ledger.Queries) ingest.EnvelopeVerifier {
	return func(ctx context.Context, env []byte, payloadType string) ([]byte, ledger.Signer, error) {
		reg, err := ledger.LoadRunnerKeys(ctx, log, 0)
		if err != nil {
			return nil, ledger.Signer{}, err
		}
		payload, signer, err := verify.VerifyRunnerEnvelope(ctx, env, payloadType, reg)
		if err != nil {
			return nil, ledger.Signer{}, err
		}
		if err := refuseAgentSigner(reg, signer, ""); err != nil {
			return nil, ledger.Signer{}, err
		}
		if err := RefuseAgentSignature(reg, env, payloadType, ""); err != nil {
			return nil, ledger.Signer{}, err
		}
		return payload, signer, nil
	}
}

// ingestRecords decodes body of format (not the native one) into the
// records of one atomic append, the original first, and puts every
// evidence record through the checks plain JSON evidence gets
// (IngestChecks). Nothing is returned to append on any error.
func (s *Server) ingestRecords(r *http.Request, format string, body []byte) ([]ledger.Record, error) {
	p, err := s.ingestParams(r)
	if err != nil {
		return nil, err
	}
	tok, _ := TokenFrom(r.Context())
	// Scope first, as far as the flags tell it (the input may carry the
	// repository: IngestChecks checks the decoded record's), so a token
	// out of scope learns nothing about signatures or parsing.
	early := tok
	if p.Repository == "" {
		early.Repositories = nil
	}
	if field, ok := early.Covers(p.Repository, p.Lane, p.Backend); !ok {
		return nil, &ledger.Error{Code: ledger.CodeForbidden, Field: field,
			Message: "out of the scope of token " + quote(tok.Name) + " (" + tok.ScopeText() + "): nothing was recorded"}
	}
	res, err := ingest.DecodeFormat(r.Context(), format, body, p)
	if err != nil {
		return nil, err
	}
	return IngestChecks(res.Records, tok, recorderFor(r))
}

// IngestChecks puts the evidence records of a decoded input through what
// plain JSON evidence goes through (signedRecords): server markers
// (gates.RefuseServerMarkers) and a run claim (ledger.RefuseRunClaim) refused, the token's scope checked on the
// record's own repository, lane and backend, and recorded_by stamped with
// rec (plus the runner that signed it, for a verified envelope; rec nil
// stamps nothing, as locally). Records of other kinds (the original) pass
// unchanged. It returns new records; recs is not modified.
func IngestChecks(recs []ledger.Record, tok ledger.Token, rec *ledger.Recorder) ([]ledger.Record, error) {
	out := make([]ledger.Record, len(recs))
	for i, r := range recs {
		out[i] = r
		if r.Kind != ledger.KindEvidence {
			continue
		}
		if err := gates.RefuseServerMarkers(r.Body, ""); err != nil {
			return nil, err
		}
		if err := ledger.RefuseRunClaim(r.Body, ""); err != nil {
			return nil, err
		}
		body, err := stampEvidence(tok, runnerRecorder(rec, r.Body), r.Body, "")
		if err != nil {
			return nil, err
		}
		out[i].Body = body
	}
	return out, nil
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
