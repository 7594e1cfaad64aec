package ledger

import (
	"context"
	"time"
)

// TokenRow is a tokens-table row exactly as a store holds it, before
// anything is judged (revocation, expiry), for checking against the token
// leaves that define it. Token is the row's columns; SecretSHA256 is the
// row's secret hash in lowercase hex; LeafIndex and RevokedIndex are the
// row's leaf_idx and revoked_idx: a LeafIndex of -1 marks a token made
// before schema 7 and not yet logged, tlog.NullLeafIndex a NULL leaf_idx; a
// RevokedIndex of -1 a NULL revoked_idx. TokenLeaves is
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

// TokenRowBatch is a driver's batch (the log engine's write transaction
// of one group commit) that reads a tokens row inside its transaction:
// the row whose secret hash is secretHash (SHA-256 of the secret) with the
// number of token and token-revocation leaves, as
// TokenRowAuthenticator.AuthenticateRow reads them, or a CodeUnauthorized
// error when no row has it. ledger/sqlite's batch implements it.
type TokenRowBatch interface {
	TokenRow(ctx context.Context, secretHash []byte) (TokenRow, error)
}
