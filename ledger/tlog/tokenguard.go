package tlog

import (
	"cmp"
	"context"
	"github.com/evidence-ledger/ledger/ledger"
	"slices"
	"sync"
)

// tokenGuard caches the token projection computed from verified leaves,
// keyed by the number of token leaves it folded. Safe for concurrent use.
type tokenGuard struct {
	mu    sync.Mutex // held while folding, so concurrent misses fold once
	ready bool
	proj  *TokenProjection
}

// projection returns the token projection of the log for a row read when
// the log held want token leaves: from the cache when it folded want
// leaves, else folded anew from every token and token-revocation leaf
// through v's verified reads. The projection returned is never mutated
// afterwards (a refold builds a new one), so callers read it unlocked.
func (v *VerifiedStore) projection(ctx context.Context, want uint64) (*TokenProjection, error) {
	g := &v.tokens
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ready && g.proj.Folded() == want {
		return g.proj, nil
	}
	toks, err := v.allEntries(ctx, ledger.KindToken)
	if err != nil {
		return nil, err
	}
	revs, err := v.allEntries(ctx, ledger.KindTokenRevocation)
	if err != nil {
		return nil, err
	}
	all := append(toks, revs...)
	slices.SortFunc(all, func(a, b ledger.Entry) int { return cmp.Compare(a.Index, b.Index) })
	proj := &TokenProjection{}
	for _, e := range all {
		c, _, err := DecodeTokenChange(e.Index, e.Kind, e.Body)
		if err != nil {
			return nil, v.tampered(e.Index, err.Error())
		}
		proj.Fold(c)
	}
	g.proj, g.ready = proj, true
	return proj, nil
}

// allEntries returns every entry of kind k through the verified reads,
// oldest first, paging to the end.
func (v *VerifiedStore) allEntries(ctx context.Context, k ledger.Kind) ([]ledger.Entry, error) {
	var out []ledger.Entry
	cursor := ""
	for {
		es, next, err := v.Entries(ctx, ledger.EntryFilter{Kind: k, Cursor: cursor, Limit: 1000})
		if err != nil {
			return nil, err
		}
		out = append(out, es...)
		if next == "" {
			break
		}
		cursor = next
	}
	return out, nil
}

// Authenticate implements ledger.TokenStore, checked: the tokens row the secret
// selects must be exactly the projection of the token leaves that define
// it (creation: secret hash, scope, roles, evidence scope, expiry,
// creation time, leaf index; its revocation leaf, if any), read through
// the verified reads, before its revocation and expiry are judged. A row
// edited behind the log (scope widened, expiry extended, revocation
// removed, secret hash replaced, a row with no leaf) is refused with
// ledger.CodeUnauthorized and logged as tampering with the token id and the
// column that differs; no message names the secret. The projection is
// cached by the number of token leaves (read with the row in one round
// trip), so an authentication costs the row's query and a map lookup
// until a token leaf is appended. A store that is not a
// ledger.TokenRowAuthenticator is authenticated as it is.
func (v *VerifiedStore) Authenticate(ctx context.Context, secret string) (ledger.Token, error) {
	ra, ok := v.Store.(ledger.TokenRowAuthenticator)
	if !ok {
		return v.Store.Authenticate(ctx, secret)
	}
	for attempt := 0; ; attempt++ {
		row, err := ra.AuthenticateRow(ctx, secret)
		if err != nil {
			return ledger.Token{}, err
		}
		proj, err := v.projection(ctx, row.TokenLeaves)
		if err != nil {
			return ledger.Token{}, err
		}
		if proj.Folded() != row.TokenLeaves && attempt < 2 {
			continue // a token leaf was appended between the row's read and the fold
		}
		if _, problem := proj.CheckRow(row); problem != "" {
			v.log.Error("tampering: a tokens table row does not match its token leaves; authentication refused", "token_id", row.ID, "problem", problem)
			return ledger.Token{}, ledger.Errorf(ledger.CodeUnauthorized, "token refused: %s; the database was edited behind the log: run `ledger audit`", problem)
		}
		t, err := row.Live()
		if err != nil {
			return ledger.Token{}, err
		}
		return t, nil
	}
}
