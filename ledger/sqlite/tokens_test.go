package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/keys"
)

// TestTokensMadeBeforeSchema7AreLogged: a database of schema 6 with a
// live and a revoked token is migrated by a writable open, which appends a
// token leaf for each (and a revocation leaf for the revoked one); the
// audit then passes, the live token still authenticates and the revoked
// one does not. A row inserted later without a leaf, even one marked as
// migration 7 marks pre-7 tokens (leaf_idx -1), is never adopted by a
// later open: the audit reports it and nothing is appended.
func TestTokensMadeBeforeSchema7AreLogged(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "old.db")
	// A database at schema 6 and its key.
	if _, err := keys.Load(dir, true); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := MigrateTo(ctx, db, 6); err != nil || v != 6 {
		t.Fatalf("down to 6: %v %v", v, err)
	}
	live, dead := sha256.Sum256([]byte("lgr_live")), sha256.Sum256([]byte("lgr_dead"))
	if _, err := db.Exec(`INSERT INTO tokens(id, name, scope, secret_hash, created_at, roles) VALUES ('tok_aaaaaaaaaaaa', 'old-ci', 'record', ?, 1000, '["qa"]'), ('tok_bbbbbbbbbbbb', 'old-rm', 'admin', ?, 2000, '[]')`, live[:], dead[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE tokens SET revoked_at = 3000 WHERE name = 'old-rm'`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	// The writable open that migrates across version 7 (as `ledger serve`
	// and `ledger migrate` do, with the key) adopts them.
	s, err := Open(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	if rep, err := s.Audit(ctx); err != nil || !rep.OK || rep.Leaves != 3 {
		t.Fatalf("audit after logging: %+v %v (want 2 token + 1 revocation leaves)", rep, err)
	}
	kinds := map[ledger.Kind]int{}
	for i := uint64(0); i < 3; i++ {
		e, err := s.EntryAt(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		kinds[e.Kind]++
		if e.Kind == ledger.KindToken && !strings.Contains(string(e.Body), `"adopted":true`) {
			t.Fatalf("adopted token leaf not marked: %s", e.Body)
		}
		if strings.Contains(string(e.Body), "lgr_") {
			t.Fatalf("a leaf carries a secret: %s", e.Body)
		}
	}
	if kinds[ledger.KindToken] != 2 || kinds[ledger.KindTokenRevocation] != 1 {
		t.Fatalf("leaves by kind: %v", kinds)
	}
	if tk, err := s.Authenticate(ctx, "lgr_live"); err != nil || tk.Name != "old-ci" || len(tk.Roles) != 1 {
		t.Fatalf("old token after logging: %+v %v", tk, err)
	}
	if _, err := s.Authenticate(ctx, "lgr_dead"); ledger.ErrorCode(err) != ledger.CodeUnauthorized {
		t.Fatalf("revoked old token: %v", err)
	}
	// Opening again logs nothing more.
	s.Close()
	s, err = Open(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if cp, _ := s.Checkpoint(ctx); cp.Size != 3 {
		t.Fatalf("second open appended: size %d", cp.Size)
	}
	// A row inserted without a leaf is never adopted by an open.
	if _, err := s.DB().Exec(`INSERT INTO tokens(id, name, scope, secret_hash, created_at) VALUES ('tok_cccccccccccc', 'evil', 'admin', randomblob(32), 1)`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := s.Audit(ctx); err != nil || rep.OK || !strings.Contains(rep.Problem, "has no token leaf (a row was inserted)") {
		t.Fatalf("inserted row: %+v %v", rep, err)
	}
	if _, err := s.DB().Exec(`DELETE FROM tokens WHERE name = 'evil'`); err != nil {
		t.Fatal(err)
	}
	// An admin row posing as a pre-7 token (leaf_idx -1) in a database
	// already at schema 8: the next writable open must not adopt it.
	evil := sha256.Sum256([]byte("lgr_evil"))
	if _, err := s.DB().Exec(`INSERT INTO tokens(id, name, scope, secret_hash, created_at, roles, repositories, lanes, backends, leaf_idx) VALUES ('tok_dddddddddddd', 'legacy', 'admin', ?, 1500, '[]', '[]', '[]', '[]', -1)`, evil[:]); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if cp, _ := s.Checkpoint(ctx); cp.Size != 3 {
		t.Fatalf("an open after schema 7 adopted an inserted -1 row: size %d", cp.Size)
	}
	if rep, err := s.Audit(ctx); err != nil || rep.OK || !strings.Contains(rep.Problem, "has no token leaf (leaf_idx -1)") {
		t.Fatalf("inserted -1 row: %+v %v", rep, err)
	}
}

// TestScopedTokenLifecycle: a scoped, expiring token's leaf carries its
// scope, expiry and secret hash (never the secret); bad specs are refused
// naming the field; a name is unique; revocation is a leaf.
func TestScopedTokenLifecycle(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, Options{Path: filepath.Join(t.TempDir(), "l.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, c := range []struct {
		spec  ledger.TokenSpec
		field string
	}{
		{ledger.TokenSpec{Name: "a b", Scope: ledger.ScopeRecord}, "name"},
		{ledger.TokenSpec{Name: "a", Scope: "root"}, "scope"},
		{ledger.TokenSpec{Name: "a", Scope: ledger.ScopeRecord, Lanes: []string{"Bad Lane"}}, "lane"},
		{ledger.TokenSpec{Name: "a", Scope: ledger.ScopeRecord, Backends: []ledger.Backend{"tpu"}}, "backend"},
		{ledger.TokenSpec{Name: "a", Scope: ledger.ScopeRecord, Repositories: []string{" "}}, "repository"},
	} {
		var le *ledger.Error
		if _, _, err := s.CreateScopedToken(ctx, c.spec); err == nil || !asError(err, &le) || le.Field != c.field {
			t.Errorf("%+v: %v, want a refusal naming %s", c.spec, err, c.field)
		}
	}
	past := s.d.opts.Now().Add(-1)
	if _, _, err := s.CreateScopedToken(ctx, ledger.TokenSpec{Name: "a", Scope: ledger.ScopeRecord, ExpiresAt: &past}); ledger.ErrorCode(err) != ledger.CodeInvalid {
		t.Errorf("expiry in the past: %v", err)
	}
	if cp, _ := s.Checkpoint(ctx); cp.Size != 0 {
		t.Fatalf("refused specs appended %d leaves", cp.Size)
	}
	exp := s.d.opts.Now().Add(720 * 3600e9)
	secret, tk, err := s.CreateScopedToken(ctx, ledger.TokenSpec{Name: "ci", Scope: ledger.ScopeRecord, Repositories: []string{"r2", "r1", "r1"}, Lanes: []string{"qmv/v1"}, Backends: []ledger.Backend{"cuda", "cpu"}, ExpiresAt: &exp})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(tk.Repositories, ",") != "r1,r2" || strings.Join([]string{string(tk.Backends[0]), string(tk.Backends[1])}, ",") != "cpu,cuda" {
		t.Fatalf("scope not normalized: %+v", tk)
	}
	if _, _, err := s.CreateScopedToken(ctx, ledger.TokenSpec{Name: "ci", Scope: ledger.ScopeRead}); ledger.ErrorCode(err) != ledger.CodeConflict {
		t.Fatalf("duplicate name: %v", err)
	}
	e, err := s.EntryAt(ctx, 0)
	if err != nil || e.Kind != ledger.KindToken {
		t.Fatalf("token leaf: %+v %v", e, err)
	}
	body := string(e.Body)
	for _, want := range []string{`"token_id":"` + tk.ID + `"`, `"repositories":["r1","r2"]`, `"lanes":["qmv/v1"]`, `"backends":["cpu","cuda"]`, `"secret_sha256":"` + ledger.SecretSHA256(secret) + `"`, `"expires_at":"`} {
		if !strings.Contains(body, want) {
			t.Errorf("token leaf lacks %s: %s", want, body)
		}
	}
	if strings.Contains(body, secret) {
		t.Fatal("token leaf carries the secret")
	}
	got, err := s.Authenticate(ctx, secret)
	if err != nil || got.ID != tk.ID || got.ExpiresAt == nil || !got.ExpiresAt.Equal(exp) || len(got.Lanes) != 1 {
		t.Fatalf("authenticate: %+v %v", got, err)
	}
	if err := s.RevokeToken(ctx, "ci"); err != nil {
		t.Fatal(err)
	}
	if e, err := s.EntryAt(ctx, 1); err != nil || e.Kind != ledger.KindTokenRevocation || !strings.Contains(string(e.Body), tk.ID) {
		t.Fatalf("revocation leaf: %+v %v", e, err)
	}
	if err := s.RevokeToken(ctx, "ci"); ledger.ErrorCode(err) != ledger.CodeNotFound {
		t.Fatalf("second revocation: %v", err)
	}
	if rep, err := s.Audit(ctx); err != nil || !rep.OK {
		t.Fatalf("audit: %+v %v", rep, err)
	}
}

func asError(err error, le **ledger.Error) bool {
	e, ok := err.(*ledger.Error)
	*le = e
	return ok
}
