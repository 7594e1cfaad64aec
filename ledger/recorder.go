package ledger

import "regexp"

// Recorder is who recorded an evidence record, set by the server when it
// appends (never by the caller: POST /api/v1/evidence refuses a body that
// carries RecordedByField, with 400 naming it). Token is the API token that
// authenticated the request; Runner is the registered runner key whose
// DSSE signature the server verified, when the record came signed. Either
// part may be absent; a record appended to the store directly (the local
// CLI, an import) has no Recorder at all. It is part of the leaf, so the
// audit covers it.
//
// JSON shape:
//
//	"recorded_by": {"token": {"id": "tok_…", "name": "ci-main"},
//	                "runner": {"name": "ci-mac", "key_id": "SHA256:…"}}
type Recorder struct {
	Token  *RecorderToken  `json:"token,omitempty"`
	Runner *RecorderRunner `json:"runner,omitempty"`
}

// RecorderToken names the API token of a Recorder: its id ("tok_" + 12
// hex) and name, as in the token leaf that created it.
type RecorderToken struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// RecorderRunner names the registered runner key of a Recorder: the
// runner's name and the OpenSSH SHA256 fingerprint of its key.
type RecorderRunner struct {
	Name  string `json:"name"`
	KeyID string `json:"key_id"`
}

// RecordedByField is the evidence member that carries a Recorder.
const RecordedByField = "recorded_by"

var tokenIDRe = regexp.MustCompile(`^tok_[0-9a-f]{12}$`)

// Validate checks the shape of r: at least one part, a token id and a
// token name of 1-64 characters, a runner name and key
// id of at most 256 characters. Errors are CodeInvalid naming the field
// under "recorded_by.".
func (r *Recorder) Validate() error {
	if r.Token == nil && r.Runner == nil {
		return FieldError(RecordedByField, "must name a token or a runner")
	}
	if t := r.Token; t != nil {
		if !tokenNameRe.MatchString(t.ID) {
			return FieldError(RecordedByField+".token.id", "must be a token id (tok_ and 12 lowercase hex for tokens made since schema 7), got %q", Clip(t.ID))
		}
		if t.Name == "" || len(t.Name) > 64 {
			return FieldError(RecordedByField+".token.name", "must be 1-64 characters")
		}
	}
	if u := r.Runner; u != nil {
		if u.Name == "" || len(u.Name) > 256 || u.KeyID == "" || len(u.KeyID) > 256 {
			return FieldError(RecordedByField+".runner", "name and key_id must be 1-256 characters")
		}
	}
	return nil
}

// String renders r for pages and logs: "token ci-main (tok_…)", "runner
// ci-mac (SHA256:…)", both joined by " via ", or "" for nil.
func (r *Recorder) String() string {
	if r == nil {
		return ""
	}
	s := ""
	if u := r.Runner; u != nil {
		s = "runner " + u.Name + " (" + u.KeyID + ")"
	}
	if t := r.Token; t != nil {
		if s != "" {
			s += " via "
		}
		s += "token " + t.Name + " (" + t.ID + ")"
	}
	return s
}
