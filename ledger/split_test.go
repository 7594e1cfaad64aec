package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

var splitCases = []string{
	`[]`, ` [ ] `, `[{}]`, `[{"a":1}]`, `[ {"a":"]}"} , {"b":[1,{"c":"\"}"}]} ]`, "\n[\t{}\r\n]\n",
	`[{"a":"\\"}]`, `[{"a":"\\\""}]`,
	// malformed
	``, `{}`, `[`, `[{}`, `[{},]`, `[{} {}]`, `[{}]x`, `[{}]]`, `[1]`, `["a"]`, `[{"a":"]`, `[{"a":1}}]`,
	`[{}},{}]`, `[,{}]`, `[{"a":[}]`, `[{"a"}]`, `[{]`,
}

func TestSplitArrayMatchesEncodingJSON(t *testing.T) {
	for _, c := range splitCases {
		checkSplit(t, []byte(c))
	}
}

func FuzzSplitArray(f *testing.F) {
	for _, c := range splitCases {
		f.Add([]byte(c))
	}
	f.Fuzz(checkSplit)
}

// checkSplit: where encoding/json accepts data as an array of objects,
// SplitArray gives the same elements; where SplitArray accepts data and
// every element is valid JSON, encoding/json accepts the whole.
func checkSplit(t *testing.T, data []byte) {
	got, err := SplitArray(data)
	var want []json.RawMessage
	werr := json.Unmarshal(data, &want)
	if werr == nil {
		for _, w := range want {
			if len(bytes.TrimSpace(w)) == 0 || bytes.TrimSpace(w)[0] != '{' {
				werr = errNotObject
			}
		}
	}
	if werr == nil {
		if err != nil {
			t.Fatalf("%q: encoding/json accepts, SplitArray: %v", data, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%q: %d elements, want %d", data, len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], bytes.TrimSpace(want[i])) {
				t.Fatalf("%q: element %d = %q, want %q", data, i, got[i], want[i])
			}
		}
		return
	}
	if err == nil {
		for _, g := range got {
			if !json.Valid(g) {
				return // rejected later by the element's strict decoding
			}
		}
		t.Fatalf("%q: SplitArray accepts with valid elements %q, encoding/json: %v", data, got, werr)
	}
	var le *Error
	if !errors.As(err, &le) || le.Code != CodeInvalid {
		t.Fatalf("%q: error %v is not CodeInvalid", data, err)
	}
}

var errNotObject = FieldError("", "not an object")

func TestSplitArrayErrorsNameTheElement(t *testing.T) {
	for _, c := range []struct{ in, field, msg string }{
		{`[1,2]`, "[0]", "must be a JSON object, got a number"},
		{`[{"a":1},null]`, "[1]", "must be a JSON object, got null"},
		{`[[{}]]`, "[0]", "must be a JSON object, got an array"},
		{`[{},{},]`, "", "malformed JSON at byte 7: trailing comma before ']'"},
	} {
		_, err := SplitArray([]byte(c.in))
		var le *Error
		if !errors.As(err, &le) || le.Field != c.field || !strings.HasPrefix(le.Message, c.msg) {
			t.Errorf("%s: got %v, want field %q, message %q", c.in, err, c.field, c.msg)
		}
	}
}
