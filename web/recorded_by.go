package web

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"

	"github.com/evidence-ledger/ledger/ledger"
	jsonv2 "github.com/go-json-experiment/json"
)

// recorderFor returns the Recorder of a request: the token that
// authenticated it (nil when none did).
func recorderFor(r *http.Request) *ledger.Recorder {
	t, ok := TokenFrom(r.Context())
	if !ok {
		return nil
	}
	return &ledger.Recorder{Token: &ledger.RecorderToken{ID: t.ID, Name: t.Name}}
}

// stampEvidence checks one posted evidence object (raw, a JSON object)
// against the request's token and returns it with recorded_by set:
//   - a body that carries recorded_by itself is refused (400 naming
//     prefix+"recorded_by"): only the server says who recorded a record;
//   - evidence about a repository, lane or backend outside the token's
//     scope is refused (403 naming the field out of scope).
//
// rec is the JSON of the request's Recorder (nil: raw is returned
// as it is). Members are matched as the strict decoder matches them
// (exact names, escapes decoded), so no spelling slips past. Shapes the
// probe cannot read are left to the strict decoder's error.
func stampEvidence(t ledger.Token, rec []byte, raw json.RawMessage, prefix string) (json.RawMessage, error) {
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

// checkPosted is stampEvidence's check of a posted evidence object
// without the stamping: recorded_by refused, the token's scope applied.
// The native ingest path sets recorded_by through ledger.Record.RecordedBy
// instead, so the record is decoded once.
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
			return ledger.FieldError(prefix+ledger.RecordedByField, "is set only by the server (the token or runner key that recorded the record); remove it")
		}
		if field, ok := t.Covers(probe.Subject.Repository, probe.Lane, probe.Backend); !ok {
			return &ledger.Error{Code: ledger.CodeForbidden, Field: prefix + field,
				Message: "out of the scope of token " + quote(t.Name) + " (" + t.ScopeText() + "): nothing was recorded"}
		}
	}
	return nil
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

// prefixed puts prefix before the field of a *ledger.Error ("[2]." and
// "lane" give "[2].lane").
func prefixed(err error, prefix string) error {
	le, ok := err.(*ledger.Error)
	if !ok || prefix == "" {
		return err
	}
	c := *le
	c.Field = prefix + c.Field
	return &c
}

// repositoryInScope refuses (403 naming field) a head or tree check about
// a repository outside the request token's repository scope: a scoped
// token records only about its own repositories, whatever the route.
func repositoryInScope(r *http.Request, field, repo string) error {
	t, ok := TokenFrom(r.Context())
	if !ok || len(t.Repositories) == 0 || slices.Contains(t.Repositories, repo) {
		return nil
	}
	return &ledger.Error{Code: ledger.CodeForbidden, Field: field,
		Message: "repository " + quote(repo) + " is out of the scope of token " + quote(t.Name) + " (" + t.ScopeText() + "): nothing was recorded"}
}
