package postgres

import (
	"context"
	"crypto/sha256"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlstore"
	"github.com/jackc/pgx/v5"
)

// The tokens table is the projection of the token and token-revocation
// leaves (sqlstore.TokenTable, whose methods Store has): the batch writes
// its rows in the transaction that appends the leaves (batch.tokOps), and
// the audit checks every row against them (sqlstore.AuditTokens).

// Authenticate implements ledger.TokenStore. Errors are CodeUnauthorized:
// "unknown token", "token expired", "token … was revoked"; none names the
// secret.
func (s *Store) Authenticate(ctx context.Context, secret string) (ledger.Token, error) {
	row, err := s.AuthenticateRow(ctx, secret)
	if err != nil {
		return ledger.Token{}, err
	}
	return row.Live()
}

// authRowQuery is sqlstore.AuthRowQuery with $1.
var authRowQuery = dialect.SQL(sqlstore.AuthRowQuery)

// AuthenticateRow implements ledger.TokenRowAuthenticator: one query
// reads the row whose secret_hash is SHA-256(secret) with the count of
// token and token-revocation leaves, so tlog.VerifiedStore can check
// the row against its leaves (and cache that check by the count).
func (s *Store) AuthenticateRow(ctx context.Context, secret string) (ledger.TokenRow, error) {
	h := sha256.Sum256([]byte(secret))
	return dialect.ScanTokenRow(s.d.db.QueryRowContext(ctx, authRowQuery, h[:]), h[:], s.d.opts.Now(), "authenticate")
}

var _ ledger.TokenRowAuthenticator = (*Store)(nil)

// queueTokens adds the buffered tokens-table writes (sqlstore.TokenOps) to
// q.
func (b *batch) queueTokens(q *pgx.Batch) {
	b.tokOps.Write(dialect, func(sql string, args ...any) error {
		q.Queue(sql, args...)
		return nil
	})
}

// TokenRow implements ledger.TokenRowBatch: AuthenticateRow's query in
// the batch's transaction, which holds the log's sequencer lock, so no
// other server's append (a revocation) commits between it and the batch.
func (b *batch) TokenRow(ctx context.Context, secretHash []byte) (ledger.TokenRow, error) {
	return dialect.ScanTokenRow(b.tx.QueryRowContext(ctx, authRowQuery, secretHash), secretHash, b.d.opts.Now(), "token row")
}

var _ ledger.TokenRowBatch = (*batch)(nil)
