package sqlite

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// Idempotency keys replay within their TTL, are forgotten after it (the
// key may then name a new request), and the table stays bounded.
func TestIdempotencyExpiresAndIsBounded(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	s, err := Open(ctx, Options{Path: filepath.Join(t.TempDir(), "ledger.db"), Now: clock, IdempotencyTTL: time.Hour, IdempotencyMax: 3, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(1))}, "k")
	if err != nil {
		t.Fatal(err)
	}
	advance(30 * time.Minute)
	// Within the TTL: a different request under the key is a conflict,
	// the same one a replay.
	if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(2))}, "k"); ledger.ErrorCode(err) != ledger.CodeConflict {
		t.Fatalf("reused key within its TTL: %v, want a conflict", err)
	}
	again, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(1))}, "k")
	if err != nil || again.Entries[0].ID != first.Entries[0].ID || !again.Entries[0].Existing {
		t.Fatalf("replay: %+v %v", again, err)
	}
	advance(time.Hour)
	// Expired: the key names a new request.
	fresh, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(2))}, "k")
	if err != nil || fresh.Entries[0].Existing {
		t.Fatalf("expired key: %+v %v, want a new entry", fresh, err)
	}
	// Bounded: many keys, a minute apart (each put prunes), leave at most
	// IdempotencyMax rows besides the newest.
	for i := 0; i < 20; i++ {
		advance(time.Minute)
		if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(100+i))}, "key-"+string(rune('a'+i))); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := s.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM idempotency").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n > 3+1 {
		t.Fatalf("idempotency table holds %d rows, bound 3 (+1 since the last prune)", n)
	}
}
