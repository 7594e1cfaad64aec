package client

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/auth"
)

// runnerAnswer is the API's answer to a runner-key append.
type runnerAnswer struct {
	Runner auth.RunnerState `json:"runner"`
	Entry  appended         `json:"entry"`
}

// AddRunner registers a runner's Ed25519 public key (keyFile: an OpenSSH
// line or a PEM PUBLIC KEY) under name through POST /runners (scope admin;
// the token's name is recorded as the author). CodeConflict when the name
// has a live key or the key was registered before; adding the name's live
// key again appends nothing (the entry's Existing is set).
func (c *Client) AddRunner(ctx context.Context, name string, keyFile []byte) (auth.RunnerState, ledger.AppendedEntry, error) {
	body, err := json.Marshal(map[string]string{"name": name, "public_key": string(keyFile)})
	if err != nil {
		return auth.RunnerState{}, ledger.AppendedEntry{}, err
	}
	var a runnerAnswer
	if err := c.do(ctx, request{method: http.MethodPost, path: "/runners", body: body, contentType: "application/json"}, &a, nil); err != nil {
		return auth.RunnerState{}, ledger.AppendedEntry{}, err
	}
	return a.Runner, a.entry(), nil
}

// RevokeRunner revokes name's live key through POST
// /runners/{name}/revoke (scope admin); CodeNotFound when it has none.
func (c *Client) RevokeRunner(ctx context.Context, name, reason string) (auth.RunnerState, ledger.AppendedEntry, error) {
	body, err := json.Marshal(map[string]string{"reason": reason})
	if err != nil {
		return auth.RunnerState{}, ledger.AppendedEntry{}, err
	}
	var a runnerAnswer
	if err := c.do(ctx, request{method: http.MethodPost, path: "/runners/" + url.PathEscape(name) + "/revoke", body: body, contentType: "application/json"}, &a, nil); err != nil {
		return auth.RunnerState{}, ledger.AppendedEntry{}, err
	}
	return a.Runner, a.entry(), nil
}

func (a runnerAnswer) entry() ledger.AppendedEntry {
	return ledger.AppendedEntry{Entry: ledger.Entry{Index: a.Entry.Index, ID: a.Entry.ID, Kind: ledger.KindRunnerKey, LeafHash: a.Entry.LeafHash}, Existing: a.Entry.Existing, Proof: a.Entry.InclusionProof}
}

// Runners returns every runner key registration, live or revoked (GET
// /runners), oldest first.
func (c *Client) Runners(ctx context.Context) (auth.RunnerRegistry, error) {
	var reg auth.RunnerRegistry
	err := c.do(ctx, request{method: http.MethodGet, path: "/runners"}, &reg, nil)
	return reg, err
}

// AppendEnvelopes posts DSSE envelopes of evidence (see
// verify.SignEvidence) to POST /evidence as one array with the DSSE
// content type: the server verifies each against its registered runner
// keys and appends all or none. Inclusion proofs are checked as in Append.
func (c *Client) AppendEnvelopes(ctx context.Context, envelopes [][]byte, idemKey string) (*ledger.AppendResult, error) {
	if len(envelopes) == 0 {
		return nil, ledger.FieldError("", "no envelopes to append")
	}
	body := append([]byte{'['}, bytes.Join(envelopes, []byte{','})...)
	body = append(body, ']')
	return c.postEvidence(ctx, body, len(envelopes), ledger.ContentTypeDSSE, idemKey)
}
