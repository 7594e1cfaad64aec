package web

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
)

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

// TestTokenRevokedByAnotherProcess: a token revoked by another process on
// the same database (what `ledger token revoke --db` does: its own open
// of the file, its own log engine) is refused on the running server's
// next request, as revoked and not as tampering, although the server
// authenticated it (and cached the token projection) just before.
func TestTokenRevokedByAnotherProcess(t *testing.T) {
	e := newTokenEnv(t, Config{})
	if code, b := e.do(t, "POST", "/api/v1/evidence", e.record, testEvidence(0)); code != http.StatusCreated {
		t.Fatalf("before the revocation: %d %s", code, b)
	}
	other, err := sqlite.Open(context.Background(), sqlite.Options{Path: e.path})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.RevokeToken(context.Background(), "ci"); err != nil {
		t.Fatal(err)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	code, b := e.do(t, "POST", "/api/v1/evidence", e.record, testEvidence(1))
	if ae := apiError(t, b); code != http.StatusUnauthorized || !strings.Contains(ae.Message, "revoked") {
		t.Fatalf("token revoked by another process: %d %s, want 401 naming the revocation", code, b)
	}
	if strings.Contains(e.logBuf.String(), "tampering") {
		t.Fatalf("a revocation by another process logged as tampering: %s", e.logBuf.String())
	}
}
