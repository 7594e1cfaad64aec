package ledger

import (
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
