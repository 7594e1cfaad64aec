package web

import (
	"net/http"
	"strings"

	"github.com/evidence-ledger/ledger/ingest"
	"github.com/evidence-ledger/ledger/ledger"
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
