package sqlite

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlog"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
)

// openLingering opens a store whose writer lingers for concurrent
// appends, so that the appends of one round share a batch (and its one
// Flush of evidence rows).
func openLingering(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), Options{Path: filepath.Join(t.TempDir(), "ledger.db"), Linger: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// concurrently runs f(0..n-1) at once and waits for them.
func concurrently(n int, f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() { <-start; f(i) })
	}
	close(start)
	wg.Wait()
}

// Evidence rows of a batch's requests are flushed together at its end: an
// answer naming a leaf appended earlier in the same batch (the same record
// sent twice) is the stored leaf byte for byte, every proof verifies
// against the answer's checkpoint, and the log audits clean.
func TestSharedFlushAnswersAreTheStoredLeaves(t *testing.T) {
	ctx := context.Background()
	s := openLingering(t)
	for round := range 3 {
		res := make([]*ledger.AppendResult, 16)
		errs := make([]error, 16)
		concurrently(16, func(i int) {
			n := 1000*round + i
			if i%2 == 1 {
				n = 1000*round + 999 // the same record from 8 requests
			}
			res[i], errs[i] = s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(n))}, "")
		})
		fresh := 0
		for i, r := range res {
			if errs[i] != nil {
				t.Fatalf("round %d append %d: %v", round, i, errs[i])
			}
			e := r.Entries[0]
			if !e.Existing && i%2 == 1 {
				fresh++
			}
			stored, err := s.EntryAt(ctx, e.Index)
			if err != nil {
				t.Fatal(err)
			}
			if stored.ID != e.ID || !bytes.Equal(stored.Raw, e.Raw) || !bytes.Equal(stored.Body, e.Body) || stored.LeafHash != e.LeafHash || !stored.RecordedAt.Equal(e.RecordedAt) || stored.Kind != e.Kind {
				t.Fatalf("round %d append %d: answered entry %+v, stored %+v", round, i, e.Entry, stored)
			}
			p := e.Proof
			hs := make([][]byte, len(p.Hashes))
			for j := range p.Hashes {
				hs[j] = p.Hashes[j][:]
			}
			if err := proof.VerifyInclusion(rfc6962.DefaultHasher, e.Index, r.Checkpoint.Size, e.LeafHash[:], hs, r.Checkpoint.Root[:]); err != nil {
				t.Fatalf("round %d append %d: proof does not verify: %v", round, i, err)
			}
		}
		if fresh != 1 {
			t.Fatalf("round %d: the record sent 8 times was new in %d answers, want 1", round, fresh)
		}
	}
	rep, err := s.Audit(ctx)
	if err != nil || !rep.OK {
		t.Fatalf("audit: %+v %v", rep, err)
	}
}

// A request that fails inside a batch whose earlier requests' rows are
// not flushed yet (an idempotency key reused for another request) fails
// alone: the batch runs again request by request and the others append.
func TestSharedFlushFailureFailsOneRequest(t *testing.T) {
	ctx := context.Background()
	s := openLingering(t)
	if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(1))}, "k"); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		errs := make([]error, 9)
		concurrently(9, func(i int) {
			if i == 8 {
				_, errs[i] = s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(2))}, "k")
				return
			}
			_, errs[i] = s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(100*(round+1)+i))}, "")
		})
		for i, err := range errs[:8] {
			if err != nil {
				t.Fatalf("round %d append %d beside a failing request: %v", round, i, err)
			}
		}
		if ledger.ErrorCode(errs[8]) != ledger.CodeConflict {
			t.Fatalf("round %d: reused key: %v, want a conflict", round, errs[8])
		}
	}
	if cp, _ := s.Checkpoint(ctx); cp.Size != 1+3*8 {
		t.Fatalf("size %d, want %d", cp.Size, 1+3*8)
	}
	rep, err := s.Audit(ctx)
	if err != nil || !rep.OK {
		t.Fatalf("audit: %+v %v", rep, err)
	}
}

// sizeGuard passes and records the log size its batch shows it.
type sizeGuard struct {
	key  string
	seen chan uint64
}

func (g sizeGuard) Key() string { return g.key }

func (g sizeGuard) Check(ctx context.Context, b tlog.Batch) error {
	n, err := b.Size(ctx)
	g.seen <- n
	return err
}

// A guard reads through the batch with the rows of the batch's earlier
// requests flushed: the size it sees is its own request's first index.
func TestSharedFlushGuardSeesEarlierRequests(t *testing.T) {
	ctx := context.Background()
	s := openLingering(t)
	for round := range 10 {
		g := sizeGuard{key: fmt.Sprint("g", round), seen: make(chan uint64, 1)}
		var guarded *ledger.AppendResult
		errs := make([]error, 9)
		concurrently(9, func(i int) {
			if i == 8 {
				guarded, errs[i] = s.Append(tlog.WithAppendGuard(ctx, g), []ledger.Record{evRecord(t, sampleEvidence(5000+round))}, "")
				return
			}
			_, errs[i] = s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(100*(round+1)+i))}, "")
		})
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d append %d: %v", round, i, err)
			}
		}
		if seen := <-g.seen; seen != guarded.Entries[0].Index {
			t.Fatalf("round %d: the guard saw size %d, its request was appended at %d", round, seen, guarded.Entries[0].Index)
		}
	}
}
