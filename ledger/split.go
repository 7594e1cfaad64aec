package ledger

import (
	"encoding/json"
	"fmt"
)

// SplitArray splits a JSON array of objects into its elements without
// decoding them: one pass over data that follows strings (and their
// escapes) and bracket depth. It checks the array's own syntax (brackets,
// commas, whitespace, nothing after the closing bracket) and that every
// element is an object; the elements' contents are left to the strict
// decoder each element goes through next (PrepareEvidence), so an element
// that is not valid JSON is rejected there. For valid JSON the result
// equals what encoding/json yields for []json.RawMessage (a differential
// fuzz test checks this).
//
// Errors are CodeInvalid *Error values naming the byte offset. The
// returned slices alias data. Safe for concurrent use.
func SplitArray(data []byte) ([]json.RawMessage, error) {
	i := skipSpace(data, 0)
	if i == len(data) || data[i] != '[' {
		return nil, FieldError("", "malformed JSON at byte %d: want '['", i)
	}
	i = skipSpace(data, i+1)
	var out []json.RawMessage
	if i < len(data) && data[i] == ']' {
		if j := skipSpace(data, i+1); j != len(data) {
			return nil, FieldError("", "trailing data after the JSON value at byte %d", j)
		}
		return out, nil
	}
	for {
		if i == len(data) {
			return nil, FieldError("", "malformed JSON: unexpected end of input at byte %d", i)
		}
		if data[i] != '{' {
			if data[i] == ']' && len(out) > 0 {
				return nil, FieldError("", "malformed JSON at byte %d: trailing comma before ']'", i)
			}
			return nil, FieldError(fmt.Sprintf("[%d]", len(out)), "must be a JSON object, got %s (at byte %d)", valueKind(data[i]), i)
		}
		end, err := objectEnd(data, i)
		if err != nil {
			return nil, err
		}
		out = append(out, json.RawMessage(data[i:end]))
		i = skipSpace(data, end)
		if i == len(data) {
			return nil, FieldError("", "malformed JSON: unexpected end of input at byte %d", i)
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case ']':
			if j := skipSpace(data, i+1); j != len(data) {
				return nil, FieldError("", "trailing data after the JSON value at byte %d", j)
			}
			return out, nil
		default:
			return nil, FieldError("", "malformed JSON at byte %d: want ',' or ']' after array element %d", i, len(out)-1)
		}
	}
}

// objectEnd returns the offset just past the object or array that starts
// at data[start].
func objectEnd(data []byte, start int) (int, error) {
	depth := 0
	for i := start; i < len(data); i++ {
		switch data[i] {
		case '"':
			for i++; ; i++ {
				if i >= len(data) {
					return 0, FieldError("", "malformed JSON: unterminated string at end of input")
				}
				if data[i] == '\\' {
					i++
				} else if data[i] == '"' {
					break
				}
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1, nil
			}
		}
	}
	return 0, FieldError("", "malformed JSON: unexpected end of input at byte %d", len(data))
}

// skipSpace returns the offset of the first non-whitespace byte (JSON
// whitespace: space, tab, CR, LF) at or after i.
func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\r' || data[i] == '\n') {
		i++
	}
	return i
}

// valueKind names the kind of the JSON value that starts with c.
func valueKind(c byte) string {
	switch {
	case c == 'n':
		return "null"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == '"':
		return "a string"
	case c == '[':
		return "an array"
	case c == '-' || c >= '0' && c <= '9':
		return "a number"
	}
	return fmt.Sprintf("%q", c)
}
