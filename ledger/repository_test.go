package ledger

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestNormalizeRepository(t *testing.T) {
	for in, want := range map[string]string{
		"git@github.com:ml-explore/mlx.git":            "github.com/ml-explore/mlx",
		"https://github.com/ml-explore/mlx":            "github.com/ml-explore/mlx",
		"https://user:pw@github.com:443/a/b.git/":      "github.com/a/b",
		"ssh://git@gitlab.example:2222/group/sub/repo": "gitlab.example/group/sub/repo",
		"git://example.org/x.git":                      "example.org/x",
		"/srv/git/ledger.git":                          "/srv/git/ledger",
		"./relative/repo/":                             "./relative/repo",
		"github.com/evidence-ledger/ledger":            "github.com/evidence-ledger/ledger",
		"C:/repos/x":                                   "C:/repos/x",
	} {
		if got := NormalizeRepository(in); got != want {
			t.Errorf("NormalizeRepository(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestUnknownFieldPath(t *testing.T) {
	var e Evidence
	err := DecodeStrict([]byte(`{"lane":"x/v1","subject":{"repository":"r","branch":"main"}}`), &e)
	le, ok := err.(*Error)
	if !ok || le.Field != "subject.branch" || le.Message != "unknown field" {
		t.Fatalf("got %#v", err)
	}
	var list []Evidence
	err = DecodeStrict([]byte(`[{"lane":"x/v1"},{"device":{"model":"m","colour":"red"}}]`), &list)
	if le, ok := err.(*Error); !ok || le.Field != "[1].device.colour" {
		t.Fatalf("got %#v", err)
	}
}

func TestAppendLeafEqualsEncodeLeaf(t *testing.T) {
	for i, body := range []string{`{}`, `{"a":1,"b":[1,2,{"c":"<x> & \"q\""}]}`, `{"lane":"x/v1","n":1.50}`} {
		c, err := CanonicalJSON([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		l := Leaf{V: 1, Index: uint64(i * 1000003), Kind: KindEvidence, ID: EntryID(KindEvidence, c), RecordedAt: time.Date(2026, 11, 29, 1, 2, 3, i*7, time.FixedZone("x", 3600)), Body: c}
		want, err := EncodeLeaf(l)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendLeaf(nil, l); string(got) != string(want) {
			t.Fatalf("AppendLeaf:\n%s\nEncodeLeaf:\n%s", got, want)
		}
	}
}

// Strict decoding (encoding/json/v2 semantics): every rejection names the
// field and says why.
func TestDecodeStrictErrors(t *testing.T) {
	for _, c := range []struct{ in, field, msg string }{
		{`{"lane":"x/v1","lane":"y/v1"}`, "lane", "duplicate field"},
		{`{"Lane":"x/v1"}`, "Lane", "unknown field"},
		{`{"subject":{"commit":1}}`, "subject.commit", "wrong type: got JSON number, want string"},
		{`{"cases_exact":"3"}`, "cases_exact", "wrong type: got JSON string, want int"},
		{`{"cases_exact":1.5}`, "cases_exact", "wrong type: got JSON number 1.5, want int"},
		{`{"cases_exact":2e2}`, "cases_exact", "wrong type: got JSON number 2e2, want int"},
		{`{"failing_cases":["a",7]}`, "failing_cases[1]", "wrong type: got JSON number, want string"},
		{`{"started_at":"yesterday"}`, "started_at", "bad time (want RFC 3339)"},
		{`{"lane":"x/v1"} {}`, "", "trailing data after the JSON value"},
		{`{"lane":`, "", "empty or truncated JSON"},
		{``, "", "empty or truncated JSON"},
		{"{\"lane\":\"\xff\"}", "lane", "malformed JSON at byte 9: invalid UTF-8"},
	} {
		var e Evidence
		err := DecodeStrict([]byte(c.in), &e)
		le, ok := err.(*Error)
		if !ok || le.Code != CodeInvalid || le.Field != c.field || !strings.HasPrefix(le.Message, c.msg) {
			t.Errorf("%q: got %#v, want field %q, message %q...", c.in, err, c.field, c.msg)
		}
	}
}

func TestValidateNamesTheNegativeCount(t *testing.T) {
	var e Evidence
	if err := DecodeStrict(benchEvidenceBody(1), &e); err != nil {
		t.Fatal(err)
	}
	e.CasesExact = -1
	if le, ok := e.Validate().(*Error); !ok || le.Field != "cases_exact" {
		t.Fatalf("got %v", e.Validate())
	}
}

func TestDeeplyNestedErrorIsShort(t *testing.T) {
	deep := `{"details":` + strings.Repeat("[", 5000) + "1," + strings.Repeat("]", 5000) + "}"
	var e Evidence
	err := DecodeStrict([]byte(deep), &e)
	if err == nil || len(err.Error()) > 600 {
		t.Fatalf("error of %d bytes: %.200v", len(fmt.Sprint(err)), err)
	}
}
