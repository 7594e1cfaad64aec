package tlog

import (
	"context"
	"fmt"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"golang.org/x/mod/sumdb/note"
)

// StartError is why a log must not be served or signed over: a key that
// does not sign its checkpoints, a database behind or disagreeing with the
// signed-state journal (a restore or a rollback), or a tail that fails its
// check. Its message names both sizes and the command that accepts a
// restore explicitly.
type StartError struct {
	// Rollback is true for a database behind or disagreeing with the
	// journal (what `ledger restore --accept-rollback` accepts).
	Rollback bool
	// NoJournal is true when the database holds signed leaves and there
	// is no journal at all.
	NoJournal bool
	Msg       string
}

func (e *StartError) Error() string { return e.Msg }

// EntryAtReader reads leaves by index (a Store's EntryAt).
type EntryAtReader interface {
	EntryAt(ctx context.Context, index uint64) (ledger.Entry, error)
}

// CheckStart checks the log before it is served or signed over:
//   - the latest stored checkpoint verifies with the log's key (a missing
//     or different key fails here) and its root is the stored tree's;
//   - when state holds a last signed checkpoint (size S, root R), the
//     database is not behind it and its checkpoint of size S has root R
//     (a restore or rollback fails here, Rollback true); a journal
//     missing beside a non-empty log fails too (Rollback and NoJournal);
//   - when r also lists entries (ledger.EntriesLister), the key chain built from
//     the key-rotation leaves verifies, the log's key is its head, and a
//     key the journal recorded is in it; the latest checkpoint verifies
//     with the chain's key at its size;
//   - every leaf of the tail since S (since 0 without a journal) matches
//     its leaf hash, its own index, kind and id, and the tail's leaf
//     hashes extend the stored tree at S to the latest signed root.
//
// state may be nil. It returns the latest checkpoint; problems are
// *StartError, read failures other errors.
func (l *Log) CheckStart(ctx context.Context, r EntryAtReader, state *SignedState) (ledger.Checkpoint, error) {
	var latest ledger.Checkpoint
	n, err := l.d.SignedSize(ctx)
	if err != nil {
		return latest, err
	}
	if q, ok := r.(ledger.EntriesLister); ok && n == 0 {
		// An empty log's chain is its key alone.
		if _, err := l.LoadKeyChain(ctx, q, 0); err != nil {
			return latest, err
		}
	}
	if n > 0 {
		if latest, err = l.CheckpointAt(ctx, n); err != nil {
			return latest, err
		}
		if q, ok := r.(ledger.EntriesLister); ok {
			if err := l.checkKeyChain(ctx, q, n, state); err != nil {
				return latest, err
			}
		}
		if err := l.checkNote(latest); err != nil {
			return latest, &StartError{Msg: fmt.Sprintf("the latest checkpoint (size %d) %v: the signing key was replaced or lost, or this database is another log's; the log's key is the one that signed its checkpoints (a log keeps its key until `ledger key rotate` records a new one)", n, err)}
		}
	}
	from := uint64(0)
	if state != nil {
		last, ok := state.Last()
		if !ok && n > 0 {
			return latest, &StartError{Rollback: true, NoJournal: true, Msg: fmt.Sprintf("the database holds a log of %d signed leaves but there is no signed-state journal at %s: the last size this log signed is unknown here (a copy restored or moved into a new directory, or a data directory from before the journal). Put the log's journal beside its key, or accept the database as it is with `ledger restore --accept-rollback`", n, state.Path())}
		}
		if ok {
			if n < last.Size {
				if _, err := r.EntryAt(ctx, last.Size-1); err == nil {
					// The leaves are all there: checkpoint rows were deleted.
					return latest, &StartError{Msg: fmt.Sprintf("the database holds the leaves up to the last size this log signed (%d, in %s) but its newest checkpoint is of size %d: the checkpoint rows above it were deleted behind the log (a client holding one would get 404). Restore the newest copy; `ledger audit` names what is missing", last.Size, state.Path(), n)}
				}
				return latest, &StartError{Rollback: true, Msg: fmt.Sprintf("the database (size %d) is behind the last checkpoint this log signed (size %d, in %s): it was restored or rolled back, and signing over it would fork the log under the same key. Restore the newest copy, or accept this one explicitly with `ledger restore --accept-rollback` (it records the restore as a leaf and in the journal)", n, last.Size, state.Path())}
			}
			cp, err := l.CheckpointAt(ctx, last.Size)
			if last.Size > 0 && (err != nil || cp.Root != last.Root) {
				return latest, &StartError{Rollback: true, Msg: fmt.Sprintf("the database (size %d) disagrees with the last checkpoint this log signed (size %d, root %s, in %s): it is another history. Restore the newest copy, or accept this one explicitly with `ledger restore --accept-rollback`", n, last.Size, last.Root, state.Path())}
			}
			from = last.Size
			if err := foreignSigner(ctx, r, state, last, n); err != nil {
				return latest, err
			}
		}
	}
	if n == 0 {
		return latest, nil
	}
	if err := l.checkTail(ctx, r, from, latest); err != nil {
		return latest, err
	}
	return latest, nil
}

// foreignSigner refuses a database that holds checkpoints of a signer
// that does not keep this journal: the journal's newest entry is last
// and the stored log (size n) extends it. Every process that signs for
// the log records each checkpoint in the one journal before it answers,
// so the stored log may be ahead of the journal by one checkpoint only
// (its signer stopped between the commit and the journal line; that
// checkpoint is adopted). Two or more checkpoints beyond last were
// signed by a server keeping another journal, which this one cannot see:
// a restore of the database below what that server signed would look
// like a longer log here, and signing over it would fork the log. The
// error is Rollback: `ledger restore --accept-rollback` accepts the
// database into this journal.
func foreignSigner(ctx context.Context, r EntryAtReader, state *SignedState, last SignedEntry, n uint64) error {
	cl, ok := r.(ledger.CheckpointLister)
	if !ok || n <= last.Size {
		return nil
	}
	// Servers sharing the journal go on signing meanwhile, each recording
	// its checkpoint a moment after its commit: the checkpoints are read
	// first and the journal after, and a lag is given a few seconds to
	// close. A journal kept apart never catches up.
	var cps []ledger.Checkpoint
	for try := 0; ; try++ {
		var err error
		if cps, _, err = cl.Checkpoints(ctx, ledger.CheckpointFilter{Limit: 2}); err != nil {
			return fmt.Errorf("list the newest checkpoints: %w", err)
		}
		if err := state.Refresh(); err != nil {
			return err
		}
		last, _ = state.Last()
		if len(cps) < 2 || cps[1].Size <= last.Size {
			return nil
		}
		if try == foreignTries {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return &StartError{Rollback: true, Msg: fmt.Sprintf("the database holds checkpoints signed after the last one recorded in the signed-state journal %s (size %d), up to size %d, which this journal never recorded: another server signs this log and keeps another journal. Every server of one log must share one journal (one --data-dir on shared storage): with journals apart, a database restored below what one server signed looks like a longer log to the others, and they would sign a fork. Point this server at the journal the other servers use, or accept this database into this journal with `ledger restore --accept-rollback`", state.Path(), last.Size, cps[0].Size)}
}

// foreignTries is how many times (100 ms apart) foreignSigner reads the
// journal again before it names another journal.
const foreignTries = 30

// checkNote verifies cp's note with the log's key and that its text is
// cp's size and root.
func (l *Log) checkNote(cp ledger.Checkpoint) error {
	v, err := l.verifierFor(cp.Size)
	if err != nil {
		return fmt.Errorf("has no valid key in the key chain: %v", err)
	}
	nt, err := note.Open([]byte(cp.Note), note.VerifierList(v))
	if err != nil {
		return fmt.Errorf("does not verify with the key %s+%08x", v.Name(), v.KeyHash())
	}
	_, size, root, err := ParseCheckpointText(nt.Text)
	if err != nil || size != cp.Size || root != cp.Root {
		return fmt.Errorf("note does not match its stored size and root")
	}
	return nil
}

// checkKeyChain loads the key chain from the rotation leaves below n and
// checks the log's key against it and the journal: the key must be the
// chain's head (a retired key or one outside the chain is refused), and a
// key the journal recorded must be in the chain.
func (l *Log) checkKeyChain(ctx context.Context, q ledger.EntriesLister, n uint64, state *SignedState) error {
	chain, err := l.LoadKeyChain(ctx, q, n)
	if err != nil {
		return &StartError{Msg: fmt.Sprintf("the log's key chain does not verify: %v: run `ledger audit`", err)}
	}
	cur := l.VerifierKey()
	if i := chain.Index(cur); i < 0 {
		return &StartError{Msg: fmt.Sprintf("ledger.key (%s) is not a key of the log's key chain (now %s): the signing key was replaced or lost, or this database is another log's; a log keeps its key until `ledger key rotate` records a new one", ledger.KeyID(cur), ledger.KeyID(chain.Head()))}
	} else if i < len(chain)-1 {
		e := chain[i+1]
		return &StartError{Msg: fmt.Sprintf("ledger.key (%s) was retired by the key rotation leaf %d: the log's key since size %d is %s. Put that key in place; if `ledger key rotate` was interrupted, run it again (it finishes from %s)", ledger.KeyID(cur), e.RotationIndex, e.From, ledger.KeyID(chain.Head()), NextKeyFile)}
	}
	if state == nil {
		return nil
	}
	if jk, ok := state.LastKey(); ok && chain.Index(jk.Key) < 0 {
		return &StartError{Msg: fmt.Sprintf("the signed-state journal %s records the key %s (from size %d), which the log's key chain does not hold: this database is another log's, or its rotation leaves were removed", state.Path(), ledger.KeyID(jk.Key), jk.Size)}
	}
	return nil
}

// NextKeyFile is the file, beside ledger.key, where `ledger key rotate`
// keeps the new signing key until the rotation leaf is committed and the
// key takes ledger.key's place.
const NextKeyFile = "ledger.key.next"

// checkTail recomputes the leaves [from, latest.Size) from their bytes and
// appends them to the stored tree at from; the result must be latest's
// root.
func (l *Log) checkTail(ctx context.Context, r EntryAtReader, from uint64, latest ledger.Checkpoint) error {
	rng, err := rangeAt(ctx, l.d, from)
	if err != nil {
		return fmt.Errorf("tail check: stored tree at %d: %w", from, err)
	}
	for i := from; i < latest.Size; i++ {
		e, err := r.EntryAt(ctx, i)
		if err != nil {
			if ledger.ErrorCode(err) == ledger.CodeNotFound {
				return &StartError{Msg: fmt.Sprintf("tail check: leaf %d of the signed size %d is missing: run `ledger audit`", i, latest.Size)}
			}
			return &StartError{Msg: fmt.Sprintf("tail check: leaf %d does not read back (%v): run `ledger audit`", i, err)}
		}
		if p := ledger.LeafProblem(e); p != "" {
			return &StartError{Msg: fmt.Sprintf("tail check: leaf %d %s: run `ledger audit`", i, p)}
		}
		if err := rng.Append(e.LeafHash[:], nil); err != nil {
			return err
		}
	}
	if rangeRoot(rng) != latest.Root {
		return &StartError{Msg: fmt.Sprintf("tail check: the leaves %d..%d and the stored tree do not give the root signed at size %d: run `ledger audit`", from, latest.Size, latest.Size)}
	}
	return nil
}
