package postgres

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/jackc/pgx/v5"
)

// The tokens table is the projection of the token and token-revocation
// leaves (as in ledger/sqlite): the batch writes its rows in the
// transaction that appends the leaves, and the audit checks every row
// against them.

const tokenCols = "id, name, scope, created_at, revoked_at, roles, repositories, lanes, backends, expires_at"

// CreateToken implements ledger.TokenStore: CreateScopedToken with no
// evidence restriction and no expiry.
func (s *Store) CreateToken(ctx context.Context, name string, scope ledger.Scope, roles []string) (string, ledger.Token, error) {
	return s.CreateScopedToken(ctx, ledger.TokenSpec{Name: name, Scope: scope, Roles: roles})
}

// CreateScopedToken implements ledger.TokenStore. The secret ("lgr_" + 64
// hex) is returned once; the token is appended as a token leaf carrying
// the SHA-256 of the secret, and its row is written in the same
// transaction. Errors: CodeInvalid naming the spec's field, CodeConflict
// when the name is taken (also when another server took it meanwhile:
// the row's UNIQUE name refuses the append).
func (s *Store) CreateScopedToken(ctx context.Context, spec ledger.TokenSpec) (string, ledger.Token, error) {
	now := s.d.opts.Now().UTC()
	if err := spec.Validate(now); err != nil {
		return "", ledger.Token{}, err
	}
	if unstorable(spec.Name) {
		return "", ledger.Token{}, ledger.FieldError("name", "must be valid UTF-8 without NUL")
	}
	var n int
	if err := s.d.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM tokens WHERE name = $1", spec.Name).Scan(&n); err != nil {
		return "", ledger.Token{}, dbErr("create token", err)
	}
	if n > 0 {
		return "", ledger.Token{}, ledger.Errorf(ledger.CodeConflict, "a token named %q already exists", spec.Name)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", ledger.Token{}, err
	}
	secret := "lgr_" + hex.EncodeToString(b[:])
	var idb [6]byte
	rand.Read(idb[:])
	leaf := ledger.TokenLeaf{
		TokenID: "tok_" + hex.EncodeToString(idb[:]), Name: spec.Name, Scope: spec.Scope,
		Roles: nonNil(spec.Roles), Repositories: nonNil(spec.Repositories), Lanes: nonNil(spec.Lanes), Backends: spec.Backends,
		ExpiresAt: spec.ExpiresAt, SecretSHA256: ledger.SecretSHA256(secret), CreatedAt: now,
	}
	if leaf.Backends == nil {
		leaf.Backends = []ledger.Backend{}
	}
	body, err := json.Marshal(leaf)
	if err != nil {
		return "", ledger.Token{}, err
	}
	if _, err := s.Append(ctx, []ledger.Record{{Kind: ledger.KindToken, Body: body}}, ""); err != nil {
		return "", ledger.Token{}, fmt.Errorf("create token: %w", err)
	}
	return secret, tokenOf(leaf), nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func tokenOf(l ledger.TokenLeaf) ledger.Token {
	t := ledger.Token{ID: l.TokenID, Name: l.Name, Scope: l.Scope, Roles: l.Roles, CreatedAt: l.CreatedAt,
		Repositories: l.Repositories, Lanes: l.Lanes, Backends: l.Backends, ExpiresAt: l.ExpiresAt}
	t.Roles, t.Repositories, t.Lanes = nilIfEmpty(t.Roles), nilIfEmpty(t.Repositories), nilIfEmpty(t.Lanes)
	if len(t.Backends) == 0 {
		t.Backends = nil
	}
	return t
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

func scanToken(sc scanner, extra ...any) (ledger.Token, error) {
	var t ledger.Token
	var scope, roles, repos, lanes, backends string
	var created int64
	var revoked, expires sql.NullInt64
	if err := sc.Scan(append([]any{&t.ID, &t.Name, &scope, &created, &revoked, &roles, &repos, &lanes, &backends, &expires}, extra...)...); err != nil {
		return t, err
	}
	t.Scope = ledger.Scope(scope)
	t.CreatedAt = time.Unix(0, created).UTC()
	if revoked.Valid {
		r := time.Unix(0, revoked.Int64).UTC()
		t.RevokedAt = &r
	}
	if expires.Valid {
		e := time.Unix(0, expires.Int64).UTC()
		t.ExpiresAt = &e
	}
	_ = json.Unmarshal([]byte(roles), &t.Roles)
	_ = json.Unmarshal([]byte(repos), &t.Repositories)
	_ = json.Unmarshal([]byte(lanes), &t.Lanes)
	_ = json.Unmarshal([]byte(backends), &t.Backends)
	t.Roles, t.Repositories, t.Lanes = nilIfEmpty(t.Roles), nilIfEmpty(t.Repositories), nilIfEmpty(t.Lanes)
	if len(t.Backends) == 0 {
		t.Backends = nil
	}
	return t, nil
}

// Tokens implements ledger.TokenStore.
func (s *Store) Tokens(ctx context.Context) ([]ledger.Token, error) {
	rows, err := s.d.db.QueryContext(ctx, "SELECT "+tokenCols+" FROM tokens ORDER BY created_at, id")
	if err != nil {
		return nil, dbErr("list tokens", err)
	}
	defer rows.Close()
	var out []ledger.Token
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, dbErr("list tokens", err)
		}
		out = append(out, t)
	}
	return out, dbErr("list tokens", rows.Err())
}

// RevokeToken implements ledger.TokenStore: it appends a token-revocation
// leaf, and the row's revoked_at is written with it. Revoking twice is an
// error (CodeNotFound: no live token of that id or name).
func (s *Store) RevokeToken(ctx context.Context, idOrName string) error {
	if unstorable(idOrName) {
		return ledger.NotFound("no live token with id or name %q", idOrName)
	}
	var id, name string
	err := s.d.db.QueryRowContext(ctx, "SELECT id, name FROM tokens WHERE (id = $1 OR name = $1) AND revoked_at IS NULL", idOrName).Scan(&id, &name)
	if errors.Is(err, sql.ErrNoRows) {
		return ledger.NotFound("no live token with id or name %q", idOrName)
	}
	if err != nil {
		return dbErr("revoke token", err)
	}
	body, _ := json.Marshal(ledger.TokenRevocationLeaf{TokenID: id, Name: name, RevokedAt: s.d.opts.Now().UTC()})
	if _, err := s.Append(ctx, []ledger.Record{{Kind: ledger.KindTokenRevocation, Body: body}}, ""); err != nil {
		return fmt.Errorf("revoke token: %w", err)
	}
	return nil
}

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

// authRowQuery reads a tokens row by secret hash with the count of token
// leaves ("kind <> 'evidence'" matches the partial index leaves_kind_key).
const authRowQuery = "SELECT " + tokenCols + ", secret_hash, leaf_idx, revoked_idx, " +
	"(SELECT COUNT(*) FROM leaves WHERE kind IN ('token', 'token-revocation') AND kind <> 'evidence') FROM tokens WHERE secret_hash = $1"

// AuthenticateRow implements ledger.TokenRowAuthenticator: one query
// reads the row whose secret_hash is SHA-256(secret) with the count of
// token and token-revocation leaves, so ledger.VerifiedStore can check
// the row against its leaves (and cache that check by the count).
func (s *Store) AuthenticateRow(ctx context.Context, secret string) (ledger.TokenRow, error) {
	h := sha256.Sum256([]byte(secret))
	return scanTokenRow(s.d.db.QueryRowContext(ctx, authRowQuery, h[:]), s.d.opts.Now(), "authenticate")
}

// scanTokenRow reads authRowQuery's answer, read at now: CodeUnauthorized
// when no row has the secret hash, op names a read failure.
func scanTokenRow(r *sql.Row, now time.Time, op string) (ledger.TokenRow, error) {
	var hash []byte
	var leafIdx, revIdx sql.NullInt64
	var n int64
	t, err := scanToken(r, &hash, &leafIdx, &revIdx, &n)
	if errors.Is(err, sql.ErrNoRows) {
		return ledger.TokenRow{}, ledger.Errorf(ledger.CodeUnauthorized, "unknown token")
	}
	if err != nil {
		return ledger.TokenRow{}, dbErr(op, err)
	}
	row := ledger.ScannedTokenRow(t, hash, leafIdx, revIdx)
	row.TokenLeaves, row.ReadAt = uint64(n), now
	return row, nil
}

var _ ledger.TokenRowAuthenticator = (*Store)(nil)

// tokenOp is one tokens-table write a token leaf implies.
type tokenOp struct {
	idx uint64
	tok *ledger.TokenLeaf
	rev *ledger.TokenRevocationLeaf
}

// addTokenLeaf buffers the tokens-table write of a token or
// token-revocation leaf at idx.
func (b *batch) addTokenLeaf(idx uint64, k ledger.Kind, body []byte) {
	op := tokenOp{idx: idx}
	switch k {
	case ledger.KindToken:
		op.tok = new(ledger.TokenLeaf)
		if json.Unmarshal(body, op.tok) != nil {
			return
		}
	case ledger.KindTokenRevocation:
		op.rev = new(ledger.TokenRevocationLeaf)
		if json.Unmarshal(body, op.rev) != nil {
			return
		}
	default:
		return
	}
	b.tokOps = append(b.tokOps, op)
}

// queueTokens adds the buffered tokens-table writes to q: a token leaf
// inserts its row (an Adopted one, logged after the fact by the SQLite
// driver, sets leaf_idx on the row it came from); a revocation sets
// revoked_at and revoked_idx on a row not yet revoked by a leaf.
func (b *batch) queueTokens(q *pgx.Batch) {
	for _, op := range b.tokOps {
		switch {
		case op.tok != nil && op.tok.Adopted:
			q.Queue("UPDATE tokens SET leaf_idx = $1 WHERE id = $2 AND leaf_idx = -1", int64(op.idx), op.tok.TokenID)
		case op.tok != nil:
			l := op.tok
			h, _ := hex.DecodeString(l.SecretSHA256)
			q.Queue("INSERT INTO tokens(id, name, scope, secret_hash, created_at, roles, repositories, lanes, backends, expires_at, leaf_idx) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11)",
				l.TokenID, l.Name, string(l.Scope), h, l.CreatedAt.UnixNano(), jsonList(l.Roles), jsonList(l.Repositories), jsonList(l.Lanes), jsonList(backendStrings(l.Backends)), unixOrNil(l.ExpiresAt), int64(op.idx))
		default:
			q.Queue("UPDATE tokens SET revoked_at = $1, revoked_idx = $2 WHERE id = $3 AND revoked_idx IS NULL", op.rev.RevokedAt.UnixNano(), int64(op.idx), op.rev.TokenID)
		}
	}
}

func jsonList(s []string) string {
	b, _ := json.Marshal(nonNil(s))
	return string(b)
}

func backendStrings(bs []ledger.Backend) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}

func unixOrNil(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixNano()
}

// TokenRow implements ledger.TokenRowBatch: AuthenticateRow's query in
// the batch's transaction, which holds the log's sequencer lock, so no
// other server's append (a revocation) commits between it and the batch.
func (b *batch) TokenRow(ctx context.Context, secretHash []byte) (ledger.TokenRow, error) {
	return scanTokenRow(b.tx.QueryRowContext(ctx, authRowQuery, secretHash), b.d.opts.Now(), "token row")
}

var _ ledger.TokenRowBatch = (*batch)(nil)
