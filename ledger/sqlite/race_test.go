package sqlite

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
)

// Several processes on one database: two long-running stores (two
// servers) append concurrently while short-lived stores (`ledger record
// --db`) open, append one record and close, over and over. No append may
// fail (in particular with a false "log state does not match the latest
// signed checkpoint"), and the audit passes. LEDGER_RACE_ROUNDS sets the
// short-lived stores' rounds (default 60; the false alarm this guards
// against struck about one round in twenty).
func TestSharedDatabaseNoFalseAlarm(t *testing.T) {
	rounds := 60
	if v, err := strconv.Atoi(os.Getenv("LEDGER_RACE_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	if testing.Short() {
		rounds = 10
	}
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	path := filepath.Join(t.TempDir(), "ledger.db")
	a, err := Open(ctx, Options{Path: path, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(ctx, Options{Path: path, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	var appended sync.Map
	for si, s := range []*Store{a, b} {
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func(n int) {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					id := n*1_000_000 + i
					if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(id))}, ""); err != nil {
						fail(err)
						return
					}
					appended.Store(id, true)
				}
			}(1 + si*4 + g)
		}
	}
	acked := 0 // short-lived appends acknowledged (a failed one is reported above, not counted)
	for r := 0; r < rounds; r++ {
		c, err := Open(ctx, Options{Path: path, Logger: quiet})
		if err != nil {
			fail(err)
			break
		}
		if _, err := c.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(r))}, ""); err != nil {
			fail(err)
		} else {
			acked++
		}
		c.Close()
	}
	close(stop)
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	rep, err := a.Audit(ctx)
	if err != nil || !rep.OK {
		t.Fatalf("audit %+v %v", rep, err)
	}
	n := 0
	appended.Range(func(any, any) bool { n++; return true })
	if rep.Leaves < uint64(n+acked) {
		t.Fatalf("audit counts %d leaves, %d appends were acknowledged", rep.Leaves, n+acked)
	}
	t.Logf("%d rounds, %d leaves", rounds, rep.Leaves)
}

// The database, its -wal and -shm files are created 0600, like the key.
func TestFilesPrivate(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	s, err := Open(ctx, Options{Path: path, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(1))}, ""); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ledger.db", "ledger.db-wal", "ledger.db-shm", "ledger.key"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if m := fi.Mode().Perm(); m&0o077 != 0 {
			t.Errorf("%s has mode %o, want no access for group and others", f, m)
		}
	}
}
