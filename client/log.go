package client

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
)

var (
	_ ledger.LogWriter = (*Client)(nil)
	_ ledger.LogReader = (*Client)(nil)
	_ ledger.Queries   = (*Client)(nil)
	_ ledger.Reader    = (*Client)(nil)
)

// maxLimit is the largest page the API serves; stores clamp Limit to it
// too, so a larger Limit reads the same page locally and remotely.
const maxLimit = 1000

// appended is one element of the API's answer to a batch append.
type appended struct {
	ID             string                `json:"id"`
	Index          uint64                `json:"index"`
	LeafHash       ledger.Hash           `json:"leaf_hash"`
	Existing       bool                  `json:"existing"`
	InclusionProof ledger.InclusionProof `json:"inclusion_proof"`
}

// Append posts recs to POST /api/v1/evidence as one array (atomic on the
// server: all or none) with idemKey as the Idempotency-Key header. The API
// appends only evidence: a record of another kind is refused (CodeInvalid,
// field "[i].kind") before anything is sent, since head verifications,
// releases, waivers, sign-offs and approvals are made by the server from
// its own checks or the token's authority (see the release methods and
// TRUST.md). Each answered inclusion proof is verified against the
// answered checkpoint's root. The entries carry ID, Index, Kind and
// LeafHash; RecordedAt, Body and Raw are not in the answer (read them with
// Entry).
func (c *Client) Append(ctx context.Context, recs []ledger.Record, idemKey string) (*ledger.AppendResult, error) {
	if len(recs) == 0 {
		return nil, ledger.FieldError("", "no records to append")
	}
	var body bytes.Buffer
	body.WriteByte('[')
	for i, r := range recs {
		if r.Kind != ledger.KindEvidence {
			return nil, ledger.FieldError(fmt.Sprintf("[%d].kind", i), "the API appends only evidence (POST /api/v1/evidence), not %s records: %s", r.Kind, notAppendable(r.Kind))
		}
		if i > 0 {
			body.WriteByte(',')
		}
		body.Write(bytes.TrimSpace(r.Body))
	}
	body.WriteByte(']')
	return c.postEvidence(ctx, body.Bytes(), len(recs), "application/json", idemKey)
}

// postEvidence posts an array body of n elements to POST /evidence and
// checks the answer's inclusion proofs.
func (c *Client) postEvidence(ctx context.Context, body []byte, n int, contentType, idemKey string) (*ledger.AppendResult, error) {
	var ans struct {
		Entries    []appended        `json:"entries"`
		Checkpoint ledger.Checkpoint `json:"checkpoint"`
	}
	err := c.do(ctx, request{method: http.MethodPost, path: "/evidence", body: body, contentType: contentType,
		header: map[string]string{"Idempotency-Key": idemKey}}, &ans, nil)
	if err != nil {
		return nil, err
	}
	if len(ans.Entries) != n {
		return nil, ledger.Errorf(ledger.CodeInternal, "server answered %d entries for %d records", len(ans.Entries), n)
	}
	res := &ledger.AppendResult{Entries: make([]ledger.AppendedEntry, len(ans.Entries)), Checkpoint: ans.Checkpoint}
	for i, a := range ans.Entries {
		if err := checkInclusion(a.InclusionProof, a.Index, a.LeafHash, ans.Checkpoint); err != nil {
			return nil, err
		}
		res.Entries[i] = ledger.AppendedEntry{
			Entry:    ledger.Entry{Index: a.Index, ID: a.ID, Kind: ledger.KindEvidence, LeafHash: a.LeafHash},
			Existing: a.Existing, Proof: a.InclusionProof,
		}
	}
	return res, nil
}

// notAppendable says how a record of kind k reaches a server instead.
func notAppendable(k ledger.Kind) string {
	switch k {
	case ledger.KindHead:
		return "the server verifies heads itself from their uploaded objects (Client.VerifyHead, POST /api/v1/heads/verify)"
	case ledger.KindPolicy:
		return "an admin registers trust policies (Client.ApplyPolicy, POST /api/v1/policies)"
	case ledger.KindRelease, ledger.KindWaiver, ledger.KindApproval:
		return "releases, waivers, sign-offs and approvals have their own routes (the client's release methods), authored by the token"
	}
	return "unknown kind"
}

// checkInclusion verifies that p proves leaf (index, leafHash) in the tree
// of checkpoint cp.
func checkInclusion(p ledger.InclusionProof, index uint64, leafHash ledger.Hash, cp ledger.Checkpoint) error {
	if p.Index != index || p.LeafHash != leafHash || p.TreeSize != cp.Size || p.Root != cp.Root {
		return ledger.Errorf(ledger.CodeInternal, "server's inclusion proof of leaf %d is not about that leaf and checkpoint %d", index, cp.Size)
	}
	hashes := make([][]byte, len(p.Hashes))
	for i := range p.Hashes {
		hashes[i] = p.Hashes[i][:]
	}
	if err := proof.VerifyInclusion(rfc6962.DefaultHasher, p.Index, p.TreeSize, p.LeafHash[:], hashes, p.Root[:]); err != nil {
		return ledger.Errorf(ledger.CodeInternal, "server's inclusion proof of leaf %d does not verify against checkpoint %d: %v", index, cp.Size, err)
	}
	return nil
}

// entryAnswer is the API's shape of one log entry and its leaf bytes.
type entryAnswer struct {
	Entry ledger.Entry `json:"entry"`
	Leaf  string       `json:"leaf"`
}

// entry returns the answered entry with Raw set to its leaf bytes and Body
// to the canonical body inside them (the answer's "body" is re-indented
// JSON), after checking that the leaf hashes to the entry's leaf hash and
// names the entry's index, kind and id.
func (a entryAnswer) entry() (ledger.Entry, error) {
	e := a.Entry
	e.Raw = []byte(a.Leaf)
	if ledger.LeafHash(e.Raw) != e.LeafHash {
		return ledger.Entry{}, ledger.Errorf(ledger.CodeInternal, "server's leaf bytes of entry %d do not hash to its leaf hash", e.Index)
	}
	l, err := ledger.DecodeLeaf(e.Raw)
	if err != nil {
		return ledger.Entry{}, ledger.Errorf(ledger.CodeInternal, "server's leaf of entry %d does not decode: %v", e.Index, err)
	}
	if l.Index != e.Index || l.Kind != e.Kind || l.ID != e.ID || !l.RecordedAt.Equal(e.RecordedAt) {
		return ledger.Entry{}, ledger.Errorf(ledger.CodeInternal, "server's leaf of entry %d names another entry", e.Index)
	}
	e.Body = l.Body
	return e, nil
}

// Entry returns the entry with content id id (GET /log/entries/{id}), with
// its exact leaf bytes in Raw, or a CodeNotFound error.
func (c *Client) Entry(ctx context.Context, id string) (ledger.Entry, error) {
	var a entryAnswer
	if err := c.do(ctx, request{method: http.MethodGet, path: "/log/entries/" + url.PathEscape(id)}, &a, nil); err != nil {
		return ledger.Entry{}, err
	}
	return a.entry()
}

// EntryAt returns the entry at leaf index index (GET /log/leaves/{index}),
// or a CodeNotFound error.
func (c *Client) EntryAt(ctx context.Context, index uint64) (ledger.Entry, error) {
	var a entryAnswer
	if err := c.do(ctx, request{method: http.MethodGet, path: "/log/leaves/" + strconv.FormatUint(index, 10)}, &a, nil); err != nil {
		return ledger.Entry{}, err
	}
	return a.entry()
}

// Checkpoint returns the latest signed checkpoint (GET /log/checkpoint).
func (c *Client) Checkpoint(ctx context.Context) (ledger.Checkpoint, error) {
	return c.CheckpointAt(ctx, 0)
}

// CheckpointAt returns the signed checkpoint of tree size size (0: the
// latest), or a CodeNotFound error when none was signed at that size.
func (c *Client) CheckpointAt(ctx context.Context, size uint64) (ledger.Checkpoint, error) {
	var q url.Values
	if size > 0 {
		q = url.Values{"size": {strconv.FormatUint(size, 10)}}
	}
	var cp ledger.Checkpoint
	err := c.do(ctx, request{method: http.MethodGet, path: "/log/checkpoint", query: q}, &cp, nil)
	return cp, err
}

// InclusionProof returns the RFC 6962 inclusion proof of leaf index in the
// tree of size leaves (0: the latest checkpoint's), from GET
// /log/proof/inclusion. The proof is returned as the server gave it; check
// it against a checkpoint you hold.
func (c *Client) InclusionProof(ctx context.Context, index, size uint64) (ledger.InclusionProof, error) {
	q := url.Values{"index": {strconv.FormatUint(index, 10)}}
	if size > 0 {
		q.Set("size", strconv.FormatUint(size, 10))
	}
	var p ledger.InclusionProof
	err := c.do(ctx, request{method: http.MethodGet, path: "/log/proof/inclusion", query: q}, &p, nil)
	return p, err
}

// ConsistencyProof returns the RFC 6962 consistency proof from tree size
// from to size to (0: the latest), from GET /log/proof/consistency.
func (c *Client) ConsistencyProof(ctx context.Context, from, to uint64) (ledger.ConsistencyProof, error) {
	q := url.Values{"from": {strconv.FormatUint(from, 10)}}
	if to > 0 {
		q.Set("to", strconv.FormatUint(to, 10))
	}
	var p ledger.ConsistencyProof
	err := c.do(ctx, request{method: http.MethodGet, path: "/log/proof/consistency", query: q}, &p, nil)
	return p, err
}

// page adds the paging parameters common to the list routes.
func page(q url.Values, asOf uint64, cursor string, limit int) url.Values {
	if asOf > 0 {
		q.Set("as_of", strconv.FormatUint(asOf, 10))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(min(limit, maxLimit)))
	}
	return q
}

// set sets q[k] to v when v is not empty.
func set(q url.Values, k, v string) {
	if v != "" {
		q.Set(k, v)
	}
}

// Entries returns one page of the entries of f.Kind (optionally of index
// key f.Key), newest first, from GET /log/entries, with the cursor of the
// next page ("" after the last). Each entry's Raw holds its leaf bytes,
// checked against its leaf hash.
func (c *Client) Entries(ctx context.Context, f ledger.EntryFilter) ([]ledger.Entry, string, error) {
	q := url.Values{"kind": {string(f.Kind)}}
	set(q, "key", f.Key)
	var ans struct {
		Entries []entryAnswer `json:"entries"`
		Next    string        `json:"next_cursor"`
	}
	if err := c.do(ctx, request{method: http.MethodGet, path: "/log/entries", query: page(q, f.AsOfSize, f.Cursor, f.Limit)}, &ans, nil); err != nil {
		return nil, "", err
	}
	out := make([]ledger.Entry, len(ans.Entries))
	for i, a := range ans.Entries {
		e, err := a.entry()
		if err != nil {
			return nil, "", err
		}
		out[i] = e
	}
	return out, ans.Next, nil
}

// Evidence returns one page of evidence selected by f, newest first, from
// GET /evidence, with the cursor of the next page ("" after the last). The
// entries carry ID, Index, Kind, RecordedAt and LeafHash but not Body or
// Raw (read them with Entry).
func (c *Client) Evidence(ctx context.Context, f ledger.EvidenceFilter) ([]ledger.EvidenceEntry, string, error) {
	q := url.Values{}
	set(q, "lane", f.Lane)
	set(q, "backend", string(f.Backend))
	set(q, "status", string(f.Status))
	set(q, "repository", f.Repository)
	set(q, "commit", f.Commit)
	set(q, "artifact", f.ArtifactDigest)
	if !f.Since.IsZero() {
		q.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	var ans struct {
		Evidence []struct {
			ID         string          `json:"id"`
			Index      uint64          `json:"index"`
			RecordedAt time.Time       `json:"recorded_at"`
			LeafHash   ledger.Hash     `json:"leaf_hash"`
			Evidence   ledger.Evidence `json:"evidence"`
		} `json:"evidence"`
		Next string `json:"next_cursor"`
	}
	if err := c.do(ctx, request{method: http.MethodGet, path: "/evidence", query: page(q, f.AsOfSize, f.Cursor, f.Limit)}, &ans, nil); err != nil {
		return nil, "", err
	}
	out := make([]ledger.EvidenceEntry, len(ans.Evidence))
	for i, e := range ans.Evidence {
		out[i] = ledger.EvidenceEntry{Entry: ledger.Entry{Index: e.Index, ID: e.ID, Kind: ledger.KindEvidence, RecordedAt: e.RecordedAt, LeafHash: e.LeafHash}, Evidence: e.Evidence}
	}
	return out, ans.Next, nil
}

// Heads returns one page of head verifications selected by f, newest
// first, from GET /heads, with the cursor of the next page ("" after the
// last). The entries carry ID, Index, Kind, RecordedAt and LeafHash but not
// Body or Raw.
func (c *Client) Heads(ctx context.Context, f ledger.HeadFilter) ([]ledger.HeadEntry, string, error) {
	q := url.Values{}
	set(q, "repository", f.Repository)
	set(q, "commit", f.Commit)
	set(q, "verdict", string(f.Verdict))
	var ans struct {
		Heads []struct {
			ID         string                  `json:"id"`
			Index      uint64                  `json:"index"`
			RecordedAt time.Time               `json:"recorded_at"`
			LeafHash   ledger.Hash             `json:"leaf_hash"`
			Head       ledger.HeadVerification `json:"head"`
		} `json:"heads"`
		Next string `json:"next_cursor"`
	}
	if err := c.do(ctx, request{method: http.MethodGet, path: "/heads", query: page(q, f.AsOfSize, f.Cursor, f.Limit)}, &ans, nil); err != nil {
		return nil, "", err
	}
	out := make([]ledger.HeadEntry, len(ans.Heads))
	for i, h := range ans.Heads {
		out[i] = ledger.HeadEntry{Entry: ledger.Entry{Index: h.Index, ID: h.ID, Kind: ledger.KindHead, RecordedAt: h.RecordedAt, LeafHash: h.LeafHash}, Head: h.Head}
	}
	return out, ans.Next, nil
}

// TLogProof returns the c2sp.org/tlog-proof of the entry with content id
// id, as the server wrote it (GET /evidence/{id}/proof?format=tlog-proof).
// Nothing in it is trusted: check it with tlogproof.Verify and the log's
// public key.
func (c *Client) TLogProof(ctx context.Context, id string) ([]byte, error) {
	var raw []byte
	q := url.Values{"format": {"tlog-proof"}}
	if err := c.do(ctx, request{method: http.MethodGet, path: "/evidence/" + url.PathEscape(id) + "/proof", query: q}, &raw, nil); err != nil {
		return nil, err
	}
	return raw, nil
}

// LogKeys returns the log's key chain and its rotation leaves (GET
// /api/v1/log/keys). The answer is the server's: check it with
// ledger.BuildKeyChain from a key you trust.
func (c *Client) LogKeys(ctx context.Context) (ledger.LogKeys, error) {
	var lk ledger.LogKeys
	err := c.do(ctx, request{method: http.MethodGet, path: "/log/keys"}, &lk, nil)
	return lk, err
}
