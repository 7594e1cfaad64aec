package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
)

// DecodeStrict decodes one JSON value from data into v, rejecting unknown
// fields and trailing data. Errors are CodeInvalid *Error values naming the
// field where encoding/json reports one.
func DecodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		jerr := jsonError(err)
		var le *Error
		if errors.As(jerr, &le) && le.Message == "unknown field" {
			// encoding/json names only the key; find its full path.
			var doc any
			if json.Unmarshal(data, &doc) == nil {
				if p := unknownPath(doc, reflect.TypeOf(v), ""); p != "" {
					le.Field = p
				}
			}
		}
		return jerr
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return FieldError("", "trailing data after the JSON value")
	}
	return nil
}

func jsonError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return FieldError("", "malformed JSON at byte %d: %v", se.Offset, se)
	case errors.As(err, &te):
		return FieldError(te.Field, "wrong type: got JSON %s, want %s", te.Value, te.Type)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return FieldError("", "empty or truncated JSON")
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return FieldError(strings.Trim(f, `"`), "unknown field")
	}
	if strings.Contains(msg, "parsing time") {
		return FieldError("", "bad time (want RFC 3339): %s", strings.TrimPrefix(msg, "json: "))
	}
	return FieldError("", "%s", strings.TrimPrefix(msg, "json: "))
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
	case KindRelease, KindWaiver, KindApproval:
		b := bytes.TrimSpace(body)
		if len(b) == 0 || b[0] != '{' {
			return nil, FieldError("", "%s body must be a JSON object", k)
		}
		c, err := CanonicalJSON(b)
		if err != nil {
			return nil, FieldError("", "%s body: %v", k, err)
		}
		return c, nil
	}
	return nil, FieldError("kind", "unknown entry kind %q", clip(string(k)))
}

// PrepareEvidence decodes body strictly, validates and normalizes it, and
// returns the record with its canonical bytes: the encoding/json encoding
// of the Evidence struct (fields in declaration order, map keys sorted,
// no HTML escaping), with Details canonicalized by CanonicalJSON.
func PrepareEvidence(body []byte) (Evidence, []byte, error) {
	var e Evidence
	if err := DecodeStrict(body, &e); err != nil {
		return e, nil, err
	}
	if err := e.Validate(); err != nil {
		return e, nil, err
	}
	e.Normalize()
	b, err := marshalNoEscape(&e)
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

// unknownPath returns the path ("subject.branch", "[2].lane") of the first
// key (in sorted order) of doc that type t has no JSON field for, or "".
func unknownPath(doc any, t reflect.Type, prefix string) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	join := func(k string) string {
		if prefix == "" {
			return k
		}
		return prefix + "." + k
	}
	switch d := doc.(type) {
	case map[string]any:
		keys := make([]string, 0, len(d))
		for k := range d {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		switch t.Kind() {
		case reflect.Struct:
			for _, k := range keys {
				f, ok := jsonField(t, k)
				if !ok {
					return join(k)
				}
				if p := unknownPath(d[k], f.Type, join(k)); p != "" {
					return p
				}
			}
		case reflect.Map:
			for _, k := range keys {
				if p := unknownPath(d[k], t.Elem(), join(k)); p != "" {
					return p
				}
			}
		}
	case []any:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for i, e := range d {
				if p := unknownPath(e, t.Elem(), fmt.Sprintf("%s[%d]", prefix, i)); p != "" {
					return p
				}
			}
		}
	}
	return ""
}

// jsonField finds the struct field that encoding/json decodes key into
// (exact tag or name match first, then case-insensitive, as encoding/json).
func jsonField(t reflect.Type, key string) (reflect.StructField, bool) {
	var fold *reflect.StructField
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := f.Name
		if tag, ok := f.Tag.Lookup("json"); ok {
			n, _, _ := strings.Cut(tag, ",")
			if n == "-" {
				continue
			}
			if n != "" {
				name = n
			}
		}
		if name == key {
			return f, true
		}
		if fold == nil && strings.EqualFold(name, key) {
			fold = &f
		}
	}
	if fold != nil {
		return *fold, true
	}
	return reflect.StructField{}, false
}
