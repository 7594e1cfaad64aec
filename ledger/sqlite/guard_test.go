package sqlite

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlog"
)

type testGuard struct {
	key    string
	err    error
	checks atomic.Int64
	rows   chan ledger.TokenRow
	hash   []byte
}

func (g *testGuard) Key() string { return g.key }
func (g *testGuard) Check(ctx context.Context, b tlog.Batch) error {
	g.checks.Add(1)
	if g.hash != nil {
		row, err := b.(ledger.TokenRowBatch).TokenRow(ctx, g.hash)
		if err != nil {
			return err
		}
		g.rows <- row
	}
	return g.err
}

// TestAppendGuard: an append whose guard fails gets the guard's error and
// appends nothing; one whose guard passes appends; a batch checks each
// guard key once however many of its requests carry it; and the batch a
// guard sees reads a tokens row in its transaction.
func TestAppendGuard(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	refuse := errors.New("refused by the guard")
	bad := &testGuard{key: "bad", err: refuse}
	if _, err := s.Append(tlog.WithAppendGuard(ctx, bad), []ledger.Record{evRecord(t, sampleEvidence(0))}, ""); !errors.Is(err, refuse) {
		t.Fatalf("append under a failing guard: %v", err)
	}
	if cp, _ := s.Checkpoint(ctx); cp.Size != 0 {
		t.Fatalf("a refused append grew the log to %d", cp.Size)
	}
	secret, tok, err := s.CreateToken(ctx, "ci", ledger.ScopeRecord, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256([]byte(secret))
	good := &testGuard{key: "good", hash: h[:], rows: make(chan ledger.TokenRow, 64)}
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			if _, err := s.Append(tlog.WithAppendGuard(ctx, good), []ledger.Record{evRecord(t, sampleEvidence(1+i))}, ""); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if cp, _ := s.Checkpoint(ctx); cp.Size != 33 {
		t.Fatalf("log size %d after 32 guarded appends, want 33 (the token leaf and 32 records)", cp.Size)
	}
	n := good.checks.Load()
	if n < 1 || n > 32 {
		t.Fatalf("%d guard checks for 32 appends", n)
	}
	row := <-good.rows
	if row.ID != tok.ID || row.TokenLeaves != 1 || row.RevokedAt != nil {
		t.Fatalf("tokens row read in the batch: %+v", row)
	}
	t.Logf("32 concurrent appends: %d guard checks", n)
}
