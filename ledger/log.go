package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/transparency-dev/merkle/rfc6962"
)

// Kind is the kind of fact a log entry records.
type Kind string

// The entry kinds. Every appended fact is one leaf of the log.
const (
	KindEvidence Kind = "evidence"
	KindHead     Kind = "head"     // a head signature verification
	KindRelease  Kind = "release"  // a release (re)definition
	KindWaiver   Kind = "waiver"   // a waiver of one gate for one release's pins
	KindApproval Kind = "approval" // a release approval
	// KindSupersede retracts one evidence or head record for one release's
	// pins (an infrastructure fault, say): attributed and reasoned.
	KindSupersede Kind = "supersede"
	KindPolicy    Kind = "policy" // a registered trust policy (PolicyRecord)
	// KindLog records an act on the log itself: a restore accepted with
	// `ledger restore --accept-rollback` (see LogEvent).
	KindLog Kind = "log"
)

// ValidKind reports whether k is one of the entry kinds.
func ValidKind(k Kind) bool {
	return slices.Contains(kinds, k)
}

// kinds is every entry kind, in the order Kinds lists them.
var kinds = []Kind{KindEvidence, KindHead, KindRelease, KindWaiver, KindApproval, KindSupersede, KindPolicy, KindRunnerKey, KindToken, KindTokenRevocation, KindLog, KindRunOutcome, KindKeyRotation, KindOriginal}

// Kinds returns every entry kind ValidKind accepts, as a new slice.
func Kinds() []Kind { return slices.Clone(kinds) }

// KindList renders Kinds for messages: "evidence, head, ... or original".
func KindList() string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Hash is a SHA-256 hash; it encodes as lowercase hex in JSON.
type Hash [32]byte

func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// MarshalText encodes h as lowercase hex.
func (h Hash) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText decodes 64 hex digits.
func (h *Hash) UnmarshalText(b []byte) error {
	if len(b) != 64 {
		return fmt.Errorf("hash must be 64 hex digits, got %d characters", len(b))
	}
	_, err := hex.Decode(h[:], b)
	return err
}

// Leaf is the canonical content of one log entry: exactly these fields, in
// this order, encoded by encoding/json with Body already canonical. The bytes
// of that encoding are what the log hashes (RFC 6962 leaf hash:
// SHA-256(0x00 || bytes)).
type Leaf struct {
	V          int             `json:"v"`     // leaf format version, 1
	Index      uint64          `json:"index"` // the leaf's own position: a reordered row cannot pass as another
	Kind       Kind            `json:"kind"`
	ID         string          `json:"id"`
	RecordedAt time.Time       `json:"recorded_at"`
	Body       json.RawMessage `json:"body"`
}

// Entry is a stored log entry: its index (0-based leaf index), the exact
// bytes that were hashed and their leaf hash.
type Entry struct {
	Index      uint64          `json:"index"`
	ID         string          `json:"id"`
	Kind       Kind            `json:"kind"`
	RecordedAt time.Time       `json:"recorded_at"`
	LeafHash   Hash            `json:"leaf_hash"`
	Body       json.RawMessage `json:"body"`
	Raw        []byte          `json:"-"` // the exact hashed bytes
}

// EntryID returns the content id of a body of kind k: the first 32 hex
// digits of SHA-256(kind || 0x00 || canonical body). Identical resubmissions
// therefore get the same id, which is how the store makes them idempotent.
func EntryID(k Kind, canonicalBody []byte) string {
	h := sha256.New()
	h.Write([]byte(k))
	h.Write([]byte{0})
	h.Write(canonicalBody)
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// EncodeLeaf returns the canonical bytes of l. l.Body must already be
// canonical (see CanonicalJSON); RecordedAt is converted to UTC.
func EncodeLeaf(l Leaf) ([]byte, error) {
	l.RecordedAt = l.RecordedAt.UTC()
	return marshalNoEscape(l)
}

// DecodeLeaf parses canonical leaf bytes and checks that re-encoding gives
// the same bytes.
func DecodeLeaf(raw []byte) (Leaf, error) {
	var l Leaf
	if err := json.Unmarshal(raw, &l); err != nil {
		return l, fmt.Errorf("decode leaf: %w", err)
	}
	again, err := EncodeLeaf(l)
	if err != nil {
		return l, err
	}
	if !bytes.Equal(again, raw) {
		return l, fmt.Errorf("leaf bytes are not canonical")
	}
	return l, nil
}

// LeafHash returns the RFC 6962 leaf hash of raw: SHA-256(0x00 || raw).
func LeafHash(raw []byte) Hash {
	var h Hash
	copy(h[:], rfc6962.DefaultHasher.HashLeaf(raw))
	return h
}

// CanonicalJSON returns the canonical form of a JSON value: objects with
// keys sorted (by encoding/json's map ordering), no insignificant space,
// numbers kept as written, no HTML escaping. It errors on invalid JSON or
// trailing data.
func CanonicalJSON(in []byte) ([]byte, error) {
	return canonicalMemo.do(in, canonicalJSON)
}

var canonicalMemo byteMemo

func canonicalJSON(in []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after JSON value")
	}
	return marshalNoEscape(v)
}

// CanonicalBody encodes v (a record struct) to canonical JSON.
func CanonicalBody(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return CanonicalJSON(b)
}

// Checkpoint is the log's state at a size: the Merkle root over leaves
// [0, Size). Note is the signed note (golang.org/x/mod/sumdb/note) whose text
// is the checkpoint body "<origin>\n<size>\n<base64 root>\n".
type Checkpoint struct {
	Origin    string    `json:"origin"`
	Size      uint64    `json:"size"`
	Root      Hash      `json:"root"`
	Note      string    `json:"note"`
	CreatedAt time.Time `json:"created_at"`
}

// InclusionProof proves that the leaf at Index is in the tree of TreeSize
// leaves; Hashes are the RFC 6962 audit path, bottom to top.
type InclusionProof struct {
	Index    uint64 `json:"index"`
	TreeSize uint64 `json:"tree_size"`
	LeafHash Hash   `json:"leaf_hash"`
	Root     Hash   `json:"root"`
	Hashes   []Hash `json:"hashes"`
}

// ConsistencyProof proves that the tree of size From is a prefix of the
// tree of size To (RFC 6962 section 2.1.2).
type ConsistencyProof struct {
	From     uint64 `json:"from"`
	To       uint64 `json:"to"`
	FromRoot Hash   `json:"from_root"`
	ToRoot   Hash   `json:"to_root"`
	Hashes   []Hash `json:"hashes"`
}

// EntryKey returns the index key of a body of kind k: the lane for
// evidence, the repository for heads, the "version" field for releases,
// waivers, approvals and supersedes, the "name" field for policies. It
// returns "" when the body has no such field.
func EntryKey(k Kind, body []byte) string {
	var probe struct {
		Lane       string `json:"lane"`
		Repository string `json:"repository"`
		Version    string `json:"version"`
		Name       string `json:"name"`
	}
	_ = json.Unmarshal(body, &probe)
	switch k {
	case KindEvidence:
		return probe.Lane
	case KindHead:
		return probe.Repository
	case KindPolicy:
		return probe.Name
	default:
		return probe.Version
	}
}

// AppendLeaf appends the canonical bytes of l to dst without re-encoding
// the body: it equals EncodeLeaf(l) when l.Body is compact JSON (as
// PrepareRecord and CanonicalJSON return) and Kind and ID need no JSON
// escaping (valid kinds and content ids never do). The store's writer uses
// it on bodies it prepared itself; anything else should call EncodeLeaf.
func AppendLeaf(dst []byte, l Leaf) []byte {
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, int64(l.V), 10)
	dst = append(dst, `,"index":`...)
	dst = strconv.AppendUint(dst, l.Index, 10)
	dst = append(dst, `,"kind":"`...)
	dst = append(dst, l.Kind...)
	dst = append(dst, `","id":"`...)
	dst = append(dst, l.ID...)
	dst = append(dst, `","recorded_at":"`...)
	dst = l.RecordedAt.UTC().AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","body":`...)
	dst = append(dst, l.Body...)
	return append(dst, '}')
}
