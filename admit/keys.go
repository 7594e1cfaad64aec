package admit

import (
	"context"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/auth"
	"github.com/evidence-ledger/ledger/verify"
)

// KeyLog is what registering runner keys needs: the log writer, the log
// reader and the entry queries the registry is folded from.
type KeyLog interface {
	ledger.LogWriter
	ledger.LogReader
	ledger.Queries
}

// AddRunner validates and appends a runner-key registration of name with
// the key in keyFile (its bytes: see verify.ParseRunnerPublicKey) by the
// admin named by, and returns the registration. It is refused with
// CodeConflict when the name has a live key or the key was registered
// before, CodeInvalid naming public_key or name for bad input. Adding the
// name's live key again appends nothing and answers the registration with
// Existing set. It is the one implementation behind POST /api/v1/runners
// and the local `ledger runner add`; two concurrent adds for one name both
// append, and the registry's fold keeps the first.
func AddRunner(ctx context.Context, st KeyLog, name string, keyFile []byte, by string) (auth.RunnerState, *ledger.AppendResult, error) {
	return AddKey(ctx, st, name, keyFile, by, "", "", nil)
}

// AddKey is AddRunner for a key of kind ("" a runner,
// ledger.RunnerKindAgent an agent) whose leaf carries specDigest and
// labels (an agent approval's, or "" and nil).
func AddKey(ctx context.Context, st KeyLog, name string, keyFile []byte, by, kind, specDigest string, labels map[string]string) (auth.RunnerState, *ledger.AppendResult, error) {
	pub, err := verify.ParseRunnerPublicKey(keyFile)
	if err != nil {
		return auth.RunnerState{}, nil, ledger.FieldError("public_key", "%v", err)
	}
	k := ledger.RunnerKey{Action: ledger.RunnerAdd, Kind: kind, Name: name, KeyID: verify.RunnerKeyID(pub), PublicKey: verify.AuthorizedKey(pub), SpecDigest: specDigest, Labels: labels, By: by, At: time.Now().UTC()}
	reg, err := auth.LoadRunnerKeys(ctx, st, 0)
	if err != nil {
		return auth.RunnerState{}, nil, err
	}
	if live, ok := reg.Live(name); ok && live.KeyID == k.KeyID && live.Kind == kind {
		// The same registration again: answered, not appended.
		cp, err := st.Checkpoint(ctx)
		if err != nil {
			return auth.RunnerState{}, nil, err
		}
		return live, &ledger.AppendResult{Entries: []ledger.AppendedEntry{{Entry: ledger.Entry{ID: live.Entry, Index: live.Index, Kind: ledger.KindRunnerKey}, Existing: true}}, Checkpoint: cp}, nil
	}
	return appendRunnerKey(ctx, st, k)
}

// RevokeRunner appends the revocation of name's live key with reason, by
// the admin named by; CodeNotFound when the name has no live key.
func RevokeRunner(ctx context.Context, st KeyLog, name, reason, by string) (auth.RunnerState, *ledger.AppendResult, error) {
	reg, err := auth.LoadRunnerKeys(ctx, st, 0)
	if err != nil {
		return auth.RunnerState{}, nil, err
	}
	live, ok := reg.Live(name)
	if !ok {
		return auth.RunnerState{}, nil, ledger.NotFound("runner %q has no live key", name)
	}
	k := ledger.RunnerKey{Action: ledger.RunnerRevoke, Name: name, KeyID: live.KeyID, Reason: reason, By: by, At: time.Now().UTC()}
	return appendRunnerKey(ctx, st, k)
}

func appendRunnerKey(ctx context.Context, store KeyLog, k ledger.RunnerKey) (auth.RunnerState, *ledger.AppendResult, error) {
	if err := k.Validate(); err != nil {
		return auth.RunnerState{}, nil, err
	}
	reg, err := auth.LoadRunnerKeys(ctx, store, 0)
	if err != nil {
		return auth.RunnerState{}, nil, err
	}
	if err := reg.Check(k); err != nil {
		return auth.RunnerState{}, nil, err
	}
	body, err := ledger.CanonicalBody(&k)
	if err != nil {
		return auth.RunnerState{}, nil, err
	}
	res, err := store.Append(ctx, []ledger.Record{{Kind: ledger.KindRunnerKey, Body: body}}, "")
	if err != nil {
		return auth.RunnerState{}, nil, err
	}
	// The state as the fold sees it after this entry.
	reg, err = auth.LoadRunnerKeys(ctx, store, 0)
	if err != nil {
		return auth.RunnerState{}, nil, err
	}
	st, _ := reg.ByKeyID(k.KeyID)
	return st, res, nil
}
