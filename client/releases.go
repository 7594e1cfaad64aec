package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"

	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
)

// The release operations. The server evaluates and signs readiness and
// records waivers, sign-offs and approvals as the token's holder (its name
// is the author, its roles are checked), as TRUST.md requires: a client
// never sends an author, a verdict or a policy.

// releaseAnswer is the API's shape of a release definition.
type releaseAnswer struct {
	Release    *gates.Release `json:"release"`
	ID         string         `json:"id"`
	Index      uint64         `json:"index"`
	RecordedAt time.Time      `json:"recorded_at"`
}

func (a releaseAnswer) entry() ledger.Entry {
	return ledger.Entry{Index: a.Index, ID: a.ID, Kind: ledger.KindRelease, RecordedAt: a.RecordedAt}
}

// DefineRelease records def, a release definition (YAML or JSON, as `ledger
// release apply` reads it) of release version, through PUT
// /releases/{version} (scope admin). It returns the definition as the
// server recorded it (DefinedBy is the token's name) and its entry.
func (c *Client) DefineRelease(ctx context.Context, version string, def []byte) (*gates.Release, ledger.Entry, error) {
	var a releaseAnswer
	err := c.do(ctx, request{method: http.MethodPut, path: "/releases/" + url.PathEscape(version), body: def, contentType: "application/yaml"}, &a, nil)
	if err != nil {
		return nil, ledger.Entry{}, err
	}
	if a.Release != nil {
		a.Release.EntryID, a.Release.EntryIndex = a.ID, a.Index
	}
	return a.Release, a.entry(), nil
}

// Releases returns the latest definition of every release (GET /releases).
func (c *Client) Releases(ctx context.Context) ([]*gates.Release, error) {
	var ans struct {
		Releases []releaseAnswer `json:"releases"`
	}
	if err := c.do(ctx, request{method: http.MethodGet, path: "/releases"}, &ans, nil); err != nil {
		return nil, err
	}
	out := make([]*gates.Release, 0, len(ans.Releases))
	for _, a := range ans.Releases {
		if a.Release == nil {
			return nil, ledger.Errorf(ledger.CodeInternal, "server answered a release entry %s without its definition", a.ID)
		}
		a.Release.EntryID, a.Release.EntryIndex = a.ID, a.Index
		out = append(out, a.Release)
	}
	return out, nil
}

// Release returns release version's latest definition, its entry, and its
// approvals and sign-offs (GET /releases/{version}), or a CodeNotFound
// error.
func (c *Client) Release(ctx context.Context, version string) (*gates.Release, ledger.Entry, []gates.Approval, []gates.Signoff, error) {
	var ans struct {
		releaseAnswer
		Approvals []gates.Approval `json:"approvals"`
		Signoffs  []gates.Signoff  `json:"signoffs"`
	}
	if err := c.do(ctx, request{method: http.MethodGet, path: "/releases/" + url.PathEscape(version)}, &ans, nil); err != nil {
		return nil, ledger.Entry{}, nil, nil, err
	}
	if ans.Release == nil {
		return nil, ledger.Entry{}, nil, nil, ledger.Errorf(ledger.CodeInternal, "server answered release %q without its definition", version)
	}
	ans.Release.EntryID, ans.Release.EntryIndex = ans.ID, ans.Index
	return ans.Release, ans.entry(), ans.Approvals, ans.Signoffs, nil
}

// Readiness returns the server's signed readiness verdict of release
// version at its latest checkpoint (GET /releases/{version}/readiness).
func (c *Client) Readiness(ctx context.Context, version string) (*gates.SignedVerdict, error) {
	var sv gates.SignedVerdict
	if err := c.do(ctx, request{method: http.MethodGet, path: "/releases/" + url.PathEscape(version) + "/readiness"}, &sv, nil); err != nil {
		return nil, err
	}
	if sv.Readiness == nil {
		return nil, ledger.Errorf(ledger.CodeInternal, "server's readiness answer for %q has no readiness", version)
	}
	return &sv, nil
}

// post sends body as JSON to POST /releases/{version}/{what}.
func (c *Client) post(ctx context.Context, version, what string, body, out, errOut any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	return c.do(ctx, request{method: http.MethodPost, path: "/releases/" + url.PathEscape(version) + "/" + what, body: b, contentType: "application/json"}, out, errOut)
}

// Waive records a waiver of gate for release version's current pins,
// expiring at expires, authored by the token (POST
// /releases/{version}/waivers, scope admin).
func (c *Client) Waive(ctx context.Context, version, gate, reason string, expires time.Time) (gates.Waiver, ledger.Entry, error) {
	var ans struct {
		ID     string       `json:"id"`
		Index  uint64       `json:"index"`
		Waiver gates.Waiver `json:"waiver"`
	}
	req := struct {
		Gate    string    `json:"gate"`
		Reason  string    `json:"reason"`
		Expires time.Time `json:"expires"`
	}{gate, reason, expires.UTC()}
	if err := c.post(ctx, version, "waivers", req, &ans, nil); err != nil {
		return gates.Waiver{}, ledger.Entry{}, err
	}
	return ans.Waiver, ledger.Entry{ID: ans.ID, Index: ans.Index, Kind: ledger.KindWaiver}, nil
}

// Signoff records a sign-off of manual gate gate of release version by the
// token, which must hold the gate's role (POST /releases/{version}/signoffs,
// scope record).
func (c *Client) Signoff(ctx context.Context, version, gate, note string) (gates.Signoff, ledger.Entry, error) {
	var ans struct {
		ID      string        `json:"id"`
		Index   uint64        `json:"index"`
		Signoff gates.Signoff `json:"signoff"`
	}
	req := struct {
		Gate string `json:"gate"`
		Note string `json:"note,omitempty"`
	}{gate, note}
	if err := c.post(ctx, version, "signoffs", req, &ans, nil); err != nil {
		return gates.Signoff{}, ledger.Entry{}, err
	}
	return ans.Signoff, ledger.Entry{ID: ans.ID, Index: ans.Index, Kind: ledger.KindApproval}, nil
}

// Approve records the final approval of release version by the token (POST
// /releases/{version}/approvals, scope admin), with the signed verdict it
// approved. A release that is not ready is refused with a CodePrecondition
// error naming the blocking gates, and the returned verdict is the one that
// refused it, as gates.RecordApproval does locally.
func (c *Client) Approve(ctx context.Context, version, note string) (gates.Approval, ledger.Entry, *gates.SignedVerdict, error) {
	var ans struct {
		ID        string               `json:"id"`
		Index     uint64               `json:"index"`
		Approval  gates.Approval       `json:"approval"`
		Readiness *gates.SignedVerdict `json:"readiness"`
	}
	var refused struct {
		Readiness *gates.SignedVerdict `json:"readiness"`
	}
	req := struct {
		Note string `json:"note,omitempty"`
	}{note}
	if err := c.post(ctx, version, "approvals", req, &ans, &refused); err != nil {
		return gates.Approval{}, ledger.Entry{}, refused.Readiness, err
	}
	return ans.Approval, ledger.Entry{ID: ans.ID, Index: ans.Index, Kind: ledger.KindApproval}, ans.Readiness, nil
}

// Supersede retracts the evidence or head record entry for release
// version's current pins, with reason, authored by the token (POST
// /releases/{version}/supersedes, scope admin, plus the release's
// approval role when it names one). Errors are the API's: CodeInvalid
// naming the field (no such entry, not evidence or a head, empty reason),
// CodeForbidden (scope or role), CodeConflict (already superseded for
// these pins), CodeNotFound (no such release).
func (c *Client) Supersede(ctx context.Context, version, entry, reason string) (gates.Supersede, ledger.Entry, error) {
	var ans struct {
		ID        string          `json:"id"`
		Index     uint64          `json:"index"`
		Supersede gates.Supersede `json:"supersede"`
	}
	req := struct {
		Entry  string `json:"entry"`
		Reason string `json:"reason"`
	}{entry, reason}
	if err := c.post(ctx, version, "supersedes", req, &ans, nil); err != nil {
		return gates.Supersede{}, ledger.Entry{}, err
	}
	return ans.Supersede, ledger.Entry{ID: ans.ID, Index: ans.Index, Kind: ledger.KindSupersede}, nil
}
