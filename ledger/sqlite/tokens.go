package sqlite

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

var tokenNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// CreateToken implements ledger.Store. The secret ("lgr_" + 64 hex) is
// returned once; only its SHA-256 is stored.
func (s *Store) CreateToken(ctx context.Context, name string, scope ledger.Scope, roles []string) (string, ledger.Token, error) {
	var t ledger.Token
	if !tokenNameRe.MatchString(name) {
		return "", t, ledger.FieldError("name", "token name must be 1-64 of [A-Za-z0-9._-], got %q", name)
	}
	switch scope {
	case ledger.ScopeRead, ledger.ScopeRecord, ledger.ScopeAdmin:
	default:
		return "", t, ledger.FieldError("scope", "must be read, record or admin, got %q", scope)
	}
	for _, r := range roles {
		if !tokenNameRe.MatchString(r) {
			return "", t, ledger.FieldError("roles", "role must be 1-64 of [A-Za-z0-9._-], got %q", r)
		}
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", t, err
	}
	secret := "lgr_" + hex.EncodeToString(b[:])
	var idb [6]byte
	rand.Read(idb[:])
	now := s.d.opts.Now().UTC()
	t = ledger.Token{ID: "tok_" + hex.EncodeToString(idb[:]), Name: name, Scope: scope, Roles: roles, CreatedAt: now}
	h := sha256.Sum256([]byte(secret))
	rj, _ := json.Marshal(nonNil(roles))
	_, err := s.d.w.ExecContext(ctx, "INSERT INTO tokens(id, name, scope, secret_hash, created_at, roles) VALUES (?,?,?,?,?,?)", t.ID, name, string(scope), h[:], now.UnixNano(), string(rj))
	if err != nil {
		if strings.Contains(err.Error(), "UNIQUE") {
			return "", t, ledger.Errorf(ledger.CodeConflict, "a token named %q already exists", name)
		}
		return "", t, dbErr("create token", err)
	}
	return secret, t, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func scanToken(sc scanner) (ledger.Token, error) {
	var t ledger.Token
	var scope, roles string
	var created int64
	var revoked sql.NullInt64
	if err := sc.Scan(&t.ID, &t.Name, &scope, &created, &revoked, &roles); err != nil {
		return t, err
	}
	t.Scope = ledger.Scope(scope)
	t.CreatedAt = time.Unix(0, created).UTC()
	if revoked.Valid {
		r := time.Unix(0, revoked.Int64).UTC()
		t.RevokedAt = &r
	}
	_ = json.Unmarshal([]byte(roles), &t.Roles)
	if len(t.Roles) == 0 {
		t.Roles = nil
	}
	return t, nil
}

// Tokens implements ledger.Store.
func (s *Store) Tokens(ctx context.Context) ([]ledger.Token, error) {
	rows, err := s.d.r.QueryContext(ctx, "SELECT id, name, scope, created_at, revoked_at, roles FROM tokens ORDER BY created_at")
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

// RevokeToken implements ledger.Store. Revoking twice is an error
// (CodeNotFound: no live token of that id or name).
func (s *Store) RevokeToken(ctx context.Context, idOrName string) error {
	res, err := s.d.w.ExecContext(ctx, "UPDATE tokens SET revoked_at = ? WHERE (id = ? OR name = ?) AND revoked_at IS NULL", s.d.opts.Now().UTC().UnixNano(), idOrName, idOrName)
	if err != nil {
		return dbErr("revoke token", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ledger.NotFound("no live token with id or name %q", idOrName)
	}
	return nil
}

// Authenticate implements ledger.Store.
func (s *Store) Authenticate(ctx context.Context, secret string) (ledger.Token, error) {
	h := sha256.Sum256([]byte(secret))
	t, err := scanToken(s.d.r.QueryRowContext(ctx, "SELECT id, name, scope, created_at, revoked_at, roles FROM tokens WHERE secret_hash = ?", h[:]))
	if errors.Is(err, sql.ErrNoRows) {
		return t, ledger.Errorf(ledger.CodeUnauthorized, "unknown token")
	}
	if err != nil {
		return t, dbErr("authenticate", err)
	}
	if t.RevokedAt != nil {
		return t, ledger.Errorf(ledger.CodeUnauthorized, "token %q was revoked", t.Name)
	}
	return t, nil
}
