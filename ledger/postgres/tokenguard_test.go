package postgres

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/storetest/pgtest"
	"github.com/evidence-ledger/ledger/ledger/tlog"
)

// TestAuthenticationChecksTokenRowAgainstLeaves: on PostgreSQL too, the
// verified store checks the tokens row it authenticates against the leaves
// that define it, so a raw-SQL edit of the row is refused at once.
func TestAuthenticationChecksTokenRowAgainstLeaves(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, pgtest.NewDatabase(t), t.TempDir(), false)
	vs := tlog.NewVerifiedStore(s, s.Log, slog.New(slog.NewTextHandler(io.Discard, nil)))
	secret, _, err := vs.CreateToken(ctx, "ci", ledger.ScopeRecord, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vs.Authenticate(ctx, secret); err != nil {
		t.Fatalf("before the edit: %v", err)
	}
	if _, err := s.DB().ExecContext(ctx, `UPDATE tokens SET scope = 'admin' WHERE name = 'ci'`); err != nil {
		t.Fatal(err)
	}
	tok, err := vs.Authenticate(ctx, secret)
	if err == nil || !strings.Contains(err.Error(), "scope differs") {
		t.Fatalf("after raising the row's scope to admin: token %+v, err %v; want a refusal naming the scope", tok, err)
	}
}
