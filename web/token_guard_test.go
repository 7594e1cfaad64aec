package web

import (
	"context"
	"crypto/sha256"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
)

// countingStore is a sqlite store that counts its Entries reads (the
// reads the token guard folds the token leaves with).
type countingStore struct {
	*sqlite.Store
	entries atomic.Int64
}

func (c *countingStore) Entries(ctx context.Context, f ledger.EntryFilter) ([]ledger.Entry, string, error) {
	c.entries.Add(1)
	return c.Store.Entries(ctx, f)
}

// attackerSecret is a token secret the attacker knows; its hash is what a
// raw-SQL edit puts into the tokens table.
const attackerSecret = "lgr_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

// TestAuthenticationRefusesEditedTokensTable: authentication checks the
// tokens row it authenticates against the token leaves that define it,
// so a raw-SQL edit of the tokens table under a running server (scope,
// lanes, backends or repositories widened, expiry removed or extended,
// revocation removed, a secret hash replaced by one the attacker knows, a
// row with no leaf) is refused at once with 401 naming what differs,
// logged as tampering with the token id, never echoing the secret, and
// nothing is appended. Each edit is one that the store's own
// Authenticate (which trusts the row) would have let through.
func TestAuthenticationRefusesEditedTokensTable(t *testing.T) {
	ah := sha256.Sum256([]byte(attackerSecret))
	for _, c := range []struct {
		name, sql string
		args      []any
		secret    func(e *tokenEnv) string
		after     time.Duration // clock advance before the request
		body      func() any
		want      string
	}{
		{name: "repository scope widened", sql: `UPDATE tokens SET repositories = '[]' WHERE name = 'ci-cuda'`,
			secret: func(e *tokenEnv) string { return e.scoped }, body: func() any {
				ev := cudaEvidence(1)
				ev["subject"].(map[string]any)["repository"] = "github.com/other/repo"
				return ev
			}, want: "repositories differs"},
		{name: "lane scope widened", sql: `UPDATE tokens SET lanes = '["qmv-bias-sum","alloc-snapshot"]' WHERE name = 'ci-cuda'`,
			secret: func(e *tokenEnv) string { return e.scoped }, body: func() any {
				ev := cudaEvidence(1)
				ev["lane"] = "alloc-snapshot/v1"
				return ev
			}, want: "lanes differs"},
		{name: "backend scope removed", sql: `UPDATE tokens SET backends = '[]' WHERE name = 'ci-cuda'`,
			secret: func(e *tokenEnv) string { return e.scoped }, body: func() any { return testEvidence(1) }, want: "backends differs"},
		{name: "scope raised to admin", sql: `UPDATE tokens SET scope = 'admin' WHERE name = 'ci'`,
			secret: func(e *tokenEnv) string { return e.record }, want: "scope differs"},
		{name: "role added", sql: `UPDATE tokens SET roles = '["release-manager"]' WHERE name = 'ci'`,
			secret: func(e *tokenEnv) string { return e.record }, want: "roles differs"},
		{name: "expiry removed", sql: `UPDATE tokens SET expires_at = NULL WHERE name = 'ci-short'`,
			secret: func(e *tokenEnv) string { return e.expires }, after: 2 * time.Hour, want: "expires_at differs"},
		{name: "expiry extended", sql: `UPDATE tokens SET expires_at = expires_at + 86400000000000 WHERE name = 'ci-short'`,
			secret: func(e *tokenEnv) string { return e.expires }, after: 2 * time.Hour, want: "expires_at differs"},
		{name: "revocation removed", sql: `UPDATE tokens SET revoked_at = NULL, revoked_idx = NULL WHERE name = 'ci-old'`,
			secret: func(e *tokenEnv) string { return e.revoked }, want: "revoked_at differs"},
		{name: "revocation removed, index kept", sql: `UPDATE tokens SET revoked_at = NULL WHERE name = 'ci-old'`,
			secret: func(e *tokenEnv) string { return e.revoked }, want: "revoked_at differs"},
		{name: "admin secret hash replaced by the attacker's", sql: `UPDATE tokens SET secret_hash = ? WHERE name = 'ops'`, args: []any{ah[:]},
			secret: func(*tokenEnv) string { return attackerSecret }, want: "secret_hash differs"},
		{name: "row inserted", sql: `INSERT INTO tokens(id, name, scope, secret_hash, created_at) VALUES ('tok_00112233aabb', 'evil', 'admin', ?, 1)`, args: []any{ah[:]},
			secret: func(*tokenEnv) string { return attackerSecret }, want: "no token leaf creates it"},
		{name: "row inserted posing as made before schema 7", sql: `INSERT INTO tokens(id, name, scope, secret_hash, created_at, leaf_idx) VALUES ('tok_00112233aabb', 'evil', 'admin', ?, 1, -1)`, args: []any{ah[:]},
			secret: func(*tokenEnv) string { return attackerSecret }, want: "not logged yet"},
		{name: "row inserted pointing at another token's leaf", sql: `INSERT INTO tokens(id, name, scope, secret_hash, created_at, leaf_idx) SELECT 'tok_00112233aabb', 'ci-twin', 'record', ?, created_at, leaf_idx FROM tokens WHERE name = 'ci'`, args: []any{ah[:]},
			secret: func(*tokenEnv) string { return attackerSecret }, want: "no token leaf creates it"},
		{name: "row renamed", sql: `UPDATE tokens SET name = 'ci2' WHERE name = 'ci'`,
			secret: func(e *tokenEnv) string { return e.record }, want: "name differs"},
		{name: "leaf index moved", sql: `UPDATE tokens SET leaf_idx = leaf_idx + 1 WHERE name = 'ci'`,
			secret: func(e *tokenEnv) string { return e.record }, want: "leaf_idx differs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newTokenEnv(t, Config{})
			secret := c.secret(e)
			body := testEvidence(1)
			if c.body != nil {
				body = c.body().(map[string]any)
			}
			// The server is running and has authenticated (and cached)
			// before the edit.
			if code, b := e.do(t, "GET", "/api/v1/evidence", e.record, nil); code != http.StatusOK {
				t.Fatalf("before the edit: %d %s", code, b)
			}
			res, err := e.store.DB().Exec(c.sql, c.args...)
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				t.Fatalf("%d rows changed", n)
			}
			e.advance(c.after)
			// The store alone trusts the edited row.
			if _, err := e.store.Authenticate(context.Background(), secret); err != nil {
				t.Fatalf("the edit does not get past the store's own check (%v): not a test of the guard", err)
			}
			n := e.size(t)
			code, out := e.do(t, "POST", "/api/v1/evidence", secret, body)
			ae := apiError(t, out)
			if code != http.StatusUnauthorized || !strings.Contains(ae.Message, c.want) || !strings.Contains(ae.Message, "ledger audit") {
				t.Fatalf("POST with the edited row: %d %s, want 401 naming %q", code, out, c.want)
			}
			if strings.Contains(string(out), secret) || strings.Contains(string(out), secret[4:20]) {
				t.Fatal("the answer names the secret")
			}
			if e.size(t) != n {
				t.Fatal("a refused request appended")
			}
			logged := e.logBuf.String()
			if !strings.Contains(logged, "tampering") || !strings.Contains(logged, c.want[:strings.Index(c.want+" ", " ")]) {
				t.Fatalf("not logged as tampering: %s", logged)
			}
			if strings.Contains(logged, secret) || strings.Contains(logged, secret[4:20]) {
				t.Fatal("the log names the secret")
			}
		})
	}
}

// TestTokenGuardCache: the guard folds the token leaves once per change
// of their count: a run of requests costs no Entries read after the
// first, a token created or revoked through the store is seen at once
// (a new token authenticates, a revoked one is refused as revoked and not
// as tampering).
func TestTokenGuardCache(t *testing.T) {
	e := newTokenEnv(t, Config{})
	if code, b := e.do(t, "POST", "/api/v1/evidence", e.record, testEvidence(0)); code != http.StatusCreated {
		t.Fatalf("first POST: %d %s", code, b)
	}
	folded := e.counted.entries.Load()
	if folded == 0 {
		t.Fatal("authentication read no token leaf")
	}
	for i := 1; i <= 20; i++ {
		if code, b := e.do(t, "POST", "/api/v1/evidence", e.record, testEvidence(i)); code != http.StatusCreated {
			t.Fatalf("POST %d: %d %s", i, code, b)
		}
	}
	if got := e.counted.entries.Load(); got != folded {
		t.Fatalf("20 POSTs at an unchanged token-leaf count read Entries %d more times", got-folded)
	}
	secret, _, err := e.store.CreateScopedToken(context.Background(), ledger.TokenSpec{Name: "ci-new", Scope: ledger.ScopeRecord})
	if err != nil {
		t.Fatal(err)
	}
	if code, b := e.do(t, "POST", "/api/v1/evidence", secret, testEvidence(30)); code != http.StatusCreated {
		t.Fatalf("new token: %d %s", code, b)
	}
	if e.counted.entries.Load() == folded {
		t.Fatal("a new token leaf did not refresh the projection")
	}
	if err := e.store.RevokeToken(context.Background(), "ci-new"); err != nil {
		t.Fatal(err)
	}
	code, b := e.do(t, "POST", "/api/v1/evidence", secret, testEvidence(31))
	if ae := apiError(t, b); code != http.StatusUnauthorized || !strings.Contains(ae.Message, "revoked") {
		t.Fatalf("revoked token: %d %s", code, b)
	}
	if strings.Contains(e.logBuf.String(), "tampering") {
		t.Fatalf("legitimate token changes logged as tampering: %s", e.logBuf.String())
	}
}
