package teststore

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/storetest"
)

func TestMain(m *testing.M) { Main(m) }

// BenchmarkIngest appends b.N records from 16 concurrent writers, one
// record per append (single) or 64 (batch64), on SQLite and on
// PostgreSQL (pgtest's cluster: fsync and synchronous_commit off, so the
// PostgreSQL figure is the server's CPU and round trips, not its disk),
// the two stores interleaved in one run. Reports records/s.
func BenchmarkIngest(b *testing.B) {
	for _, kind := range []string{"sqlite", "postgres"} {
		for _, per := range []int{1, 64} {
			name := kind + "/single"
			if per > 1 {
				name = kind + "/batch64"
			}
			b.Run(name, func(b *testing.B) {
				os.Setenv("LEDGER_TEST_STORE", kind)
				defer os.Unsetenv("LEDGER_TEST_STORE")
				s := Open(b, Options{})
				var seq atomic.Int64
				var wg sync.WaitGroup
				var failed atomic.Value
				b.ResetTimer()
				for range 16 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							lo := seq.Add(int64(per)) - int64(per)
							if lo >= int64(b.N) {
								return
							}
							var recs []ledger.Record
							for i := lo; i < min(lo+int64(per), int64(b.N)); i++ {
								raw, _ := json.Marshal(storetest.Evidence(int(i)))
								recs = append(recs, ledger.Record{Kind: ledger.KindEvidence, Body: raw})
							}
							if _, err := s.Append(context.Background(), recs, ""); err != nil {
								failed.Store(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				if err, _ := failed.Load().(error); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
			})
		}
	}
}
