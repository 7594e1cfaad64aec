package ledger

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"
)

// TokenRow is a tokens-table row exactly as a store holds it, before
// anything is judged (revocation, expiry), for checking against the token
// leaves that define it. Token is the row's columns; SecretSHA256 is the
// row's secret hash in lowercase hex; LeafIndex and RevokedIndex are the
// row's leaf_idx and revoked_idx (-1 when NULL; a LeafIndex of -1 also
// marks a token made before schema 7 and not yet logged). TokenLeaves is
// the number of token and token-revocation leaves in the log, read in the
// same statement as the row: the guard's cache key. ReadAt is the
// store's clock when it read the row; expiry is judged against it.
type TokenRow struct {
	Token
	SecretSHA256 string
	LeafIndex    int64
	RevokedIndex int64
	TokenLeaves  uint64
	ReadAt       time.Time
}

// Live returns the row's token when it is neither revoked nor expired at
// ReadAt, else the token and a CodeUnauthorized error ("token ... was
// revoked", "token expired: ..."); neither names the secret.
func (r TokenRow) Live() (Token, error) {
	t := r.Token
	if t.RevokedAt != nil {
		return t, Errorf(CodeUnauthorized, "token %q was revoked", t.Name)
	}
	if t.Expired(r.ReadAt) {
		return t, Errorf(CodeUnauthorized, "token expired: %q expired at %s", t.Name, t.ExpiresAt.Format(time.RFC3339))
	}
	return t, nil
}

// TokenRowAuthenticator is a store whose tokens table is a projection of
// the token leaves (ledger/sqlite, ledger/postgres). AuthenticateRow
// returns the row whose secret hash is SHA-256(secret), revoked or expired
// alike, with the count of token leaves, in one database round trip;
// CodeUnauthorized "unknown token" when no row has that hash. Safe for
// concurrent use.
type TokenRowAuthenticator interface {
	AuthenticateRow(ctx context.Context, secret string) (TokenRow, error)
}

// tokenState is what the token leaves say one tokens row must hold: the
// first token leaf of its id and the first revocation leaf after it.
type tokenState struct {
	leaf   TokenLeaf
	idx    uint64
	rev    *time.Time
	revIdx uint64
}

// tokenGuard caches the token projection computed from verified leaves,
// keyed by the number of token leaves it folded. Safe for concurrent use.
type tokenGuard struct {
	mu    sync.Mutex // held while folding, so concurrent misses fold once
	n     uint64
	ready bool
	byID  map[string]*tokenState
}

// projection returns the token projection of the log for a row read when
// the log held want token leaves, and the number of leaves the projection
// folded: from the cache when it folded want leaves, else folded anew
// from every token and token-revocation leaf through v's verified reads.
func (v *VerifiedStore) projection(ctx context.Context, want uint64) (map[string]*tokenState, uint64, error) {
	g := &v.tokens
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ready && g.n == want {
		return g.byID, g.n, nil
	}
	toks, err := v.allEntries(ctx, KindToken)
	if err != nil {
		return nil, 0, err
	}
	revs, err := v.allEntries(ctx, KindTokenRevocation)
	if err != nil {
		return nil, 0, err
	}
	byID := make(map[string]*tokenState, len(toks))
	for _, e := range toks {
		var l TokenLeaf
		if err := json.Unmarshal(e.Body, &l); err != nil {
			return nil, 0, v.tampered(e.Index, "token leaf body does not parse")
		}
		if _, dup := byID[l.TokenID]; !dup {
			byID[l.TokenID] = &tokenState{leaf: l, idx: e.Index}
		}
	}
	for _, e := range revs {
		var l TokenRevocationLeaf
		if err := json.Unmarshal(e.Body, &l); err != nil {
			return nil, 0, v.tampered(e.Index, "token-revocation leaf body does not parse")
		}
		if w := byID[l.TokenID]; w != nil && w.rev == nil && e.Index > w.idx {
			at := l.RevokedAt.UTC()
			w.rev, w.revIdx = &at, e.Index
		}
	}
	g.byID, g.n, g.ready = byID, uint64(len(toks)+len(revs)), true
	return g.byID, g.n, nil
}

// allEntries returns every entry of kind k through the verified reads,
// oldest first, paging to the end.
func (v *VerifiedStore) allEntries(ctx context.Context, k Kind) ([]Entry, error) {
	var out []Entry
	cursor := ""
	for {
		es, next, err := v.Entries(ctx, EntryFilter{Kind: k, Cursor: cursor, Limit: 1000})
		if err != nil {
			return nil, err
		}
		out = append(out, es...)
		if next == "" {
			break
		}
		cursor = next
	}
	slices.SortFunc(out, func(a, b Entry) int {
		switch {
		case a.Index < b.Index:
			return -1
		case a.Index > b.Index:
			return 1
		}
		return 0
	})
	return out, nil
}

// Authenticate implements TokenStore, checked: the tokens row the secret
// selects must be exactly the projection of the token leaves that define
// it (creation: secret hash, scope, roles, evidence scope, expiry,
// creation time, leaf index; its revocation leaf, if any), read through
// the verified reads, before its revocation and expiry are judged. A row
// edited behind the log (scope widened, expiry extended, revocation
// removed, secret hash replaced, a row with no leaf) is refused with
// CodeUnauthorized and logged as tampering with the token id and the
// column that differs; no message names the secret. The projection is
// cached by the number of token leaves (read with the row in one round
// trip), so an authentication costs the row's query and a map lookup
// until a token leaf is appended. A store that is not a
// TokenRowAuthenticator is authenticated as it is.
func (v *VerifiedStore) Authenticate(ctx context.Context, secret string) (Token, error) {
	ra, ok := v.Store.(TokenRowAuthenticator)
	if !ok {
		return v.Store.Authenticate(ctx, secret)
	}
	for attempt := 0; ; attempt++ {
		row, err := ra.AuthenticateRow(ctx, secret)
		if err != nil {
			return Token{}, err
		}
		proj, n, err := v.projection(ctx, row.TokenLeaves)
		if err != nil {
			return Token{}, err
		}
		if n != row.TokenLeaves && attempt < 2 {
			continue // a token leaf was appended between the row's read and the fold
		}
		if col := rowDiff(row, proj[row.ID]); col != "" {
			v.log.Error("tampering: a tokens table row does not match its token leaves; authentication refused", "token_id", row.ID, "differs", col)
			return Token{}, Errorf(CodeUnauthorized, "token refused: its tokens table row does not match the token leaves that define it (%s); the database was edited behind the log: run `ledger audit`", col)
		}
		t, err := row.Live()
		if err != nil {
			return Token{}, err
		}
		return t, nil
	}
}

// rowDiff names what of row differs from the state its leaves imply ("" when
// nothing does).
func rowDiff(row TokenRow, w *tokenState) string {
	switch {
	case row.LeafIndex == -1 && w == nil:
		return "no token leaf creates it (a row was inserted into the tokens table)"
	case w == nil:
		return "no token leaf creates it (a row was inserted)"
	}
	l := w.leaf
	revIdxOK := row.RevokedIndex == -1
	if w.rev != nil {
		revIdxOK = row.RevokedIndex == int64(w.revIdx)
	}
	for _, c := range []struct {
		col string
		eq  bool
	}{
		{"name", row.Name == l.Name},
		{"scope", row.Scope == l.Scope},
		{"roles", slices.Equal(row.Roles, emptyNil(l.Roles))},
		{"repositories", slices.Equal(row.Repositories, emptyNil(l.Repositories))},
		{"lanes", slices.Equal(row.Lanes, emptyNil(l.Lanes))},
		{"backends", slices.Equal(row.Backends, emptyNil(l.Backends))},
		{"expires_at", sameInstant(row.ExpiresAt, l.ExpiresAt)},
		{"secret_hash", row.SecretSHA256 == l.SecretSHA256},
		{"created_at", row.CreatedAt.Equal(l.CreatedAt)},
		{"leaf_idx", row.LeafIndex >= 0 && uint64(row.LeafIndex) == w.idx},
		{"revoked_at", sameInstant(row.RevokedAt, w.rev)},
		{"revoked_idx", revIdxOK},
	} {
		if !c.eq {
			return c.col + " differs"
		}
	}
	return ""
}

func emptyNil[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

func sameInstant(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(*b)
}
