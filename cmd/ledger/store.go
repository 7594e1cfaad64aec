package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/keys"
	"github.com/evidence-ledger/ledger/ledger/postgres"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
	"github.com/evidence-ledger/ledger/ledger/tlog"
)

// Store is a local ledger store as the commands use it, whichever driver
// --db selects (see openDriverStore): the store's methods, and Log, the
// log engine over it (for tlog.NewVerifiedStore). Exactly one of lite
// and pg is set.
type Store struct {
	driverStore
	Log  *tlog.Log
	lite *sqlite.Store
	pg   *postgres.Store
}

// driverStore is what both drivers' stores offer the commands.
type driverStore interface {
	ledger.Store
	ledger.CheckpointLister
	tlog.NodeReader
	Origin() string
	CheckStart(ctx context.Context, r tlog.EntryAtReader, state *tlog.SignedState) (ledger.Checkpoint, error)
	ProbeStorage(ctx context.Context) error
	// AuthenticateRow lets tlog.VerifiedStore check a tokens row against
	// its token leaves (ledger.TokenRowAuthenticator): a wrapper that hid
	// it would make authentication trust the row.
	AuthenticateRow(ctx context.Context, secret string) (ledger.TokenRow, error)
}

var (
	_ driverStore                  = (*sqlite.Store)(nil)
	_ driverStore                  = (*postgres.Store)(nil)
	_ ledger.TokenRowAuthenticator = (*Store)(nil)
	_ tlog.EntryRangeReader        = (*Store)(nil)
)

// EntriesRange implements tlog.EntryRangeReader (the background full
// verification's reads): one query on SQLite, leaf by leaf on PostgreSQL.
func (s *Store) EntriesRange(ctx context.Context, lo, hi uint64) ([]ledger.Entry, error) {
	if s.lite != nil {
		return s.lite.EntriesRange(ctx, lo, hi)
	}
	es := make([]ledger.Entry, 0, hi-lo)
	for i := lo; i < hi; i++ {
		e, err := s.EntryAt(ctx, i)
		if ledger.ErrorCode(err) == ledger.CodeNotFound {
			break
		}
		if err != nil {
			return nil, err
		}
		es = append(es, e)
	}
	return es, nil
}

// isPostgres reports whether --db names a PostgreSQL database (a
// postgres:// or postgresql:// URL); anything else is SQLite.
func isPostgres(db string) bool { return postgres.IsDSN(db) }

// sqlitePath is the file path of a SQLite --db: a path, or sqlite://PATH.
// Another URL scheme is an error, never a file named after it.
func sqlitePath(db string) (string, error) {
	if p, ok := strings.CutPrefix(db, "sqlite://"); ok {
		if p == "" {
			return "", fmt.Errorf("--db sqlite:// names no file")
		}
		return p, nil
	}
	if i := strings.Index(db, "://"); i > 0 && !isPostgres(db) && !strings.ContainsAny(db[:i], "/\\.") {
		return "", fmt.Errorf("--db %s://...: unsupported database; use a file path, sqlite://PATH, or postgres://USER@HOST/DB", db[:i])
	}
	return db, nil
}

// dbName names --db for messages: a SQLite path, or a PostgreSQL
// host:port/database (never the password).
func dbName(db string) string {
	if !isPostgres(db) {
		p, _ := sqlitePath(db)
		return p
	}
	return postgres.Redact(db)
}

// storeOptions are what openDriverStore passes to either driver.
type storeOptions struct {
	key          keys.Key
	keyDir       string
	log          *slog.Logger
	readOnly     bool
	onCheckpoint func(ledger.Checkpoint) error
	idemTTL      time.Duration
}

// openDriverStore opens the store --db selects: PostgreSQL for a
// postgres:// or postgresql:// URL (a refused connection is an error, never
// a fallback), SQLite for a path or sqlite://PATH.
func openDriverStore(ctx context.Context, db string, o storeOptions) (*Store, error) {
	if isPostgres(db) {
		st, err := postgres.Open(ctx, postgres.Options{DSN: db, Key: o.key, KeyDir: o.keyDir, Logger: o.log, ReadOnly: o.readOnly, OnCheckpoint: o.onCheckpoint, IdempotencyTTL: o.idemTTL})
		if err != nil {
			return nil, err
		}
		return &Store{driverStore: st, Log: st.Log, pg: st}, nil
	}
	path, err := sqlitePath(db)
	if err != nil {
		return nil, err
	}
	st, err := sqlite.Open(ctx, sqlite.Options{Path: path, Key: o.key, KeyDir: o.keyDir, Logger: o.log, ReadOnly: o.readOnly, OnCheckpoint: o.onCheckpoint, IdempotencyTTL: o.idemTTL})
	if err != nil {
		return nil, err
	}
	return &Store{driverStore: st, Log: st.Log, lite: st}, nil
}

// migrationStatus returns the store's schema version and the newest.
func (s *Store) migrationStatus(ctx context.Context) (cur, latest int64, err error) {
	if s.pg != nil {
		return postgres.MigrationStatus(ctx, s.pg.DB())
	}
	return sqlite.MigrationStatus(ctx, s.lite.DB())
}
