package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/evidence-ledger/ledger/ledger"
)

// IngestParams is what a format lacks, sent as the query parameters of
// POST /api/v1/evidence (see package ingest's Params): lane, backend,
// repository, commit, tree and artifact pins "NAME=sha256:HEX".
type IngestParams struct {
	Lane, Backend, Repository, Commit, Tree string
	Artifacts                               []string
}

// Ingest posts body as it is (a JUnit XML file, a go test -json stream, an
// in-toto Statement, a DSSE envelope) with Content-Type mediaType to
// POST /api/v1/evidence; the server decodes it, verifies what is signed,
// and appends the original and the evidence naming it atomically. Each
// answered inclusion proof is verified against the answered checkpoint.
// Entries carry ID, Index and LeafHash; the first is the original
// (KindOriginal), the rest evidence.
func (c *Client) Ingest(ctx context.Context, mediaType string, body []byte, p IngestParams, idemKey string) (*ledger.AppendResult, error) {
	if len(body) == 0 {
		return nil, ledger.FieldError("", "empty body: nothing to record")
	}
	q := url.Values{}
	for k, v := range map[string]string{"lane": p.Lane, "backend": p.Backend, "repository": p.Repository, "commit": p.Commit, "tree": p.Tree} {
		if v != "" {
			q.Set(k, v)
		}
	}
	for _, a := range p.Artifacts {
		q.Add("artifact", a)
	}
	var ans struct {
		Entries    []appended        `json:"entries"`
		Checkpoint ledger.Checkpoint `json:"checkpoint"`
	}
	err := c.do(ctx, request{method: http.MethodPost, path: "/evidence", query: q, body: body, contentType: mediaType,
		header: map[string]string{"Idempotency-Key": idemKey}}, &ans, nil)
	if err != nil {
		return nil, err
	}
	if len(ans.Entries) == 0 {
		return nil, ledger.Errorf(ledger.CodeInternal, "server answered no entries")
	}
	res := &ledger.AppendResult{Entries: make([]ledger.AppendedEntry, len(ans.Entries)), Checkpoint: ans.Checkpoint}
	for i, a := range ans.Entries {
		if err := checkInclusion(a.InclusionProof, a.Index, a.LeafHash, ans.Checkpoint); err != nil {
			return nil, err
		}
		kind := ledger.KindEvidence
		if i == 0 && len(ans.Entries) > 1 {
			kind = ledger.KindOriginal
		}
		res.Entries[i] = ledger.AppendedEntry{
			Entry:    ledger.Entry{Index: a.Index, ID: a.ID, Kind: kind, LeafHash: a.LeafHash},
			Existing: a.Existing, Proof: a.InclusionProof,
		}
	}
	return res, nil
}
