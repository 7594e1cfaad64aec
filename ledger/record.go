package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// DecodeStrict decodes one JSON value from data into v, rejecting unknown
// fields, duplicate fields, invalid UTF-8 and trailing data. Field names
// match exactly (case-sensitively). It decodes with encoding/json/v2
// semantics (through its github.com/go-json-experiment/json mirror, about
// three times faster than encoding/json here). Errors are CodeInvalid
// *Error values naming the field ("subject.branch", "[1].device.colour")
// where there is one.
func DecodeStrict(data []byte, v any) error {
	if err := jsonv2.Unmarshal(data, v, jsonv2.RejectUnknownMembers(true)); err != nil {
		return jsonError(err)
	}
	return nil
}

// RefuseDuplicateNames checks that no object in data, a JSON text, has a
// member name twice. RFC 8259 (section 4) leaves what duplicate names mean
// to each parser, so a signed document with them can say one thing to the
// ledger (encoding/json keeps the last) and another to a reader that keeps
// the first: such a document is refused, not interpreted. Errors are
// CodeInvalid naming the member ("duplicate field") or the malformed
// byte. It reads tokens without building values; safe for concurrent use.
func RefuseDuplicateNames(data []byte) error {
	dec := jsontext.NewDecoder(bytes.NewReader(data))
	for {
		if _, err := dec.ReadToken(); err != nil {
			if err == io.EOF {
				return nil
			}
			return jsonError(err)
		}
	}
}

// jsonError translates a decoding error into a CodeInvalid *Error.
func jsonError(err error) error {
	var se *jsonv2.SemanticError
	var sx *jsontext.SyntacticError
	switch {
	case errors.As(err, &sx):
		field := pointerField(sx.JSONPointer)
		switch {
		case errors.Is(sx.Err, io.ErrUnexpectedEOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return FieldError("", "empty or truncated JSON")
		case errors.Is(sx.Err, jsontext.ErrDuplicateName):
			return FieldError(field, "duplicate field")
		case strings.Contains(sx.Err.Error(), "after top-level value"):
			return FieldError("", "trailing data after the JSON value")
		}
		return FieldError(field, "malformed JSON at byte %d: %v", sx.ByteOffset, sx.Err)
	case errors.As(err, &se):
		field := pointerField(se.JSONPointer)
		switch {
		case errors.Is(se.Err, jsonv2.ErrUnknownName):
			return FieldError(field, "unknown field")
		case se.GoType == reflect.TypeFor[time.Time]():
			return FieldError(field, "bad time (want RFC 3339): %v", se.Err)
		case se.JSONKind != 0 && se.GoType != nil && (se.Err == nil || se.JSONKind == '0'):
			// A JSON value of the wrong kind, or a number that does not
			// fit (1.5 or 2e2 for an integer): name the value when short.
			got := kindName(se.JSONKind)
			if v := string(se.JSONValue); v != "" && len(v) <= 40 {
				got += " " + v
			}
			return FieldError(field, "wrong type: got JSON %s, want %s", got, se.GoType)
		case se.Err != nil:
			return FieldError(field, "%s", Clip(se.Err.Error()))
		}
		return FieldError(field, "cannot decode JSON %s into %v", kindName(se.JSONKind), se.GoType)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return FieldError("", "empty or truncated JSON")
	}
	return FieldError("", "%s", strings.TrimPrefix(err.Error(), "json: "))
}

// pointerField turns a JSON Pointer (RFC 6901: "/subject/branch", "/1/lane")
// into a field path ("subject.branch", "[1].lane"); tokens of decimal
// digits are taken as array indexes.
func pointerField(p jsontext.Pointer) string {
	var b strings.Builder
	for tok := range p.Tokens() {
		if b.Len() > 200 { // a deeply nested value: the start of its path is enough
			b.WriteString("…")
			break
		}
		if tok != "" && strings.Trim(tok, "0123456789") == "" {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

func kindName(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 'f', 't':
		return "boolean"
	case '"':
		return "string"
	case '0':
		return "number"
	case '{':
		return "object"
	case '[':
		return "array"
	}
	return "value"
}

// PrepareRecord validates body as a record of kind k and returns its
// canonical bytes. Evidence and head verifications are decoded strictly,
// validated and normalized; other kinds must be JSON objects and are
// canonicalized (their producers, such as package gates, validate them).
func PrepareRecord(k Kind, body []byte) ([]byte, error) {
	switch k {
	case KindEvidence:
		_, b, err := PrepareEvidence(body)
		return b, err
	case KindHead:
		_, b, err := PrepareHead(body)
		return b, err
	case KindPolicy:
		_, b, err := PreparePolicy(body)
		return b, err
	case KindRunnerKey:
		_, b, err := PrepareRunnerKey(body)
		return b, err
	case KindRunOutcome:
		_, b, err := PrepareRunOutcome(body)
		return b, err
	case KindOriginal:
		_, b, err := PrepareOriginal(body)
		return b, err
	case KindRelease, KindWaiver, KindApproval, KindSupersede, KindLog:
		b := bytes.TrimSpace(body)
		if len(b) == 0 || b[0] != '{' {
			return nil, FieldError("", "%s body must be a JSON object", k)
		}
		c, err := CanonicalJSON(b)
		if err != nil {
			return nil, FieldError("", "%s body: %v", k, err)
		}
		return c, nil
	case KindToken, KindTokenRevocation:
		return prepareTokenLeaf(k, body)
	case KindKeyRotation:
		return nil, FieldError("kind", "key-rotation leaves are appended only by `ledger key rotate` (Log.Rotate), never through Append")
	}
	return nil, FieldError("kind", "unknown entry kind %q", Clip(string(k)))
}

// PrepareEvidence decodes body strictly, validates and normalizes it, and
// returns the record with its canonical bytes: the encoding/json encoding
// of the Evidence struct (fields in declaration order, map keys sorted,
// no HTML escaping), with Details canonicalized by CanonicalJSON.
func PrepareEvidence(body []byte) (Evidence, []byte, error) {
	return prepareEvidence(body, nil)
}

// prepareEvidence is PrepareEvidence with recorded_by set to rec after
// decoding (Record.RecordedBy) when rec is not nil.
func prepareEvidence(body []byte, rec *Recorder) (Evidence, []byte, error) {
	var e Evidence
	if err := DecodeStrict(body, &e); err != nil {
		return e, nil, err
	}
	if rec != nil {
		if e.RecordedBy != nil {
			return e, nil, FieldError(RecordedByField, "is set only by the server (the token or runner key that recorded the record); remove it")
		}
		e.RecordedBy = rec
	}
	if err := e.Validate(); err != nil {
		return e, nil, err
	}
	e.Normalize()
	b, err := EvidenceJSON(make([]byte, 0, 640+len(e.Details)), &e)
	return e, b, err
}

// PrepareHead is PrepareEvidence for head verification records.
func PrepareHead(body []byte) (HeadVerification, []byte, error) {
	var h HeadVerification
	if err := DecodeStrict(body, &h); err != nil {
		return h, nil, err
	}
	if err := h.Validate(); err != nil {
		return h, nil, err
	}
	h.VerifiedAt = h.VerifiedAt.UTC()
	h.SignedAt = h.SignedAt.UTC()
	b, err := marshalNoEscape(&h)
	return h, b, err
}

func marshalNoEscape(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// ParseEvidence decodes canonical evidence bytes as stored in the log.
func ParseEvidence(body []byte) (Evidence, error) {
	var e Evidence
	if err := json.Unmarshal(body, &e); err != nil {
		return e, fmt.Errorf("parse evidence: %w", err)
	}
	return e, nil
}

// KindOriginal is the entry kind of an original input kept byte for byte
// (a JUnit XML file, a go test -json stream, a DSSE envelope, a Sigstore
// bundle): the evidence decoded from it names it by entry id and digest.
const KindOriginal Kind = "original"

// Original is the body of a KindOriginal entry. Content is the input's exact
// bytes (base64 in JSON); Digest is "sha256:" plus the lowercase hex SHA-256
// of Content; Size is len(Content) in bytes. Format names the decoder that
// read it ("junit", "gotest", "in-toto", "dsse", "sigstore-bundle") and
// MediaType the media type it was sent as.
type Original struct {
	Format    string `json:"format"`
	MediaType string `json:"media_type"`
	Digest    string `json:"digest"`
	Size      int    `json:"size"`
	Content   []byte `json:"content"`
}

// NewOriginal returns the Original of content read by format.
func NewOriginal(format, mediaType string, content []byte) Original {
	sum := sha256.Sum256(content)
	return Original{Format: format, MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: len(content), Content: content}
}

// PrepareOriginal decodes body strictly and checks that Digest and Size
// are those of Content; it returns the original and its canonical bytes.
// Errors are CodeInvalid *Error values naming the field.
func PrepareOriginal(body []byte) (Original, []byte, error) {
	var o Original
	if err := DecodeStrict(body, &o); err != nil {
		return o, nil, err
	}
	if o.Format == "" || len(o.Format) > 64 || !validName(o.Format) {
		return o, nil, FieldError("format", "required, a name of at most 64 characters")
	}
	if o.MediaType == "" || len(o.MediaType) > 128 {
		return o, nil, FieldError("media_type", "required, at most 128 characters")
	}
	if len(o.Content) == 0 {
		return o, nil, FieldError("content", "required: the original's bytes, base64")
	}
	want := NewOriginal(o.Format, o.MediaType, o.Content)
	if o.Digest != want.Digest {
		return o, nil, FieldError("digest", "is not the SHA-256 of content")
	}
	if o.Size != want.Size {
		return o, nil, FieldError("size", "is %d, content has %d bytes", o.Size, want.Size)
	}
	b, err := marshalNoEscape(&o)
	return o, b, err
}
