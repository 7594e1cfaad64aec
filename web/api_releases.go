package web

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"time"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/go-chi/chi/v5"
)

// ReleaseJSON is the API representation of a release definition.
type ReleaseJSON struct {
	Release    *gates.Release `json:"release"`
	ID         string         `json:"id"`
	Index      uint64         `json:"index"`
	RecordedAt time.Time      `json:"recorded_at"`
	PinsDigest string         `json:"pins_digest"`
}

func (s *Server) handleListReleases(w http.ResponseWriter, r *http.Request) {
	rs, err := gates.ListReleases(r.Context(), s.store)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := make([]ReleaseJSON, 0, len(rs))
	for _, rel := range rs {
		out = append(out, ReleaseJSON{Release: rel, ID: rel.EntryID, Index: rel.EntryIndex, PinsDigest: rel.PinsDigest()})
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"releases": out})
}

// handlePutRelease records a (re)definition. The body is the release YAML
// (application/yaml, text/yaml) or the same as JSON; its version must equal
// the path's.
func (s *Server) handlePutRelease(w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		switch {
		case err != nil:
			s.writeError(w, r, ledger.Errorf(ledger.CodeUnsupported, "bad Content-Type %q", ct))
			return
		case mt == "application/yaml", mt == "text/yaml", mt == "application/x-yaml", mt == "application/json":
		default:
			s.writeError(w, r, ledger.Errorf(ledger.CodeUnsupported, "Content-Type %q is not supported: send application/yaml or application/json", mt))
			return
		}
	}
	body, err := s.readBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	rel, err := gates.ParseRelease(body)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if v := chi.URLParam(r, "version"); rel.Version != v {
		s.writeError(w, r, ledger.FieldError("version", "body defines %q but the path names %q", rel.Version, v))
		return
	}
	if t, ok := TokenFrom(r.Context()); ok {
		rel.DefinedBy = t.Name
	}
	rel.DefinedAt = s.cfg.Now().UTC()
	e, err := gates.Apply(r.Context(), s.store, rel)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.metrics.appended.WithLabelValues(string(ledger.KindRelease)).Inc()
	s.writeJSON(w, http.StatusCreated, ReleaseJSON{Release: rel, ID: e.ID, Index: e.Index, RecordedAt: e.RecordedAt, PinsDigest: rel.PinsDigest()})
}

func (s *Server) handleGetRelease(w http.ResponseWriter, r *http.Request) {
	version := chi.URLParam(r, "version")
	rel, e, err := gates.LoadRelease(r.Context(), s.store, version)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	aps, sos, err := gates.Approvals(r.Context(), s.store, version)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, struct {
		ReleaseJSON
		Approvals []gates.Approval `json:"approvals"`
		Signoffs  []gates.Signoff  `json:"signoffs"`
	}{ReleaseJSON{Release: rel, ID: e.ID, Index: e.Index, RecordedAt: e.RecordedAt, PinsDigest: rel.PinsDigest()}, nonNilSlice(aps), nonNilSlice(sos)})
}

func nonNilSlice[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// handleReadiness answers a gates.SignedVerdict: the readiness at the
// latest checkpoint and its signed note.
func (s *Server) handleReadiness(w http.ResponseWriter, r *http.Request) {
	lr, err := s.sharedRelease(r.Context(), chi.URLParam(r, "version"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	v, err := s.evaluateVerdict(r.Context(), lr.rel)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if s.serveReadinessFormat(w, r, lr.rel, v.rd) {
		return
	}
	b, err := s.readinessAnswer(v)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

// actorOf is the release actor of r's principal (admit.Actor).
func actorOf(r *http.Request) (gates.Actor, error) { return admit.Actor(principalOf(r)) }

// WaiverRequest is the body of POST /releases/{version}/waivers; the
// author is the token's name.
type WaiverRequest struct {
	Gate    string      `json:"gate"`
	Reason  string      `json:"reason"`
	Expires RFC3339Time `json:"expires"`
}

// RFC3339Time is a time in a request body, RFC 3339 ("2027-01-05T00:00:00Z");
// anything else is refused naming expires and the shape it wants.
type RFC3339Time struct{ time.Time }

// UnmarshalJSON implements json.Unmarshaler.
func (t *RFC3339Time) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return ledger.FieldError("expires", "want an RFC 3339 time as a string, such as \"2027-01-05T00:00:00Z\"")
	}
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return ledger.FieldError("expires", "%q is not an RFC 3339 time such as \"2027-01-05T00:00:00Z\" (the CLI's --expires takes durations such as 14d)", clipText(s))
	}
	t.Time = v
	return nil
}

func (s *Server) handlePostWaiver(w http.ResponseWriter, r *http.Request) {
	var req WaiverRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	who, err := actorOf(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	wv, e, err := admit.Waiver(r.Context(), s.store, who, chi.URLParam(r, "version"), req.Gate, req.Reason, req.Expires.Time, s.cfg.Now())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.metrics.appended.WithLabelValues(string(ledger.KindWaiver)).Inc()
	s.writeJSON(w, http.StatusCreated, map[string]any{"id": e.ID, "index": e.Index, "waiver": wv})
}

// SignoffRequest is the body of POST /releases/{version}/signoffs: a
// sign-off of one manual gate by a token holding its role.
type SignoffRequest struct {
	Gate string `json:"gate"`
	Note string `json:"note,omitempty"`
}

// handlePostSignoff records a sign-off (admit.Signoff): 201 with the new
// entry, or 200 with "existing": true and the entry of the identical
// sign-off already in the log (same gate, role, author and pins), which
// is not appended again.
func (s *Server) handlePostSignoff(w http.ResponseWriter, r *http.Request) {
	var req SignoffRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	who, err := actorOf(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	so, e, err := admit.Signoff(r.Context(), s.store, who, chi.URLParam(r, "version"), req.Gate, req.Note, s.cfg.Now())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	status := http.StatusOK
	if !e.Existing {
		status = http.StatusCreated
		s.metrics.appended.WithLabelValues(string(ledger.KindApproval)).Inc()
	}
	s.writeJSON(w, status, map[string]any{"id": e.ID, "index": e.Index, "existing": e.Existing, "signoff": so})
}

// ApprovalRequest is the body of POST /releases/{version}/approvals.
type ApprovalRequest struct {
	Note string `json:"note,omitempty"`
}

// handlePostApproval records the final approval when the release is ready;
// otherwise 409 with code "precondition", the blocking gates in the message
// and the signed verdict under "readiness".
func (s *Server) handlePostApproval(w http.ResponseWriter, r *http.Request) {
	var req ApprovalRequest
	if err := requireJSON(r); err != nil {
		s.writeError(w, r, err)
		return
	}
	body, err := s.readBody(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if len(bytes.TrimSpace(body)) > 0 { // an empty body approves without a note
		if err := ledger.DecodeStrict(body, &req); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	who, err := actorOf(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ap, e, sv, err := admit.Approval(r.Context(), s.store, who, chi.URLParam(r, "version"), req.Note, s.cfg.Now())
	if err != nil {
		if ledger.ErrorCode(err) == ledger.CodePrecondition && sv != nil {
			_, body := errorBody(err)
			s.writeJSON(w, http.StatusConflict, struct {
				APIError
				Blockers  []string             `json:"blockers"`
				Readiness *gates.SignedVerdict `json:"readiness"`
			}{body, sv.Readiness.Blockers(), sv})
			return
		}
		s.writeError(w, r, err)
		return
	}
	s.metrics.appended.WithLabelValues(string(ledger.KindApproval)).Inc()
	s.writeJSON(w, http.StatusCreated, map[string]any{"id": e.ID, "index": e.Index, "approval": ap, "readiness": sv})
}
