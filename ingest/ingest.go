package ingest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"mime"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// The media types Decode accepts. MediaEvidence is the ledger's own JSON
// (an evidence object or an array of them). MediaInToto is the in-toto
// Statement media type and MediaDSSE the DSSE envelope media type, as the
// in-toto attestation framework and the DSSE protocol specification name
// them (github.com/in-toto/attestation spec/v1/statement.md,
// github.com/secure-systems-lab/dsse envelope.md). JUnit XML and test2json
// have no registered media type; the ones here are the ledger's.
const (
	MediaEvidence = "application/json"
	MediaJUnit    = "application/junit+xml"
	MediaGoTest   = "application/vnd.go.test2json+jsonl"
	MediaInToto   = "application/vnd.in-toto+json"
	MediaDSSE     = "application/vnd.dsse.envelope.v1+json"
)

// Format names, as --format takes them and ledger.Original.Format records.
const (
	FormatEvidence = "evidence"
	FormatJUnit    = "junit"
	FormatGoTest   = "gotest"
	FormatInToto   = "in-toto"
	FormatDSSE     = "dsse"
)

// formats maps each format name to its canonical media type.
var formats = map[string]string{
	FormatEvidence: MediaEvidence,
	FormatJUnit:    MediaJUnit,
	FormatGoTest:   MediaGoTest,
	FormatInToto:   MediaInToto,
	FormatDSSE:     MediaDSSE,
}

// FormatNames lists the format names Decode knows, sorted.
func FormatNames() []string {
	out := make([]string, 0, len(formats))
	for f := range formats {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// MediaTypeOf returns the media type of a format name, or a CodeInvalid
// error naming field "format".
func MediaTypeOf(format string) (string, error) {
	if mt, ok := formats[format]; ok {
		return mt, nil
	}
	return "", ledger.FieldError("format", "unknown format %q: want one of %s", clip(format), strings.Join(FormatNames(), ", "))
}

// FormatOf maps a media type (parameters ignored) to its format name;
// an unknown media type is CodeUnsupported naming the ones known.
func FormatOf(mediaType string) (string, error) {
	mt, _, err := mime.ParseMediaType(mediaType)
	if err != nil && mediaType != "" {
		return "", ledger.Errorf(ledger.CodeUnsupported, "Content-Type %q does not parse", clip(mediaType))
	}
	switch mt {
	case "", MediaEvidence:
		return FormatEvidence, nil
	case MediaJUnit, "application/xml", "text/xml":
		return FormatJUnit, nil
	case MediaGoTest, "application/x-ndjson", "application/jsonl":
		return FormatGoTest, nil
	case MediaInToto:
		return FormatInToto, nil
	case MediaDSSE:
		return FormatDSSE, nil
	case MediaSigstoreBundle, "application/vnd.dev.sigstore.bundle+json", "application/vnd.dev.sigstore.bundle.v0.2+json", "application/vnd.dev.sigstore.bundle.v0.1+json":
		return FormatSigstore, nil
	}
	return "", ledger.Errorf(ledger.CodeUnsupported, "Content-Type %q is not supported: send %s", clip(mt),
		strings.Join([]string{MediaEvidence, MediaJUnit, MediaGoTest, MediaInToto, MediaDSSE, MediaSigstoreBundle}, ", "))
}

// Params supplies what a format lacks. Lane and Backend are required by
// every format but the native one; Repository, Commit and Tree are
// required unless the input carries them (an in-toto subject with
// gitCommit and gitTree digests). Artifacts are pins name ->
// "sha256:<64 hex>"; a format whose subjects disagree with them is refused.
type Params struct {
	Lane       string
	Backend    ledger.Backend
	Repository string
	Commit     string
	Tree       string
	Artifacts  map[string]string
	// Now stands in for start and finish times a format does not carry
	// (JUnit without timestamps); zero means time.Now().
	Now time.Time
	// PredicateType is the in-toto predicate type the lane expects; ""
	// means the test-result predicate (PredicateTestResult).
	PredicateType string
	// Envelopes verifies in-toto DSSE envelopes against the registered
	// runner keys; nil refuses every DSSE envelope.
	Envelopes EnvelopeVerifier
	// Sigstore is the Sigstore trust policy to verify a bundle with; nil
	// means the rule of SigstoreTrust for Lane and Token.
	Sigstore *SigstorePolicy
	// SigstoreTrust is the server's Sigstore trust setting; nil (and
	// Sigstore nil) refuses every bundle with CodePrecondition naming the
	// missing setting.
	SigstoreTrust *SigstoreConfig
	// Token is the name of the token recording the input ("" locally),
	// which SigstoreTrust's rules may name.
	Token string
}

// Result is what Decode returns: the records to append, in order, as one
// atomic batch (the original first, then the evidence naming it), and the
// decoded evidence for callers that show a summary.
type Result struct {
	Format   string
	Original *ledger.Original // nil for native evidence
	Evidence []ledger.Evidence
	Records  []ledger.Record
}

// Decode is the ingestion seam's one dispatch: it decodes body, sent as
// mediaType, into records. Unknown media types are CodeUnsupported
// (HTTP 415); bad input is a CodeInvalid error naming the field, and
// nothing is returned to append. ctx bounds key look-ups and the decode
// itself: once ctx is done the decoder stops and ctx.Err() is returned.
func Decode(ctx context.Context, mediaType string, body []byte, p Params) (*Result, error) {
	f, err := FormatOf(mediaType)
	if err != nil {
		return nil, err
	}
	return DecodeFormat(ctx, f, body, p)
}

// DecodeFormat is Decode with the format named ("junit", ...).
func DecodeFormat(ctx context.Context, format string, body []byte, p Params) (*Result, error) {
	mt, err := MediaTypeOf(format)
	if err != nil {
		return nil, err
	}
	if format == FormatEvidence {
		return decodeNative(body)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, ledger.FieldError("", "empty body: send a %s document", format)
	}
	var run *Run
	switch format {
	case FormatJUnit:
		run, err = DecodeJUnit(ctx, body)
	case FormatGoTest:
		run, err = DecodeGoTest(ctx, body)
	case FormatInToto:
		run, err = decodeStatement(ctx, body, p)
	case FormatDSSE:
		run, err = decodeDSSE(ctx, body, p)
	case FormatSigstore:
		run, err = decodeBundle(ctx, body, p)
	}
	if err != nil {
		return nil, err
	}
	orig := ledger.NewOriginal(format, mt, body)
	origBody, err := originalBody(orig)
	if err != nil {
		return nil, err
	}
	ev, err := p.evidence(run, orig, ledger.EntryID(ledger.KindOriginal, origBody))
	if err != nil {
		return nil, err
	}
	evBody, err := ledger.CanonicalBody(&ev)
	if err != nil {
		return nil, err
	}
	return &Result{Format: format, Original: &orig, Evidence: []ledger.Evidence{ev},
		Records: []ledger.Record{{Kind: ledger.KindOriginal, Body: origBody}, {Kind: ledger.KindEvidence, Body: evBody}}}, nil
}

// Detect guesses the format of a file from its name and first bytes:
// XML is JUnit; a JSON object with "payloadType" a DSSE envelope (of an
// in-toto Statement; other envelopes are the native format's), with
// "_type" an in-toto Statement, with "Action" a test2json stream; any other
// JSON the native format. It returns a CodeInvalid error when nothing fits.
func Detect(name string, body []byte) (string, error) {
	b := bytes.TrimSpace(bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")))
	switch ext := strings.ToLower(filepath.Ext(name)); {
	case ext == ".xml" || bytes.HasPrefix(b, []byte("<")):
		return FormatJUnit, nil
	case len(b) == 0:
		return "", ledger.FieldError("format", "empty input: nothing to detect")
	case b[0] == '[':
		return FormatEvidence, nil
	case b[0] != '{':
		return "", ledger.FieldError("format", "not XML or JSON: give --format")
	}
	line := b
	if i := bytes.IndexByte(b, '\n'); i > 0 {
		line = b[:i]
	}
	var probe map[string]json.RawMessage
	if json.Unmarshal(line, &probe) == nil {
		if _, ok := probe["Action"]; ok {
			return FormatGoTest, nil
		}
	}
	probe = nil
	if json.Unmarshal(b, &probe) != nil {
		return "", ledger.FieldError("format", "not one JSON value nor a test2json stream: give --format")
	}
	if err := foreignDocument(probe); err != nil {
		return "", err
	}
	var mt string
	_ = json.Unmarshal(probe["mediaType"], &mt)
	switch {
	case strings.HasPrefix(mt, "application/vnd.dev.sigstore.bundle"):
		return FormatSigstore, nil
	case probe["payloadType"] != nil && !IsInTotoEnvelope(b):
		return FormatEvidence, nil // an envelope of the ledger's own evidence
	case probe["payloadType"] != nil:
		return FormatDSSE, nil
	case probe["_type"] != nil:
		return FormatInToto, nil
	}
	return FormatEvidence, nil
}

// foreignDocument refuses, naming what it is, a JSON document of another
// attestation tool that no format here decodes whole (probe: its top-level
// members):
//   - an npm registry attestations list ({"attestations": [{predicateType,
//     bundle}]}, registry.npmjs.org/-/npm/v1/attestations): each bundle in
//     it is a Sigstore bundle, recorded on its own;
//   - gcloud's `artifacts docker images describe --show-provenance` output
//     ({"image_summary", "provenance_summary"}): Google Cloud Build's DSSE
//     envelopes are signed by Cloud KMS keys this ledger has no trust
//     setting for.
func foreignDocument(probe map[string]json.RawMessage) error {
	switch {
	case probe["attestations"] != nil && probe["_type"] == nil && probe["payloadType"] == nil:
		return ledger.FieldError("attestations", "an npm registry attestations list: record each attestations[i].bundle on its own, as a Sigstore bundle")
	case probe["provenance_summary"] != nil:
		return ledger.FieldError("provenance_summary", "Google Cloud Build provenance (gcloud describe output): its envelopes are signed by Cloud KMS keys this ledger has no trust setting for, so it is not recorded")
	}
	return nil
}

func decodeNative(body []byte) (*Result, error) {
	trimmed := bytes.TrimSpace(body)
	var raws []json.RawMessage
	switch {
	case len(trimmed) == 0:
		return nil, ledger.FieldError("", "empty body: send an evidence object or an array of them")
	case trimmed[0] == '[':
		var err error
		if raws, err = ledger.SplitArray(trimmed); err != nil {
			return nil, err
		}
		if len(raws) == 0 {
			return nil, ledger.FieldError("", "empty array: nothing to record")
		}
	case trimmed[0] == '{':
		var probe map[string]json.RawMessage
		if json.Unmarshal(trimmed, &probe) == nil {
			if err := foreignDocument(probe); err != nil {
				return nil, err
			}
		}
		raws = []json.RawMessage{trimmed}
	default:
		return nil, ledger.FieldError("", "body must be a JSON object or array")
	}
	res := &Result{Format: FormatEvidence, Records: make([]ledger.Record, len(raws))}
	for i, raw := range raws {
		res.Records[i] = ledger.Record{Kind: ledger.KindEvidence, Body: raw}
	}
	return res, nil
}

// Outcome is the result of one case as the input gave it.
type Outcome string

// The outcomes. Flaky is a case that failed and then passed on a rerun: it
// is not a pass. Incomplete is a case a stream started and never finished.
const (
	Passed     Outcome = "passed"
	Failed     Outcome = "failed"
	Errored    Outcome = "error"
	Skipped    Outcome = "skipped"
	Flaky      Outcome = "flaky"
	Incomplete Outcome = "incomplete"
)

// Case is one test case: a stable id, its outcome and duration in seconds.
type Case struct {
	ID       string  `json:"id"`
	Outcome  Outcome `json:"outcome"`
	Duration float64 `json:"duration_s,omitempty"`
}

// Counts tallies cases by outcome; Tests is all of them.
type Counts struct {
	Tests      int `json:"tests"`
	Passed     int `json:"passed"`
	Failed     int `json:"failed"`
	Errors     int `json:"errors"`
	Skipped    int `json:"skipped"`
	Flaky      int `json:"flaky,omitempty"`
	Incomplete int `json:"incomplete,omitempty"`
}

// Declared is what a file says of itself (JUnit's tests, failures,
// errors, skipped attributes), compared with the cases found.
type Declared struct {
	Tests    int `json:"tests"`
	Failures int `json:"failures"`
	Errors   int `json:"errors"`
	Skipped  int `json:"skipped"`
}

// Identity is who produced a signed input: the runner key that signed a
// DSSE envelope, or the Sigstore certificate identity of a bundle.
type Identity struct {
	Kind   string `json:"kind"` // "runner-key" or "sigstore-certificate"
	Name   string `json:"name"` // the key's registered name, or the certificate's SAN
	KeyID  string `json:"keyid,omitempty"`
	Issuer string `json:"issuer,omitempty"` // the certificate's OIDC issuer
}

// Run is what a decoder found: the cases, the file's own counts where it
// has them, the time span (zero when the format has none), notes on what
// was odd (a cut-off stream, a rerun), and for attestations the subject,
// predicate type and signer.
type Run struct {
	Cases         []Case
	Declared      *Declared
	Started       time.Time
	Finished      time.Time
	Truncated     bool
	Notes         []string
	Subject       *ledger.Subject // from the input; nil when it has none
	PredicateType string
	Identity      *Identity
	// Signer is the verified runner signature of a DSSE envelope; the
	// record carries it (ledger.Evidence.Signer), so signed_by gates
	// count it.
	Signer *ledger.Signer
}

// Tally counts r's cases by outcome.
func (r *Run) Tally() Counts {
	var c Counts
	for _, k := range r.Cases {
		c.Tests++
		switch k.Outcome {
		case Passed:
			c.Passed++
		case Failed:
			c.Failed++
		case Errored:
			c.Errors++
		case Skipped:
			c.Skipped++
		case Flaky:
			c.Flaky++
		case Incomplete:
			c.Incomplete++
		}
	}
	return c
}

// mismatch describes how the declared counts differ from c, "" when they
// agree.
func (d *Declared) mismatch(c Counts) string {
	if d == nil {
		return ""
	}
	var parts []string
	if d.Tests != c.Tests {
		parts = append(parts, fmt.Sprintf("tests declared %d, found %d", d.Tests, c.Tests))
	}
	if d.Failures != c.Failed {
		parts = append(parts, fmt.Sprintf("failures declared %d, found %d", d.Failures, c.Failed))
	}
	if d.Errors != c.Errors {
		parts = append(parts, fmt.Sprintf("errors declared %d, found %d", d.Errors, c.Errors))
	}
	if d.Skipped != c.Skipped {
		parts = append(parts, fmt.Sprintf("skipped declared %d, found %d", d.Skipped, c.Skipped))
	}
	return strings.Join(parts, "; ")
}

// OriginalRef is how evidence names the original it was decoded from.
type OriginalRef struct {
	ID        string `json:"id"`
	Digest    string `json:"digest"`
	Format    string `json:"format"`
	MediaType string `json:"media_type"`
}

// Details is the shape of the evidence details an ingested record carries.
type Details struct {
	Format        string      `json:"format"`
	Original      OriginalRef `json:"original"`
	Counts        Counts      `json:"counts"`
	Declared      *Declared   `json:"declared,omitempty"`
	CountMismatch string      `json:"count_mismatch,omitempty"`
	Truncated     bool        `json:"truncated,omitempty"`
	Notes         []string    `json:"notes,omitempty"`
	PredicateType string      `json:"predicate_type,omitempty"`
	Identity      *Identity   `json:"runner_identity,omitempty"`
	Cases         []Case      `json:"cases"`
}

// OriginalEntryID is the entry id the original gets in the log.
func OriginalEntryID(o ledger.Original) (string, error) {
	b, err := originalBody(o)
	if err != nil {
		return "", err
	}
	return ledger.EntryID(ledger.KindOriginal, b), nil
}

// originalBody is the canonical body the store hashes for o: the bytes
// ledger.PrepareRecord(ledger.KindOriginal, ...) returns for it, after
// the same checks in the same order, written straight into one buffer of
// the final size. Going through PrepareRecord would encode the content to
// base64, decode it back and encode it again, about five times the
// original's size in allocations for one result.
func originalBody(o ledger.Original) ([]byte, error) {
	// The ledger's checks of format and media type, on a one-byte
	// stand-in for the content.
	probe := ledger.NewOriginal(o.Format, o.MediaType, []byte{0})
	pb, err := json.Marshal(&probe)
	if err != nil {
		return nil, err
	}
	if _, err := ledger.PrepareRecord(ledger.KindOriginal, pb); err != nil {
		return nil, err
	}
	if len(o.Content) == 0 {
		return nil, ledger.FieldError("content", "required: the original's bytes, base64")
	}
	want := ledger.NewOriginal(o.Format, o.MediaType, o.Content)
	if o.Digest != want.Digest {
		return nil, ledger.FieldError("digest", "is not the SHA-256 of content")
	}
	if o.Size != want.Size {
		return nil, ledger.FieldError("size", "is %d, content has %d bytes", o.Size, want.Size)
	}
	// The field order and spelling of ledger.Original's JSON encoding,
	// strings unescaped for HTML as the ledger's canonical encoder leaves
	// them.
	format, media, digest := jsonString(o.Format), jsonString(o.MediaType), jsonString(o.Digest)
	size := strconv.Itoa(o.Size)
	n := len(`{"format":,"media_type":,"digest":,"size":,"content":""}`) + len(format) + len(media) + len(digest) + len(size) + base64.StdEncoding.EncodedLen(len(o.Content))
	b := make([]byte, 0, n)
	b = append(b, `{"format":`...)
	b = append(b, format...)
	b = append(b, `,"media_type":`...)
	b = append(b, media...)
	b = append(b, `,"digest":`...)
	b = append(b, digest...)
	b = append(b, `,"size":`...)
	b = append(b, size...)
	b = append(b, `,"content":"`...)
	b = base64.StdEncoding.AppendEncode(b, o.Content)
	return append(b, `"}`...), nil
}

// jsonString is s as a JSON string, without HTML escaping.
func jsonString(s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.Encode(s) // a string always encodes
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// subject merges the run's own subject with the flags; a disagreement is
// refused naming the flag.
func (p Params) subject(r *Run) (ledger.Subject, error) {
	s := ledger.Subject{Repository: p.Repository, Commit: p.Commit, Tree: p.Tree, Artifacts: map[string]string{}}
	for k, v := range p.Artifacts {
		s.Artifacts[k] = v
	}
	if r.Subject != nil {
		own := r.Subject
		for _, f := range []struct{ name, flag, own string }{
			{"repository", p.Repository, own.Repository}, {"commit", p.Commit, own.Commit}, {"tree", p.Tree, own.Tree},
		} {
			if f.own != "" && f.flag != "" && f.own != f.flag {
				return s, ledger.FieldError(f.name, "the input's subject says %q, the flag says %q", clip(f.own), clip(f.flag))
			}
		}
		if own.Repository != "" {
			s.Repository = own.Repository
		}
		if own.Commit != "" {
			s.Commit = own.Commit
		}
		if own.Tree != "" {
			s.Tree = own.Tree
		}
		for name, d := range own.Artifacts {
			if flag, ok := p.Artifacts[name]; ok && flag != d {
				return s, ledger.FieldError("artifact", "the input's subject pins %q to %s, the flag to %s", clip(name), clip(d), clip(flag))
			}
			s.Artifacts[name] = d
		}
	}
	if len(s.Artifacts) == 0 {
		s.Artifacts = nil
	}
	return s, nil
}

// evidence builds the evidence record of run r read from orig, whose
// entry id is id (OriginalEntryID). The rule:
// cases_total counts every case that was not skipped and cases_exact the
// passed ones; the status is error for a cut-off input, failed when any
// case failed or errored, inconclusive when a case was flaky or
// incomplete, when no case ran or when the file's own counts disagree with
// the cases found, and passed otherwise.
func (p Params) evidence(r *Run, orig ledger.Original, id string) (ledger.Evidence, error) {
	var ev ledger.Evidence
	if !ledger.ValidLane(p.Lane) {
		return ev, ledger.FieldError("lane", "required for %s input (name/vN), got %q", orig.Format, clip(p.Lane))
	}
	if !p.Backend.Valid() {
		return ev, ledger.FieldError("backend", "required for %s input: one of %s, got %q", orig.Format, ledger.BackendList(), clip(string(p.Backend)))
	}
	subj, err := p.subject(r)
	if err != nil {
		return ev, err
	}
	c := r.Tally()
	d := Details{Format: orig.Format, Original: OriginalRef{ID: id, Digest: orig.Digest, Format: orig.Format, MediaType: orig.MediaType},
		Counts: c, Declared: r.Declared, CountMismatch: r.Declared.mismatch(c), Truncated: r.Truncated, Notes: r.Notes,
		PredicateType: r.PredicateType, Identity: r.Identity, Cases: r.Cases}
	if d.Cases == nil {
		d.Cases = []Case{}
	}
	details, err := json.Marshal(d)
	if err != nil {
		return ev, err
	}
	var failing []string
	for _, k := range r.Cases {
		if k.Outcome != Passed && k.Outcome != Skipped {
			failing = append(failing, k.ID)
		}
	}
	ev = ledger.Evidence{Lane: p.Lane, Subject: subj, Backend: p.Backend, Control: ledger.ControlNone,
		CasesExact: c.Passed, CasesTotal: c.Tests - c.Skipped, FailingCases: failing, Details: details,
		StartedAt: r.Started, FinishedAt: r.Finished, Signer: r.Signer}
	switch {
	case r.Truncated:
		ev.Status = ledger.StatusError
	case c.Failed > 0 || c.Errors > 0:
		ev.Status = ledger.StatusFailed
	case c.Flaky > 0 || c.Incomplete > 0 || ev.CasesTotal == 0 || d.CountMismatch != "":
		ev.Status = ledger.StatusInconclusive
	default:
		ev.Status = ledger.StatusPassed
	}
	if ev.StartedAt.IsZero() || ev.FinishedAt.IsZero() {
		now := p.Now
		if now.IsZero() {
			now = time.Now()
		}
		ev.StartedAt, ev.FinishedAt = now, now
	}
	if ev.FinishedAt.Before(ev.StartedAt) {
		ev.FinishedAt = ev.StartedAt
	}
	if err := ev.Validate(); err != nil {
		return ev, err
	}
	ev.Normalize()
	return ev, nil
}

// caseIDs gives each case a stable id: its parts joined by " > ", cut
// to the ledger's 256 characters with a digest suffix when longer, and
// duplicates numbered "#2", "#3"... in document order: a case whose id is
// taken gets "id #n" for the smallest n >= 2 not taken yet, whether the
// taken id was numbered here or was a case's own name (a case named
// "a #2" before a second "a" moves that one to "a #3"). The search for n
// resumes where the last one for the same id stopped (ids are only ever
// added, so no smaller n frees up), which keeps N duplicates linear
// instead of quadratic. A caseIDs is not safe for concurrent use.
type caseIDs struct {
	taken map[string]struct{}
	nextN map[string]int // id -> the smallest n >= 2 that may still be free for "id #n"
}

func newCaseIDs() *caseIDs {
	return &caseIDs{taken: map[string]struct{}{}, nextN: map[string]int{}}
}

// next returns the id of the case whose parts are given (see caseIDs).
func (ids *caseIDs) next(parts ...string) string {
	return ids.nextUnder(idPrefix{}, parts...)
}

// nextUnder is next with parts following the parts already in p (a
// suite's path), so a case under deep suites costs its own parts only.
func (ids *caseIDs) nextUnder(p idPrefix, parts ...string) string {
	for _, part := range parts {
		p = p.extend(part)
	}
	id := p.id()
	if _, dup := ids.taken[id]; dup {
		base := id
		n := max(ids.nextN[base], 2)
		for {
			id = base + " #" + strconv.Itoa(n)
			if _, dup := ids.taken[id]; !dup {
				break
			}
			n++
		}
		ids.nextN[base] = n + 1
	}
	ids.taken[id] = struct{}{}
	return id
}

// The id rule's lengths: an id longer than idMax bytes is cut to at most
// idCut bytes (not splitting a UTF-8 sequence), then "…" and the first 4
// bytes of the SHA-256 of the whole id in hex are added (227 bytes at
// most, leaving room for " #n" within the ledger's 256).
const (
	idMax = 230
	idCut = 216
	// idKeep is how long a prefix is kept whole; past it, only its first
	// idMax+1 bytes and the SHA-256 state of all of it are kept.
	idKeep = 1024
)

// idPrefix is the first parts of a case id, trimmed, empty ones left
// out, joined by " > ". It is kept whole up to idKeep bytes; past that
// as its first idMax+1 bytes, its length and the SHA-256 state over all
// of it, so the ids of a suite nested thousands deep cost each case its
// own parts, not the whole path (a path of depth D and N cases would
// otherwise cost N·D). The zero idPrefix is empty.
type idPrefix struct {
	s     string // the whole prefix (state == nil) or its first idMax+1 bytes
	n     int    // the whole prefix's length in bytes
	state []byte // the SHA-256 state (encoding.BinaryMarshaler) of all n bytes; nil while whole
}

// extend returns p followed by part (trimmed; an empty part changes
// nothing).
func (p idPrefix) extend(part string) idPrefix {
	if part = strings.TrimSpace(part); part == "" {
		return p
	}
	sep := ""
	if p.n > 0 {
		sep = " > "
	}
	if p.state == nil && p.n+len(sep)+len(part) <= idKeep {
		whole := p.s + sep + part
		return idPrefix{s: whole, n: len(whole)}
	}
	h := sha256.New()
	if p.state == nil {
		h.Write([]byte(p.s))
	} else if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(p.state); err != nil {
		panic("sha256 state: " + err.Error()) // a state this package marshaled
	}
	h.Write([]byte(sep))
	h.Write([]byte(part))
	state, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		panic("sha256 state: " + err.Error())
	}
	head := p.s
	if len(head) <= idMax {
		head += sep + part
		if len(head) > idMax+1 {
			head = head[:idMax+1]
		}
	}
	return idPrefix{s: head, n: p.n + len(sep) + len(part), state: state}
}

// id is the case id p names before numbering: "(unnamed)" when empty,
// cut with a digest suffix when longer than idMax bytes.
func (p idPrefix) id() string {
	if p.n == 0 {
		return "(unnamed)"
	}
	if p.n <= idMax {
		return p.s
	}
	var sum []byte
	if p.state == nil {
		d := sha256.Sum256([]byte(p.s))
		sum = d[:]
	} else {
		h := sha256.New()
		if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(p.state); err != nil {
			panic("sha256 state: " + err.Error())
		}
		sum = h.Sum(nil)
	}
	cut := idCut
	for cut > 0 && p.s[cut]&0xC0 == 0x80 { // do not split a UTF-8 sequence
		cut--
	}
	return p.s[:cut] + "…" + hex.EncodeToString(sum[:4])
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// ParseArtifacts reads artifact pins given as "NAME=sha256:HEX" (the
// --artifact flag, the artifact query parameter) into a map; a malformed
// or repeated pin is a CodeInvalid error naming "artifact".
func ParseArtifacts(pins []string) (map[string]string, error) {
	if len(pins) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(pins))
	for _, p := range pins {
		name, d, ok := strings.Cut(p, "=")
		if !ok || name == "" || !ledger.ValidDigest(d) {
			return nil, ledger.FieldError("artifact", "want NAME=sha256:<64 lowercase hex>, got %q", clip(p))
		}
		if old, dup := out[name]; dup && old != d {
			return nil, ledger.FieldError("artifact", "artifact %q is pinned twice", clip(name))
		}
		out[name] = d
	}
	return out, nil
}
