package gates

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/postgres"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
	"github.com/evidence-ledger/ledger/ledger/tlog"
)

// benchDBVersion keys the cached benchmark database; bump it when the data
// generator changes. The directory also names the schema version
// (gates-bench-v1-s9), so that code of another schema (the old side of
// scripts/bench-vs-base.sh) never opens, or migrates, this one's copy.
const benchDBVersion = "gates-bench-v1"

// benchDBDir is the cached database's directory under os.TempDir() for a
// ledger of n evidence records (the 1,000,000-record one keeps its
// historical name).
func benchDBDir(b *testing.B, n int) string {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	_, latest, err := sqlite.MigrationStatus(context.Background(), db)
	if err != nil {
		b.Fatal(err)
	}
	if n != benchRecords {
		return filepath.Join(os.TempDir(), fmt.Sprintf("%s-%d-s%d", benchDBVersion, n, latest))
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("%s-s%d", benchDBVersion, latest))
}

const (
	benchRecords = 1_000_000
	benchLanes   = 20
	benchCommits = 5000
)

func benchCommit(i int) string { return fmt.Sprintf("%040x", 0x5eed0000+i) }

// benchEvidence returns record i of the benchmark ledger: lanes and commits
// spread evenly, one in four runs on cuda, every 97th failed, every 89th
// with its control not caught, artifacts on half.
func benchEvidence(i int) ledger.Evidence {
	lane := fmt.Sprintf("bench-lane-%02d/v1", i%benchLanes)
	commit := benchCommit((i / benchLanes) % benchCommits)
	e := ledger.Evidence{
		Lane:    lane,
		Subject: ledger.Subject{Repository: "bench/core", Commit: commit, Tree: commit},
		Backend: ledger.BackendCPU, CasesExact: 216, CasesTotal: 216, Control: ledger.ControlCaught, Status: ledger.StatusPassed,
		StartedAt: t0.Add(time.Duration(i) * time.Millisecond), FinishedAt: t0.Add(time.Duration(i)*time.Millisecond + time.Second),
	}
	if i%4 == 0 {
		e.Backend = ledger.BackendCUDA
	}
	if i%2 == 0 {
		e.Subject.Artifacts = map[string]string{"lib": fmt.Sprintf("sha256:%064x", i%7)}
	}
	switch {
	case i%97 == 0:
		e.CasesExact, e.Status = 156, ledger.StatusFailed
	case i%89 == 0:
		e.Control, e.Status = ledger.ControlNotCaught, ledger.StatusInconclusive
	}
	if i%(benchLanes*3) < benchLanes && strings.HasSuffix(lane, "00/v1") {
		d, _ := json.Marshal(map[string]any{"model": []string{"gemma", "qwen"}[i%2], "cache": []string{"off", "on"}[(i/2)%2]})
		e.Details = d
	}
	return e
}

// benchReader is what the readiness benchmarks read and sign with.
type benchReader interface {
	ledger.Reader
	ledger.Keys
}

// benchStore is benchStoreSQLite's database, or, when LEDGER_BENCH_PG_DSN
// is set, that PostgreSQL database opened read-only with the key of
// LEDGER_BENCH_KEY_DIR: a `ledger copy` of the SQLite one
// (scripts/bench-pg-copy.sh runs the benchmarks so).
func benchStore(b *testing.B) benchReader {
	b.Helper()
	dsn := os.Getenv("LEDGER_BENCH_PG_DSN")
	if dsn == "" {
		return benchStoreSQLite(b, benchRecords)
	}
	s, err := postgres.Open(context.Background(), postgres.Options{DSN: dsn, KeyDir: os.Getenv("LEDGER_BENCH_KEY_DIR"), ReadOnly: true, Now: func() time.Time { return t0 }})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// benchStoreSQLite opens the cached benchmark ledger of n evidence records
// under os.TempDir(), filling it on first use with the records appended
// 1000 per call (the batched fast path) plus head verifications.
func benchStoreSQLite(b *testing.B, n int) *sqlite.Store {
	b.Helper()
	ctx := context.Background()
	dir := benchDBDir(b, n)
	path := filepath.Join(dir, "ledger.db")
	done := filepath.Join(dir, "complete")
	if _, err := os.Stat(done); err != nil {
		os.RemoveAll(dir)
		s, err := sqlite.Open(ctx, sqlite.Options{Path: path, Now: func() time.Time { return t0 }})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		recs := make([]ledger.Record, 0, 1000)
		for i := 0; i < n; i++ {
			body, _ := json.Marshal(benchEvidence(i))
			recs = append(recs, ledger.Record{Kind: ledger.KindEvidence, Body: body})
			if len(recs) == 1000 {
				if _, err := s.Append(ctx, recs, ""); err != nil {
					b.Fatal(err)
				}
				recs = recs[:0]
			}
		}
		for c := 0; c < 5; c++ {
			h := ledger.HeadVerification{Repository: "bench/core", Object: benchCommit(c), ObjectType: "commit", Commit: benchCommit(c), Verdict: ledger.VerdictGood, Decision: ledger.DecisionTrusted, VerifiedAt: t0}
			body, _ := json.Marshal(h)
			if _, err := s.Append(ctx, []ledger.Record{{Kind: ledger.KindHead, Body: body}}, ""); err != nil {
				b.Fatal(err)
			}
		}
		s.Close()
		os.WriteFile(done, []byte(time.Since(start).String()+"\n"), 0o644)
		b.Logf("filled %d records in %s", n, time.Since(start))
	}
	s, err := sqlite.Open(ctx, sqlite.Options{Path: path, Now: func() time.Time { return t0 }})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// benchRelease has 50 gates: 40 lane gates (20 lanes x cpu|cuda, with and
// without artifact pins), signed heads and tree equivalence over 5
// components, 2 trajectory, 2 matrix and 4 manual gates.
func benchRelease() *Release {
	r := &Release{Version: "bench-1", Artifacts: map[string]string{"lib": fmt.Sprintf("sha256:%064x", 3)}}
	for c := 0; c < 5; c++ {
		r.Components = append(r.Components, Component{Name: fmt.Sprintf("c%d", c), Repository: "bench/core", Head: benchCommit(c), Reviewed: benchCommit(c + 100)})
	}
	for i := 0; i < 40; i++ {
		g := Gate{ID: fmt.Sprintf("lane-%02d", i), Kind: KindLane, Lane: fmt.Sprintf("bench-lane-%02d/v1", i%benchLanes), Component: fmt.Sprintf("c%d", i%5), Backends: []string{"cpu"}, MinRuns: 2}
		if i >= 20 {
			g.Backends, g.Artifacts = []string{"cuda"}, []string{"lib"}
		}
		r.Gates = append(r.Gates, g)
	}
	r.Gates = append(r.Gates,
		Gate{ID: "heads", Kind: KindSignedHeads},
		Gate{ID: "tree", Kind: KindTreeEquivalence},
		Gate{ID: "traj-1", Kind: KindTrajectory, Component: "c0", Trajectories: []string{"gemma"}, Modes: []string{"ordinary", "automatic"}, Backends: []string{"contiguous", "paged"}},
		Gate{ID: "traj-2", Kind: KindTrajectory, Component: "c1", Trajectories: []string{"qwen"}, Modes: []string{"ordinary", "automatic"}},
		Gate{ID: "matrix-1", Kind: KindMatrix, Lane: "bench-lane-00/v1", Component: "c0", Dimensions: []Dimension{{"model", []string{"gemma", "qwen"}}, {"cache", []string{"off", "on"}}, {"backend", []string{"cpu", "cuda"}}}},
		Gate{ID: "matrix-2", Kind: KindMatrix, Lane: "bench-lane-00/v1", Component: "c3", Dimensions: []Dimension{{"model", []string{"gemma", "qwen"}}}},
	)
	for i := 0; i < 4; i++ {
		r.Gates = append(r.Gates, Gate{ID: fmt.Sprintf("manual-%d", i), Kind: KindManual, Role: "reviewer"})
	}
	return r
}

// BenchmarkReadiness evaluates a 50-gate release over a 1,000,000-record
// ledger. The first run fills a cached database (minutes); reruns reuse it.
func BenchmarkReadiness(b *testing.B) {
	s := benchStore(b)
	rel := benchRelease()
	if err := rel.Validate(); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	rd, err := Evaluate(ctx, s, rel, EvalOptions{Now: t0})
	if err != nil {
		b.Fatal(err)
	}
	if len(rd.Gates) != 50 || rd.Checkpoint.Size < benchRecords {
		b.Fatalf("%d gates over %d entries", len(rd.Gates), rd.Checkpoint.Size)
	}
	b.Logf("counts %v", rd.Counts)
	b.ResetTimer()
	for b.Loop() {
		if _, err := Evaluate(ctx, s, rel, EvalOptions{Now: t0}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadinessSigned adds signing the verdict to the evaluation.
func BenchmarkReadinessSigned(b *testing.B) {
	s := benchStore(b)
	rel := benchRelease()
	if err := rel.Validate(); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for b.Loop() {
		rd, err := Evaluate(ctx, s, rel, EvalOptions{Now: t0})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Sign(rd, s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadinessVerified evaluates the 50-gate release through
// tlog.VerifiedStore, as the server does, over 200,000 and 1,000,000
// evidence records: every leaf a gate reads is checked against the signed
// tree. The first evaluation of a store is left out (see
// BenchmarkReadinessVerifiedFirst).
func BenchmarkReadinessVerified(b *testing.B) {
	for _, n := range []int{200_000, benchRecords} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s := benchStoreSQLite(b, n)
			v := tlog.NewVerifiedStore(s, s.Log, slog.New(slog.NewTextHandler(io.Discard, nil)))
			rel := benchRelease()
			if err := rel.Validate(); err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			rd, err := Evaluate(ctx, v, rel, EvalOptions{Now: t0})
			if err != nil {
				b.Fatal(err)
			}
			if len(rd.Gates) != 50 || rd.Checkpoint.Size < uint64(n) {
				b.Fatalf("%d gates over %d entries", len(rd.Gates), rd.Checkpoint.Size)
			}
			b.Logf("counts %v", rd.Counts)
			cpu0 := cpuTime()
			b.ResetTimer()
			for b.Loop() {
				if _, err := Evaluate(ctx, v, rel, EvalOptions{Now: t0}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
		})
	}
}

// BenchmarkReadinessVerifiedFirst is the first evaluation through a new
// tlog.VerifiedStore (a server's first readiness answer after a start,
// or one `ledger release check --db`), with the heap the store holds
// afterwards (index-MiB; GC and memory statistics are read outside the
// timed work only approximately: run it with a small -benchtime).
func BenchmarkReadinessVerifiedFirst(b *testing.B) {
	for _, n := range []int{200_000, benchRecords} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s := benchStoreSQLite(b, n)
			rel := benchRelease()
			if err := rel.Validate(); err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var held uint64 // heap the last store holds after its evaluation: its query index
			cpu0 := cpuTime()
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				v := tlog.NewVerifiedStore(s, s.Log, slog.New(slog.NewTextHandler(io.Discard, nil)))
				if _, err := Evaluate(ctx, v, rel, EvalOptions{Now: t0}); err != nil {
					b.Fatal(err)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				held = after.HeapAlloc - min(after.HeapAlloc, before.HeapAlloc)
				runtime.KeepAlive(v)
			}
			b.ReportMetric(float64(held)/(1<<20), "index-MiB")
			b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
		})
	}
}

// cpuTime is the process's user and system CPU time so far: on a machine
// shared with other work it measures an evaluation's cost better than
// its wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
