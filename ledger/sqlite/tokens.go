package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlstore"
)

// The tokens table is the projection of the token and token-revocation
// leaves (sqlstore.TokenTable, whose methods Store has): the batch writes
// its rows in the transaction that appends the leaves (stmts.tokOps), and
// the audit checks every row against them (sqlstore.AuditTokens). A token
// made before schema 7 has no leaf until a writable Open logs it
// (logUnloggedTokens; migration 7 marks those rows with leaf_idx -1).

const tokenCols = sqlstore.TokenCols

// Authenticate implements ledger.TokenStore. Errors are CodeUnauthorized:
// "unknown token", "token expired", "token … was revoked"; none names the
// secret. It trusts the tokens row and reads only the columns a Token
// holds; tlog.VerifiedStore.Authenticate checks the row against its
// token leaves first (AuthenticateRow).
func (s *Store) Authenticate(ctx context.Context, secret string) (ledger.Token, error) {
	h := sha256.Sum256([]byte(secret))
	t, err := sqlstore.ScanToken(s.d.r.QueryRowContext(ctx, "SELECT "+tokenCols+" FROM tokens WHERE secret_hash = ?", h[:]))
	if errors.Is(err, sql.ErrNoRows) {
		return ledger.Token{}, ledger.Errorf(ledger.CodeUnauthorized, "unknown token")
	}
	if err != nil {
		return ledger.Token{}, dbErr("authenticate", err)
	}
	return ledger.TokenRow{Token: t, ReadAt: s.d.opts.Now()}.Live()
}

// AuthenticateRow implements ledger.TokenRowAuthenticator: one query
// (sqlstore.AuthRowQuery) reads the row whose secret_hash is
// SHA-256(secret) with the count of token and token-revocation leaves (an
// index-only count over leaves_kind_key). The row's secret hash is the one
// it was selected by, so it is not read back.
func (s *Store) AuthenticateRow(ctx context.Context, secret string) (ledger.TokenRow, error) {
	h := sha256.Sum256([]byte(secret))
	return dialect.ScanTokenRow(s.d.r.QueryRowContext(ctx, sqlstore.AuthRowQuery, h[:]), h[:], s.d.opts.Now(), "authenticate")
}

// flushTokens writes the buffered tokens-table rows (sqlstore.TokenOps)
// in tx.
func (st *stmts) flushTokens(ctx context.Context, tx *sql.Tx) error {
	err := st.tokOps.Write(dialect, func(q string, args ...any) error {
		_, err := tx.ExecContext(ctx, q, args...)
		return err
	})
	if err != nil {
		return fmt.Errorf("tokens projection: %w", err)
	}
	return nil
}

// tokenLeavesSchema is the schema version (migration 00007) from which
// every token has a leaf.
const tokenLeavesSchema = 7

// logUnloggedTokens appends a token leaf (Adopted) for every tokens row
// that migration 7 marked as made before it (leaf_idx -1), and a
// revocation leaf for those already revoked, so that those tokens are
// covered by the audit like the others. It runs only in the writable
// open that migrated the database across version 7 (it needs the signing
// key): a -1 row found by any later open was inserted, is never adopted,
// and the audit and authentication refuse it.
func (s *Store) logUnloggedTokens(ctx context.Context) error {
	rows, err := s.d.w.QueryContext(ctx, "SELECT "+tokenCols+", secret_hash, revoked_idx FROM tokens WHERE leaf_idx = -1 ORDER BY created_at, id")
	if err != nil {
		return dbErr("log tokens", err)
	}
	var recs []ledger.Record
	for rows.Next() {
		var t ledger.Token
		var hash []byte
		var revIdx sql.NullInt64
		if t, err = sqlstore.ScanToken(sqlstore.MultiScanner{R: rows, Extra: []any{&hash, &revIdx}}); err != nil {
			rows.Close()
			return dbErr("log tokens", err)
		}
		l := ledger.TokenLeaf{TokenID: t.ID, Name: t.Name, Scope: t.Scope, Roles: sqlstore.NonNil(t.Roles), Repositories: sqlstore.NonNil(t.Repositories),
			Lanes: sqlstore.NonNil(t.Lanes), Backends: t.Backends, ExpiresAt: t.ExpiresAt, SecretSHA256: hex.EncodeToString(hash), CreatedAt: t.CreatedAt, Adopted: true}
		if l.Backends == nil {
			l.Backends = []ledger.Backend{}
		}
		b, _ := json.Marshal(l)
		recs = append(recs, ledger.Record{Kind: ledger.KindToken, Body: b})
		if t.RevokedAt != nil && !revIdx.Valid {
			b, _ := json.Marshal(ledger.TokenRevocationLeaf{TokenID: t.ID, Name: t.Name, RevokedAt: *t.RevokedAt})
			recs = append(recs, ledger.Record{Kind: ledger.KindTokenRevocation, Body: b})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return dbErr("log tokens", err)
	}
	if len(recs) == 0 {
		return nil
	}
	if _, err := s.Append(ctx, recs, ""); err != nil {
		return fmt.Errorf("log tokens made before schema 7: %w", err)
	}
	s.d.log.Info("logged tokens made before schema 7", "leaves", len(recs))
	return nil
}

// TokenRow implements ledger.TokenRowBatch: AuthenticateRow's query in the
// batch's transaction, so that what it reads is what the batch appends
// under (no other writer commits before the batch does).
func (b *batch) TokenRow(ctx context.Context, secretHash []byte) (ledger.TokenRow, error) {
	return dialect.ScanTokenRow(b.tx.StmtContext(ctx, b.st.tokenRow).QueryRowContext(ctx, secretHash), secretHash, b.d.opts.Now(), "token row")
}

var _ ledger.TokenRowBatch = (*batch)(nil)
