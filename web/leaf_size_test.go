package web

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// TestLeafAnswerSize: an entry read back (GET /api/v1/log/leaves/N and
// /api/v1/log/entries/{id}) costs about twice its leaf (the body and the
// leaf text), however its body is shaped: a leaf of many small numbers
// (which indentation multiplies) and of "<", ">" and "&" (which HTML
// escaping writes in six bytes each) included. The answer still carries
// the exact leaf bytes and the entry's body.
func TestLeafAnswerSize(t *testing.T) {
	e := newAPIEnv(t, Config{})
	ev := testEvidence(0)
	tokens := make([]int, 60_000)
	for i := range tokens {
		tokens[i] = i % 10
	}
	ev["details"] = map[string]any{"tokens": tokens, "text": strings.Repeat("<a&b>", 20_000)}
	code, body := e.do(t, "POST", "/api/v1/evidence", e.record, ev)
	if code != 201 {
		t.Fatalf("post: %d %s", code, body)
	}
	var res struct {
		ID    string `json:"id"`
		Index uint64 `json:"index"`
	}
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatal(err)
	}
	stored, err := e.store.EntryAt(t.Context(), res.Index)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{fmt.Sprintf("/api/v1/log/leaves/%d", res.Index), "/api/v1/log/entries/" + res.ID} {
		code, answer := e.do(t, "GET", path, "", nil)
		if code != 200 {
			t.Fatalf("%s: %d %s", path, code, answer)
		}
		var got EntryJSON
		if err := json.Unmarshal(answer, &got); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if got.Leaf != string(stored.Raw) || got.Entry.Index != res.Index || got.Entry.ID != res.ID {
			t.Fatalf("%s: the answer does not carry the stored leaf", path)
		}
		var want, have any
		if json.Unmarshal(stored.Body, &want) != nil || json.Unmarshal(got.Entry.Body, &have) != nil || !reflect.DeepEqual(want, have) {
			t.Fatalf("%s: the answer's body differs from the stored one", path)
		}
		if limit := 2*len(stored.Raw) + 1024; len(answer) > limit {
			t.Fatalf("%s: answer of %d bytes for a leaf of %d (%.1fx), want at most %d", path, len(answer), len(stored.Raw), float64(len(answer))/float64(len(stored.Raw)), limit)
		}
	}
}
