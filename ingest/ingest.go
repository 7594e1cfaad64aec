package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"mime"
	"path/filepath"
	"sort"
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
// and TestNG's testng-results.xml have no registered media type; the
// ones here are the ledger's.
const (
	MediaEvidence = "application/json"
	MediaJUnit    = "application/junit+xml"
	MediaTestNG   = "application/vnd.testng+xml"
	MediaGoTest   = "application/vnd.go.test2json+jsonl"
	MediaInToto   = "application/vnd.in-toto+json"
	MediaDSSE     = "application/vnd.dsse.envelope.v1+json"
)

// Format names, as --format takes them and ledger.Original.Format records.
const (
	FormatEvidence = "evidence"
	FormatJUnit    = "junit"
	FormatTestNG   = "testng"
	FormatGoTest   = "gotest"
	FormatInToto   = "in-toto"
	FormatDSSE     = "dsse"
)

// formats maps each format name to its canonical media type.
var formats = map[string]string{
	FormatEvidence: MediaEvidence,
	FormatJUnit:    MediaJUnit,
	FormatTestNG:   MediaTestNG,
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
// an unknown media type is CodeUnsupported naming the ones known. The
// XML media types give junit; DecodeFormat reads a document of junit
// whose root is <testng-results> as testng.
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
	case MediaTestNG:
		return FormatTestNG, nil
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
		strings.Join([]string{MediaEvidence, MediaJUnit, MediaTestNG, MediaGoTest, MediaInToto, MediaDSSE, MediaSigstoreBundle}, ", "))
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
	// Envelope is the runner-key verification of a DSSE body
	// (FormatDSSE), done by the caller before decoding; nil refuses every
	// DSSE envelope (CodeUnauthorized).
	Envelope *VerifiedEnvelope
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

// DecodeFormat is Decode with the format named ("junit", ...). A junit
// document whose root element is <testng-results> is TestNG's and is
// decoded and recorded as testng.
func DecodeFormat(ctx context.Context, format string, body []byte, p Params) (*Result, error) {
	if format == FormatJUnit && xmlRoot(ctx, body) == "testng-results" {
		format = FormatTestNG
	}
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
	case FormatTestNG:
		run, err = DecodeTestNG(ctx, body)
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
// XML is TestNG's when its root is <testng-results>, else JUnit; a JSON
// object with "payloadType" a DSSE envelope (of an in-toto Statement;
// other envelopes are the native format's), with
// "_type" an in-toto Statement, with "Action" a test2json stream; any other
// JSON the native format. It returns a CodeInvalid error when nothing fits.
func Detect(name string, body []byte) (string, error) {
	b := bytes.TrimSpace(bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")))
	switch ext := strings.ToLower(filepath.Ext(name)); {
	case ext == ".xml" || bytes.HasPrefix(b, []byte("<")):
		if xmlRoot(context.Background(), body) == "testng-results" {
			return FormatTestNG, nil
		}
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
	first := probe
	probe = nil
	if json.Unmarshal(b, &probe) != nil {
		var mt string
		if json.Unmarshal(first["mediaType"], &mt) == nil && strings.HasPrefix(mt, "application/vnd.dev.sigstore.bundle") {
			return FormatSigstore, nil // a .jsonl of bundles: its decoder says to send one per request
		}
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

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
