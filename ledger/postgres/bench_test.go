package postgres

import (
	"context"
	"os"
	"testing"
)

// BenchmarkInclusionProof1M: an inclusion proof against the latest
// checkpoint of the database at LEDGER_BENCH_PG_DSN (a `ledger copy` of
// ledger/sqlite's 1,000,000-leaf benchmark log; scripts/bench-pg-copy.sh
// runs it so), opened read-only with the key of LEDGER_BENCH_KEY_DIR.
// Skipped without it. Reports the log's size as "leaves".
func BenchmarkInclusionProof1M(b *testing.B) {
	dsn := os.Getenv("LEDGER_BENCH_PG_DSN")
	if dsn == "" {
		b.Skip("LEDGER_BENCH_PG_DSN names no database")
	}
	ctx := context.Background()
	s, err := Open(ctx, Options{DSN: dsn, KeyDir: os.Getenv("LEDGER_BENCH_KEY_DIR"), ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	cp, err := s.Checkpoint(ctx)
	if err != nil {
		b.Fatal(err)
	}
	n := cp.Size
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := s.InclusionProof(ctx, uint64(i*7919)%n, n); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n), "leaves")
}
