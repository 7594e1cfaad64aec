package sqlite

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
)

// TestAuditBesideAppends: the audit reads tree_nodes on a connection of
// its own, whose snapshot can be newer than the leaves'; appends running
// meanwhile must never read as "nodes beyond the last leaf" or any other
// problem (the server's background full verification audits beside its
// appends). Each round also checks that the audit saw a size the log had.
func TestAuditBesideAppends(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	for i := range 50 {
		if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(i))}, ""); err != nil {
			t.Fatal(err)
		}
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var appendErr atomic.Value
	wg.Go(func() {
		for i := 50; !stop.Load(); i++ {
			if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(i))}, ""); err != nil {
				appendErr.Store(err)
				return
			}
		}
	})
	for round := range 30 {
		rep, err := s.Audit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK {
			stop.Store(true)
			wg.Wait()
			t.Fatalf("round %d: audit beside appends reports a problem at %d: %s", round, rep.FirstBadIndex, rep.Problem)
		}
	}
	stop.Store(true)
	wg.Wait()
	if err, _ := appendErr.Load().(error); err != nil {
		t.Fatal(err)
	}
}

// TestAuditFindsNodeBeyondLastLeaf: a tree_nodes row past what the log's
// leaves complete is still reported, although the audit's node stream
// is bounded to the snapshot's size.
func TestAuditFindsNodeBeyondLastLeaf(t *testing.T) {
	s, path := openTest(t)
	ctx := context.Background()
	for i := range 8 {
		if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(i))}, ""); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	h, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	// The level-1 node ending at leaf 10 (ord 10<<6|1), two leaves past the
	// last.
	if _, err := h.Exec("INSERT INTO tree_nodes (ord, hash) VALUES (?, ?)", int64(10<<6|1), make([]byte, 32)); err != nil {
		t.Fatal(err)
	}
	h.Close()
	var s2 *Store
	s2, err = Open(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	rep, err := s2.Audit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK || !strings.Contains(rep.Problem, "beyond the last leaf") {
		t.Fatalf("audit of a log with a node past its last leaf: %+v", rep)
	}
}
