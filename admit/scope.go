package admit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/evidence-ledger/ledger/ledger"
	jsonv2 "github.com/go-json-experiment/json"
)

// Require refuses p a request that needs scope need (ReviewerChange):
// CodeUnauthorized when p carries no token, CodeForbidden when its
// token's scope does not allow need. The local administrator may do
// anything.
func Require(p Principal, need ledger.Scope) error {
	switch {
	case p.Kind == LocalAdmin:
		return nil
	case !p.hasToken():
		return refuse(ReviewerChange, ledger.Errorf(ledger.CodeUnauthorized, "this request needs a bearer token with scope %q (create one with `ledger token create --scope %s --name NAME`)", need, need))
	case !p.Token.Scope.Allows(need):
		return refuse(ReviewerChange, ledger.Errorf(ledger.CodeForbidden, "token %q has scope %q; this request needs %q", p.Token.Name, p.Token.Scope, need))
	}
	return nil
}

// RequireForm is Require for a dashboard form, whose token is typed
// into the form: CodeUnauthorized asks for one, CodeForbidden names the
// form's need.
func RequireForm(p Principal, need ledger.Scope) error {
	switch {
	case p.Kind == LocalAdmin:
		return nil
	case !p.hasToken():
		return refuse(ReviewerChange, ledger.Errorf(ledger.CodeUnauthorized, "enter an API token with scope %q (create one with `ledger token create --scope %s --name NAME`)", need, need))
	case !p.Token.Scope.Allows(need):
		return refuse(ReviewerChange, ledger.Errorf(ledger.CodeForbidden, "token %q has scope %q; this form needs %q", p.Token.Name, p.Token.Scope, need))
	}
	return nil
}

// stamp checks one posted evidence object (raw, a JSON object) against
// token t and returns it with recorded_by set to rec:
//   - a body that carries recorded_by itself is refused (CodeInvalid
//     naming prefix+"recorded_by", CIClaim): only the server says who
//     recorded a record;
//   - evidence about a repository, lane or backend outside the token's
//     scope is refused (CodeForbidden naming the field, CIScope).
//
// rec is the JSON of the Recorder (nil: raw is returned as it is).
// Members are matched as the strict decoder matches them (exact names,
// escapes decoded), so no spelling slips past. Shapes the probe cannot
// read are left to the strict decoder's error.
func stamp(t ledger.Token, rec []byte, raw json.RawMessage, prefix string) (json.RawMessage, error) {
	if rec == nil {
		return raw, nil
	}
	if err := checkPosted(t, raw, prefix); err != nil {
		return nil, err
	}
	i := 1
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
		i++
	}
	out := make([]byte, 0, len(raw)+len(rec)+20)
	out = append(out, '{', '"')
	out = append(out, ledger.RecordedByField...)
	out = append(out, '"', ':')
	out = append(out, rec...)
	if i < len(raw) && raw[i] != '}' {
		out = append(out, ',')
	}
	return append(out, raw[i:]...), nil
}

// checkPosted is stamp's check of a posted evidence object without the
// stamping: recorded_by refused, the token's scope applied. The native
// path sets recorded_by through ledger.Record.RecordedBy instead, so the
// record is decoded once.
func checkPosted(t ledger.Token, raw json.RawMessage, prefix string) error {
	if t.Restricted() || bytes.IndexByte(raw, '\\') >= 0 || bytes.Contains(raw, []byte(ledger.RecordedByField)) {
		var probe struct {
			Lane       string          `json:"lane"`
			Backend    ledger.Backend  `json:"backend"`
			RecordedBy json.RawMessage `json:"recorded_by"`
			Subject    struct {
				Repository string `json:"repository"`
			} `json:"subject"`
		}
		if err := jsonv2.Unmarshal(raw, &probe); err != nil {
			if err := ledger.DecodeStrict(raw, new(ledger.Evidence)); err != nil {
				return prefixed(err, prefix)
			}
			return ledger.FieldError(prefix, "cannot read the record's lane, backend and repository")
		}
		if probe.RecordedBy != nil {
			return refuse(CIClaim, ledger.FieldError(prefix+ledger.RecordedByField, "is set only by the server (the token or runner key that recorded the record); remove it"))
		}
		if field, ok := t.Covers(probe.Subject.Repository, probe.Lane, probe.Backend); !ok {
			return outOfScope(t, prefix+field, "recorded")
		}
	}
	return nil
}

// outOfScope is the CIScope refusal of field for token t: nothing was
// done ("recorded", "queued", "registered").
func outOfScope(t ledger.Token, field, done string) error {
	return &Refusal{Rule: CIScope, Err: &ledger.Error{Code: ledger.CodeForbidden, Field: field,
		Message: "out of the scope of token " + Quote(t.Name) + " (" + t.ScopeText() + "): nothing was " + done}}
}

// Quote is s as a JSON string, as refusals quote names.
func Quote(s string) string { b, _ := json.Marshal(s); return string(b) }

// RepositoryInScope refuses (CodeForbidden naming field, CIScope) a head
// or tree check about repo by a principal whose token is restricted to
// other repositories: a scoped token records only about its own
// repositories, whatever the route.
func RepositoryInScope(p Principal, field, repo string) error {
	t := p.Token
	if !p.hasToken() || len(t.Repositories) == 0 || slices.Contains(t.Repositories, repo) {
		return nil
	}
	return &Refusal{Rule: CIScope, Err: &ledger.Error{Code: ledger.CodeForbidden, Field: field,
		Message: "repository " + Quote(repo) + " is out of the scope of token " + Quote(t.Name) + " (" + t.ScopeText() + "): nothing was recorded"}}
}

// IngestScope refuses (CodeForbidden naming the member, CIScope) an
// input of another format whose parameters (repository, lane, backend
// given beside the input) are outside p's token scope, before anything is
// decoded or verified, so a token out of scope learns nothing about
// signatures or parsing. An empty repository is not judged here (the
// input may carry it: Decoded checks the decoded record's).
func IngestScope(p Principal, repo, lane string, backend ledger.Backend) error {
	tok := p.Token
	early := tok
	if repo == "" {
		early.Repositories = nil
	}
	if field, ok := early.Covers(repo, lane, backend); !ok {
		return outOfScope(tok, field, "recorded")
	}
	return nil
}

// RunInScope refuses (CodeForbidden naming the first member out of scope:
// "repository", "lanes[i]" or "backend"; CIScope) a run of repo on
// backend with lanes queued by token t: every lane must be in its scope.
// Nothing is queued.
func RunInScope(t ledger.Token, repo string, lanes []string, backend ledger.Backend) error {
	for i, l := range lanes {
		if field, ok := t.Covers(repo, l, backend); !ok {
			if field == "lane" {
				field = fmt.Sprintf("lanes[%d]", i)
			} else if field == "subject.repository" {
				field = "repository"
			}
			return outOfScope(t, field, "queued")
		}
	}
	return nil
}

// AgentInScope refuses (CodeForbidden naming "spec.repository" or
// "backend", CIScope) the registration of an agent building repo on
// backend with token t, when t may not record for them: such an agent
// would never be served. Nothing is registered.
func AgentInScope(t ledger.Token, repo string, backend ledger.Backend) error {
	if !t.Restricted() {
		return nil
	}
	if len(t.Repositories) > 0 && !slices.Contains(t.Repositories, repo) {
		return outOfScope(t, "spec.repository", "registered")
	}
	if len(t.Backends) > 0 && !slices.Contains(t.Backends, backend) {
		return outOfScope(t, "backend", "registered")
	}
	return nil
}

// CancelInScope refuses (CodeForbidden, CIScope) the cancel of run id
// (of repo on backend with lanes) by token t when any of its lanes is
// outside t's scope. Nothing is canceled.
func CancelInScope(t ledger.Token, id, repo string, lanes []string, backend ledger.Backend) error {
	for _, l := range lanes {
		if _, ok := t.Covers(repo, l, backend); !ok {
			return &Refusal{Rule: CIScope, Err: ledger.Errorf(ledger.CodeForbidden, "run %s is out of the scope of token %s (%s): not canceled", id, Quote(t.Name), t.ScopeText())}
		}
	}
	return nil
}

// RequireAs is Require for the local administrator acting as token t
// (`--as NAME` on the local database): the token's scope still binds what
// it may do, as over the API. CodeForbidden naming the need.
func RequireAs(t ledger.Token, need ledger.Scope) error {
	if !t.Scope.Allows(need) {
		return refuse(ReviewerChange, ledger.Errorf(ledger.CodeForbidden, "token %q has scope %q; this needs %q (as over the API)", t.Name, t.Scope, need))
	}
	return nil
}
