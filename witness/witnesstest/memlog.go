// Package witnesstest has test helpers for the witness, proof and audit
// packages: MemLog, an in-memory ledger.LogReader that can be forked and
// cut back under the same key, and Litewitness, a real, independent
// c2sp.org/tlog-witness (filippo.io/torchwood's litewitness) run as its
// own process on loopback.
package witnesstest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/evidence-ledger/ledger/ledger"
)

// MemLog is an in-memory Merkle log (RFC 6962 hashing, via
// golang.org/x/mod/sumdb/tlog) that signs a checkpoint after every Append.
// It implements ledger.LogReader and ledger.Keys and is safe for concurrent
// use.
type MemLog struct {
	mu     sync.Mutex
	skey   string
	signer note.Signer
	vkey   string
	leaves [][]byte
	hashes []tlog.Hash // tlog stored hashes
	cps    map[uint64]ledger.Checkpoint
	latest ledger.Checkpoint
	// Now is the clock of checkpoint times; default time.Now.
	Now func() time.Time
}

// NewMemLog returns an empty log whose key (and origin) is named name.
func NewMemLog(name string) (*MemLog, error) {
	skey, _, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		return nil, err
	}
	return NewMemLogWithKey(skey)
}

// NewMemLogWithKey returns an empty log signing with skey (a note signer
// key).
func NewMemLogWithKey(skey string) (*MemLog, error) {
	s, err := note.NewSigner(skey)
	if err != nil {
		return nil, err
	}
	m := &MemLog{skey: skey, signer: s, cps: map[uint64]ledger.Checkpoint{}, Now: time.Now}
	m.vkey, err = verifierKey(skey)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.signLocked(); err != nil {
		return nil, err
	}
	return m, nil
}

// verifierKey derives "name+hash+base64(alg||pub)" from a signer key
// "PRIVATE+KEY+name+hash+base64(alg||seed)" (the base64 may contain '+').
func verifierKey(skey string) (string, error) {
	parts := strings.SplitN(skey, "+", 5)
	if len(parts) != 5 {
		return "", fmt.Errorf("malformed signer key")
	}
	raw, err := base64.StdEncoding.DecodeString(parts[4])
	if err != nil || len(raw) != 33 {
		return "", fmt.Errorf("malformed signer key")
	}
	pub := ed25519.NewKeyFromSeed(raw[1:]).Public().(ed25519.PublicKey)
	return note.NewEd25519VerifierKey(parts[2], pub)
}

// Origin returns the log origin (the key name).
func (m *MemLog) Origin() string { return m.signer.Name() }

// SignerKey returns the note signer key ("PRIVATE+KEY+...").
func (m *MemLog) SignerKey() string { return m.skey }

// VerifierKey returns the note verifier key of the checkpoints.
func (m *MemLog) VerifierKey() string { return m.vkey }

// SignNote signs text as a note with the log key.
func (m *MemLog) SignNote(text string) (string, error) {
	b, err := note.Sign(&note.Note{Text: text}, m.signer)
	return string(b), err
}

func (m *MemLog) hashReader() tlog.HashReader {
	return tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			if x < 0 || x >= int64(len(m.hashes)) {
				return nil, fmt.Errorf("hash index %d out of range", x)
			}
			out[i] = m.hashes[x]
		}
		return out, nil
	})
}

// Append appends leaves (their bytes are the leaf data hashed as RFC 6962
// leaves) and signs a checkpoint of the new size, which it returns.
func (m *MemLog) Append(leaves ...[]byte) (ledger.Checkpoint, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range leaves {
		hs, err := tlog.StoredHashes(int64(len(m.leaves)), l, m.hashReader())
		if err != nil {
			return ledger.Checkpoint{}, err
		}
		m.hashes = append(m.hashes, hs...)
		m.leaves = append(m.leaves, append([]byte(nil), l...))
	}
	if err := m.signLocked(); err != nil {
		return ledger.Checkpoint{}, err
	}
	return m.latest, nil
}

// AppendN appends n leaves "<tag> <i>" and returns the checkpoint.
func (m *MemLog) AppendN(tag string, n int) (ledger.Checkpoint, error) {
	ls := make([][]byte, n)
	base := m.Size()
	for i := range ls {
		ls[i] = fmt.Appendf(nil, "%s %d", tag, base+uint64(i))
	}
	return m.Append(ls...)
}

func (m *MemLog) signLocked() error {
	n := int64(len(m.leaves))
	root, err := tlog.TreeHash(n, m.hashReader())
	if err != nil {
		return err
	}
	text := fmt.Sprintf("%s\n%d\n%s\n", m.signer.Name(), n, base64.StdEncoding.EncodeToString(root[:]))
	signed, err := note.Sign(&note.Note{Text: text}, m.signer)
	if err != nil {
		return err
	}
	cp := ledger.Checkpoint{Origin: m.signer.Name(), Size: uint64(n), Root: ledger.Hash(root), Note: string(signed), CreatedAt: m.Now().UTC()}
	m.cps[cp.Size] = cp
	m.latest = cp
	return nil
}

// Size returns the number of leaves.
func (m *MemLog) Size() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return uint64(len(m.leaves))
}

// Fork returns a new log with the first size leaves of m and its
// checkpoints up to size, signing with the same key: appending other
// leaves to it makes a fork of m; not appending makes a rollback.
func (m *MemLog) Fork(size uint64) (*MemLog, error) {
	m.mu.Lock()
	leaves := append([][]byte(nil), m.leaves[:min(size, uint64(len(m.leaves)))]...)
	m.mu.Unlock()
	f, err := NewMemLogWithKey(m.skey)
	if err != nil {
		return nil, err
	}
	f.Now = m.Now
	if len(leaves) > 0 {
		if _, err := f.Append(leaves...); err != nil {
			return nil, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	for s, cp := range m.cps {
		if s <= size {
			f.cps[s] = cp
		}
	}
	return f, nil
}

// DeleteCheckpoint forgets the stored checkpoint of size size (a deleted
// checkpoint row).
func (m *MemLog) DeleteCheckpoint(size uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.cps, size)
}

// Entry returns the entry whose id is id (hex of its leaf hash's first 16
// bytes).
func (m *MemLog) Entry(ctx context.Context, id string) (ledger.Entry, error) {
	m.mu.Lock()
	n := len(m.leaves)
	m.mu.Unlock()
	for i := range n {
		e, _ := m.EntryAt(ctx, uint64(i))
		if e.ID == id {
			return e, nil
		}
	}
	return ledger.Entry{}, ledger.NotFound("no entry %s", id)
}

// EntryAt returns the entry at index.
func (m *MemLog) EntryAt(_ context.Context, index uint64) (ledger.Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if index >= uint64(len(m.leaves)) {
		return ledger.Entry{}, ledger.NotFound("no entry at index %d", index)
	}
	raw := m.leaves[index]
	h := ledger.LeafHash(raw)
	return ledger.Entry{Index: index, ID: hex.EncodeToString(h[:16]), Kind: ledger.KindEvidence, LeafHash: h, Raw: raw}, nil
}

// Checkpoint returns the latest checkpoint.
func (m *MemLog) Checkpoint(context.Context) (ledger.Checkpoint, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.latest, nil
}

// CheckpointAt returns the checkpoint of size size (0: the latest).
func (m *MemLog) CheckpointAt(_ context.Context, size uint64) (ledger.Checkpoint, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if size == 0 {
		return m.latest, nil
	}
	cp, ok := m.cps[size]
	if !ok {
		return ledger.Checkpoint{}, ledger.NotFound("no checkpoint of size %d", size)
	}
	return cp, nil
}

// InclusionProof proves leaf index in the tree of size (0: the latest).
func (m *MemLog) InclusionProof(_ context.Context, index, size uint64) (ledger.InclusionProof, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if size == 0 {
		size = uint64(len(m.leaves))
	}
	if index >= size || size > uint64(len(m.leaves)) {
		return ledger.InclusionProof{}, ledger.Errorf(ledger.CodeInvalid, "no leaf %d in a tree of %d", index, size)
	}
	p, err := tlog.ProveRecord(int64(size), int64(index), m.hashReader())
	if err != nil {
		return ledger.InclusionProof{}, err
	}
	root, err := tlog.TreeHash(int64(size), m.hashReader())
	if err != nil {
		return ledger.InclusionProof{}, err
	}
	out := ledger.InclusionProof{Index: index, TreeSize: size, LeafHash: ledger.LeafHash(m.leaves[index]), Root: ledger.Hash(root)}
	for _, h := range p {
		out.Hashes = append(out.Hashes, ledger.Hash(h))
	}
	return out, nil
}

// ConsistencyProof proves the tree of size from is a prefix of the tree of
// size to.
func (m *MemLog) ConsistencyProof(_ context.Context, from, to uint64) (ledger.ConsistencyProof, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if from > to || to > uint64(len(m.leaves)) {
		return ledger.ConsistencyProof{}, ledger.Errorf(ledger.CodeInvalid, "no consistency proof from %d to %d in a tree of %d", from, to, len(m.leaves))
	}
	fr, err := tlog.TreeHash(int64(from), m.hashReader())
	if err != nil {
		return ledger.ConsistencyProof{}, err
	}
	tr, err := tlog.TreeHash(int64(to), m.hashReader())
	if err != nil {
		return ledger.ConsistencyProof{}, err
	}
	out := ledger.ConsistencyProof{From: from, To: to, FromRoot: ledger.Hash(fr), ToRoot: ledger.Hash(tr)}
	if from == 0 || from == to {
		return out, nil
	}
	p, err := tlog.ProveTree(int64(to), int64(from), m.hashReader())
	if err != nil {
		return ledger.ConsistencyProof{}, err
	}
	for _, h := range p {
		out.Hashes = append(out.Hashes, ledger.Hash(h))
	}
	return out, nil
}

var (
	_ ledger.LogReader = (*MemLog)(nil)
	_ ledger.Keys      = (*MemLog)(nil)
)
