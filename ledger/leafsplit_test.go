package ledger

import (
	"bytes"
	"encoding/json"
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
