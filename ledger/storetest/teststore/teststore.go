// Package teststore opens the store that other packages' tests (gates,
// web) run against: SQLite in a temporary directory by default, or a
// fresh database of pgtest's throwaway PostgreSQL cluster when
// LEDGER_TEST_STORE=postgres. `make test` runs those packages once per
// store, so the API, gates and audit tests hold on both.
//
// With LEDGER_TEST_STORE=postgres and PostgreSQL absent, Open skips the
// test (fails it under LEDGER_REQUIRE_POSTGRES=1), see pgtest.
package teststore

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/postgres"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
	"github.com/evidence-ledger/ledger/ledger/storetest/pgtest"
)

// Store is an open test store: the driver's store and Log, its log
// engine. Exactly one of Lite and PG is set.
type Store struct {
	DriverStore
	Log  *ledger.Log
	Lite *sqlite.Store
	PG   *postgres.Store
}

// DriverStore is what both drivers' stores offer.
type DriverStore interface {
	ledger.Store
	ledger.CheckpointLister
	ledger.NodeReader
	Origin() string
	ProbeStorage(ctx context.Context) error
	// AuthenticateRow keeps ledger.VerifiedStore's check of a tokens row
	// against its leaves working through this wrapper.
	AuthenticateRow(ctx context.Context, secret string) (ledger.TokenRow, error)
}

var _ ledger.TokenRowAuthenticator = (*Store)(nil)

// Options configures Open.
type Options struct {
	// Now is the store's clock (default time.Now).
	Now func() time.Time
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Dir holds the SQLite file and the key (default t.TempDir()).
	Dir string
}

// Kind returns the store the tests run on: "sqlite" or "postgres"
// (LEDGER_TEST_STORE).
func Kind() string {
	if os.Getenv("LEDGER_TEST_STORE") == "postgres" {
		return "postgres"
	}
	return "sqlite"
}

// Main is TestMain's body for packages that call Open: it stops the
// PostgreSQL cluster when the tests end.
func Main(m *testing.M) { pgtest.Main(m) }

// Open opens a new, empty store for t, closed at its end.
func Open(t testing.TB, o Options) *Store {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	ctx := context.Background()
	var s *Store
	switch Kind() {
	case "postgres":
		st, err := postgres.Open(ctx, postgres.Options{DSN: pgtest.NewDatabase(t), KeyDir: o.Dir, Now: o.Now, Logger: o.Logger})
		if err != nil {
			t.Fatal(err)
		}
		s = &Store{DriverStore: st, Log: st.Log, PG: st}
	default:
		st, err := sqlite.Open(ctx, sqlite.Options{Path: filepath.Join(o.Dir, "ledger.db"), Now: o.Now, Logger: o.Logger})
		if err != nil {
			t.Fatal(err)
		}
		s = &Store{DriverStore: st, Log: st.Log, Lite: st}
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// String names the store kind (for test logs).
func (s *Store) String() string { return fmt.Sprintf("%s store", Kind()) }
