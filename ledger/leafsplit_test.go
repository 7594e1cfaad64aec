package ledger

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestSplitLeafCanonical: every leaf EncodeLeaf writes splits without a
// decoder, into what json.Unmarshal reads from it.
func TestSplitLeafCanonical(t *testing.T) {
	bodies := []string{`{}`, `{"a":1}`, `[1,2]`, `{"s":"<\u003e\"}\\"}`, `{"x":{"body":{}}}`}
	for i, b := range bodies {
		for _, idx := range []uint64{0, 7, 1<<64 - 1} {
			raw, err := EncodeLeaf(Leaf{V: 1, Index: idx, Kind: KindEvidence, ID: EntryID(KindEvidence, []byte(b)), RecordedAt: time.Unix(1700000000, int64(i)*1001), Body: json.RawMessage(b)})
			if err != nil {
				t.Fatal(err)
			}
			h, body, ok := SplitLeaf(raw)
			if !ok {
				t.Fatalf("%s: canonical leaf not split", raw)
			}
			var l Leaf
			if err := json.Unmarshal(raw, &l); err != nil {
				t.Fatal(err)
			}
			if h.Index != l.Index || h.Kind != l.Kind || h.ID != l.ID || !bytes.Equal(body, l.Body) || h.RecordedAt != l.RecordedAt.Format(time.RFC3339Nano) {
				t.Fatalf("%s: split %+v %s, decoded %+v", raw, h, body, l)
			}
		}
	}
}

// TestSplitLeafRefuses: bytes outside the canonical layout are left to
// the decoder, and LeafBody still reads a valid non-canonical leaf.
func TestSplitLeafRefuses(t *testing.T) {
	for _, raw := range []string{
		``, `{}`, `{"v":2,"index":1,"kind":"e","id":"i","recorded_at":"t","body":{}}`,
		`{"v":1,"index":01,"kind":"e","id":"i","recorded_at":"t","body":{}}`,
		`{"v":1,"index":18446744073709551616,"kind":"e","id":"i","recorded_at":"t","body":{}}`,
		`{"v":1,"index":,"kind":"e","id":"i","recorded_at":"t","body":{}}`,
		`{"v":1,"index":1,"kind":"e\u0041","id":"i","recorded_at":"t","body":{}}`,
		`{"v":1,"index":1,"kind":"é","id":"i","recorded_at":"t","body":{}}`,
		`{"v":1,"index":1,"kind":"e","id":"i","recorded_at":"t","body":}`,
		`{"v":1, "index":1,"kind":"e","id":"i","recorded_at":"t","body":{}}`,
	} {
		if h, b, ok := SplitLeaf([]byte(raw)); ok {
			t.Errorf("%s: split into %+v %s", raw, h, b)
		}
	}
	body, err := LeafBody([]byte(`{"v":1, "index":1,"kind":"e","id":"i","recorded_at":"2020-01-01T00:00:00Z","body":{"a":1}}`))
	if err != nil || string(body) != `{"a":1}` {
		t.Fatalf("non-canonical leaf: %s %v", body, err)
	}
	if _, err := LeafBody([]byte(`{"v":1,"index":1,`)); err == nil || err.Error() != "stored leaf is not valid JSON: run ledger audit" {
		t.Fatalf("broken leaf: %v", err)
	}
}

// FuzzSplitLeaf: whenever SplitLeaf splits bytes whose body is valid
// JSON, json.Unmarshal reads the same leaf from them.
func FuzzSplitLeaf(f *testing.F) {
	f.Add([]byte(`{"v":1,"index":3,"kind":"evidence","id":"ab","recorded_at":"2020-01-01T00:00:00Z","body":{"a":1}}`))
	f.Add([]byte(`{"v":1,"index":0,"kind":"e","id":"","recorded_at":"","body":[]}`))
	f.Add([]byte(`{"v":1,"index":1,"kind":"e","id":"i","recorded_at":"t","body":{},"body":{}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		h, body, ok := SplitLeaf(raw)
		if !ok || !json.Valid(body) {
			return
		}
		var l struct {
			V          int             `json:"v"`
			Index      uint64          `json:"index"`
			Kind       Kind            `json:"kind"`
			ID         string          `json:"id"`
			RecordedAt string          `json:"recorded_at"`
			Body       json.RawMessage `json:"body"`
		}
		if err := json.Unmarshal(raw, &l); err != nil {
			t.Fatalf("%q split but does not decode: %v", raw, err)
		}
		if l.V != 1 || h.Index != l.Index || h.Kind != l.Kind || h.ID != l.ID || h.RecordedAt != l.RecordedAt || !bytes.Equal(body, l.Body) {
			t.Fatalf("%q: split %+v %q, decoded %+v", raw, h, body, l)
		}
	})
}

// TestLeafProblemEditedLeaf: a stored leaf whose content was edited and
// rehashed (leaf_hash recomputed by whoever edited the row) is never taken
// as the entry it claims to be, whether or not the edit keeps SplitLeaf's
// layout. An edit of the bytes alone (an escape, another key order) that
// keeps the content passes this check; its new leaf hash is then not in the
// signed tree, which tlog.VerifiedStore.check refuses (ledger/sqlite/verifyread_test.go).
func TestLeafProblemEditedLeaf(t *testing.T) {
	body := `{"lane":"x/v1","status":"failed"}`
	at := time.Unix(1700000000, 5).UTC()
	raw, err := EncodeLeaf(Leaf{V: 1, Index: 27, Kind: KindEvidence, ID: EntryID(KindEvidence, []byte(body)), RecordedAt: at, Body: json.RawMessage(body)})
	if err != nil {
		t.Fatal(err)
	}
	e := Entry{Index: 27, ID: EntryID(KindEvidence, []byte(body)), Kind: KindEvidence, RecordedAt: at, Raw: raw, LeafHash: LeafHash(raw)}
	if p := LeafProblem(e); p != "" {
		t.Fatalf("genuine leaf: %s", p)
	}
	passed := `{"lane":"x/v1","status":"passed"}`
	s := string(raw)
	for name, edited := range map[string]string{
		"body changed":       strings.Replace(s, body, passed, 1),
		"second body key":    strings.TrimSuffix(s, "}") + `,"body":` + passed + `}`,
		"space around body":  strings.Replace(s, `"body":`+body, `"body": `+passed+` `, 1),
		"other index":        strings.Replace(s, `"index":27`, `"index":28`, 1),
		"leading-zero index": strings.Replace(s, `"index":27`, `"index":027`, 1),
	} {
		ed := e
		ed.Raw = []byte(edited)
		ed.LeafHash = LeafHash(ed.Raw)
		if edited == s {
			t.Fatalf("%s: the edit changed nothing", name)
		}
		// The row's id column follows the edit too where the edit is of the body.
		if b, err := LeafBody(ed.Raw); err == nil && json.Valid(b) && name == "body changed" {
			ed.ID = EntryID(KindEvidence, b)
		}
		if p := LeafProblem(ed); p == "" {
			t.Errorf("%s: %s taken as genuine", name, edited)
		}
	}
}
