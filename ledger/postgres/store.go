package postgres

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/keys"
	"github.com/evidence-ledger/ledger/ledger/sqlstore"
	"github.com/evidence-ledger/ledger/ledger/tlog"
	pgmig "github.com/evidence-ledger/ledger/migrations/postgres"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// Options configures Open.
type Options struct {
	// DSN is the PostgreSQL connection string: a postgres:// or
	// postgresql:// URL or a libpq keyword/value string. Required.
	DSN string
	// Key is the log's signing key (see ledger/keys). When its Signer is
	// nil, Open loads the key from KeyDir with keys.Load, generating it
	// unless ReadOnly.
	Key keys.Key
	// KeyDir is where Open looks for the key when Key is not given; it is
	// required then (a database server has no directory of its own here).
	KeyDir string
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Now is the clock; default time.Now. Tests pin it.
	Now func() time.Time
	// MaxBatch and Linger are tlog.LogOptions' (group commit).
	MaxBatch int
	Linger   time.Duration
	// IdempotencyTTL is how long an idempotency key's answer is replayed
	// (default DefaultIdempotencyTTL).
	IdempotencyTTL time.Duration
	// IdempotencyMax bounds the idempotency table (default
	// DefaultIdempotencyMax rows).
	IdempotencyMax int
	// ReadOnly opens without starting the sequencer or migrating; a
	// database at an older schema is refused. Appends fail.
	ReadOnly bool
	// OnCheckpoint is tlog.LogOptions.OnCheckpoint.
	OnCheckpoint func(ledger.Checkpoint) error
	// MaxConns caps the connection pool (default 16).
	MaxConns int
	// ConnectTimeout bounds the first connection (default 10 s).
	ConnectTimeout time.Duration
}

// Idempotency defaults (as in ledger/sqlite).
const (
	DefaultIdempotencyTTL = sqlstore.DefaultIdempotencyTTL
	DefaultIdempotencyMax = sqlstore.DefaultIdempotencyMax
	idemPruneEvery        = 1000
	idemPruneAge          = time.Minute
)

// SequencerLock is the advisory lock key every batch holds for its
// transaction (pg_advisory_xact_lock): one writer at a time across all
// ledger processes on a database.
const SequencerLock int64 = 0x6c65646765720001 // "ledger" 0001

// Store is the PostgreSQL ledger.Store: the log engine (tlog.Log, whose
// methods it has) over this package's driver, plus the projection
// queries, tokens, checkpoints listing and the audit. Safe for concurrent
// use.
type Store struct {
	*tlog.Log
	sqlstore.Queries
	sqlstore.TokenTable
	d *driver
}

var (
	_ ledger.Store            = (*Store)(nil)
	_ ledger.CheckpointLister = (*Store)(nil)
)

// driver is the PostgreSQL tlog.Driver: one connection pool; batches
// take a pool connection for their transaction.
type driver struct {
	db   *sql.DB
	opts Options
	log  *slog.Logger
	// where names the server for messages: host:port/database, never the
	// password.
	where string

	// cache holds the tree nodes of this process's commits for append
	// answers (AnswerNodes).
	cache *nodeCache
	// hints are the content ids of queued appends (LookupIDs).
	hints idHints

	// idemPuts and idemPruned pace the idempotency table's pruning
	// (sequencer goroutine only).
	idemPuts   int
	idemPruned time.Time
}

// IsDSN reports whether s selects PostgreSQL: a postgres:// or
// postgresql:// URL.
func IsDSN(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// Open connects to the database of opts.DSN, refuses a schema newer than
// this ledger's, migrates an older one (unless read-only), loads the
// signing key when opts.Key is not given, and starts the sequencer.
// Connection errors name the host, port, database and user, never the
// password; there is no fallback to another store.
func Open(ctx context.Context, opts Options) (*Store, error) {
	d, err := openDriver(ctx, opts)
	if err != nil {
		return nil, err
	}
	opts = d.opts
	if opts.Key.Signer == nil {
		if opts.KeyDir == "" {
			d.close()
			return nil, errors.New("open store: no signing key and no key directory (--data-dir) for a PostgreSQL ledger")
		}
		if opts.Key, err = keys.Load(opts.KeyDir, !opts.ReadOnly); err != nil {
			d.close()
			return nil, err
		}
	}
	l, err := tlog.NewLog(d, tlog.LogOptions{Signer: opts.Key.Signer, VerifierKey: opts.Key.VerifierKey, Logger: opts.Logger, Now: opts.Now, MaxBatch: opts.MaxBatch, Linger: opts.Linger, ReadOnly: opts.ReadOnly, OnCheckpoint: opts.OnCheckpoint})
	if err != nil {
		d.close()
		return nil, fmt.Errorf("open store: %w", err)
	}
	return &Store{Log: l, d: d,
		Queries:    sqlstore.Queries{DB: d.db, Dialect: dialect, LogOrigin: l.Origin},
		TokenTable: sqlstore.TokenTable{Dialect: dialect, Lookup: d.db, List: d.db, ListOrder: "created_at, id", Now: opts.Now, AppendLeaves: l.Append},
	}, nil
}

func withDefaults(opts Options) Options {
	sqlstore.FillDefaults(&opts.Logger, &opts.Now, &opts.IdempotencyTTL, &opts.IdempotencyMax)
	if opts.MaxConns <= 0 {
		opts.MaxConns = 16
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = 10 * time.Second
	}
	return opts
}

// openDriver connects (one ping) and checks or migrates the schema.
func openDriver(ctx context.Context, opts Options) (*driver, error) {
	opts = withDefaults(opts)
	db, where, err := Connect(ctx, opts.DSN, opts.ConnectTimeout)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(opts.MaxConns)
	db.SetMaxIdleConns(opts.MaxConns)
	d := &driver{db: db, opts: opts, log: opts.Logger, where: where, cache: newNodeCache()}
	if err := d.schema(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return d, nil
}

// Connect opens a pool on dsn and checks that the server answers within
// timeout. It returns the pool and where, "host:port/database", for
// messages. Errors name where and the user, never the password (a
// password in a message is replaced by "****").
func Connect(ctx context.Context, dsn string, timeout time.Duration) (*sql.DB, string, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgconn's parse errors print the DSN with its password redacted.
		return nil, "", fmt.Errorf("open store: PostgreSQL DSN: %w", err)
	}
	where := whereOf(cfg)
	if timeout > 0 && (cfg.ConnectTimeout == 0 || cfg.ConnectTimeout > timeout) {
		cfg.ConnectTimeout = timeout
	}
	db := stdlib.OpenDB(*cfg)
	pctx, cancel := context.WithTimeout(ctx, timeout+time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		msg := connectCause(err)
		if cfg.Password != "" {
			msg = strings.ReplaceAll(msg, cfg.Password, "****")
		}
		return nil, "", fmt.Errorf("open store: cannot connect to PostgreSQL at %s as user %q: %s", where, cfg.User, msg)
	}
	return db, where, nil
}

// connectCause is the reason of a failed connection without pgx's
// "failed to connect to `user=... database=...`" preamble.
func connectCause(err error) string {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) && ce.Unwrap() != nil {
		err = ce.Unwrap()
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Severity + ": " + pe.Message + " (SQLSTATE " + pe.Code + ")"
	}
	return err.Error()
}

// schema refuses a database written by a newer ledger and migrates an
// older one, unless read-only (then it is refused too).
func (d *driver) schema(ctx context.Context) error {
	cur, latest, err := MigrationStatus(ctx, d.db)
	if err != nil {
		return fmt.Errorf("open store: read schema version: %w", err)
	}
	migrate, err := sqlstore.NeedsMigration(cur, latest, d.opts.ReadOnly, "")
	if err != nil || !migrate {
		return err
	}
	if err := Migrate(ctx, d.db); err != nil {
		return err
	}
	if cur > 0 {
		d.log.Info("migrated the database schema", "from", cur, "to", latest, "db", d.where)
	}
	return nil
}

// Migrate applies all pending migrations to db under goose's PostgreSQL
// session lock (two servers starting together migrate once). Applying
// twice is a no-op.
func Migrate(ctx context.Context, db *sql.DB) error {
	p, err := newProvider(db, true)
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// MigrationStatus returns the current and the newest available versions.
func MigrationStatus(ctx context.Context, db *sql.DB) (current, latest int64, err error) {
	p, err := newProvider(db, false)
	if err != nil {
		return 0, 0, err
	}
	if current, err = p.GetDBVersion(ctx); err != nil {
		return 0, 0, err
	}
	srcs := p.ListSources()
	if len(srcs) > 0 {
		latest = srcs[len(srcs)-1].Version
	}
	return current, latest, nil
}

// Versions lists the versions of this package's migrations, in order.
func Versions() ([]int64, error) {
	p, err := newProvider(nil, false)
	if err != nil {
		return nil, err
	}
	var out []int64
	for _, s := range p.ListSources() {
		out = append(out, s.Version)
	}
	return out, nil
}

func newProvider(db *sql.DB, locked bool) (*goose.Provider, error) {
	sub, err := fs.Sub(pgmig.FS, ".")
	if err != nil {
		return nil, err
	}
	var popts []goose.ProviderOption
	if locked {
		l, err := lock.NewPostgresSessionLocker()
		if err != nil {
			return nil, err
		}
		popts = append(popts, goose.WithSessionLocker(l))
	}
	if db == nil {
		// Listing only: goose wants a handle, never used here.
		db = &sql.DB{}
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub, popts...)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return p, nil
}

// DB returns the connection pool, for tools (migrate, copy).
func (s *Store) DB() *sql.DB { return s.d.db }

// Where names the database for messages: host:port/database.
func (s *Store) Where() string { return s.d.where }

// ProbeStorage checks that the database answers (web's /healthz calls it
// while degraded); the server's disk is the server's to watch.
func (s *Store) ProbeStorage(ctx context.Context) error {
	return dbErr("storage probe", s.d.db.PingContext(ctx))
}

// Close stops the sequencer after pending appends and closes the pool.
func (s *Store) Close() error {
	s.Log.Close()
	return s.d.close()
}

func (d *driver) close() error { return d.db.Close() }

// dbErr translates database errors into application errors, in one place
// (sqlstore.Dialect.Err with engineErr).
func dbErr(op string, err error) error { return dialect.Err(op, err) }

// engineErr translates PostgreSQL's own errors during op: a lost
// connection (CodeUnavailable) and a full disk or temp file limit
// (ledger.StorageFull); nil for any other.
func engineErr(op string, err error) error {
	if connLost(err) {
		return unavailableErr(op, err)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "53100" || pe.Code == "53400") {
		// disk_full, configuration_limit_exceeded (temp file limit)
		return ledger.StorageFull(op, err)
	}
	return nil
}

// connLost reports whether err is the loss of the connection to
// PostgreSQL rather than an answer from it: the server closed or
// terminated the session (SQLSTATE class 08 connection exception, 57P01
// admin_shutdown from pg_terminate_backend, 57P02 crash_shutdown, 57P03
// cannot_connect_now, https://www.postgresql.org/docs/current/errcodes-appendix.html),
// the socket failed or was closed, or no connection could be made.
func connLost(err error) bool {
	if err == nil {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	switch {
	case errors.Is(err, sqldriver.ErrBadConn), errors.Is(err, sql.ErrConnDone), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, net.ErrClosed), errors.As(err, &ce), errors.As(err, &ne), pgconn.SafeToRetry(err):
		return true
	}
	// pgx's answer for a connection it already closed.
	return strings.Contains(err.Error(), "conn closed")
}

// RetryAfter is how long a caller is told to wait (HTTP Retry-After)
// after the connection to PostgreSQL was lost: the pool reconnects on
// the next request.
const RetryAfter = 2 * time.Second

// unavailable is a lost connection to PostgreSQL, wrapped in a
// ledger.CodeUnavailable error; RetryAfter tells web the answer's
// Retry-After.
type unavailable struct{ err error }

func (e *unavailable) Error() string             { return e.err.Error() }
func (e *unavailable) Unwrap() error             { return e.err }
func (e *unavailable) RetryAfter() time.Duration { return RetryAfter }

// unavailableErr is the CodeUnavailable error for a connection lost
// during op. Its message names the database being unavailable and not
// the server's address (the DSN stays in the server's log).
func unavailableErr(op string, err error) error {
	return &ledger.Error{Code: ledger.CodeUnavailable, Message: "the database is unavailable (the connection to PostgreSQL was lost during " + op + "): nothing was changed by this request unless it says otherwise; send it again shortly", Err: &unavailable{err}}
}

// lost returns err translated by dbErr when it is a lost connection, and
// err itself otherwise (nil stays nil): for the paths whose other errors
// keep their own meaning for the caller.
func lost(op string, err error) error {
	if connLost(err) {
		return unavailableErr(op, err)
	}
	return err
}

// Redact returns dsn's server for messages, "host:port/database", or
// "PostgreSQL (unparsable DSN)"; never the password.
func Redact(dsn string) string {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "PostgreSQL (unparsable DSN)"
	}
	return whereOf(cfg)
}

func whereOf(cfg *pgx.ConnConfig) string {
	if strings.HasPrefix(cfg.Host, "/") {
		return cfg.Host + ":" + strconv.Itoa(int(cfg.Port)) + "/" + cfg.Database
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))) + "/" + cfg.Database
}

// SignedSizeNoKey returns the size of the latest stored checkpoint of the
// database at dsn, 0 when it has no ledger tables yet, without a key.
func SignedSizeNoKey(ctx context.Context, dsn string) (uint64, error) {
	db, _, err := Connect(ctx, dsn, 10*time.Second)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var exists bool
	if err := db.QueryRowContext(ctx, "SELECT to_regclass('checkpoints') IS NOT NULL").Scan(&exists); err != nil || !exists {
		return 0, dbErr("signed size", err)
	}
	var n int64
	err = db.QueryRowContext(ctx, "SELECT COALESCE(MAX(size), 0) FROM checkpoints").Scan(&n)
	return uint64(n), dbErr("signed size", err)
}
