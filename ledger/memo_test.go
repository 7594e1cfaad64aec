package ledger

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// bigDetails returns a details object of about n bytes, its keys out of
// order and spaced, so that canonicalizing changes it.
func bigDetails(n int) []byte {
	var b strings.Builder
	b.WriteString("{ ")
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteString(" , ")
		}
		fmt.Fprintf(&b, `"k%07d" : [ %d, "v<%d>" ]`, 9999999-i, i, i)
	}
	b.WriteString(" }")
	return []byte(b.String())
}

// The memo gives what the function gives: for a large input, for its
// canonical result given again, and for a large invalid input (an error
// every time, never kept); and it stays within its byte bound.
func TestCanonicalMemo(t *testing.T) {
	in := bigDetails(200 << 10)
	want, err := canonicalJSON(in)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		got, err := CanonicalJSON(in)
		if err != nil || string(got) != string(want) {
			t.Fatalf("call %d: memoized result differs (%v)", i, err)
		}
		got[0] = 'X' // callers get copies
	}
	if got, err := CanonicalJSON(want); err != nil || string(got) != string(want) {
		t.Fatalf("canonical input: %v", err)
	}
	bad := append(append([]byte(nil), in[:len(in)-1]...), ',')
	for i := range 2 {
		if _, err := CanonicalJSON(bad); err == nil {
			t.Fatalf("call %d: invalid JSON accepted", i)
		}
	}
	var m byteMemo
	for i := range 600 {
		x := bigDetails(memoMin + i)
		if _, err := m.do(x, canonicalJSON); err != nil {
			t.Fatal(err)
		}
		if m.bytes > memoMaxBytes {
			t.Fatalf("memo holds %d bytes, bound %d", m.bytes, memoMaxBytes)
		}
	}
}

// A signed payload's canonical bytes are the same through the memo, and
// preparing them again gives them back (the memo maps a result to itself).
func TestPayloadMemo(t *testing.T) {
	var e map[string]any
	if err := json.Unmarshal(benchEvidenceBody(3), &e); err != nil {
		t.Fatal(err)
	}
	e["details"] = json.RawMessage(bigDetails(100 << 10))
	p, _ := json.Marshal(e)
	want, err := payloadEvidence(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range [][]byte{p, p, want} {
		got, err := PayloadEvidence(in)
		if err != nil || string(got) != string(want) {
			t.Fatalf("memoized payload differs: %v", err)
		}
	}
	if again, err := payloadEvidence(want); err != nil || string(again) != string(want) {
		t.Fatalf("canonical payload is not a fixed point: %v", err)
	}
}
