package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlog"
)

// bigLog returns a closed database of n leaves, built once with batched
// appends of 1000 and cached under os.TempDir() for later runs. The cache
// name carries the schema version it is built at, so a binary of another
// schema (scripts/bench-vs-base.sh's older side) keeps its own.
func bigLog(b *testing.B, n int) string {
	b.Helper()
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("ledger-bench-s%d-%d", latestSchema(b), n))
	path := filepath.Join(dir, "ledger.db")
	if _, err := os.Stat(filepath.Join(dir, "done")); err == nil {
		return path
	}
	os.RemoveAll(dir)
	ctx := context.Background()
	s, err := Open(ctx, Options{Path: path})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i += 1000 {
		recs := make([]ledger.Record, 0, 1000)
		for j := i; j < i+1000 && j < n; j++ {
			recs = append(recs, evRecord(b, sampleEvidence(j)))
		}
		if _, err := s.Append(ctx, recs, ""); err != nil {
			b.Fatal(err)
		}
	}
	s.Close()
	os.WriteFile(filepath.Join(dir, "done"), nil, 0o644)
	return path
}

// latestSchema returns the newest migration version this package applies.
func latestSchema(b *testing.B) int64 {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	_, latest, err := MigrationStatus(context.Background(), db)
	if err != nil {
		b.Fatal(err)
	}
	return latest
}

func logSize() int {
	if testing.Short() {
		return 100_000
	}
	return 1_000_000
}

// BenchmarkAudit1M: a full audit of a 1,000,000-leaf log (target < 15 s).
func BenchmarkAudit1M(b *testing.B) {
	path := bigLog(b, logSize())
	s, err := Open(context.Background(), Options{Path: path, ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rep, err := s.Audit(context.Background())
		if err != nil || !rep.OK {
			b.Fatalf("%+v %v", rep, err)
		}
	}
	b.ReportMetric(float64(logSize()), "leaves")
}

// BenchmarkInclusionProof1M: an inclusion proof at 1,000,000 leaves
// (target < 1 ms).
func BenchmarkInclusionProof1M(b *testing.B) {
	n := logSize()
	path := bigLog(b, n)
	s, err := Open(context.Background(), Options{Path: path, ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		idx := uint64(i*7919) % uint64(n)
		if _, err := s.InclusionProof(ctx, idx, uint64(n)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBatchedAppend: store-level appends of 100 records per call.
func BenchmarkBatchedAppend(b *testing.B) {
	s, _ := openTest(b)
	ctx := context.Background()
	b.ResetTimer()
	n := 0
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		recs := make([]ledger.Record, 100)
		for j := range recs {
			recs[j] = evRecord(b, sampleEvidence(n))
			n++
		}
		b.StartTimer()
		if _, err := s.Append(ctx, recs, ""); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkRawInsertPerRowTx measures the baseline the ingest targets
// compare against: a raw modernc.org/sqlite insert of the same row (leaf
// bytes with the evidence projection columns), one transaction per row,
// WAL, synchronous=FULL.
func BenchmarkRawInsertPerRowTx(b *testing.B) {
	path := filepath.Join(b.TempDir(), "raw.db")
	db, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if err := Migrate(context.Background(), db); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e := sampleEvidence(i)
		body, _ := json.Marshal(e)
		h := ledger.LeafHash(body)
		tx, err := db.Begin()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tx.Exec("INSERT INTO leaves(idx, id, kind, key, recorded_at, leaf, leaf_hash, backend, status, repository, commit_id) VALUES (?,?,?,?,?,?,?,?,?,?,?)", i, fmt.Sprint(i), "evidence", e.Lane, 0, body, h[:], "cpu", "passed", "r", e.Subject.Commit); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkIDFilterBuild1M: opening a 1,000,000-leaf log until the
// content-id filter's builder has read every id (appends meanwhile look
// ids up in the database). Reports the filter's size.
func BenchmarkIDFilterBuild1M(b *testing.B) {
	path := bigLog(b, logSize())
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		s, err := Open(ctx, Options{Path: path})
		if err != nil {
			b.Fatal(err)
		}
		s.d.startIDFilter() // as the first Append does
		for len(s.d.idf.built) == 0 {
			time.Sleep(time.Millisecond)
		}
		b.StopTimer()
		var bits uint
		for _, st := range s.d.idf.stages {
			bits += st.Cap()
		}
		b.ReportMetric(float64(bits)/8/1e6, "filter-MB")
		s.Close()
		b.StartTimer()
	}
}

// BenchmarkResubmitBatch100: store-level resubmission of batches of 100
// records the log already holds (a CI job retried): each is answered with
// its stored entry and nothing is appended.
func BenchmarkResubmitBatch100(b *testing.B) {
	s, _ := openTest(b)
	ctx := context.Background()
	var batches [][]ledger.Record
	for i := 0; i < 50; i++ {
		recs := make([]ledger.Record, 100)
		for j := range recs {
			recs[j] = evRecord(b, sampleEvidence(i*100+j))
		}
		if _, err := s.Append(ctx, recs, ""); err != nil {
			b.Fatal(err)
		}
		batches = append(batches, recs)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := s.Append(ctx, batches[i%len(batches)], "")
		if err != nil {
			b.Fatal(err)
		}
		if !res.Entries[0].Existing || res.Checkpoint.Size != 5000 {
			b.Fatalf("resubmission appended: size %d", res.Checkpoint.Size)
		}
	}
	b.ReportMetric(float64(100*b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkFullScan100k: the server's background full verification
// (tlog.Log.FullScan, no pause: the leaves and the tree, then the
// store's audit of the projections) of a 100,000-leaf log; compare with
// BenchmarkFullScanLeavesOnly100k and BenchmarkAudit100k on the same file.
func BenchmarkFullScan100k(b *testing.B) {
	path := bigLog(b, 100_000)
	s, err := Open(context.Background(), Options{Path: path, ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.FullScan(context.Background(), s, 100_000, tlog.ScanOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(100_000, "leaves")
}

// leavesOnly is a Store seen without its Auditor: FullScan then checks
// the leaves and the tree alone (what it did before it ran the audit).
type leavesOnly struct{ s *Store }

func (l leavesOnly) EntryAt(ctx context.Context, i uint64) (ledger.Entry, error) {
	return l.s.EntryAt(ctx, i)
}

func (l leavesOnly) EntriesRange(ctx context.Context, lo, hi uint64) ([]ledger.Entry, error) {
	return l.s.EntriesRange(ctx, lo, hi)
}

func (l leavesOnly) Checkpoints(ctx context.Context, f ledger.CheckpointFilter) ([]ledger.Checkpoint, string, error) {
	return l.s.Checkpoints(ctx, f)
}

// BenchmarkFullScanLeavesOnly100k: BenchmarkFullScan100k without the
// audit of the projections, for the cost of that audit.
func BenchmarkFullScanLeavesOnly100k(b *testing.B) {
	path := bigLog(b, 100_000)
	s, err := Open(context.Background(), Options{Path: path, ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.FullScan(context.Background(), leavesOnly{s}, 100_000, tlog.ScanOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(100_000, "leaves")
}

// BenchmarkAudit100k: `ledger audit` of the log BenchmarkFullScan100k
// scans.
func BenchmarkAudit100k(b *testing.B) {
	path := bigLog(b, 100_000)
	s, err := Open(context.Background(), Options{Path: path, ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if rep, err := s.Audit(context.Background()); err != nil || !rep.OK {
			b.Fatalf("%+v %v", rep, err)
		}
	}
}
