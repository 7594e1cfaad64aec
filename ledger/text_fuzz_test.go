package ledger

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzCheckText: accepted text is valid UTF-8 within the cap, without a
// control character (tab and line breaks only where multiline), and
// non-blank when required; refusals name the field.
func FuzzCheckText(f *testing.F) {
	for _, s := range []string{"github.com/a/b", "a\x00b", "a\nb", "\xff", "a\u0085b", "  ", strings.Repeat("x", 600)} {
		f.Add(s, true, false)
	}
	f.Fuzz(func(t *testing.T, s string, required, multiline bool) {
		err := CheckText("repository", s, MaxIdentifier, required, multiline)
		if err != nil {
			if e, ok := err.(*Error); !ok || e.Field != "repository" || e.Code != CodeInvalid {
				t.Fatalf("%q: %v", s, err)
			}
			return
		}
		if !utf8.ValidString(s) || len(s) > MaxIdentifier || (required && strings.TrimSpace(s) == "") {
			t.Fatalf("%q accepted", s)
		}
		for _, c := range s {
			if unicode.IsControl(c) && !(multiline && (c == '\t' || c == '\n' || c == '\r')) {
				t.Fatalf("%q accepted with U+%04X", s, c)
			}
		}
	})
}

// depth is the deepest nesting of objects and arrays in a valid JSON text,
// counted over its bytes outside strings.
func depth(b []byte) int {
	d, most, inStr, esc := 0, 0, false, false
	for _, c := range b {
		switch {
		case inStr && esc:
			esc = false
		case inStr && c == '\\':
			esc = true
		case inStr && c == '"':
			inStr = false
		case inStr:
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			d++
			most = max(most, d)
		case c == '}' || c == ']':
			d--
		}
	}
	return most
}

// FuzzCheckDetails: accepted details are one JSON object within the size
// and depth caps.
func FuzzCheckDetails(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":[1,{"b":"}"}]}`, `[]`, `{"a":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`, `{"a":"\u0000"}`, "{\"a\":\"\xff\"}", "{\"\xac\":" + strings.Repeat("[", 40) + strings.Repeat("]", 40) + "}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := checkDetails(b); err != nil {
			if e, ok := err.(*Error); !ok || e.Field != "details" {
				t.Fatalf("%q: %v", b, err)
			}
			return
		}
		tb := []byte(strings.TrimSpace(string(b)))
		if !json.Valid(tb) || tb[0] != '{' || len(tb) > MaxDetailsBytes || depth(tb) > MaxDetailsDepth {
			t.Fatalf("%q accepted (depth %d)", b, depth(tb))
		}
	})
}
