package ledger

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// KindKeyRotation is the entry kind of a signing-key rotation
// (KeyRotation). Only tlog.Log.Rotate appends it; Append refuses it.
const KindKeyRotation Kind = "key-rotation"

// KeyRotation is the body of a KindKeyRotation leaf: the log's signing key
// changes from OldKey to NewKey (signed-note verifier keys
// "name+hash+base64(alg||pub)", both named the log origin). The leaf
// stands at index TakeoverSize-2: the checkpoint that first covers it, of
// size TakeoverSize-1, is the last one OldKey signs, and every checkpoint
// of size TakeoverSize or more is signed by NewKey. OldSig and NewSig are
// the base64 Ed25519 signatures of OldKey and NewKey over the same bytes,
// RotationMessage(origin, TakeoverSize, OldKey, NewKey): the old key
// vouches for the new one, the new key proves it is held.
type KeyRotation struct {
	OldKey       string `json:"old_key"`
	NewKey       string `json:"new_key"`
	TakeoverSize uint64 `json:"takeover_size"`
	OldSig       string `json:"old_sig"`
	NewSig       string `json:"new_sig"`
}

// RotationMessage returns the bytes both keys of a rotation sign: five
// lines, each ending in a newline,
//
//	ledger key rotation v1
//	<origin>
//	<takeover size, decimal>
//	<old verifier key>
//	<new verifier key>
//
// Its first line holds spaces, which no note key name (a checkpoint's
// first line) may, so the message is never a checkpoint's text.
func RotationMessage(origin string, takeover uint64, oldKey, newKey string) []byte {
	return []byte("ledger key rotation v1\n" + origin + "\n" + strconv.FormatUint(takeover, 10) + "\n" + oldKey + "\n" + newKey + "\n")
}

// KeyEpoch is one key of a log's key chain: Key (a verifier key) signs
// every checkpoint of size From or more, up to the next epoch's From.
// RotationIndex is the index of the rotation leaf that brought the key in
// (-1 for the chain's first key).
type KeyEpoch struct {
	Key           string `json:"key"`
	From          uint64 `json:"from_size"`
	RotationIndex int64  `json:"rotation_index"`
}

// KeyChain is a log's signing keys in order, from its first key (From 0)
// through every rotation. Its methods do not modify it.
type KeyChain []KeyEpoch

// KeyFor returns the verifier key that signs the checkpoint of size size.
func (c KeyChain) KeyFor(size uint64) string {
	k := ""
	for _, e := range c {
		if e.From <= size {
			k = e.Key
		}
	}
	return k
}

// Head returns the chain's last key (the one that signs new checkpoints),
// "" for an empty chain.
func (c KeyChain) Head() string {
	if len(c) == 0 {
		return ""
	}
	return c[len(c)-1].Key
}

// Index returns the position of vkey in the chain, -1 when absent.
func (c KeyChain) Index(vkey string) int {
	for i, e := range c {
		if e.Key == vkey {
			return i
		}
	}
	return -1
}

// Keys returns the chain's verifier keys, first to last.
func (c KeyChain) Keys() []string {
	out := make([]string, len(c))
	for i, e := range c {
		out[i] = e.Key
	}
	return out
}

// ParseKeyRotation decodes a rotation leaf's body and checks it against
// the leaf's index and origin and the key in force before it (cur, a
// verifier key): OldKey is cur, NewKey is another key of the same name
// (the origin), TakeoverSize is index+2, and both signatures verify over
// RotationMessage. Errors name the check that failed, never key bytes.
func ParseKeyRotation(body []byte, index uint64, origin, cur string) (KeyRotation, error) {
	var r KeyRotation
	if err := json.Unmarshal(body, &r); err != nil {
		return r, errors.New("body is not a key rotation")
	}
	if r.OldKey != cur {
		return r, fmt.Errorf("its old key is not the key in force before it (%s)", keyID(cur))
	}
	if r.TakeoverSize != index+2 {
		return r, fmt.Errorf("its takeover size %d is not its index + 2 (%d)", r.TakeoverSize, index+2)
	}
	ov, err := note.NewVerifier(r.OldKey)
	if err != nil {
		return r, errors.New("its old key is malformed")
	}
	nv, err := note.NewVerifier(r.NewKey)
	if err != nil {
		return r, errors.New("its new key is malformed")
	}
	if nv.Name() != origin || ov.Name() != origin {
		return r, fmt.Errorf("its keys are not named the log origin %s", origin)
	}
	if r.NewKey == r.OldKey || nv.KeyHash() == ov.KeyHash() {
		return r, errors.New("its new key is the old key")
	}
	msg := RotationMessage(origin, r.TakeoverSize, r.OldKey, r.NewKey)
	for _, s := range []struct {
		who string
		sig string
		v   note.Verifier
	}{{"old", r.OldSig, ov}, {"new", r.NewSig, nv}} {
		if s.sig == "" {
			return r, fmt.Errorf("the %s key's signature is missing", s.who)
		}
		sig, err := base64.StdEncoding.DecodeString(s.sig)
		if err != nil || !s.v.Verify(msg, sig) {
			return r, fmt.Errorf("the %s key's signature does not verify", s.who)
		}
	}
	return r, nil
}

// keyID names a verifier key by its name and key hash ("name+hash"), the
// way note signatures name their key.
func keyID(vkey string) string {
	if i := strings.LastIndexByte(vkey, '+'); i > 0 {
		return vkey[:i]
	}
	return "a malformed key"
}

// KeyID names a verifier key "name+hash+base64" by "name+hash".
func KeyID(vkey string) string { return keyID(vkey) }

// RotationLeaf is a key-rotation leaf as a chain is built from it: its
// index and body.
type RotationLeaf struct {
	Index uint64
	Body  []byte
}

// BuildKeyChain follows the rotation leaves rots (in index order) from
// the log's first key: the first rotation's old key, or last when there is
// none (the key the log signs with). Each rotation must pass
// ParseKeyRotation against the key before it. An error names the rotation
// leaf's index and what failed.
func BuildKeyChain(origin, last string, rots []RotationLeaf) (KeyChain, error) {
	first := last
	if len(rots) > 0 {
		var r KeyRotation
		if err := json.Unmarshal(rots[0].Body, &r); err != nil {
			return nil, fmt.Errorf("key rotation leaf %d: body is not a key rotation", rots[0].Index)
		}
		first = r.OldKey
	}
	chain := KeyChain{{Key: first, From: 0, RotationIndex: -1}}
	for i, rl := range rots {
		if i > 0 && rl.Index <= rots[i-1].Index {
			return nil, fmt.Errorf("key rotation leaf %d is out of order", rl.Index)
		}
		r, err := ParseKeyRotation(rl.Body, rl.Index, origin, chain.Head())
		if err != nil {
			return nil, fmt.Errorf("key rotation leaf %d: %v", rl.Index, err)
		}
		chain = append(chain, KeyEpoch{Key: r.NewKey, From: r.TakeoverSize, RotationIndex: int64(rl.Index)})
	}
	return chain, nil
}

// EntriesLister lists log entries by kind (Queries.Entries).
type EntriesLister interface {
	Entries(ctx context.Context, f EntryFilter) (entries []Entry, next string, err error)
}

// RotationLeaves reads every key-rotation leaf of q below size (all when
// size is 0), in index order, paging to the end; each leaf's bytes must
// hash to its leaf hash and carry its index, kind and id (an error names
// the index otherwise).
func RotationLeaves(ctx context.Context, q EntriesLister, size uint64) ([]RotationLeaf, error) {
	var out []RotationLeaf
	cur := ""
	for {
		es, next, err := q.Entries(ctx, EntryFilter{Kind: KindKeyRotation, Cursor: cur, Limit: 1000})
		if err != nil {
			return nil, fmt.Errorf("read key rotations: %w", err)
		}
		for _, e := range es {
			if size > 0 && e.Index >= size {
				continue
			}
			if p := LeafProblem(e); p != "" {
				return nil, fmt.Errorf("key rotation leaf %d %s", e.Index, p)
			}
			out = append(out, RotationLeaf{Index: e.Index, Body: e.Body})
		}
		if next == "" {
			break
		}
		cur = next
	}
	// Entries pages newest first.
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// LogKeys is the answer of GET /api/v1/log/keys: the log's key chain and
// the rotation leaves it comes from (index and body), so a client that
// trusts one key of the chain can check every rotation itself
// (BuildKeyChain) rather than trust the server's chain.
type LogKeys struct {
	Keys      KeyChain      `json:"keys"`
	Rotations []RotationRef `json:"rotations"`
}

// RotationRef is one key-rotation leaf: its index and body (a KeyRotation).
type RotationRef struct {
	Index uint64          `json:"index"`
	Body  json.RawMessage `json:"body"`
}

// LogKeysOf reads q's rotation leaves and builds the LogKeys of a log
// whose current key is vkey (its name the origin).
func LogKeysOf(ctx context.Context, q EntriesLister, vkey string) (LogKeys, error) {
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return LogKeys{}, err
	}
	rots, err := RotationLeaves(ctx, q, 0)
	if err != nil {
		return LogKeys{}, err
	}
	chain, err := BuildKeyChain(v.Name(), vkey, rots)
	if err != nil {
		return LogKeys{}, err
	}
	if chain.Head() != vkey {
		return LogKeys{}, fmt.Errorf("the log's key chain ends at %s, not at the key in force %s", keyID(chain.Head()), keyID(vkey))
	}
	out := LogKeys{Keys: chain, Rotations: make([]RotationRef, len(rots))}
	for i, r := range rots {
		out.Rotations[i] = RotationRef{Index: r.Index, Body: r.Body}
	}
	return out, nil
}
