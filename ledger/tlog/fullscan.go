package tlog

import (
	"cmp"
	"context"
	"fmt"
	"github.com/evidence-ledger/ledger/ledger"
	"slices"
	"time"
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

// MarkTampered puts the log in the tampered state for a finding made
// outside the engine (the database file replaced under the process): as
// after a full scan's finding, appends, notes and rotations are refused
// until the process ends. index is the leaf the finding is about (the
// last signed one when it is about the whole file). The first finding
// stays; later ones are dropped. Safe for concurrent use.
func (l *Log) MarkTampered(index uint64, problem string) {
	l.tamper.CompareAndSwap(nil, &TamperState{Index: index, Problem: problem, Since: l.opts.Now().UTC()})
}

// refuseTampered is the ledger.CodeUnavailable error every signing act (an
// append's checkpoint, a note, a rotation) gets once the log is tampered.
func (l *Log) refuseTampered() error {
	t := l.tamper.Load()
	if t == nil {
		return nil
	}
	return &ledger.Error{Code: ledger.CodeUnavailable, Message: fmt.Sprintf("refusing to sign: the full verification found leaf %d %s (the database was edited behind the log); nothing is appended or signed until it is repaired: run `ledger audit`", t.Index, t.Problem)}
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
// its leaf hash and the index, kind and id they carry, and the tree
// recomputed from the leaf hashes must give the root of every stored
// checkpoint on the way (when r lists them: a ledger.CheckpointLister) and the
// verified root at size. The first failure puts the log in the tampered
// state (Tampered; Append, SignNote and Rotate then fail with
// ledger.CodeUnavailable) and is returned as a *TamperError naming the leaf: the
// leaf itself when its bytes fail, else the first leaf after the last
// checkpoint whose root still matched (exact when checkpoints are one
// leaf apart; otherwise the first of the range, which the message gives).
// When every leaf passed and r is also an Auditor, its Audit then runs
// (the `ledger audit` of the driver's snapshot, the log's leaves at that
// moment): beside the same leaf and tree checks it compares every
// projection row and column a query filters by (the evidence columns,
// heads_index, evidence_artifacts, the tokens and id tables) with its
// leaf, so that an edited projection, which hides a record from queries
// without touching a leaf, puts the log in the tampered state too, named
// by the audit's first bad leaf (the leaf at size-1 when the problem is
// not tied to one leaf, such as a row count). Cancelling ctx stops the
// scan between chunks (ctx's error). Read failures, the audit's
// included, are other errors and change no state. Safe to run beside
// appends: leaves below size never change, and the audit reads one
// snapshot.
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
	cps, err := checkpointRoots(ctx, r, size)
	if err != nil {
		return fmt.Errorf("full scan: %w", err)
	}
	cps = append(cps, auditCP{size: size, root: cp.Root})
	rng := rangeFactory.NewEmptyRange(0)
	ci, good := 0, uint64(0)
	for lo := uint64(0); lo < size; lo += uint64(o.Chunk) {
		if err := ctx.Err(); err != nil {
			return err
		}
		hi := min(size, lo+uint64(o.Chunk))
		es, err := readRange(ctx, r, lo, hi)
		if err != nil {
			return err
		}
		for i := lo; i < hi; i++ {
			if i-lo >= uint64(len(es)) || es[i-lo].Index != i {
				return l.tampered(i, "is missing", o.Now())
			}
			e := es[i-lo]
			if p := scanProblem(&e); p != "" {
				return l.tampered(i, p, o.Now())
			}
			if err := rng.Append(e.LeafHash[:], nil); err != nil {
				return err
			}
			for ci < len(cps) && cps[ci].size == i+1 {
				if rangeRoot(rng) != cps[ci].root {
					return l.tampered(good, fmt.Sprintf("is the first of the leaves %d..%d, which do not give the root signed at size %d", good, i, i+1), o.Now())
				}
				good = i + 1
				ci++
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
	if a, ok := r.(ledger.Auditor); ok {
		return l.auditProjections(ctx, a, size, o.Now)
	}
	return nil
}

// auditProjections runs a's audit after the leaves passed and sets the
// tamper state on its first finding.
func (l *Log) auditProjections(ctx context.Context, a ledger.Auditor, size uint64, now func() time.Time) error {
	rep, err := a.Audit(ctx)
	if err != nil {
		return fmt.Errorf("full scan: audit: %w", err)
	}
	if rep.OK {
		return nil
	}
	if rep.FirstBadIndex < 0 {
		return l.tampered(size-1, "is the last leaf of a log whose audit fails: "+rep.Problem, now())
	}
	return l.tampered(uint64(rep.FirstBadIndex), "fails the audit: "+rep.Problem, now())
}

// scanProblem is ledger.LeafProblem without decoding JSON: the bytes must hash
// to the leaf hash and be exactly the canonical envelope of the entry's
// index, kind, id and time around a body that hashes to its id (the
// audit's check, leafBody). "" when they are.
func scanProblem(e *ledger.Entry) string {
	if ledger.LeafHash(e.Raw) != e.LeafHash {
		return "does not match its leaf hash"
	}
	al := AuditLeaf{Index: e.Index, ID: e.ID, Kind: string(e.Kind), RecordedAt: e.RecordedAt.UnixNano(), Raw: e.Raw}
	if _, p, _ := leafBody(&al); p != "" {
		return "fails its check: " + p
	}
	return ""
}

// EntryRangeReader reads the stored leaves of indexes [lo, hi) in index
// order in one go (missing leaves are absent from the answer).
type EntryRangeReader interface {
	EntriesRange(ctx context.Context, lo, hi uint64) ([]ledger.Entry, error)
}

// readRange reads [lo, hi) through r's EntriesRange when it has one, else
// leaf by leaf (a missing leaf ends the answer early).
func readRange(ctx context.Context, r EntryAtReader, lo, hi uint64) ([]ledger.Entry, error) {
	if rr, ok := r.(EntryRangeReader); ok {
		es, err := rr.EntriesRange(ctx, lo, hi)
		if err != nil {
			return nil, fmt.Errorf("full scan: leaves %d..%d: %w", lo, hi-1, err)
		}
		return es, nil
	}
	es := make([]ledger.Entry, 0, hi-lo)
	for i := lo; i < hi; i++ {
		e, err := r.EntryAt(ctx, i)
		if ledger.ErrorCode(err) == ledger.CodeNotFound {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("full scan: leaf %d: %w", i, err)
		}
		es = append(es, e)
	}
	return es, nil
}

// checkpointRoots lists the stored checkpoints below size, in increasing
// size, when r is a ledger.CheckpointLister (none otherwise).
func checkpointRoots(ctx context.Context, r EntryAtReader, size uint64) ([]auditCP, error) {
	cl, ok := r.(ledger.CheckpointLister)
	if !ok {
		return nil, nil
	}
	var out []auditCP
	cur := ""
	for {
		page, next, err := cl.Checkpoints(ctx, ledger.CheckpointFilter{Cursor: cur, Limit: 1000})
		if err != nil {
			return nil, fmt.Errorf("list checkpoints: %w", err)
		}
		for _, c := range page {
			if c.Size < size && c.Size > 0 {
				out = append(out, auditCP{size: c.Size, root: c.Root})
			}
		}
		if next == "" {
			break
		}
		cur = next
	}
	slices.SortFunc(out, func(a, b auditCP) int { return cmp.Compare(a.size, b.size) })
	return out, nil
}

// tampered sets the tamper state (the first finding stays), logs it as
// tampering and returns the *TamperError.
func (l *Log) tampered(index uint64, problem string, now time.Time) error {
	l.tamper.CompareAndSwap(nil, &TamperState{Index: index, Problem: problem, Since: now.UTC()})
	l.opts.Logger.Error("tampering: the full verification found a stored leaf that fails its check; refusing to sign", "index", index, "problem", problem)
	return &TamperError{Index: index}
}
