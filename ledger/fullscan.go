package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
)

// TamperState is what a full scan found: the first leaf that fails its
// check against its own bytes or the signed tree, the problem (never the
// leaf's bytes) and when it was found.
type TamperState struct {
	Index   uint64    `json:"index"`
	Problem string    `json:"problem"`
	Since   time.Time `json:"since"`
}

// Tampered returns the tamper state a full scan set (ok false while none
// found anything). Once set it stays until the process ends: a tampered
// database is repaired offline (restore a backup, `ledger audit`).
func (l *Log) Tampered() (TamperState, bool) {
	if t := l.tamper.Load(); t != nil {
		return *t, true
	}
	return TamperState{}, false
}

// refuseTampered is the CodeUnavailable error every signing act (an
// append's checkpoint, a note, a rotation) gets once the log is tampered.
func (l *Log) refuseTampered() error {
	t := l.tamper.Load()
	if t == nil {
		return nil
	}
	return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("refusing to sign: the full verification found leaf %d %s (the database was edited behind the log); nothing is appended or signed until it is repaired: run `ledger audit`", t.Index, t.Problem)}
}

// ScanOptions configures FullScan.
type ScanOptions struct {
	// Chunk is how many leaves are read and checked at a time (default
	// 1024).
	Chunk int
	// Pause is slept between chunks so that the scan yields the store and
	// the processors to the service (default 0: none).
	Pause time.Duration
	// Now is the clock of the tamper state (default time.Now).
	Now func() time.Time
}

// FullScan verifies the whole log up to size (the signed size at start):
// the stored checkpoint of that size must verify with the key in force
// there; then, a chunk of leaves at a time, every leaf's bytes must match
// its leaf hash and the index, kind and id they carry, and its leaf hash
// must be in the signed tree (an inclusion proof from the stored tree,
// verified against the checkpoint's root). The first failing leaf puts
// the log in the tampered state (Tampered; Append, SignNote and Rotate
// then fail with CodeUnavailable) and is returned as a *TamperError.
// Cancelling ctx stops the scan between chunks (ctx's error). Read
// failures are other errors and change no state. Safe to run beside
// appends: leaves below size never change.
func (l *Log) FullScan(ctx context.Context, r EntryAtReader, size uint64, o ScanOptions) error {
	if size == 0 {
		return nil
	}
	if o.Chunk <= 0 {
		o.Chunk = 1024
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	cp, err := l.CheckpointAt(ctx, size)
	if err != nil {
		return fmt.Errorf("full scan: checkpoint of size %d: %w", size, err)
	}
	if err := l.checkNote(cp); err != nil {
		return l.tampered(size-1, fmt.Sprintf("is under a checkpoint (size %d) that %v", size, err), o.Now())
	}
	idx := make([]uint64, 0, o.Chunk)
	es := make([]Entry, 0, o.Chunk)
	for lo := uint64(0); lo < size; lo += uint64(o.Chunk) {
		if err := ctx.Err(); err != nil {
			return err
		}
		hi := min(size, lo+uint64(o.Chunk))
		idx, es = idx[:0], es[:0]
		for i := lo; i < hi; i++ {
			e, err := r.EntryAt(ctx, i)
			if err != nil {
				if ErrorCode(err) == CodeNotFound {
					return l.tampered(i, "is missing", o.Now())
				}
				return fmt.Errorf("full scan: leaf %d: %w", i, err)
			}
			if p := leafProblem(e); p != "" {
				return l.tampered(i, p, o.Now())
			}
			idx, es = append(idx, i), append(es, e)
		}
		ps, err := inclusionMany(ctx, l.d, idx, size, cp.Root)
		if err != nil {
			return fmt.Errorf("full scan: inclusion proofs of leaves %d..%d: %w", lo, hi-1, err)
		}
		for j, p := range ps {
			e := es[j]
			hs := make([][]byte, len(p.Hashes))
			for k := range p.Hashes {
				hs[k] = p.Hashes[k][:]
			}
			if proof.VerifyInclusion(rfc6962.DefaultHasher, e.Index, size, e.LeafHash[:], hs, cp.Root[:]) != nil {
				return l.tampered(e.Index, "is not in the signed tree", o.Now())
			}
		}
		if o.Pause > 0 && hi < size {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(o.Pause):
			}
		}
	}
	return nil
}

// tampered sets the tamper state (the first finding stays), logs it as
// tampering and returns the *TamperError.
func (l *Log) tampered(index uint64, problem string, now time.Time) error {
	l.tamper.CompareAndSwap(nil, &TamperState{Index: index, Problem: problem, Since: now.UTC()})
	l.opts.Logger.Error("tampering: the full verification found a stored leaf that fails its check; refusing to sign", "index", index, "problem", problem)
	return &TamperError{Index: index}
}
