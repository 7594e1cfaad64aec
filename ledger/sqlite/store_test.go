package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"
)

func openTest(t testing.TB) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	s, err := Open(context.Background(), Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

// SampleEvidence returns a valid evidence record that differs by n.
func sampleEvidence(n int) ledger.Evidence {
	start := time.Date(2025, 11, 29, 10, 0, 0, 0, time.UTC).Add(time.Duration(n) * time.Second)
	return ledger.Evidence{
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
		Details: json.RawMessage(`{"n":` + fmt.Sprint(n) + `}`),
	}
}

func evRecord(t testing.TB, e ledger.Evidence) ledger.Record {
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return ledger.Record{Kind: ledger.KindEvidence, Body: b}
}

func TestAppendProveAudit(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	v, err := note.NewVerifier(s.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	var last *ledger.AppendResult
	for i := 0; i < 37; i++ {
		res, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(i))}, "")
		if err != nil {
			t.Fatal(err)
		}
		e := res.Entries[0]
		if e.Index != uint64(i) || e.Existing {
			t.Fatalf("append %d: index %d existing %v", i, e.Index, e.Existing)
		}
		if _, err := note.Open([]byte(res.Checkpoint.Note), note.VerifierList(v)); err != nil {
			t.Fatalf("checkpoint does not verify: %v", err)
		}
		hs := make([][]byte, len(e.Proof.Hashes))
		for j := range hs {
			hs[j] = e.Proof.Hashes[j][:]
		}
		if err := proof.VerifyInclusion(rfc6962.DefaultHasher, e.Index, res.Checkpoint.Size, e.LeafHash[:], hs, res.Checkpoint.Root[:]); err != nil {
			t.Fatalf("inclusion proof %d: %v", i, err)
		}
		last = res
	}
	// Inclusion against every earlier size, consistency between sizes.
	for size := uint64(1); size <= 37; size++ {
		for idx := uint64(0); idx < size; idx += 5 {
			p, err := s.InclusionProof(ctx, idx, size)
			if err != nil {
				t.Fatal(err)
			}
			hs := make([][]byte, len(p.Hashes))
			for j := range hs {
				hs[j] = p.Hashes[j][:]
			}
			cp, err := s.CheckpointAt(ctx, size)
			if err != nil {
				t.Fatal(err)
			}
			if err := proof.VerifyInclusion(rfc6962.DefaultHasher, idx, size, p.LeafHash[:], hs, cp.Root[:]); err != nil {
				t.Fatalf("inclusion %d@%d: %v", idx, size, err)
			}
		}
		c, err := s.ConsistencyProof(ctx, size, 37)
		if err != nil {
			t.Fatal(err)
		}
		hs := make([][]byte, len(c.Hashes))
		for j := range hs {
			hs[j] = c.Hashes[j][:]
		}
		if err := proof.VerifyConsistency(rfc6962.DefaultHasher, size, 37, hs, c.FromRoot[:], last.Checkpoint.Root[:]); err != nil {
			t.Fatalf("consistency %d->37: %v", size, err)
		}
	}
	rep, err := s.Audit(ctx)
	if err != nil || !rep.OK || rep.Leaves != 37 {
		t.Fatalf("audit: %+v %v", rep, err)
	}
	// Identical resubmission appends nothing.
	res, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(3))}, "")
	if err != nil || !res.Entries[0].Existing || res.Entries[0].Index != 3 {
		t.Fatalf("resubmission: %+v %v", res, err)
	}
	// Idempotency key with a different body conflicts.
	if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(100))}, "k1"); err != nil {
		t.Fatal(err)
	}
	res, err = s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(100))}, "k1")
	if err != nil || !res.Entries[0].Existing {
		t.Fatalf("idempotent replay: %v", err)
	}
	if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(101))}, "k1"); ledger.ErrorCode(err) != ledger.CodeConflict {
		t.Fatalf("want conflict, got %v", err)
	}
	cp, _ := s.Checkpoint(ctx)
	if cp.Size != 38 {
		t.Fatalf("size %d, want 38", cp.Size)
	}
}

func TestBatchAtomic(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	bad := sampleEvidence(2)
	bad.CasesExact = 300
	_, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(1)), evRecord(t, bad)}, "")
	le, ok := err.(*ledger.Error)
	if !ok || le.Code != ledger.CodeInvalid || le.Field != "[1].cases_exact" {
		t.Fatalf("want invalid [1].cases_exact, got %#v", err)
	}
	cp, _ := s.Checkpoint(ctx)
	if cp.Size != 0 {
		t.Fatalf("something was appended: size %d", cp.Size)
	}
}

func TestConcurrentAppends(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	var wg sync.WaitGroup
	errs := make(chan error, 32*20)
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(g*1000+i))}, ""); err != nil {
					errs <- err
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	rep, err := s.Audit(ctx)
	if err != nil || !rep.OK || rep.Leaves != 640 {
		t.Fatalf("audit %+v %v", rep, err)
	}
}

// Two stores (two processes) appending to one database: each sees the
// other's leaves and the log stays consistent.
func TestTwoWritersOneDatabase(t *testing.T) {
	ctx := context.Background()
	a, path := openTest(t)
	b, err := Open(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i := 0; i < 10; i++ {
		s := a
		if i%2 == 1 {
			s = b
		}
		res, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(i))}, "")
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		if res.Entries[0].Index != uint64(i) {
			t.Fatalf("append %d got index %d", i, res.Entries[0].Index)
		}
	}
	rep, err := a.Audit(ctx)
	if err != nil || !rep.OK || rep.Leaves != 10 {
		t.Fatalf("audit %+v %v", rep, err)
	}
}

// A batch mixing a record already logged, a new one and a repeat of the
// new one appends exactly one leaf.
func TestBatchDedupe(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(1))}, ""); err != nil {
		t.Fatal(err)
	}
	res, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(1)), evRecord(t, sampleEvidence(2)), evRecord(t, sampleEvidence(2))}, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []bool
	for _, e := range res.Entries {
		got = append(got, e.Existing)
	}
	if fmt.Sprint(got) != "[true false true]" || res.Entries[1].Index != 1 || res.Entries[2].Index != 1 || res.Checkpoint.Size != 2 {
		t.Fatalf("existing %v, indexes %d %d, size %d", got, res.Entries[1].Index, res.Entries[2].Index, res.Checkpoint.Size)
	}
}

// A write that fails partway through a multi-row INSERT (here a trigger
// raising FAIL, which keeps the statement's earlier rows, as INSERT OR
// FAIL does) loses only its own request: the requests that shared its
// transaction are appended, nothing of the failed one remains, the tree
// and id state stay in step with the database, and the audit passes.
func TestWriteFailureLosesOnlyItsRequest(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	if _, err := s.DB().Exec(`CREATE TRIGGER boom BEFORE INSERT ON leaves WHEN NEW.key = 'boom/v1'
		BEGIN SELECT RAISE(FAIL, 'boom'); END`); err != nil {
		t.Fatal(err)
	}
	boom := func(n int) []ledger.Record {
		var recs []ledger.Record
		for j := 0; j < 10; j++ {
			e := sampleEvidence(n + j)
			if j == 6 {
				e.Lane = "boom/v1"
			}
			recs = append(recs, evRecord(t, e))
		}
		return recs
	}
	// Alone in its transaction.
	if _, err := s.Append(ctx, boom(100000), ""); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("want the trigger's error, got %v", err)
	}
	// Sharing transactions with good requests (group commit).
	var wg sync.WaitGroup
	var good, failed atomic.Int64
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 15; i++ {
				n := g*10000 + i*10
				if g%4 == 0 && i%3 == 0 {
					if _, err := s.Append(ctx, boom(200000+n), ""); err == nil {
						t.Error("a request with a failing write succeeded")
					}
					failed.Add(1)
					continue
				}
				var recs []ledger.Record
				for j := 0; j < 10; j++ {
					recs = append(recs, evRecord(t, sampleEvidence(n+j)))
				}
				if _, err := s.Append(ctx, recs, ""); err != nil {
					t.Error(err)
					return
				}
				good.Add(10)
			}
		}(g)
	}
	wg.Wait()
	if failed.Load() == 0 || good.Load() == 0 {
		t.Fatal("the test did not exercise both paths")
	}
	rep, err := s.Audit(ctx)
	if err != nil || !rep.OK || rep.Leaves != uint64(good.Load()) {
		t.Fatalf("audit %+v %v, want %d leaves", rep, err, good.Load())
	}
	// The failed requests' good records were not appended.
	es, _, err := s.Evidence(ctx, ledger.EvidenceFilter{Commit: sampleEvidence(200000).Subject.Commit})
	if err != nil || len(es) != 0 {
		t.Fatalf("a failed request's record is in the log: %d %v", len(es), err)
	}
	if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(999999))}, ""); err != nil {
		t.Fatal(err)
	}
}

// Commit and artifact filters that could never match (not lowercase hex,
// too long, another digest algorithm) are refused, naming the filter.
func TestEvidenceFilterRejectsNonHex(t *testing.T) {
	s, _ := openTest(t)
	for _, c := range []struct {
		f     ledger.EvidenceFilter
		field string
	}{
		{ledger.EvidenceFilter{Commit: "xyz1"}, "commit"},
		{ledger.EvidenceFilter{Commit: "ABCD1234"}, "commit"},
		{ledger.EvidenceFilter{Commit: strings.Repeat("a", 65)}, "commit"},
		{ledger.EvidenceFilter{ArtifactDigest: "md5:abcdef"}, "artifact"},
		{ledger.EvidenceFilter{ArtifactDigest: "sha256:zz12"}, "artifact"},
		{ledger.EvidenceFilter{ArtifactDigest: "SHA256:abcd"}, "artifact"},
	} {
		_, _, err := s.Evidence(context.Background(), c.f)
		if le, ok := err.(*ledger.Error); !ok || le.Code != ledger.CodeInvalid || le.Field != c.field {
			t.Errorf("%+v: %v, want an invalid-%s error", c.f, err, c.field)
		}
	}
	for _, f := range []ledger.EvidenceFilter{{Commit: "abcd"}, {Commit: strings.Repeat("a", 64)}, {ArtifactDigest: "sha256:abcd"}, {ArtifactDigest: "abcd"}} {
		if _, _, err := s.Evidence(context.Background(), f); err != nil {
			t.Errorf("%+v: %v", f, err)
		}
	}
}

// Appends racing with Close all return: answered, or refused as closed,
// never left waiting for a sequencer that has gone.
func TestAppendDuringClose(t *testing.T) {
	for round := 0; round < 5; round++ {
		s, _ := openTest(t)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := 0; g < 16; g++ {
			wg.Go(func() {
				<-start
				for i := 0; i < 20; i++ {
					if _, err := s.Append(context.Background(), []ledger.Record{evRecord(t, sampleEvidence(round*100000+g*100+i))}, ""); err != nil {
						if !strings.Contains(err.Error(), "closed") {
							t.Errorf("append during close: %v", err)
						}
						return
					}
				}
			})
		}
		close(start)
		time.Sleep(time.Duration(round) * time.Millisecond)
		s.Close()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("an append never returned after Close")
		}
	}
}
