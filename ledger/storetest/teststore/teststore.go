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
	"database/sql"
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
	"github.com/evidence-ledger/ledger/ledger/tlog"
)

// Store is an open test store: the driver's store and Log, its log
// engine. Exactly one of Lite and PG is set.
type Store struct {
	DriverStore
	Log  *tlog.Log
	Lite *sqlite.Store
	PG   *postgres.Store
	dsn  string // PG's database
	dir  string // the key's directory (SQLite: and the database's)
}

// DriverStore is what both drivers' stores offer.
type DriverStore interface {
	ledger.Store
	ledger.CheckpointLister
	tlog.NodeReader
	Origin() string
	ProbeStorage(ctx context.Context) error
	// AuthenticateRow keeps tlog.VerifiedStore's check of a tokens row
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
		dsn := pgtest.NewDatabase(t)
		st, err := postgres.Open(ctx, postgres.Options{DSN: dsn, KeyDir: o.Dir, Now: o.Now, Logger: o.Logger})
		if err != nil {
			t.Fatal(err)
		}
		s = &Store{DriverStore: st, Log: st.Log, PG: st, dsn: dsn, dir: o.Dir}
	default:
		st, err := sqlite.Open(ctx, sqlite.Options{Path: filepath.Join(o.Dir, "ledger.db"), Now: o.Now, Logger: o.Logger})
		if err != nil {
			t.Fatal(err)
		}
		s = &Store{DriverStore: st, Log: st.Log, Lite: st, dir: o.Dir}
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// OpenSecond opens a second PostgreSQL store on s's database with s's
// key, as a second `ledger serve` on one database runs (its own
// sequencer, serialised with s's by the advisory lock); closed at t's
// end. It skips t on SQLite, whose stores are one per host.
func OpenSecond(t testing.TB, s *Store) *Store {
	t.Helper()
	if s.PG == nil {
		t.Skip("a second server on one database is a PostgreSQL deployment (LEDGER_TEST_STORE=postgres)")
	}
	st, err := postgres.Open(context.Background(), postgres.Options{DSN: s.dsn, KeyDir: s.dir})
	if err != nil {
		t.Fatal(err)
	}
	s2 := &Store{DriverStore: st, Log: st.Log, PG: st, dsn: s.dsn, dir: s.dir}
	t.Cleanup(func() { s2.Close() })
	return s2
}

// String names the store kind (for test logs).
func (s *Store) String() string { return fmt.Sprintf("%s store", Kind()) }

// AuxDB opens a second handle on s's database, as `ledger serve` opens
// one for the run store (package runs): SQLite's aux handle, or a
// PostgreSQL pool on the same database; closed at t's end. pg reports
// which.
func (s *Store) AuxDB(t testing.TB) (db *sql.DB, pg bool) {
	t.Helper()
	var err error
	if s.PG != nil {
		db, _, err = postgres.Connect(context.Background(), s.dsn, 10*time.Second)
	} else {
		db, err = sqlite.OpenAux(filepath.Join(s.dir, "ledger.db"))
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, s.PG != nil
}
