package sqlite

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// The tokens table is the projection of the token and token-revocation
// leaves (ledger.KindToken, ledger.KindTokenRevocation): the batch writes
// its rows in the transaction that appends the leaves (addTokenLeaf,
// flushTokens), and the audit checks every row against them
// (auditTokens). A token made before schema 7 has no leaf until a
// writable Open logs it (logUnloggedTokens; migration 7 marks those rows
// with leaf_idx -1).

const tokenCols = "id, name, scope, created_at, revoked_at, roles, repositories, lanes, backends, expires_at"

// CreateToken implements ledger.TokenStore: CreateScopedToken with no
// evidence restriction and no expiry.
func (s *Store) CreateToken(ctx context.Context, name string, scope ledger.Scope, roles []string) (string, ledger.Token, error) {
	return s.CreateScopedToken(ctx, ledger.TokenSpec{Name: name, Scope: scope, Roles: roles})
}

// CreateScopedToken implements ledger.TokenStore. The secret ("lgr_" + 64
// hex) is returned once; the token is appended as a token leaf carrying
// the SHA-256 of the secret (never the secret), and its tokens row is
// written in the same transaction. Errors: CodeInvalid naming the spec's
// field, CodeConflict when the name is taken.
func (s *Store) CreateScopedToken(ctx context.Context, spec ledger.TokenSpec) (string, ledger.Token, error) {
	now := s.d.opts.Now().UTC()
	if err := spec.Validate(now); err != nil {
		return "", ledger.Token{}, err
	}
	var n int
	if err := s.d.w.QueryRowContext(ctx, "SELECT COUNT(*) FROM tokens WHERE name = ?", spec.Name).Scan(&n); err != nil {
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

func tokenOf(l ledger.TokenLeaf) ledger.Token {
	t := ledger.Token{ID: l.TokenID, Name: l.Name, Scope: l.Scope, Roles: l.Roles, CreatedAt: l.CreatedAt,
		Repositories: l.Repositories, Lanes: l.Lanes, Backends: l.Backends, ExpiresAt: l.ExpiresAt}
	if len(t.Roles) == 0 {
		t.Roles = nil
	}
	if len(t.Repositories) == 0 {
		t.Repositories = nil
	}
	if len(t.Lanes) == 0 {
		t.Lanes = nil
	}
	if len(t.Backends) == 0 {
		t.Backends = nil
	}
	return t
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func scanToken(sc scanner) (ledger.Token, error) {
	var t ledger.Token
	var scope, roles, repos, lanes, backends string
	var created int64
	var revoked, expires sql.NullInt64
	if err := sc.Scan(&t.ID, &t.Name, &scope, &created, &revoked, &roles, &repos, &lanes, &backends, &expires); err != nil {
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
	t.Roles = stringList[string](roles)
	t.Repositories = stringList[string](repos)
	t.Lanes = stringList[string](lanes)
	t.Backends = stringList[ledger.Backend](backends)
	return t, nil
}

// stringList decodes a token column holding a JSON array of strings (as
// json.Unmarshal does, ignoring its error); an empty list is nil.
// Authentication scans a token per request, so "", null and [] skip the
// decoder and other columns are decoded once (listMemo) and copied.
func stringList[S ~string](col string) []S {
	switch col {
	case "", "null", "[]":
		return nil
	}
	var list []string
	if v, ok := listMemo.Load(col); ok {
		list = v.([]string)
	} else {
		_ = json.Unmarshal([]byte(col), &list)
		if listMemoSize.Add(1) <= listMemoMax {
			listMemo.Store(col, list)
		}
	}
	if len(list) == 0 {
		return nil
	}
	out := make([]S, len(list))
	for i, v := range list {
		out[i] = S(v)
	}
	return out
}

// listMemo maps a token list column's text to its decoded list (never
// modified once stored; stringList returns copies). It holds at most
// listMemoMax columns: tokens are few, and a database with more distinct
// lists than that decodes the rest per read. Safe for concurrent use.
var (
	listMemo     sync.Map
	listMemoSize atomic.Int64
)

const listMemoMax = 1024

// Tokens implements ledger.TokenStore.
func (s *Store) Tokens(ctx context.Context) ([]ledger.Token, error) {
	rows, err := s.d.r.QueryContext(ctx, "SELECT "+tokenCols+" FROM tokens ORDER BY created_at")
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
	var id, name string
	err := s.d.w.QueryRowContext(ctx, "SELECT id, name FROM tokens WHERE (id = ? OR name = ?) AND revoked_at IS NULL", idOrName, idOrName).Scan(&id, &name)
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
// secret. It trusts the tokens row and reads only the columns a Token
// holds; ledger.VerifiedStore.Authenticate checks the row against its
// token leaves first (AuthenticateRow).
func (s *Store) Authenticate(ctx context.Context, secret string) (ledger.Token, error) {
	h := sha256.Sum256([]byte(secret))
	t, err := scanToken(s.d.r.QueryRowContext(ctx, "SELECT "+tokenCols+" FROM tokens WHERE secret_hash = ?", h[:]))
	if errors.Is(err, sql.ErrNoRows) {
		return ledger.Token{}, ledger.Errorf(ledger.CodeUnauthorized, "unknown token")
	}
	if err != nil {
		return ledger.Token{}, dbErr("authenticate", err)
	}
	return ledger.TokenRow{Token: t, ReadAt: s.d.opts.Now()}.Live()
}

// authRowQuery reads a tokens row by secret hash with the count of token
// leaves; "kind <> 'evidence'" lets SQLite count on the partial index
// leaves_kind_key instead of scanning the leaves (TestQueryPlansUseIndexes).
const authRowQuery = "SELECT " + tokenCols + ", leaf_idx, revoked_idx, " +
	"(SELECT COUNT(*) FROM leaves WHERE kind IN ('token', 'token-revocation') AND kind <> 'evidence') FROM tokens WHERE secret_hash = ?"

// AuthenticateRow implements ledger.TokenRowAuthenticator: one query
// reads the row whose secret_hash is SHA-256(secret) with the count of
// token and token-revocation leaves (an index-only count over
// leaves_kind_key). The row's secret hash is the one it was selected by,
// so it is not read back.
func (s *Store) AuthenticateRow(ctx context.Context, secret string) (ledger.TokenRow, error) {
	h := sha256.Sum256([]byte(secret))
	return scanTokenRow(s.d.r.QueryRowContext(ctx, authRowQuery, h[:]), h[:], s.d.opts.Now(), "authenticate")
}

// scanTokenRow reads authRowQuery's answer for the row selected by
// secretHash, read at now: CodeUnauthorized when there is none, op names
// a read failure.
func scanTokenRow(r *sql.Row, secretHash []byte, now time.Time, op string) (ledger.TokenRow, error) {
	var leafIdx, revIdx sql.NullInt64
	var n int64
	t, err := scanToken(multiScanner{r, []any{&leafIdx, &revIdx, &n}})
	if errors.Is(err, sql.ErrNoRows) {
		return ledger.TokenRow{}, ledger.Errorf(ledger.CodeUnauthorized, "unknown token")
	}
	if err != nil {
		return ledger.TokenRow{}, dbErr(op, err)
	}
	row := ledger.ScannedTokenRow(t, secretHash, leafIdx, revIdx)
	row.TokenLeaves, row.ReadAt = uint64(n), now
	return row, nil
}

// tokenOp is one tokens-table write a token leaf implies.
type tokenOp struct {
	idx uint64
	tok *ledger.TokenLeaf
	rev *ledger.TokenRevocationLeaf
}

// addTokenLeaf buffers the tokens-table write of a token or
// token-revocation leaf at idx (body canonical, as prepared).
func (st *stmts) addTokenLeaf(idx uint64, k ledger.Kind, body []byte) {
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
	st.tokOps = append(st.tokOps, op)
}

// flushTokens writes the buffered tokens-table rows in tx. A token leaf
// inserts its row, or, for a token logged after the fact (Adopted), sets
// leaf_idx on the row it came from; a revocation sets revoked_at and
// revoked_idx on a row not yet revoked by a leaf.
func (st *stmts) flushTokens(ctx context.Context, tx *sql.Tx) error {
	for _, op := range st.tokOps {
		var err error
		switch {
		case op.tok != nil && op.tok.Adopted:
			_, err = tx.ExecContext(ctx, "UPDATE tokens SET leaf_idx = ? WHERE id = ? AND leaf_idx = -1", op.idx, op.tok.TokenID)
		case op.tok != nil:
			l := op.tok
			h, _ := hex.DecodeString(l.SecretSHA256)
			_, err = tx.ExecContext(ctx, "INSERT INTO tokens(id, name, scope, secret_hash, created_at, roles, repositories, lanes, backends, expires_at, leaf_idx) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
				l.TokenID, l.Name, string(l.Scope), h, l.CreatedAt.UnixNano(), jsonList(l.Roles), jsonList(l.Repositories), jsonList(l.Lanes), jsonList(backendStrings(l.Backends)), unixOrNil(l.ExpiresAt), op.idx)
		default:
			_, err = tx.ExecContext(ctx, "UPDATE tokens SET revoked_at = ?, revoked_idx = ? WHERE id = ? AND revoked_idx IS NULL", op.rev.RevokedAt.UnixNano(), op.idx, op.rev.TokenID)
		}
		if err != nil {
			return fmt.Errorf("tokens projection: %w", err)
		}
	}
	st.tokOps = st.tokOps[:0]
	return nil
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
		if t, err = scanToken(multiScanner{rows, []any{&hash, &revIdx}}); err != nil {
			rows.Close()
			return dbErr("log tokens", err)
		}
		l := ledger.TokenLeaf{TokenID: t.ID, Name: t.Name, Scope: t.Scope, Roles: nonNil(t.Roles), Repositories: nonNil(t.Repositories),
			Lanes: nonNil(t.Lanes), Backends: t.Backends, ExpiresAt: t.ExpiresAt, SecretSHA256: hex.EncodeToString(hash), CreatedAt: t.CreatedAt, Adopted: true}
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

// multiScanner scans a tokens row followed by extra columns.
type multiScanner struct {
	r     scanner
	extra []any
}

func (m multiScanner) Scan(dst ...any) error { return m.r.Scan(slices.Concat(dst, m.extra)...) }

// tokenLeafOf decodes the body of a token or token-revocation leaf row for
// the audit (CheckLeaf; safe on distinct rows). It returns a problem when
// the body does not decode.
func tokenLeafOf(r *auditRow) string {
	var l ledger.Leaf
	if err := json.Unmarshal(r.Raw, &l); err != nil {
		return "token leaf does not parse"
	}
	c, _, err := ledger.DecodeTokenChange(r.Index, ledger.Kind(r.Kind), l.Body)
	if err != nil {
		return err.Error()
	}
	r.Proj.tok = &c
	return ""
}

// auditTokens checks the tokens table against the token leaves
// (ledger.TokenProjection.CheckTable). It returns the leaf index
// concerned (-1 when none) and the problem ("" when none).
func (a *auditSrc) auditTokens(ctx context.Context) (int64, string, error) {
	rows, err := a.tx.QueryContext(ctx, "SELECT "+tokenCols+", secret_hash, leaf_idx, revoked_idx FROM tokens ORDER BY id")
	if err != nil {
		return -1, "", err
	}
	defer rows.Close()
	var table []ledger.TokenRow
	for rows.Next() {
		var hash []byte
		var leafIdx, revIdx sql.NullInt64
		t, err := scanToken(multiScanner{rows, []any{&hash, &leafIdx, &revIdx}})
		if err != nil {
			return -1, "", err
		}
		table = append(table, ledger.ScannedTokenRow(t, hash, leafIdx, revIdx))
	}
	if err := rows.Err(); err != nil {
		return -1, "", err
	}
	idx, problem := a.tokens.CheckTable(table)
	return idx, problem, nil
}

// TokenRow implements ledger.TokenRowBatch: AuthenticateRow's query in the
// batch's transaction, so that what it reads is what the batch appends
// under (no other writer commits before the batch does).
func (b *batch) TokenRow(ctx context.Context, secretHash []byte) (ledger.TokenRow, error) {
	return scanTokenRow(b.tx.StmtContext(ctx, b.st.tokenRow).QueryRowContext(ctx, secretHash), secretHash, b.d.opts.Now(), "token row")
}

var _ ledger.TokenRowBatch = (*batch)(nil)
