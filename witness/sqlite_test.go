package witness_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
	"github.com/evidence-ledger/ledger/witness"
	"github.com/evidence-ledger/ledger/witness/witnesstest"
)

// openStore opens a fresh SQLite ledger in a temporary directory.
func openStore(tb testing.TB) *sqlite.Store {
	tb.Helper()
	s, err := sqlite.Open(context.Background(), sqlite.Options{Path: filepath.Join(tb.TempDir(), "ledger.db")})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func evidence(tb testing.TB, n int) ledger.Record {
	tb.Helper()
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).Add(time.Duration(n) * time.Second)
	e := ledger.Evidence{
		Lane: "qmv-bias-sum/v1",
		Subject: ledger.Subject{
			Repository: "github.com/ml-explore/mlx",
			Commit:     fmt.Sprintf("%040x", n+1),
			Tree:       fmt.Sprintf("%040x", n+1000000),
			Artifacts:  map[string]string{"libmlx.so": fmt.Sprintf("sha256:%064x", n)},
		},
		Backend: ledger.BackendCPU, Device: ledger.Device{Model: "test", Cores: 2},
		CasesExact: 216, CasesTotal: 216, Control: ledger.ControlCaught, Status: ledger.StatusPassed,
		StartedAt: start, FinishedAt: start.Add(time.Second),
	}
	b, err := json.Marshal(e)
	if err != nil {
		tb.Fatal(err)
	}
	return ledger.Record{Kind: ledger.KindEvidence, Body: b}
}

// TestWitnesserOverSQLiteStore runs the Witnesser over the real store's
// LogReader (its consistency proofs, its signed checkpoints) with a real
// litewitness.
func TestWitnesserOverSQLiteStore(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	lw := witnesstest.NewLitewitness(t, "witness.test/s", s.Origin(), s.VerifierKey())
	p := mustPolicy(t, lw.PolicyLine()+"quorum witness.test/s\n")
	w, err := witness.New(witness.Config{Log: s, LogKey: s.VerifierKey(), Policy: p, StatePath: filepath.Join(t.TempDir(), "state.json")})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, batch := range []int{1, 2, 5, 17} {
		var recs []ledger.Record
		for range batch {
			recs = append(recs, evidence(t, n))
			n++
		}
		if _, err := s.Append(ctx, recs, ""); err != nil {
			t.Fatal(err)
		}
		r, err := w.Witness(ctx)
		if err != nil || !r.Cosigned.QuorumMet || r.Cosigned.Size != uint64(n) {
			t.Fatalf("after %d leaves: %+v, %v", n, r, err)
		}
	}
}

// BenchmarkCheckpointWitnessing is the cost of one appended record with
// its checkpoint (SQLite store, fsynced), then cosigned by 0, 1 or 3
// litewitness processes on loopback.
//
// The variant state=memory keeps the Witnesser's state in memory (no
// state-file write and fsync per round), to show that part of the cost.
func BenchmarkCheckpointWitnessing(b *testing.B) {
	for _, c := range []struct {
		nw    int
		state string
	}{{0, "file"}, {1, "file"}, {1, "memory"}, {3, "file"}, {3, "memory"}} {
		nw := c.nw
		b.Run(fmt.Sprintf("witnesses=%d/state=%s", nw, c.state), func(b *testing.B) {
			ctx := context.Background()
			s := openStore(b)
			var w *witness.Witnesser
			if nw > 0 {
				var lines string
				var names []string
				for i := range nw {
					lw := witnesstest.NewLitewitness(b, fmt.Sprintf("witness.test/b%d", i), s.Origin(), s.VerifierKey())
					lines += lw.PolicyLine()
					names = append(names, lw.Name)
				}
				quorum := "quorum " + names[0]
				if nw > 1 {
					quorum = "group all all"
					for _, n := range names {
						quorum += " " + n
					}
					quorum += "\nquorum all"
				}
				p, err := witness.ParsePolicy([]byte(lines + quorum + "\n"))
				if err != nil {
					b.Fatal(err)
				}
				statePath := filepath.Join(b.TempDir(), "state.json")
				if c.state == "memory" {
					statePath = ""
				}
				w, err = witness.New(witness.Config{Log: s, LogKey: s.VerifierKey(), Policy: p, StatePath: statePath})
				if err != nil {
					b.Fatal(err)
				}
			}
			// Warm up: the first cosignature from size 0.
			if _, err := s.Append(ctx, []ledger.Record{evidence(b, 0)}, ""); err != nil {
				b.Fatal(err)
			}
			if w != nil {
				if r, err := w.Witness(ctx); err != nil || !r.Cosigned.QuorumMet {
					b.Fatalf("%+v %v", r, err)
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := s.Append(ctx, []ledger.Record{evidence(b, i+1)}, ""); err != nil {
					b.Fatal(err)
				}
				if w != nil {
					if r, err := w.Witness(ctx); err != nil || !r.Cosigned.QuorumMet {
						b.Fatalf("%+v %v", r, err)
					}
				}
			}
		})
	}
}

// BenchmarkAppendWhileWitnessing is what an append costs while a Witnesser
// runs in the background as `ledger serve` runs it (a round after each
// append, never waited for), with 0 or 1 litewitness: the append path's
// share of witnessing, on a machine whose cores the witness shares.
//
// minRound=0 runs a round after every append that found none running (the
// worst case); minRound=1s is the default of Config.MinRoundInterval.
func BenchmarkAppendWhileWitnessing(b *testing.B) {
	for _, c := range []struct {
		nw       int
		minRound time.Duration
	}{{0, 0}, {1, time.Nanosecond}, {1, time.Second}} {
		nw, minRound := c.nw, c.minRound
		name := fmt.Sprintf("witnesses=%d", nw)
		if nw > 0 {
			name += "/minRound=" + map[bool]string{true: "0", false: "1s"}[minRound < time.Millisecond]
		}
		b.Run(name, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s := openStore(b)
			notify := func() {}
			if nw == 1 {
				lw := witnesstest.NewLitewitness(b, "witness.test/a", s.Origin(), s.VerifierKey())
				p, err := witness.ParsePolicy([]byte(lw.PolicyLine() + "quorum witness.test/a\n"))
				if err != nil {
					b.Fatal(err)
				}
				w, err := witness.New(witness.Config{Log: s, LogKey: s.VerifierKey(), Policy: p, StatePath: filepath.Join(b.TempDir(), "state.json"),
					Logger: slog.New(slog.DiscardHandler), MinRoundInterval: minRound})
				if err != nil {
					b.Fatal(err)
				}
				done := make(chan struct{})
				go func() { defer close(done); w.Run(ctx, time.Minute, 30*time.Second) }()
				defer func() { cancel(); <-done }()
				notify = w.Notify
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := s.Append(ctx, []ledger.Record{evidence(b, i)}, ""); err != nil {
					b.Fatal(err)
				}
				notify()
			}
		})
	}
}
