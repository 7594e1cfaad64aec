package ledger

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// appendEvidence appends e's JSON to dst, byte for byte what
// encoding/json.Encoder with SetEscapeHTML(false) writes for it (without
// the trailing newline): fields in declaration order, omitempty as tagged,
// map keys sorted, json.RawMessage members compacted, times as
// time.Time.MarshalJSON gives them. Every record an append stores is
// encoded here, so it avoids the reflection of encoding/json;
// TestAppendEvidenceMatchesEncodingJSON and FuzzAppendEvidence hold it to
// encoding/json's bytes. ok is false where encoding/json would fail or
// where this encoder does not follow it (a time outside years 0-9999, a
// RawMessage that is not valid JSON): the caller then uses encoding/json
// itself, so its error and bytes are the ones returned.
func appendEvidence(dst []byte, e *Evidence) (_ []byte, ok bool) {
	dst = append(dst, `{"lane":`...)
	dst = appendJSONString(dst, e.Lane)
	dst = append(dst, `,"subject":{"repository":`...)
	dst = appendJSONString(dst, e.Subject.Repository)
	dst = append(dst, `,"commit":`...)
	dst = appendJSONString(dst, e.Subject.Commit)
	dst = append(dst, `,"tree":`...)
	dst = appendJSONString(dst, e.Subject.Tree)
	if e.Subject.Dirty {
		dst = append(dst, `,"dirty":true`...)
	}
	if len(e.Subject.Artifacts) > 0 {
		dst = append(dst, `,"artifacts":`...)
		dst = appendStringMap(dst, e.Subject.Artifacts)
	}
	dst = append(dst, `},"backend":`...)
	dst = appendJSONString(dst, string(e.Backend))
	dst = append(dst, `,"device":{`...)
	n := len(dst)
	if e.Device.Model != "" {
		dst = appendJSONString(append(dst, `"model":`...), e.Device.Model)
	}
	if e.Device.Driver != "" {
		dst = appendJSONString(append(comma(dst, n), `"driver":`...), e.Device.Driver)
	}
	if e.Device.Cores != 0 {
		dst = strconv.AppendInt(append(comma(dst, n), `"cores":`...), int64(e.Device.Cores), 10)
	}
	if len(e.Device.Attrs) > 0 {
		dst = appendStringMap(append(comma(dst, n), `"attrs":`...), e.Device.Attrs)
	}
	dst = append(dst, `},"runner":{`...)
	n = len(dst)
	if e.Runner.Version != "" {
		dst = appendJSONString(append(dst, `"version":`...), e.Runner.Version)
	}
	if e.Runner.Commit != "" {
		dst = appendJSONString(append(comma(dst, n), `"commit":`...), e.Runner.Commit)
	}
	dst = append(dst, `},"cases_exact":`...)
	dst = strconv.AppendInt(dst, int64(e.CasesExact), 10)
	dst = append(dst, `,"cases_total":`...)
	dst = strconv.AppendInt(dst, int64(e.CasesTotal), 10)
	if len(e.FailingCases) > 0 {
		dst = append(dst, `,"failing_cases":[`...)
		for i, c := range e.FailingCases {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, c)
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"control":`...)
	dst = appendJSONString(dst, string(e.Control))
	dst = append(dst, `,"status":`...)
	dst = appendJSONString(dst, string(e.Status))
	if dst, ok = appendJSONTime(append(dst, `,"started_at":`...), e.StartedAt); !ok {
		return dst, false
	}
	if dst, ok = appendJSONTime(append(dst, `,"finished_at":`...), e.FinishedAt); !ok {
		return dst, false
	}
	if len(e.Details) > 0 {
		if dst, ok = appendCompact(append(dst, `,"details":`...), e.Details); !ok {
			return dst, false
		}
	}
	if r := e.Run; r != nil {
		dst = append(dst, `,"run":{"id":`...)
		dst = appendJSONString(dst, r.ID)
		dst = append(dst, `,"attempt":`...)
		dst = strconv.AppendInt(dst, int64(r.Attempt), 10)
		dst = append(dst, '}')
	}
	if s := e.Signer; s != nil {
		dst = append(dst, `,"signer":{"runner":`...)
		dst = appendJSONString(dst, s.Runner)
		dst = append(dst, `,"key_id":`...)
		dst = appendJSONString(dst, s.KeyID)
		dst = append(dst, `,"key_entry":`...)
		dst = appendJSONString(dst, s.KeyEntry)
		dst = append(dst, `,"envelope":`...)
		if s.Envelope == nil { // RawMessage.MarshalJSON: nil is null
			dst = append(dst, "null"...)
		} else if dst, ok = appendCompact(dst, s.Envelope); !ok {
			return dst, false
		}
		dst = append(dst, '}')
	}
	if r := e.RecordedBy; r != nil {
		dst = append(dst, `,"recorded_by":{`...)
		n = len(dst)
		if r.Token != nil {
			dst = append(dst, `"token":{"id":`...)
			dst = appendJSONString(dst, r.Token.ID)
			dst = append(dst, `,"name":`...)
			dst = appendJSONString(dst, r.Token.Name)
			dst = append(dst, '}')
		}
		if r.Runner != nil {
			dst = append(comma(dst, n), `"runner":{"name":`...)
			dst = appendJSONString(dst, r.Runner.Name)
			dst = append(dst, `,"key_id":`...)
			dst = appendJSONString(dst, r.Runner.KeyID)
			dst = append(dst, '}')
		}
		dst = append(dst, '}')
	}
	return append(dst, '}'), true
}

// EvidenceJSON appends e's JSON to dst: encoding/json's bytes (HTML
// escaping off, no newline), made without reflection when it can be (see
// appendEvidence). The error is encoding/json's.
func EvidenceJSON(dst []byte, e *Evidence) ([]byte, error) {
	if b, ok := appendEvidence(dst, e); ok {
		return b, nil
	}
	b, err := marshalNoEscape(e)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

// comma appends a comma to dst when something was written after offset n
// (the start of an object's members).
func comma(dst []byte, n int) []byte {
	if len(dst) > n {
		return append(dst, ',')
	}
	return dst
}

// appendStringMap appends m as a JSON object with its keys sorted, as
// encoding/json orders a map[string]string.
func appendStringMap(dst []byte, m map[string]string) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(appendJSONString(dst, k), ':')
		dst = appendJSONString(dst, m[k])
	}
	return append(dst, '}')
}

// appendJSONTime appends t as time.Time.MarshalJSON does (RFC 3339 with
// nanoseconds, quoted); ok is false for a time not in UTC or outside the
// years MarshalJSON accepts (0-9999), left to encoding/json.
func appendJSONTime(dst []byte, t time.Time) ([]byte, bool) {
	if y := t.Year(); y < 0 || y > 9999 || t.Location() != time.UTC {
		return dst, false
	}
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	return append(dst, '"'), true
}

// appendCompact appends raw with insignificant space removed, as
// encoding/json writes a json.RawMessage; ok is false when raw is not
// valid JSON.
func appendCompact(dst, raw []byte) ([]byte, bool) {
	buf := bytes.NewBuffer(dst)
	if err := json.Compact(buf, raw); err != nil {
		return dst, false
	}
	return buf.Bytes(), true
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s quoted as encoding/json does with HTML
// escaping off: ", \ and the control characters escaped (\b \f \n \r \t
// short, others \u00XX), invalid UTF-8 as \ufffd, U+2028 and U+2029 as
// \u2028 and \u2029, everything else as it is.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
