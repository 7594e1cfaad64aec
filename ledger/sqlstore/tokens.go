package sqlstore

import (
	"context"
	"crypto/rand"
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
	"github.com/evidence-ledger/ledger/ledger/tlog"
)

// The tokens table is the projection of the token and token-revocation
// leaves (ledger.KindToken, ledger.KindTokenRevocation): a batch writes its
// rows in the transaction that appends the leaves (TokenOps), and the
// audit checks every row against them (AuditTokens).

// TokenCols are the tokens columns ScanToken reads.
const TokenCols = "id, name, scope, created_at, revoked_at, roles, repositories, lanes, backends, expires_at"

// AuthRowQuery reads a tokens row by secret hash ("?") with the count of
// token leaves; "kind <> 'evidence'" lets the engine count on the partial
// index leaves_kind_key instead of scanning the leaves. ScanTokenRow reads
// its answer.
const AuthRowQuery = "SELECT " + TokenCols + ", leaf_idx, revoked_idx, " +
	"(SELECT COUNT(*) FROM leaves WHERE kind IN ('token', 'token-revocation') AND kind <> 'evidence') FROM tokens WHERE secret_hash = ?"

// TokenTable is the ledger.TokenStore of a driver: tokens are created and
// revoked by appending leaves (whose batch writes the rows) and listed
// from the tokens table. A driver's Store embeds it. Safe for concurrent
// use when its queryers and Append are.
type TokenTable struct {
	Dialect *Dialect
	// Lookup reads a token's row before a leaf is appended for it.
	Lookup Queryer
	// List reads the table for Tokens, in ListOrder (an ORDER BY list).
	List         Queryer
	ListOrder    string
	Now          func() time.Time
	AppendLeaves func(ctx context.Context, recs []ledger.Record, idemKey string) (*ledger.AppendResult, error)
}

// CreateToken implements ledger.TokenStore: CreateScopedToken with no
// evidence restriction and no expiry.
func (t *TokenTable) CreateToken(ctx context.Context, name string, scope ledger.Scope, roles []string) (string, ledger.Token, error) {
	return t.CreateScopedToken(ctx, ledger.TokenSpec{Name: name, Scope: scope, Roles: roles})
}

// CreateScopedToken implements ledger.TokenStore. The secret ("lgr_" + 64
// hex) is returned once; the token is appended as a token leaf carrying
// the SHA-256 of the secret (never the secret), and its tokens row is
// written in the same transaction. Errors: CodeInvalid naming the spec's
// field, CodeConflict when the name is taken (also when another writer
// took it meanwhile: the row's UNIQUE name refuses the append).
func (t *TokenTable) CreateScopedToken(ctx context.Context, spec ledger.TokenSpec) (string, ledger.Token, error) {
	d := t.Dialect
	now := t.Now().UTC()
	if err := spec.Validate(now); err != nil {
		return "", ledger.Token{}, err
	}
	if d.unstorable(spec.Name) {
		return "", ledger.Token{}, ledger.FieldError("name", "must be valid UTF-8 without NUL")
	}
	var n int
	if err := t.Lookup.QueryRowContext(ctx, d.SQL("SELECT COUNT(*) FROM tokens WHERE name = ?"), spec.Name).Scan(&n); err != nil {
		return "", ledger.Token{}, d.Err("create token", err)
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
		Roles: NonNil(spec.Roles), Repositories: NonNil(spec.Repositories), Lanes: NonNil(spec.Lanes), Backends: spec.Backends,
		ExpiresAt: spec.ExpiresAt, SecretSHA256: ledger.SecretSHA256(secret), CreatedAt: now,
	}
	if leaf.Backends == nil {
		leaf.Backends = []ledger.Backend{}
	}
	body, err := json.Marshal(leaf)
	if err != nil {
		return "", ledger.Token{}, err
	}
	if _, err := t.AppendLeaves(ctx, []ledger.Record{{Kind: ledger.KindToken, Body: body}}, ""); err != nil {
		return "", ledger.Token{}, fmt.Errorf("create token: %w", err)
	}
	return secret, tokenOf(leaf), nil
}

// tokenOf is the Token a token leaf creates (empty lists are nil).
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

// NonNil returns s, or an empty list for nil (a leaf's lists are never
// JSON null).
func NonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Tokens implements ledger.TokenStore.
func (t *TokenTable) Tokens(ctx context.Context) ([]ledger.Token, error) {
	d := t.Dialect
	rows, err := t.List.QueryContext(ctx, "SELECT "+TokenCols+" FROM tokens ORDER BY "+t.ListOrder)
	if err != nil {
		return nil, d.Err("list tokens", err)
	}
	defer rows.Close()
	var out []ledger.Token
	for rows.Next() {
		tok, err := ScanToken(rows)
		if err != nil {
			return nil, d.Err("list tokens", err)
		}
		out = append(out, tok)
	}
	return out, d.Err("list tokens", rows.Err())
}

// RevokeToken implements ledger.TokenStore: it appends a token-revocation
// leaf, and the row's revoked_at is written with it. Revoking twice is an
// error (CodeNotFound: no live token of that id or name).
func (t *TokenTable) RevokeToken(ctx context.Context, idOrName string) error {
	d := t.Dialect
	if d.unstorable(idOrName) {
		return ledger.NotFound("no live token with id or name %q", idOrName)
	}
	var id, name string
	err := t.Lookup.QueryRowContext(ctx, d.SQL("SELECT id, name FROM tokens WHERE (id = ? OR name = ?) AND revoked_at IS NULL"), idOrName, idOrName).Scan(&id, &name)
	if errors.Is(err, sql.ErrNoRows) {
		return ledger.NotFound("no live token with id or name %q", idOrName)
	}
	if err != nil {
		return d.Err("revoke token", err)
	}
	body, _ := json.Marshal(ledger.TokenRevocationLeaf{TokenID: id, Name: name, RevokedAt: t.Now().UTC()})
	if _, err := t.AppendLeaves(ctx, []ledger.Record{{Kind: ledger.KindTokenRevocation, Body: body}}, ""); err != nil {
		return fmt.Errorf("revoke token: %w", err)
	}
	return nil
}

// ScanToken reads the TokenCols of a row (then extra columns, when sc is
// a MultiScanner).
func ScanToken(sc Scanner) (ledger.Token, error) {
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

// MultiScanner scans a tokens row followed by Extra columns.
type MultiScanner struct {
	R     Scanner
	Extra []any
}

// Scan implements Scanner: dst, then Extra.
func (m MultiScanner) Scan(dst ...any) error { return m.R.Scan(slices.Concat(dst, m.Extra)...) }

// ScanTokenRow reads AuthRowQuery's answer for the row selected by
// secretHash, read at now: CodeUnauthorized when there is none, op names
// a read failure.
func (d *Dialect) ScanTokenRow(r *sql.Row, secretHash []byte, now time.Time, op string) (ledger.TokenRow, error) {
	var leafIdx, revIdx sql.NullInt64
	var n int64
	t, err := ScanToken(MultiScanner{r, []any{&leafIdx, &revIdx, &n}})
	if errors.Is(err, sql.ErrNoRows) {
		return ledger.TokenRow{}, ledger.Errorf(ledger.CodeUnauthorized, "unknown token")
	}
	if err != nil {
		return ledger.TokenRow{}, d.Err(op, err)
	}
	row := tlog.ScannedTokenRow(t, secretHash, leafIdx, revIdx)
	row.TokenLeaves, row.ReadAt = uint64(n), now
	return row, nil
}

// TokenOps are the tokens-table writes the token leaves of a batch imply,
// buffered until the leaves are written. Not safe for concurrent use.
type TokenOps []tokenOp

// tokenOp is one tokens-table write a token leaf implies.
type tokenOp struct {
	idx uint64
	tok *ledger.TokenLeaf
	rev *ledger.TokenRevocationLeaf
}

// Add buffers the tokens-table write of a token or token-revocation leaf
// at idx (body canonical, as prepared); other kinds, and bodies that do
// not decode, imply none.
func (o *TokenOps) Add(idx uint64, k ledger.Kind, body []byte) {
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
	*o = append(*o, op)
}

// Write hands each buffered write to exec as a statement in d's spelling
// and its arguments, in order, stopping at exec's first error, and empties
// the buffer when all were handed. A token leaf inserts its row, or, for
// a token logged after the fact (Adopted), sets leaf_idx on the row it
// came from; a revocation sets revoked_at and revoked_idx on a row not yet
// revoked by a leaf.
func (o *TokenOps) Write(d *Dialect, exec func(q string, args ...any) error) error {
	for _, op := range *o {
		var err error
		switch {
		case op.tok != nil && op.tok.Adopted:
			err = exec(d.SQL("UPDATE tokens SET leaf_idx = ? WHERE id = ? AND leaf_idx = -1"), int64(op.idx), op.tok.TokenID)
		case op.tok != nil:
			l := op.tok
			h, _ := hex.DecodeString(l.SecretSHA256)
			err = exec(d.SQL("INSERT INTO tokens(id, name, scope, secret_hash, created_at, roles, repositories, lanes, backends, expires_at, leaf_idx) VALUES (?,?,?,?,?,?,?,?,?,?,?)"),
				l.TokenID, l.Name, string(l.Scope), h, l.CreatedAt.UnixNano(), jsonList(l.Roles), jsonList(l.Repositories), jsonList(l.Lanes), jsonList(backendStrings(l.Backends)), unixOrNil(l.ExpiresAt), int64(op.idx))
		default:
			err = exec(d.SQL("UPDATE tokens SET revoked_at = ?, revoked_idx = ? WHERE id = ? AND revoked_idx IS NULL"), op.rev.RevokedAt.UnixNano(), int64(op.idx), op.rev.TokenID)
		}
		if err != nil {
			return err
		}
	}
	*o = (*o)[:0]
	return nil
}

func jsonList(s []string) string {
	b, _ := json.Marshal(NonNil(s))
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
