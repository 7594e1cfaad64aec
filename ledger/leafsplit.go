package ledger

import (
	"encoding/json"
	"errors"
	"time"
)

// LeafHead is the part of canonical leaf bytes before the body, as
// SplitLeaf reads it. RecordedAt is the RFC 3339 text, not parsed.
type LeafHead struct {
	Index      uint64
	Kind       Kind
	ID         string
	RecordedAt string
}

// SplitLeaf reads canonical leaf bytes (EncodeLeaf's output:
// {"v":1,"index":N,"kind":"K","id":"I","recorded_at":"T","body":B})
// without a JSON decoder, and returns the head and B, a subslice of raw.
// ok is false for anything else, including a string that holds an escape,
// a control character or a non-ASCII byte, an index with a leading zero
// or beyond uint64, or white space around B; a caller then decodes raw as
// JSON (LeafBody does). B itself is not checked: whenever it is valid
// JSON, raw is a JSON object with exactly Leaf's fields and json.Unmarshal
// gives the same index, kind, id, time text and body (FuzzSplitLeaf). A
// caller that trusts the bytes' content checks them against the leaf hash
// and the content id (tlog.VerifiedStore does). Safe for concurrent use.
func SplitLeaf(raw []byte) (h LeafHead, body []byte, ok bool) {
	p, ok := cutPrefix(raw, `{"v":1,"index":`)
	if !ok {
		return h, nil, false
	}
	n := 0
	for n < len(p) && p[n] >= '0' && p[n] <= '9' {
		if n == 20 || h.Index > (1<<64-1-uint64(p[n]-'0'))/10 {
			return h, nil, false
		}
		h.Index = h.Index*10 + uint64(p[n]-'0')
		n++
	}
	if n == 0 || (n > 1 && p[0] == '0') {
		return h, nil, false
	}
	p = p[n:]
	var kind, id, at []byte
	if kind, p, ok = leafString(p, `,"kind":"`); !ok {
		return h, nil, false
	}
	if id, p, ok = leafString(p, `,"id":"`); !ok {
		return h, nil, false
	}
	if at, p, ok = leafString(p, `,"recorded_at":"`); !ok {
		return h, nil, false
	}
	if p, ok = cutPrefix(p, `,"body":`); !ok || len(p) < 2 || p[len(p)-1] != '}' {
		return h, nil, false
	}
	body = p[:len(p)-1]
	if jsonSpace(body[0]) || jsonSpace(body[len(body)-1]) {
		return h, nil, false
	}
	h.Kind, h.ID, h.RecordedAt = Kind(kind), string(id), string(at)
	return h, body, true
}

func jsonSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func cutPrefix(p []byte, prefix string) ([]byte, bool) {
	if len(p) < len(prefix) || string(p[:len(prefix)]) != prefix {
		return p, false
	}
	return p[len(prefix):], true
}

// leafString cuts prefix and then a string of printable ASCII without
// escapes up to its closing quote.
func leafString(p []byte, prefix string) (s, rest []byte, ok bool) {
	if p, ok = cutPrefix(p, prefix); !ok {
		return nil, p, false
	}
	for i, c := range p {
		switch {
		case c == '"':
			return p[:i], p[i+1:], true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return nil, p, false
		}
	}
	return nil, p, false
}

// errLeafJSON is LeafBody's error for bytes that are not a leaf.
var errLeafJSON = errors.New("stored leaf is not valid JSON: run ledger audit")

// LeafBody returns the body of the stored leaf bytes raw: through
// SplitLeaf when raw has the canonical layout, else by decoding raw as a
// Leaf. The error (raw is not a leaf) says to run the audit and names
// nothing of raw.
func LeafBody(raw []byte) (json.RawMessage, error) {
	if _, body, ok := SplitLeaf(raw); ok {
		return body, nil
	}
	l, err := DecodeLeafJSON(raw)
	return l.Body, err
}

// leafHead returns raw's head, body and time, through SplitLeaf or, when
// raw is not in the canonical layout, by decoding it.
func leafHead(raw []byte) (LeafHead, []byte, time.Time, error) {
	if h, body, ok := SplitLeaf(raw); ok {
		t, err := time.Parse(time.RFC3339Nano, h.RecordedAt)
		if err != nil {
			return h, nil, t, errLeafJSON
		}
		return h, body, t, nil
	}
	l, err := DecodeLeafJSON(raw)
	return LeafHead{Index: l.Index, Kind: l.Kind, ID: l.ID}, l.Body, l.RecordedAt, err
}

// DecodeLeafJSON decodes raw as a Leaf with encoding/json, for bytes
// outside SplitLeaf's layout; its error is errLeafJSON.
func DecodeLeafJSON(raw []byte) (Leaf, error) {
	var l Leaf
	if err := json.Unmarshal(raw, &l); err != nil {
		return Leaf{}, errLeafJSON
	}
	return l, nil
}

// LeafProblem checks an entry against its own bytes: the leaf hash of
// Raw, and the index, kind, id and body the bytes carry. "" when it holds.
func LeafProblem(e Entry) string {
	if LeafHash(e.Raw) != e.LeafHash {
		return "does not match its leaf hash"
	}
	h, body, at, err := leafHead(e.Raw)
	if err != nil {
		return "is not a leaf"
	}
	if h.Index != e.Index || h.Kind != e.Kind || h.ID != e.ID || !at.Equal(e.RecordedAt) {
		return "does not match the index, kind, id or time its bytes carry"
	}
	if EntryID(h.Kind, body) != h.ID {
		return "does not match its content id"
	}
	return ""
}
