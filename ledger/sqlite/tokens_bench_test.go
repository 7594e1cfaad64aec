package sqlite

import (
	"context"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlog"
)

// BenchmarkAuthenticate: one authentication of a scoped record token
// (repositories, lanes and backends set, as a CI token has them), by the
// store alone (trusting the row) and through tlog.VerifiedStore (the
// row checked against its token leaves; what `ledger serve` runs).
func BenchmarkAuthenticate(b *testing.B) {
	st, _ := openTest(b)
	ctx := context.Background()
	secret, _, err := st.CreateScopedToken(ctx, ledger.TokenSpec{Name: "ci", Scope: ledger.ScopeRecord,
		Repositories: []string{"github.com/ml-explore/mlx"}, Lanes: []string{"qmv-bias-sum"}, Backends: []ledger.Backend{"cuda"}})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		ts   ledger.TokenStore
	}{{"store", st}, {"verified", tlog.NewVerifiedStore(st, st.Log, nil)}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := c.ts.Authenticate(ctx, secret); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
