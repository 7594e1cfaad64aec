package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// waitFilterReady appends until the content-id filter is ready (the writer
// marks it ready in a batch after the builder finished).
func waitFilterReady(t *testing.T, s *Store, n *int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !s.d.idf.ready.Load() {
		if time.Now().After(deadline) {
			t.Fatal("content-id filter never became ready")
		}
		if _, err := s.Append(context.Background(), []ledger.Record{evRecord(t, sampleEvidence(*n))}, ""); err != nil {
			t.Fatal(err)
		}
		*n++
	}
}

// resubmitAll appends records 0..n-1 again, one request each, and checks
// that every one is answered as the existing leaf of the same index.
func resubmitAll(t *testing.T, s *Store, n int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i++ {
		res, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(i))}, "")
		if err != nil || !res.Entries[0].Existing || res.Entries[0].Index != uint64(i) {
			t.Fatalf("resubmitting %d: %+v %v", i, res, err)
		}
	}
}

// The filter never forgets an id: across its stages growing, merges into
// entry_ids, a reopen (the builder's snapshot), and another process's
// appends and merges, every resubmission is found, and the log holds each
// record once. New records are answered without a database lookup.
func TestIDFilterNoFalseNegatives(t *testing.T) {
	defer func(c uint) { idFilterMinCap = c }(idFilterMinCap)
	idFilterMinCap = 8
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s := openRecent(t, path, 4)
	n := 0
	waitFilterReady(t, s, &n)
	for ; n < 60; n++ {
		if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(n))}, ""); err != nil {
			t.Fatal(err)
		}
	}
	if len(s.d.idf.stages) < 3 {
		t.Fatalf("%d filter stages after 60 ids from a capacity of 8; want the filter to grow", len(s.d.idf.stages))
	}
	resubmitAll(t, s, n)
	// A new record: the filter answers for it, so the caller reads nothing.
	p, err := ledger.PrepareOne(evRecord(t, sampleEvidence(1000)))
	if err != nil {
		t.Fatal(err)
	}
	if l := s.d.lookupIDs(ctx, []ledger.Prepared{p}); l.w != s.d.pubW.Load() || l.found != nil {
		t.Fatalf("lookup of a new id: %+v (watermark %d); want no database lookup", l, s.d.pubW.Load())
	}
	// An old one may be in the filter: it is looked up and found.
	p, _ = ledger.PrepareOne(evRecord(t, sampleEvidence(2)))
	if l := s.d.lookupIDs(ctx, []ledger.Prepared{p}); l.found[p.ID] != 2 {
		t.Fatalf("lookup of leaf 2's id: %+v", l)
	}
	s.Close()

	// Reopened: the builder reads the id tables.
	s = openRecent(t, path, 4)
	defer s.Close()
	waitFilterReady(t, s, &n)
	resubmitAll(t, s, n)

	// Another process appends (and merges) 20 records beside this one.
	b := openRecent(t, path, 4)
	for i := n; i < n+20; i++ {
		if _, err := b.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(i))}, ""); err != nil {
			t.Fatal(err)
		}
	}
	b.Close()
	n += 20
	resubmitAll(t, s, n)
	rep, err := s.Audit(ctx)
	if err != nil || !rep.OK || rep.Leaves != uint64(n) {
		t.Fatalf("audit %+v %v; want %d leaves", rep, err, n)
	}
}

// A builder snapshot older than the writer's first view of the log: the
// writer adds the leaves in between before the filter is ready.
func TestIDFilterClosesBuilderGap(t *testing.T) {
	ctx := context.Background()
	s, _ := openTest(t)
	var ids []string
	for i := 0; i < 10; i++ {
		res, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(i))}, "")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Entries[0].ID)
	}
	var recs []ledger.Prepared
	for _, id := range ids {
		recs = append(recs, ledger.Prepared{ID: id})
	}
	for _, tc := range []struct {
		name           string
		snap, covered  uint64
		builderIDsUpTo int
	}{
		{"snapshot before the writer's start", 3, 10, 3},
		// Leaves 6..9 have no ids in the tables (appended by a ledger
		// older than schema 5): the builder's snapshot of the tables
		// lacks them.
		{"leaves the id tables do not cover", 10, 6, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newIDFilter(0)
			if err := f.writerSync(ctx, s.d.r, 10, tc.covered); err != nil || f.ready.Load() {
				t.Fatalf("before the builder: ready %v, %v", f.ready.Load(), err)
			}
			f.add(ids[:tc.builderIDsUpTo]...)
			f.built <- tc.snap
			if err := f.writerSync(ctx, s.d.r, 10, tc.covered); err != nil || !f.ready.Load() {
				t.Fatalf("after the builder: ready %v, %v", f.ready.Load(), err)
			}
			if got := f.maybe(recs); len(got) != len(ids) {
				t.Fatalf("filter holds %d of the 10 ids", len(got))
			}
			if got := f.maybe([]ledger.Prepared{{ID: "not an id"}}); len(got) != 0 {
				t.Fatalf("filter claims an id it never saw: %v", got)
			}
		})
	}
}
