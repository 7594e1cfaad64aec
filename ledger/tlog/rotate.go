package tlog

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/evidence-ledger/ledger/ledger"
	"golang.org/x/mod/sumdb/note"
)

// KeyChain returns the log's key chain as CheckStart (LoadKeyChain) loaded
// it and Rotate extended it; nil before it was loaded. The caller must not
// modify it.
func (l *Log) KeyChain() ledger.KeyChain {
	l.chainM.Lock()
	defer l.chainM.Unlock()
	return l.chain
}

// LoadKeyChain reads the key-rotation leaves below the signed size size
// (through q, the store's Entries) and builds the log's key chain from
// them (ledger.BuildKeyChain, ending at the log's key when there is none), which
// KeyChain then returns. It does not check that the log's key is the
// chain's head: CheckStart does.
func (l *Log) LoadKeyChain(ctx context.Context, q ledger.EntriesLister, size uint64) (ledger.KeyChain, error) {
	var rots []ledger.RotationLeaf
	if size > 0 {
		var err error
		if rots, err = ledger.RotationLeaves(ctx, q, size); err != nil {
			return nil, err
		}
	}
	chain, err := ledger.BuildKeyChain(l.origin, l.VerifierKey(), rots)
	if err != nil {
		return nil, err
	}
	l.chainM.Lock()
	l.chain = chain
	l.chainM.Unlock()
	return chain, nil
}

// verifierFor returns the verifier of the key that signed (or signs) the
// checkpoint of size size: the chain's key for it once the chain is
// loaded, else the log's key.
func (l *Log) verifierFor(size uint64) (note.Verifier, error) {
	chain := l.KeyChain()
	if chain == nil {
		return l.key.Load().verifier, nil
	}
	vk := chain.KeyFor(size)
	if vk == l.VerifierKey() {
		return l.key.Load().verifier, nil
	}
	return note.NewVerifier(vk)
}

// Rotate changes the log's signing key to next (nextVKey its verifier
// key, named the log origin): it appends a ledger.KindKeyRotation leaf
// (ledger.KeyRotation, both keys' signatures over ledger.RotationMessage) in a batch of
// its own, whose checkpoint the current key signs, and from then on the
// log signs every checkpoint and note with next. It blocks until the batch
// committed (and OnCheckpoint recorded its checkpoint) and returns the
// rotation entry and that checkpoint. The key chain must be loaded
// (CheckStart or LoadKeyChain) and the log's key must be its head. Rotate
// checks that next is the key nextVKey names, not the signatures it
// returns (as it does not re-verify checkpoint signatures): CheckStart and
// the audit verify them, and a caller should check the returned body with
// ledger.ParseKeyRotation. Safe for concurrent use with Append.
func (l *Log) Rotate(ctx context.Context, next note.Signer, nextVKey string) (ledger.Entry, ledger.Checkpoint, error) {
	if l.opts.ReadOnly {
		return ledger.Entry{}, ledger.Checkpoint{}, ledger.Errorf(ledger.CodeInternal, "store opened read-only")
	}
	if err := l.refuseTampered(); err != nil {
		return ledger.Entry{}, ledger.Checkpoint{}, err
	}
	nv, err := note.NewVerifier(nextVKey)
	if err != nil {
		return ledger.Entry{}, ledger.Checkpoint{}, fmt.Errorf("rotate: new verifier key: %w", err)
	}
	if nv.Name() != next.Name() || nv.KeyHash() != next.KeyHash() {
		return ledger.Entry{}, ledger.Checkpoint{}, errors.New("rotate: the new verifier key is not the new signer's")
	}
	if nv.Name() != l.origin {
		return ledger.Entry{}, ledger.Checkpoint{}, fmt.Errorf("rotate: the new key is named %s, not the log origin %s", nv.Name(), l.origin)
	}
	cur := l.key.Load()
	if nv.KeyHash() == cur.verifier.KeyHash() || nextVKey == cur.vkey {
		return ledger.Entry{}, ledger.Checkpoint{}, errors.New("rotate: the new key is the current key")
	}
	chain := l.KeyChain()
	if chain == nil {
		return ledger.Entry{}, ledger.Checkpoint{}, errors.New("rotate: the key chain is not loaded (CheckStart first)")
	}
	if chain.Head() != cur.vkey {
		return ledger.Entry{}, ledger.Checkpoint{}, errors.New("rotate: the log's key is not the head of its key chain")
	}
	req := &appendReq{ctx: ctx, resp: make(chan appendResp, 1)}
	req.rotate = func(size uint64) (ledger.Prepared, error) {
		takeover := size + 2
		msg := ledger.RotationMessage(l.origin, takeover, cur.vkey, nextVKey)
		oldSig, err := cur.signer.Sign(msg)
		if err != nil {
			return ledger.Prepared{}, fmt.Errorf("rotate: old key signs: %w", err)
		}
		newSig, err := next.Sign(msg)
		if err != nil {
			return ledger.Prepared{}, fmt.Errorf("rotate: new key signs: %w", err)
		}
		body, err := ledger.CanonicalBody(ledger.KeyRotation{OldKey: cur.vkey, NewKey: nextVKey, TakeoverSize: takeover,
			OldSig: base64.StdEncoding.EncodeToString(oldSig), NewSig: base64.StdEncoding.EncodeToString(newSig)})
		if err != nil {
			return ledger.Prepared{}, err
		}
		return ledger.Prepared{Kind: ledger.KindKeyRotation, Body: body, ID: ledger.EntryID(ledger.KindKeyRotation, body), Key: ledger.EntryKey(ledger.KindKeyRotation, body)}, nil
	}
	req.after = func(cp ledger.Checkpoint) {
		l.key.Store(&logKey{signer: next, vkey: nextVKey, verifier: nv})
		l.chainM.Lock()
		l.chain = append(l.chain[:len(l.chain):len(l.chain)], ledger.KeyEpoch{Key: nextVKey, From: cp.Size + 1, RotationIndex: int64(cp.Size - 1)})
		l.chainM.Unlock()
	}
	select {
	case l.rots <- req:
	case <-ctx.Done():
		return ledger.Entry{}, ledger.Checkpoint{}, ctx.Err()
	case <-l.done:
		return ledger.Entry{}, ledger.Checkpoint{}, ledger.Errorf(ledger.CodeInternal, "store is closed")
	}
	var resp appendResp
	select {
	case resp = <-req.resp:
	case <-l.exited:
		select {
		case resp = <-req.resp:
		default:
			return ledger.Entry{}, ledger.Checkpoint{}, ledger.Errorf(ledger.CodeInternal, "store is closed")
		}
	}
	if resp.err != nil {
		return ledger.Entry{}, ledger.Checkpoint{}, resp.err
	}
	res, err := l.answer(ctx, resp)
	if err != nil {
		return ledger.Entry{}, ledger.Checkpoint{}, err
	}
	if len(res.Entries) != 1 || res.Entries[0].Existing {
		return ledger.Entry{}, ledger.Checkpoint{}, errors.New("rotate: the rotation leaf was not appended")
	}
	return res.Entries[0].Entry, res.Checkpoint, nil
}

// checkSignerInForce is the sequencer's check, when it (re)loads the
// tree, that its key is the one that must sign the next checkpoint: the
// new key of a rotation that is the log's last leaf, else the key that
// signed the latest checkpoint. Another process rotating the key under a
// running one is caught here (that process then refuses to sign).
func (l *Log) checkSignerInForce(ctx context.Context, b Batch, latest ledger.Checkpoint) error {
	if latest.Size == 0 {
		return nil
	}
	cur := l.key.Load()
	e, err := b.EntryAt(ctx, latest.Size-1)
	if err != nil {
		return fmt.Errorf("read the last leaf: %w", err)
	}
	if e.Kind == ledger.KindKeyRotation {
		var r ledger.KeyRotation
		if err := json.Unmarshal(e.Body, &r); err != nil || r.NewKey != cur.vkey {
			return fmt.Errorf("the log's last leaf rotates its key to another key than this process holds (%s): restart with the log's key", ledger.KeyID(cur.vkey))
		}
		return nil
	}
	if _, err := note.Open([]byte(latest.Note), note.VerifierList(cur.verifier)); err != nil {
		return fmt.Errorf("the latest checkpoint (size %d) is not signed by this process's key (%s): the key was rotated or replaced by another process; restart with the log's key", latest.Size, ledger.KeyID(cur.vkey))
	}
	return nil
}
