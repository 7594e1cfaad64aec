package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// Object is one raw git object to upload: its type ("commit", "tag",
// "tree"), the id the caller claims and its bytes exactly as `git
// cat-file TYPE ID` prints them. The server recomputes the id.
type Object struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	Data []byte `json:"data"`
}

// HeadUpload asks the server to verify a head from its objects (POST
// /heads/verify, scope record). The policy is the one Release binds or,
// without Release, the registered policy Policy names (a name or a
// digest); a request never carries a policy's content or a path.
type HeadUpload struct {
	Repository   string   `json:"repository,omitempty"`
	Ref          string   `json:"ref,omitempty"`
	Release      string   `json:"release,omitempty"`
	Component    string   `json:"component,omitempty"`
	Policy       string   `json:"policy,omitempty"`
	ObjectFormat string   `json:"object_format,omitempty"`
	Objects      []Object `json:"objects"`
}

// TreeUpload asks the server to compute tree equivalence of a release
// component's head and reviewed commits, at the pins the release declares
// for it (POST /trees/verify, scope record).
type TreeUpload struct {
	Release      string   `json:"release"`
	Component    string   `json:"component,omitempty"`
	Lane         string   `json:"lane,omitempty"`
	ObjectFormat string   `json:"object_format,omitempty"`
	Objects      []Object `json:"objects"`
}

// TreeDifference and TreeReport mirror the server's answer (package
// verify's TreeReport) without importing verify.
type TreeDifference struct {
	Kind    string `json:"kind"`
	Path    string `json:"path"`
	OldPath string `json:"old_path,omitempty"`
	OldMode string `json:"old_mode,omitempty"`
	NewMode string `json:"new_mode,omitempty"`
	OldID   string `json:"old_id,omitempty"`
	NewID   string `json:"new_id,omitempty"`
	InPins  bool   `json:"in_pins"`
}

// TreeReport is the server's comparison of a head's tree with the
// reviewed tree.
type TreeReport struct {
	Head         string           `json:"head"`
	Reviewed     string           `json:"reviewed"`
	HeadTree     string           `json:"head_tree"`
	ReviewedTree string           `json:"reviewed_tree"`
	Pins         []string         `json:"pins,omitempty"`
	Differences  []TreeDifference `json:"differences"`
	OutsidePins  int              `json:"outside_pins"`
	Equivalent   bool             `json:"equivalent"`
}

// PolicySummary is a registered policy's name, digest and author.
type PolicySummary struct {
	ID        string    `json:"id"`
	Index     uint64    `json:"index"`
	Name      string    `json:"name"`
	Digest    string    `json:"digest"`
	AppliedAt time.Time `json:"applied_at"`
	AppliedBy string    `json:"applied_by,omitempty"`
}

// appendedAnswer is the common part of the answers of routes that append
// one record: its entry, inclusion proof and checkpoint.
type appendedAnswer struct {
	ID             string                `json:"id"`
	Index          uint64                `json:"index"`
	LeafHash       ledger.Hash           `json:"leaf_hash"`
	Existing       bool                  `json:"existing"`
	InclusionProof ledger.InclusionProof `json:"inclusion_proof"`
	Checkpoint     ledger.Checkpoint     `json:"checkpoint"`
}

// entry checks the inclusion proof against the answered checkpoint and
// returns the entry.
func (a appendedAnswer) entry(k ledger.Kind) (ledger.Entry, error) {
	if err := checkInclusion(a.InclusionProof, a.Index, a.LeafHash, a.Checkpoint); err != nil {
		return ledger.Entry{}, err
	}
	return ledger.Entry{Index: a.Index, ID: a.ID, Kind: k, LeafHash: a.LeafHash}, nil
}

func (c *Client) postJSON(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	return c.do(ctx, request{method: http.MethodPost, path: path, body: b, contentType: "application/json"}, out, nil)
}

// VerifyHead uploads a head's objects; the server verifies them under the
// bound policy and records its verification, which is returned with its
// entry (inclusion proof checked). A head the policy does not trust is not
// an error: read Decision.
func (c *Client) VerifyHead(ctx context.Context, u HeadUpload) (ledger.HeadVerification, ledger.Entry, error) {
	var ans struct {
		appendedAnswer
		Head ledger.HeadVerification `json:"head"`
	}
	if err := c.postJSON(ctx, "/heads/verify", u, &ans); err != nil {
		return ledger.HeadVerification{}, ledger.Entry{}, err
	}
	e, err := ans.entry(ledger.KindHead)
	return ans.Head, e, err
}

// VerifyTree uploads the commits and differing trees of a release
// component; the server computes and records tree-equivalence evidence
// (details computed_by "server"), returned with the report and its entry.
func (c *Client) VerifyTree(ctx context.Context, u TreeUpload) (TreeReport, ledger.Evidence, ledger.Entry, error) {
	var ans struct {
		appendedAnswer
		Tree     TreeReport      `json:"tree"`
		Evidence ledger.Evidence `json:"evidence"`
	}
	if err := c.postJSON(ctx, "/trees/verify", u, &ans); err != nil {
		return TreeReport{}, ledger.Evidence{}, ledger.Entry{}, err
	}
	e, err := ans.entry(ledger.KindEvidence)
	return ans.Tree, ans.Evidence, e, err
}

// ApplyPolicy registers a trust policy (POST /policies, scope admin): its
// name, YAML and the files it names (verify.ReadPolicyBundle reads them).
func (c *Client) ApplyPolicy(ctx context.Context, name string, policy []byte, files map[string][]byte) (PolicySummary, ledger.Entry, error) {
	var ans struct {
		appendedAnswer
		Policy PolicySummary `json:"policy"`
	}
	req := struct {
		Name   string            `json:"name"`
		Policy string            `json:"policy"`
		Files  map[string][]byte `json:"files,omitempty"`
	}{name, string(policy), files}
	if err := c.postJSON(ctx, "/policies", req, &ans); err != nil {
		return PolicySummary{}, ledger.Entry{}, err
	}
	e, err := ans.entry(ledger.KindPolicy)
	return ans.Policy, e, err
}

// Policy returns the newest registered policy of a name, or the policy of
// a digest (GET /policies/{ref}), with its content.
func (c *Client) Policy(ctx context.Context, ref string) (ledger.PolicyRecord, error) {
	var ans struct {
		Policy ledger.PolicyRecord `json:"policy"`
	}
	err := c.do(ctx, request{method: http.MethodGet, path: "/policies/" + url.PathEscape(ref)}, &ans, nil)
	return ans.Policy, err
}
