package tlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
)

// TamperError is a stored leaf that fails its check on the read path: its
// bytes do not hash to its leaf hash, do not carry its index, kind or id,
// or its leaf hash is not in the signed tree. The message names the index
// only, never the stored bytes, so a web layer may show it as is.
type TamperError struct {
	Index uint64
}

func (e *TamperError) Error() string {
	return fmt.Sprintf("leaf %d fails its integrity check against its leaf hash and the signed tree: the database was edited behind the log; run `ledger audit`", e.Index)
}

// VerifiedStore is a Store whose every served leaf (Entry, EntryAt,
// Entries, Evidence, Heads) is checked before it is returned: its bytes
// against its leaf hash and the index, kind and id they carry, and the
// leaf hash against the latest signed checkpoint by an inclusion proof
// computed from the stored tree (the checkpoint's signature verified once
// per size). A failing leaf is a *TamperError, logged as tampering with
// its index; nothing of the page is returned. Authenticate checks the
// tokens row it authenticates against the token leaves the same way
// (tokenguard.go). Safe for concurrent use.
type VerifiedStore struct {
	ledger.Store
	l   *Log
	log *slog.Logger

	mu sync.Mutex
	cp ledger.Checkpoint // the latest checkpoint whose note verified

	tokens tokenGuard // Authenticate's projection of the token leaves
	index  leafIndex  // the query index (see indexAt)
}

// NewVerifiedStore wraps st, whose engine is l (a sqlite.Store's Log).
func NewVerifiedStore(st ledger.Store, l *Log, log *slog.Logger) *VerifiedStore {
	if log == nil {
		log = slog.Default()
	}
	return &VerifiedStore{Store: st, l: l, log: log}
}

// signedRoot returns a verified checkpoint of size > index.
func (v *VerifiedStore) signedRoot(ctx context.Context, index uint64) (ledger.Checkpoint, error) {
	v.mu.Lock()
	cp := v.cp
	v.mu.Unlock()
	if cp.Size > index {
		return cp, nil
	}
	cp, err := v.l.CheckpointAt(ctx, 0)
	if err != nil {
		return cp, err
	}
	if cp.Size <= index {
		return cp, &TamperError{Index: index}
	}
	if err := v.l.checkNote(cp); err != nil {
		v.log.Error("tampering: the latest checkpoint does not verify", "size", cp.Size)
		return cp, ledger.Errorf(ledger.CodeInternal, "the latest checkpoint (size %d) %v: run `ledger audit`", cp.Size, err)
	}
	v.mu.Lock()
	if cp.Size > v.cp.Size {
		v.cp = cp
	}
	v.mu.Unlock()
	return cp, nil
}

// check verifies es (any order) and returns the first failure.
func (v *VerifiedStore) check(ctx context.Context, es []*ledger.Entry) error {
	if len(es) == 0 {
		return nil
	}
	var top uint64
	for _, e := range es {
		if p := ledger.LeafProblem(*e); p != "" {
			return v.tampered(e.Index, p)
		}
		top = max(top, e.Index)
	}
	cp, err := v.signedRoot(ctx, top)
	if err != nil {
		var te *TamperError
		if errors.As(err, &te) {
			return v.tampered(top, "is beyond the latest signed checkpoint")
		}
		return err
	}
	idx := make([]uint64, len(es))
	for i, e := range es {
		idx[i] = e.Index
	}
	ps, err := inclusionMany(ctx, v.l.d, idx, cp.Size, cp.Root)
	if err != nil {
		return internal("read-path inclusion proof", err)
	}
	for i, e := range es {
		p := ps[i]
		hs := make([][]byte, len(p.Hashes))
		for j := range p.Hashes {
			hs[j] = p.Hashes[j][:]
		}
		if p.LeafHash != e.LeafHash || proof.VerifyInclusion(rfc6962.DefaultHasher, e.Index, cp.Size, e.LeafHash[:], hs, cp.Root[:]) != nil {
			return v.tampered(e.Index, "is not in the signed tree")
		}
	}
	return nil
}

func (v *VerifiedStore) tampered(index uint64, problem string) error {
	v.log.Error("tampering: a stored leaf fails its integrity check; not served", "index", index, "problem", problem)
	return &TamperError{Index: index}
}

// Entry implements ledger.LogReader, checked.
func (v *VerifiedStore) Entry(ctx context.Context, id string) (ledger.Entry, error) {
	e, err := v.Store.Entry(ctx, id)
	if err != nil {
		return e, err
	}
	return e, v.check(ctx, []*ledger.Entry{&e})
}

// EntryAt implements ledger.LogReader, checked.
func (v *VerifiedStore) EntryAt(ctx context.Context, index uint64) (ledger.Entry, error) {
	e, err := v.Store.EntryAt(ctx, index)
	if err != nil {
		return e, err
	}
	return e, v.check(ctx, []*ledger.Entry{&e})
}

// Entries implements Queries, checked. A filter IndexedEntries accepts is
// answered from the query index: complete against the verified leaves,
// whatever the projection columns say.
func (v *VerifiedStore) Entries(ctx context.Context, f ledger.EntryFilter) ([]ledger.Entry, string, error) {
	if IndexedEntries(f) {
		return v.indexedPage(ctx, f.Cursor, f.AsOfSize, f.Limit, func(x *leafIndex) []uint64 {
			switch {
			case f.Kind == ledger.KindEvidence:
				return x.lanes[f.Key]
			case f.Key == "":
				return x.kinds[f.Kind]
			}
			return x.entries[entryKey(f.Kind, f.Key)]
		})
	}
	es, next, err := v.Store.Entries(ctx, f)
	if err != nil {
		return nil, "", err
	}
	ps := make([]*ledger.Entry, len(es))
	for i := range es {
		ps[i] = &es[i]
	}
	if err := v.check(ctx, ps); err != nil {
		return nil, "", err
	}
	return es, next, nil
}

// Evidence implements Queries, checked. A filter IndexedEvidence accepts
// (the ones gates use) is answered from the query index: complete against
// the verified leaves, so an edited projection column can neither add a
// record nor leave one out. Otherwise the store's projection answers and
// an entry whose body does not match the filter's lane, backend or status
// (an edited projection) is tampering.
func (v *VerifiedStore) Evidence(ctx context.Context, f ledger.EvidenceFilter) ([]ledger.EvidenceEntry, string, error) {
	if IndexedEvidence(f) {
		es, next, err := v.indexedPage(ctx, f.Cursor, f.AsOfSize, f.Limit, func(x *leafIndex) []uint64 {
			if f.Commit != "" {
				return x.commits[f.Lane+"\x00"+f.Commit]
			}
			return x.lanes[f.Lane]
		})
		if err != nil {
			return nil, "", err
		}
		return evidenceOf(es, next)
	}
	es, next, err := v.Store.Evidence(ctx, f)
	if err != nil {
		return nil, "", err
	}
	ps := make([]*ledger.Entry, len(es))
	for i := range es {
		ps[i] = &es[i].Entry
		ev := es[i].Evidence
		if (f.Lane != "" && ev.Lane != f.Lane) || (f.Backend != "" && ev.Backend != f.Backend) || (f.Status != "" && ev.Status != f.Status) {
			return nil, "", v.tampered(es[i].Index, "does not match the query's projection columns")
		}
	}
	if err := v.check(ctx, ps); err != nil {
		return nil, "", err
	}
	return es, next, nil
}

// Heads implements Queries, checked. A filter IndexedHeads accepts is
// answered from the query index (verifications of exactly that commit).
func (v *VerifiedStore) Heads(ctx context.Context, f ledger.HeadFilter) ([]ledger.HeadEntry, string, error) {
	if IndexedHeads(f) {
		es, next, err := v.indexedPage(ctx, f.Cursor, f.AsOfSize, f.Limit, func(x *leafIndex) []uint64 { return x.heads[f.Commit] })
		if err != nil {
			return nil, "", err
		}
		out := make([]ledger.HeadEntry, len(es))
		for i, e := range es {
			var h ledger.HeadVerification
			if err := json.Unmarshal(e.Body, &h); err != nil {
				return nil, "", internal(fmt.Sprintf("head leaf %d", e.Index), err)
			}
			out[i] = ledger.HeadEntry{Entry: e, Head: h}
		}
		return out, next, nil
	}
	es, next, err := v.Store.Heads(ctx, f)
	if err != nil {
		return nil, "", err
	}
	ps := make([]*ledger.Entry, len(es))
	for i := range es {
		ps[i] = &es[i].Entry
	}
	if err := v.check(ctx, ps); err != nil {
		return nil, "", err
	}
	return es, next, nil
}

// evidenceOf decodes verified evidence entries.
func evidenceOf(es []ledger.Entry, next string) ([]ledger.EvidenceEntry, string, error) {
	out := make([]ledger.EvidenceEntry, len(es))
	for i, e := range es {
		ev, err := ledger.ParseEvidence(e.Body)
		if err != nil {
			return nil, "", internal(fmt.Sprintf("evidence leaf %d", e.Index), err)
		}
		out[i] = ledger.EvidenceEntry{Entry: e, Evidence: ev}
	}
	return out, next, nil
}

// ProbeStorage forwards to the wrapped store's disk probe, when it has
// one (web's /healthz recovers from a full disk through it).
func (v *VerifiedStore) ProbeStorage(ctx context.Context) error {
	if p, ok := v.Store.(interface{ ProbeStorage(context.Context) error }); ok {
		return p.ProbeStorage(ctx)
	}
	return nil
}

// ReadNodes implements NodeReader through the log engine (tiles carry
// hashes their readers check against a signed checkpoint themselves).
func (v *VerifiedStore) ReadNodes(ctx context.Context, ids []compact.NodeID) ([][]byte, error) {
	return v.l.ReadNodes(ctx, ids)
}

// Checkpoints implements ledger.CheckpointLister when the wrapped store does
// (ledger.CodeInternal otherwise); each checkpoint's origin is the log's.
func (v *VerifiedStore) Checkpoints(ctx context.Context, f ledger.CheckpointFilter) ([]ledger.Checkpoint, string, error) {
	cl, ok := v.Store.(ledger.CheckpointLister)
	if !ok {
		return nil, "", ledger.Errorf(ledger.CodeInternal, "the store keeps no checkpoint history")
	}
	return cl.Checkpoints(ctx, f)
}
