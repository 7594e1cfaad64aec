package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// Caps on the free-text fields of records, in bytes of UTF-8. They are
// the same for every way a record arrives (API, CLI, forms) and are listed
// in docs/reference/api.md, "Limits".
const (
	MaxIdentifier   = 512     // repository, device model and driver, attribute values
	MaxShortText    = 256     // runner version and commit, case ids, attribute names
	MaxFailingCases = 4096    // failing case ids per record
	MaxDetailsBytes = 2 << 20 // canonical bytes of an evidence record's details (a CUDA run's per-case details are ~1.1 MB)
	MaxDetailsDepth = 32      // nesting of objects and arrays inside details
)

// CheckText reports whether s is a valid identifier or free-text value of
// at most max bytes: valid UTF-8, not empty when required, and free of NUL
// and every other control character (Unicode category Cc, which includes
// C0, DEL and C1) and of the bidirectional formatting characters
// (Unicode property Bidi_Control: U+061C, U+200E-U+200F, U+202A-U+202E,
// U+2066-U+2069). multiline allows tab, LF and CR, for reasons and notes.
// The error names field.
func CheckText(field, s string, max int, required, multiline bool) error {
	if required && strings.TrimSpace(s) == "" {
		return FieldError(field, "required, at most %d bytes", max)
	}
	if len(s) > max {
		return FieldError(field, "at most %d bytes, got %d", max, len(s))
	}
	if !utf8.ValidString(s) {
		return FieldError(field, "must be valid UTF-8")
	}
	for _, c := range s {
		if unicode.IsControl(c) && !(multiline && (c == '\t' || c == '\n' || c == '\r')) {
			return FieldError(field, "must not contain control characters (found U+%04X)", c)
		}
		if unicode.Is(unicode.Bidi_Control, c) {
			return FieldError(field, "must not contain bidirectional formatting characters (found U+%04X): they make text display otherwise than it is stored", c)
		}
	}
	return nil
}

// checkDetails checks an evidence record's details: one JSON object of at
// most MaxDetailsBytes, in valid UTF-8, whose values nest at most
// MaxDetailsDepth deep.
func checkDetails(d []byte) error {
	d = bytes.TrimSpace(d)
	if len(d) == 0 || d[0] != '{' || !json.Valid(d) {
		return FieldError("details", "must be a JSON object")
	}
	if len(d) > MaxDetailsBytes {
		return FieldError("details", "at most %d bytes, got %d: keep large outputs as artifacts and record their digests", MaxDetailsBytes, len(d))
	}
	dec := jsontext.NewDecoder(bytes.NewReader(d))
	for {
		tok, err := dec.ReadToken()
		if err == io.EOF {
			break
		}
		if err != nil {
			// json.Valid passes invalid UTF-8 that jsontext refuses; a
			// refusal here must not end the depth scan early.
			return FieldError("details", "must be a JSON object in valid UTF-8")
		}
		if k := tok.Kind(); (k == '{' || k == '[') && dec.StackDepth() > MaxDetailsDepth {
			return FieldError("details", "nests deeper than %d levels", MaxDetailsDepth)
		}
	}
	return nil
}

// Status is the verdict of one lane run.
type Status string

// The statuses. A run whose negative control was not caught is
// StatusInconclusive, never StatusPassed.
const (
	StatusPassed       Status = "passed"
	StatusFailed       Status = "failed"
	StatusInconclusive Status = "inconclusive"
	StatusError        Status = "error"
)

// Control is the outcome of a lane's negative control.
type Control string

// The control outcomes. ControlNone means the lane has no negative control.
const (
	ControlCaught    Control = "caught"
	ControlNotCaught Control = "not_caught"
	ControlNone      Control = "none"
)

// Subject is what a piece of evidence is about: a repository at an exact
// source commit and tree, plus artifact pins (name -> "sha256:<64 hex>").
// Dirty is true when the work tree that ran had uncommitted changes; gates
// never count dirty evidence.
type Subject struct {
	Repository string            `json:"repository"`
	Commit     string            `json:"commit"`
	Tree       string            `json:"tree"`
	Dirty      bool              `json:"dirty,omitempty"`
	Artifacts  map[string]string `json:"artifacts,omitempty"`
}

// Device is the free-form identity of the hardware a lane ran on.
type Device struct {
	Model  string            `json:"model,omitempty"`
	Driver string            `json:"driver,omitempty"`
	Cores  int               `json:"cores,omitempty"`
	Attrs  map[string]string `json:"attrs,omitempty"`
}

// RunRef names one attempt of a run: ID is the run's id ("run_" and 32
// lowercase hex digits), Attempt its attempt number, 1 to MaxRunAttempts.
type RunRef struct {
	ID      string `json:"id"`
	Attempt int    `json:"attempt"`
}

// MaxRunAttempts is the most attempts a run may have.
const MaxRunAttempts = 10

// RunField is the evidence member that carries a RunRef.
const RunField = "run"

// Validate checks r's shape; errors name run.id or run.attempt.
func (r *RunRef) Validate() error {
	if !ValidRunID(r.ID) {
		return FieldError(RunField+".id", "must be a run id (run_ and 32 lowercase hex digits), got %q", Clip(r.ID))
	}
	if r.Attempt < 1 || r.Attempt > MaxRunAttempts {
		return FieldError(RunField+".attempt", "must be 1 to %d, got %d", MaxRunAttempts, r.Attempt)
	}
	return nil
}

// RefuseRunClaim returns a CodeInvalid error naming prefix+"run" when the
// evidence JSON body has a top-level run member (HasMember): a record names
// a run only when its agent records it through that run (the server checks
// it there), so anywhere else it is a claim nobody checked.
func RefuseRunClaim(body []byte, prefix string) error {
	if HasMember(body, RunField) {
		return FieldError(prefix+RunField, "is set only by an agent recording a run whose lease it holds (POST /api/v1/agent/runs/{id}/finish): remove it; nothing was recorded")
	}
	return nil
}

// HasMember reports whether the JSON object body has a top-level member
// named name, matched ignoring ASCII letter case (as encoding/json matches
// a struct field) and with escapes decoded. A body that is not a JSON
// object has none. It decodes body only when body holds an escape or name
// in quotes in some letter case, so most bodies are read at memchr speed.
func HasMember(body []byte, name string) bool {
	if bytes.IndexByte(body, '\\') < 0 && !containsQuotedFold(body, name) {
		return false
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return false
	}
	for k := range top {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

// containsQuotedFold reports whether body holds name between two double
// quotes, ignoring ASCII letter case.
func containsQuotedFold(body []byte, name string) bool {
	for i := 0; ; {
		j := bytes.IndexByte(body[i:], '"')
		if j < 0 {
			return false
		}
		i += j + 1
		if end := i + len(name); end < len(body) && body[end] == '"' && bytes.EqualFold(body[i:end], []byte(name)) {
			return true
		}
	}
}

// RunnerBuild identifies the build of the program that ran the lane.
type RunnerBuild struct {
	Version string `json:"version,omitempty"`
	Commit  string `json:"commit,omitempty"`
}

// CaseResult is the result of one case of a lane, kept in Details by the
// runner; listed here so producers and the dashboard agree on the shape.
type CaseResult struct {
	ID       string `json:"id"`
	Result   string `json:"result"` // "exact", "mismatch" or "error"
	Expected string `json:"expected,omitempty"`
	Got      string `json:"got,omitempty"`
	Note     string `json:"note,omitempty"`
}

// Evidence is one append-only record of a lane run. Times are UTC with
// nanosecond precision; Details is a JSON object (or absent).
type Evidence struct {
	Lane         string          `json:"lane"`
	Subject      Subject         `json:"subject"`
	Backend      Backend         `json:"backend"`
	Device       Device          `json:"device"`
	Runner       RunnerBuild     `json:"runner"`
	CasesExact   int             `json:"cases_exact"`
	CasesTotal   int             `json:"cases_total"`
	FailingCases []string        `json:"failing_cases,omitempty"`
	Control      Control         `json:"control"`
	Status       Status          `json:"status"`
	StartedAt    time.Time       `json:"started_at"`
	FinishedAt   time.Time       `json:"finished_at"`
	Details      json.RawMessage `json:"details,omitempty"`
	// Run names the run and attempt of POST /api/v1/runs under whose
	// lease an agent ran the lane; nil for evidence recorded any other
	// way. The server takes a record carrying it only from the agent
	// holding that attempt's lease, in the run's staging or finish
	// (RefuseRunClaim refuses it everywhere else).
	Run *RunRef `json:"run,omitempty"`
	// Signer is set only by the server, on a record that arrived as a DSSE
	// envelope signed by a registered runner key (see Signer).
	Signer *Signer `json:"signer,omitempty"`
	// RecordedBy is who recorded the record, set by the server (see
	// Recorder); nil for records appended to the store directly.
	RecordedBy *Recorder `json:"recorded_by,omitempty"`
}

// ValidLane reports whether s is a lane name of the form "name/vN": the
// name 1 to 96 of [a-z0-9._-], starting with [a-z0-9]; N 1 to 6 digits,
// not starting with 0 (the regular expression
// ^[a-z0-9][a-z0-9._-]{0,95}/v[1-9][0-9]{0,5}$, written out because
// every record is checked against it).
func ValidLane(s string) bool {
	i := strings.IndexByte(s, '/')
	if i < 1 || i > 96 || !laneStart(s[0]) {
		return false
	}
	for j := 1; j < i; j++ {
		if !laneStart(s[j]) && s[j] != '.' && s[j] != '_' && s[j] != '-' {
			return false
		}
	}
	v := s[i+1:]
	if len(v) < 2 || len(v) > 7 || v[0] != 'v' || v[1] < '1' || v[1] > '9' {
		return false
	}
	for j := 2; j < len(v); j++ {
		if v[j] < '0' || v[j] > '9' {
			return false
		}
	}
	return true
}

func laneStart(c byte) bool { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') }

// validName reports whether s is an artifact or format name: 1 to 255 of
// [A-Za-z0-9._+@:/-], starting with [A-Za-z0-9] (the regular expression
// ^[A-Za-z0-9][A-Za-z0-9._+@:/-]{0,254}$, written out).
func validName(s string) bool {
	if len(s) < 1 || len(s) > 255 || !alnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !alnum(c) && !strings.ContainsRune("._+@:/-", rune(c)) {
			return false
		}
	}
	return true
}

func alnum(c byte) bool {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

// ValidObjectID reports whether s is a git object id: 40 (SHA-1) or 64
// (SHA-256) lowercase hex digits.
func ValidObjectID(s string) bool { return (len(s) == 40 || len(s) == 64) && LowerHex(s) }

// ValidDigest reports whether s is "sha256:" followed by 64 lowercase hex.
func ValidDigest(s string) bool {
	return len(s) == 7+64 && strings.HasPrefix(s, "sha256:") && LowerHex(s[7:])
}

// LowerHex reports whether s is all lowercase hexadecimal digits ("" is).
func LowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// LaneName splits "name/vN" into its name; it returns s when there is no
// version part.
func LaneName(lane string) string {
	if i := strings.LastIndex(lane, "/v"); i > 0 {
		return lane[:i]
	}
	return lane
}

// Validate checks a Subject; prefix is prepended to field names in errors.
func (s Subject) Validate(prefix string) error {
	if err := CheckText(prefix+"repository", s.Repository, MaxIdentifier, true, false); err != nil {
		return err
	}
	if !ValidObjectID(s.Commit) {
		return FieldError(prefix+"commit", "must be 40 or 64 lowercase hex digits, got %q", Clip(s.Commit))
	}
	if !ValidObjectID(s.Tree) {
		return FieldError(prefix+"tree", "must be 40 or 64 lowercase hex digits, got %q", Clip(s.Tree))
	}
	if len(s.Commit) != len(s.Tree) {
		return FieldError(prefix+"tree", "tree id and commit id must use the same hash (both 40 or both 64 hex)")
	}
	if len(s.Artifacts) > 256 {
		return FieldError(prefix+"artifacts", "at most 256 artifacts")
	}
	for name, d := range s.Artifacts {
		if !validName(name) {
			return FieldError(prefix+"artifacts", "artifact name %q is not a valid name", Clip(name))
		}
		if !ValidDigest(d) {
			return FieldError(prefix+"artifacts."+name, "digest must be sha256:<64 lowercase hex>, got %q", Clip(d))
		}
	}
	return nil
}

// Validate checks every field of e and the consistency between them:
// 0 <= exact <= total, len(failing) <= total-exact when failing ids are
// given, status passed implies exact == total and a control that is not
// "not_caught", finished >= started, both times within ValidateTimesAt's
// bounds of the wall clock. It returns a CodeInvalid *Error naming
// the first bad field.
func (e *Evidence) Validate() error {
	for _, check := range []func() error{e.validateIdentity, e.validateCounts, e.validateOutcome, e.validateTimes, e.validateAttached} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// validateIdentity checks the lane, subject, backend, device and runner.
func (e *Evidence) validateIdentity() error {
	if !ValidLane(e.Lane) {
		return FieldError("lane", "must look like name/vN (lowercase), got %q", Clip(e.Lane))
	}
	if err := e.Subject.Validate("subject."); err != nil {
		return err
	}
	if !e.Backend.Valid() {
		return FieldError("backend", "must be one of %s, got %q", BackendList(), Clip(string(e.Backend)))
	}
	if e.Device.Cores < 0 || len(e.Device.Attrs) > 64 {
		return FieldError("device", "cores >= 0, at most 64 attrs")
	}
	for _, f := range []struct {
		field, v string
		max      int
	}{{"device.model", e.Device.Model, MaxIdentifier}, {"device.driver", e.Device.Driver, MaxIdentifier}, {"runner.version", e.Runner.Version, MaxShortText}, {"runner.commit", e.Runner.Commit, MaxShortText}} {
		if err := CheckText(f.field, f.v, f.max, false, false); err != nil {
			return err
		}
	}
	for k, v := range e.Device.Attrs {
		if err := CheckText("device.attrs", k, MaxShortText, true, false); err != nil {
			return err
		}
		if err := CheckText("device.attrs."+Clip(k), v, MaxIdentifier, false, false); err != nil {
			return err
		}
	}
	return nil
}

// validateCounts checks the case counts and the failing case ids.
func (e *Evidence) validateCounts() error {
	if e.CasesExact < 0 {
		return FieldError("cases_exact", "must be >= 0, got %d", e.CasesExact)
	}
	if e.CasesTotal < 0 {
		return FieldError("cases_total", "must be >= 0, got %d", e.CasesTotal)
	}
	if e.CasesExact > e.CasesTotal {
		return FieldError("cases_exact", "cases_exact (%d) exceeds cases_total (%d)", e.CasesExact, e.CasesTotal)
	}
	if len(e.FailingCases) > e.CasesTotal-e.CasesExact {
		return FieldError("failing_cases", "%d failing case ids but only %d cases were not exact", len(e.FailingCases), e.CasesTotal-e.CasesExact)
	}
	if len(e.FailingCases) > MaxFailingCases {
		return FieldError("failing_cases", "at most %d ids, got %d", MaxFailingCases, len(e.FailingCases))
	}
	seen := make(map[string]bool, len(e.FailingCases))
	for i, id := range e.FailingCases {
		if err := CheckText(fmt.Sprintf("failing_cases[%d]", i), id, MaxShortText, true, false); err != nil {
			return err
		}
		if seen[id] {
			return FieldError(fmt.Sprintf("failing_cases[%d]", i), "duplicate case id %q", Clip(id))
		}
		seen[id] = true
	}
	return nil
}

// validateOutcome checks the control and the status against the counts.
func (e *Evidence) validateOutcome() error {
	switch e.Control {
	case ControlCaught, ControlNotCaught, ControlNone:
	default:
		return FieldError("control", "must be caught, not_caught or none, got %q", Clip(string(e.Control)))
	}
	switch e.Status {
	case StatusPassed:
		if e.CasesExact != e.CasesTotal {
			return FieldError("status", "passed requires cases_exact == cases_total (%d != %d)", e.CasesExact, e.CasesTotal)
		}
		if e.CasesTotal == 0 {
			return FieldError("status", "passed requires at least one case")
		}
		if e.Control == ControlNotCaught {
			return FieldError("status", "a run whose negative control was not caught is inconclusive, not passed")
		}
	case StatusFailed, StatusInconclusive, StatusError:
	default:
		return FieldError("status", "must be passed, failed, inconclusive or error, got %q", Clip(string(e.Status)))
	}
	return nil
}

// MaxClockSkew is how far after the validating clock an evidence record's
// started_at or finished_at may lie: room for a runner's clock running
// ahead of the server's, not for a run dated in the future (which a
// freshness bound would otherwise take as fresh for as long as it likes).
const MaxClockSkew = 10 * time.Minute

// minEvidenceTime is the earliest started_at or finished_at accepted: the
// Unix epoch. Earlier times (year 0000, 0001) are placeholders, not runs.
var minEvidenceTime = time.Unix(0, 0).UTC()

// validateTimes checks started_at and finished_at against the wall clock
// (ValidateTimesAt).
func (e *Evidence) validateTimes() error { return e.ValidateTimesAt(time.Now()) }

// ValidateTimesAt checks started_at and finished_at as a receiver whose
// clock reads now: both set, neither before 1970-01-01T00:00:00Z nor more
// than MaxClockSkew after now, and finished_at not before started_at. It
// returns a CodeInvalid *Error naming the first bad field (started_at
// first). Validate calls it with time.Now(), so every append, through the
// API or a local store, applies the same bound.
func (e *Evidence) ValidateTimesAt(now time.Time) error {
	latest := now.Add(MaxClockSkew)
	for _, f := range []struct {
		name, verb string
		at         time.Time
	}{{"started_at", "start", e.StartedAt}, {"finished_at", "end", e.FinishedAt}} {
		switch {
		case f.at.IsZero():
			return FieldError(f.name, "required (RFC 3339)")
		case f.at.Before(minEvidenceTime):
			return FieldError(f.name, "is before %s: not the time of a run", minEvidenceTime.Format(time.RFC3339))
		case f.at.After(latest):
			return FieldError(f.name, "is %s, more than %s after the receiving clock (%s): a run cannot %s in the future", f.at.UTC().Format(time.RFC3339), MaxClockSkew, now.UTC().Format(time.RFC3339), f.verb)
		}
	}
	if e.FinishedAt.Before(e.StartedAt) {
		return FieldError("finished_at", "is before started_at")
	}
	return nil
}

// validateAttached checks the details, run, recorded_by and signer.
func (e *Evidence) validateAttached() error {
	if len(e.Details) > 0 {
		if err := checkDetails(e.Details); err != nil {
			return err
		}
		if err := checkThroughputEvidence(e); err != nil {
			return err
		}
	}
	if e.Run != nil {
		if err := e.Run.Validate(); err != nil {
			return err
		}
	}
	if e.RecordedBy != nil {
		if err := e.RecordedBy.Validate(); err != nil {
			return err
		}
	}
	if e.Signer != nil {
		return e.Signer.validate(e)
	}
	return nil
}

// Normalize puts e in canonical form in place: times in UTC, failing case
// ids sorted, details compacted. Call before hashing.
func (e *Evidence) Normalize() {
	e.StartedAt = e.StartedAt.UTC()
	e.FinishedAt = e.FinishedAt.UTC()
	if len(e.FailingCases) == 0 {
		e.FailingCases = nil
	} else {
		sort.Strings(e.FailingCases)
	}
	if len(e.Subject.Artifacts) == 0 {
		e.Subject.Artifacts = nil
	}
	if len(e.Device.Attrs) == 0 {
		e.Device.Attrs = nil
	}
	if len(e.Details) > 0 {
		if c, err := CanonicalJSON(e.Details); err == nil {
			e.Details = c
		}
	} else {
		e.Details = nil
	}
}

// Clip returns s cut to its first 80 bytes with "…" appended when it is
// longer, for quoting a caller's value in an error message.
func Clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
