package postgres

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/storetest"
	"github.com/evidence-ledger/ledger/ledger/storetest/pgtest"
)

// TestGroupCommitAnswersAsTheStore: concurrent appends share batches
// (content ids looked up when the batch begins, rows kept until COMMIT,
// proofs from the driver's node cache), mixing new records, records
// already stored, one record sent by several requests at once, requests
// that carry a stored and a new record, and token creations (written at
// once, mid-batch). Every answer must be what the store says afterwards:
// each entry the stored leaf at its index (bytes equal), each proof the
// store's inclusion proof at the answer's size, each record at one index
// however many requests sent it; the audit is clean.
func TestGroupCommitAnswersAsTheStore(t *testing.T) {
	groupCommit(t, 1)
}

// TestTwoStoresAnswerAsTheStore is TestGroupCommitAnswersAsTheStore
// through two Stores on one database (two servers' drivers: each batch
// reloads the tree the other extended, partly from the node cache).
func TestTwoStoresAnswerAsTheStore(t *testing.T) {
	groupCommit(t, 2)
}

func groupCommit(t *testing.T, stores int) {
	ctx := context.Background()
	dsn, dir := pgtest.NewDatabase(t), t.TempDir()
	ss := make([]*Store, stores)
	for i := range ss {
		ss[i] = openTest(t, dsn, dir, false)
	}
	s := ss[0]
	rec := func(i int) ledger.Record { return storetest.Record(t, ledger.KindEvidence, storetest.Evidence(i)) }
	for i := range 4 {
		if _, err := s.Append(ctx, []ledger.Record{rec(i)}, ""); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu   sync.Mutex
		ress []*ledger.AppendResult
		wg   sync.WaitGroup
	)
	for g := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 12 {
				var recs []ledger.Record
				switch n := g*100 + k; {
				case k%4 == 1:
					recs = []ledger.Record{rec(n % 4), rec(1000 + n)} // stored, then new
				case k%4 == 2:
					recs = []ledger.Record{rec(5000 + k)} // the same record from every goroutine
				default:
					recs = []ledger.Record{rec(1000 + n)}
				}
				if g%8 == 0 && k%6 == 3 {
					if _, _, err := ss[g%stores].CreateToken(ctx, fmt.Sprintf("t-%d-%d", g, k), ledger.ScopeRecord, nil); err != nil {
						t.Error(err)
					}
				}
				res, err := ss[g%stores].Append(ctx, recs, "")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				ress = append(ress, res)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	at := map[string]uint64{}
	for _, res := range ress {
		for _, ae := range res.Entries {
			if prev, ok := at[ae.ID]; ok && prev != ae.Index {
				t.Fatalf("record %s answered at indexes %d and %d", ae.ID, prev, ae.Index)
			}
			at[ae.ID] = ae.Index
			e, err := s.EntryAt(ctx, ae.Index)
			if err != nil {
				t.Fatal(err)
			}
			if e.ID != ae.ID || !bytes.Equal(e.Raw, ae.Raw) || e.LeafHash != ae.LeafHash {
				t.Fatalf("answer at index %d is %s, the store holds %s", ae.Index, ae.ID, e.ID)
			}
			p, err := s.InclusionProof(ctx, ae.Index, res.Checkpoint.Size)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(p, ae.Proof) {
				t.Fatalf("answer's proof of index %d at size %d differs from the store's:\n%+v\n%+v", ae.Index, res.Checkpoint.Size, ae.Proof, p)
			}
		}
		cp, err := s.CheckpointAt(ctx, res.Checkpoint.Size)
		if err != nil {
			t.Fatal(err)
		}
		if cp.Root != res.Checkpoint.Root || cp.Note != res.Checkpoint.Note {
			t.Fatalf("answer's checkpoint of size %d is not the stored one", cp.Size)
		}
	}
	if rep, err := s.Audit(ctx); err != nil || !rep.OK {
		t.Fatalf("audit: %+v %v", rep, err)
	}
}
