package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/keys"
	"github.com/evidence-ledger/ledger/ledger/sqlstore"
	"github.com/evidence-ledger/ledger/ledger/tlog"
	"github.com/evidence-ledger/ledger/migrations"
	"github.com/pressly/goose/v3"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// Options configures Open.
type Options struct {
	// Path of the database file; its directory is created (0700) if missing.
	Path string
	// Key is the log's signing key (see ledger/keys). When its Signer is
	// nil, Open loads the key from KeyDir with keys.Load, generating it
	// unless ReadOnly.
	Key keys.Key
	// KeyDir is where Open looks for the key when Key is not given.
	// Default: the database's directory.
	KeyDir string
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Now is the clock; default time.Now. Tests pin it.
	Now func() time.Time
	// MaxBatch caps how many append requests share one transaction
	// (default 256; see tlog.LogOptions).
	MaxBatch int
	// Linger is how long the writer waits for more concurrent appends to
	// join a batch (see tlog.LogOptions; default 500µs, negative
	// disables).
	Linger time.Duration
	// RecentIDs is how many content ids recent_ids collects before the
	// writer merges them into entry_ids (default DefaultRecentIDs; see
	// ids.go). Larger values mean fewer merges and longer scans when an
	// entry is looked up by id.
	RecentIDs int
	// IdempotencyTTL is how long an idempotency key's answer is replayed
	// (default DefaultIdempotencyTTL); an older key is forgotten and may be
	// used again.
	IdempotencyTTL time.Duration
	// IdempotencyMax bounds the idempotency table (default
	// DefaultIdempotencyMax rows): beyond it the oldest keys are forgotten
	// before they expire.
	IdempotencyMax int
	// ReadOnly opens without starting the writer or migrating (used by audit
	// of a database that must not change). Appends fail.
	ReadOnly bool
	// OnCheckpoint is tlog.LogOptions.OnCheckpoint (the signed-state
	// journal).
	OnCheckpoint func(ledger.Checkpoint) error
}

// Store is the SQLite ledger.Store: the log engine (tlog.Log, whose
// methods it has) over this package's driver, plus the projection
// queries, tokens and the audit. It is safe for concurrent use.
type Store struct {
	*tlog.Log
	sqlstore.Queries
	sqlstore.TokenTable
	d *driver
}

// driver is the SQLite tlog.Driver: one writer connection, a read pool
// with cached statements, a checkpointer connection, and the content-id
// machinery (ids.go, idfilter.go).
type driver struct {
	w *sql.DB
	// adoptTokens: this open migrated the schema across version 7, so the
	// tokens rows that migration marked unlogged (leaf_idx -1) are the
	// pre-7 tokens, to be logged as adopted leaves (logUnloggedTokens). A
	// later open never adopts: a -1 row it finds was inserted.
	adoptTokens bool
	r           *stmtDB // read-only pool with cached statements
	// proofs is the append answers' own read pool (see AnswerNodes).
	proofs *stmtDB
	opts   Options
	log    *slog.Logger

	// file is the database file as stat(2) saw it at open (nil when it
	// could not be read), for FileUnchanged.
	file os.FileInfo

	stmts     *stmts       // the writer's prepared statements (writer goroutine only)
	ids       *idIndex     // the writer's view of the id tables (writer goroutine only; loaded by Start)
	idf       *idFilter    // content ids seen (nil when read-only)
	pubW      atomic.Int64 // ids.w as last published by the writer; -1 before
	buildOnce sync.Once    // the filter's builder starts with the first append
	lifeMu    sync.Mutex   // orders closing done with starting goroutines
	buildCtx  context.Context
	stopBuild context.CancelFunc
	ck        *sql.DB       // the background checkpointer's connection
	ckSignal  chan struct{} // a commit happened (buffered, 1)
	closeOnce sync.Once
	done      chan struct{}
	wg        sync.WaitGroup

	// idemPuts and idemPruned pace the idempotency table's pruning
	// (writer goroutine only; see batch.PutIdempotency).
	idemPuts   int
	idemPruned time.Time

	// lookupHook, when set (tests), replaces the callers' id lookup.
	lookupHook func(recs []ledger.Prepared) callerLookup
}

func dsn(path string, readonly bool) string {
	q := url.Values{}
	// modernc.org/sqlite runs the _pragma list sorted by name and the
	// shorthand keys (_busy_timeout first; _foreign_keys, _journal_mode,
	// _synchronous, _query_only after the list). page_size only takes effect
	// while the database is still empty, so it must come before
	// journal_mode=WAL, which writes the first page: as a _pragma it does.
	q.Add("_pragma", fmt.Sprintf("page_size(%d)", pageSize))
	q.Add("_busy_timeout", "10000")
	q.Add("_foreign_keys", "1")
	q.Add("_journal_mode", "WAL")
	q.Add("_synchronous", "FULL")
	// Page cache per connection (negative: KiB). The writer's random index
	// inserts (content ids) touch pages all over a large log.
	if readonly {
		q.Add("_pragma", "cache_size(-16384)")
		q.Add("_query_only", "1")
	} else {
		q.Add("_pragma", "cache_size(-65536)")
		// Savepoint and statement journals in memory, not in temporary
		// files: a savepoint copies every page it first touches.
		q.Add("_pragma", "temp_store(MEMORY)")
		q.Add("_txlock", "immediate")
	}
	return "file:" + path + "?" + q.Encode()
}

// Idempotency key defaults and the pruning pace (PutIdempotency).
const (
	DefaultIdempotencyTTL = sqlstore.DefaultIdempotencyTTL
	DefaultIdempotencyMax = sqlstore.DefaultIdempotencyMax
	idemPruneEvery        = 1000
	idemPruneAge          = time.Minute
)

// pageSize is the page size, in bytes, of databases this package creates
// and of the copies Backup writes. An existing database keeps the page
// size it was created with (SQLite cannot change it in WAL mode).
//
// 16 KiB: a batch's pages are mostly appended in order (content ids are
// not in a random-page index, the evidence projection is in the leaf
// rows), and larger pages mean fewer WAL frames, fewer page splits of the
// leaves table and shallower trees (figures in BENCHMARKS.md).
var pageSize = 16384

// Open opens the database at opts.Path, creating it and applying migrations
// when needed, loads the signing key when opts.Key is not given, and starts
// the writer. Errors name what failed (directory, key file, migration).
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.Path == "" {
		return nil, errors.New("open store: empty database path")
	}
	opts = withDefaults(opts)
	if opts.ReadOnly {
		if _, err := os.Stat(opts.Path); err != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
	} else if err := os.MkdirAll(filepath.Dir(opts.Path), 0o700); err != nil {
		return nil, fmt.Errorf("open store: create directory: %w", err)
	} else if err := createPrivate(opts.Path); err != nil {
		return nil, err
	}
	opened, _ := os.Stat(opts.Path)
	d, err := openDriver(ctx, opts)
	if err != nil {
		return nil, err
	}
	d.file = opened
	if opts.Key.Signer == nil {
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
	s := &Store{Log: l, d: d,
		Queries:    sqlstore.Queries{DB: d.r, Dialect: dialect, LogOrigin: l.Origin},
		TokenTable: sqlstore.TokenTable{Dialect: dialect, Lookup: d.w, List: d.r, ListOrder: "created_at", Now: opts.Now, AppendLeaves: l.Append},
	}
	if !opts.ReadOnly && d.adoptTokens {
		if err := s.logUnloggedTokens(ctx); err != nil {
			s.Close()
			return nil, fmt.Errorf("open store: %w", err)
		}
	}
	return s, nil
}

// createPrivate creates the database file, when missing, with mode 0600:
// SQLite creates the -wal and -shm files with the database file's mode
// (os_unix.c, findCreateFileMode), so none of the three is readable by
// other users, like the signing key. An existing file keeps its mode.
func createPrivate(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open store: create database file: %w", err)
	}
	return f.Close()
}

func withDefaults(opts Options) Options {
	sqlstore.FillDefaults(&opts.Logger, &opts.Now, &opts.IdempotencyTTL, &opts.IdempotencyMax)
	if opts.RecentIDs <= 0 {
		opts.RecentIDs = DefaultRecentIDs
	}
	if opts.KeyDir == "" {
		opts.KeyDir = filepath.Dir(opts.Path)
	}
	return opts
}

// openDriver opens the connections, checks (and unless read-only,
// migrates) the schema, and starts the checkpointer.
func openDriver(ctx context.Context, opts Options) (*driver, error) {
	d := &driver{opts: opts, log: opts.Logger, done: make(chan struct{})}
	d.pubW.Store(-1)
	var err error
	if d.w, err = sql.Open("sqlite", dsn(opts.Path, false)); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	d.w.SetMaxOpenConns(1)
	d.w.SetConnMaxLifetime(0)
	rdb, err := sql.Open("sqlite", dsn(opts.Path, true))
	if err != nil {
		d.close()
		return nil, fmt.Errorf("open store: %w", err)
	}
	d.r = newStmtDB(rdb)
	d.r.SetMaxOpenConns(max(4, 2*runtime.NumCPU()))
	// Keep every reader connection (and its prepared statements) alive.
	d.r.SetMaxIdleConns(max(4, 2*runtime.NumCPU()))
	d.r.SetConnMaxLifetime(0)
	// Append answers build their inclusion proofs on connections of their
	// own (sharing the read pool's node cache): a writer's answer does not
	// queue behind page readers for a read connection, nor pages behind
	// the writers' proofs.
	pdb, err := sql.Open("sqlite", dsn(opts.Path, true))
	if err != nil {
		d.close()
		return nil, fmt.Errorf("open store: %w", err)
	}
	d.proofs = &stmtDB{DB: pdb, stmts: map[string]*sql.Stmt{}, nodes: d.r.nodes}
	d.proofs.SetMaxOpenConns(2)
	d.proofs.SetMaxIdleConns(2)
	d.proofs.SetConnMaxLifetime(0)
	if err := d.schema(ctx); err != nil {
		d.close()
		return nil, err
	}
	if !opts.ReadOnly {
		if err := d.startWriterSide(ctx); err != nil {
			d.close()
			return nil, err
		}
	}
	return d, nil
}

// schema refuses a database written by a newer ledger (this one's writer
// would not keep what newer migrations added) and migrates an older one,
// unless read-only (then it is refused too).
func (d *driver) schema(ctx context.Context) error {
	cur, latest, err := MigrationStatus(ctx, d.w)
	if err != nil {
		return fmt.Errorf("open store: read schema version: %w", err)
	}
	migrate, err := sqlstore.NeedsMigration(cur, latest, d.opts.ReadOnly, " (back it up first with the older ledger's `ledger backup`, or stop it and copy the database file)")
	if err != nil || !migrate {
		return err
	}
	if err := Migrate(ctx, d.w); err != nil {
		return err
	}
	d.adoptTokens = cur < tokenLeavesSchema && latest >= tokenLeavesSchema
	if cur > 0 {
		d.log.Info("migrated the database schema", "from", cur, "to", latest, "path", d.opts.Path)
	}
	return nil
}

// startWriterSide opens the checkpointer's connection and starts it, and
// sizes the content-id filter. The checkpointer copies committed WAL
// frames into the database file from its own connection, off the
// writer's path; the writer's own auto-checkpoint (every 1000 frames)
// stays as the backstop when it falls behind.
func (d *driver) startWriterSide(ctx context.Context) error {
	var err error
	if d.ck, err = sql.Open("sqlite", dsn(d.opts.Path, false)); err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	d.ck.SetMaxOpenConns(1)
	d.ck.SetConnMaxLifetime(0)
	d.ckSignal = make(chan struct{}, 1)
	var n uint64
	if err := d.r.QueryRowContext(ctx, storedSizeQuery).Scan(&n); err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	d.idf = newIDFilter(uint(2 * n))
	d.buildCtx, d.stopBuild = context.WithCancel(context.Background())
	d.wg.Add(1)
	go d.checkpointer()
	return nil
}

// Migrate applies all pending migrations to db. Applying twice is a no-op.
func Migrate(ctx context.Context, db *sql.DB) error {
	_, err := MigrateTo(ctx, db, 0)
	return err
}

// MigrateTo applies migrations up to version (0: all) and returns the
// resulting version.
func MigrateTo(ctx context.Context, db *sql.DB, version int64) (int64, error) {
	// goose holds one connection for its version table while a Go
	// migration (migrations.Go) takes another: a pool of one would wait
	// forever.
	if db.Stats().MaxOpenConnections == 1 {
		db.SetMaxOpenConns(2)
		defer db.SetMaxOpenConns(1)
	}
	p, err := newProvider(db)
	if err != nil {
		return 0, err
	}
	if version == 0 {
		if _, err := p.Up(ctx); err != nil {
			return 0, fmt.Errorf("migrate: %w", err)
		}
	} else if _, err := p.UpTo(ctx, version); err != nil {
		return 0, fmt.Errorf("migrate: %w", err)
	}
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrate: read version: %w", err)
	}
	return v, nil
}

// MigrationStatus returns the current and the newest available versions.
func MigrationStatus(ctx context.Context, db *sql.DB) (current, latest int64, err error) {
	p, err := newProvider(db)
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

func newProvider(db *sql.DB) (*goose.Provider, error) {
	sub, err := fs.Sub(migrations.FS, ".")
	if err != nil {
		return nil, err
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, db, sub, goose.WithGoMigrations(migrations.Go...))
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return p, nil
}

// Backup writes a consistent copy of the database to dest, which must not
// exist, with SQLite's VACUUM INTO: it reads one snapshot, so appends may
// continue meanwhile. The copy has pageSize pages whatever the source's
// (restoring it is how a database made with 4 KiB pages moves to the
// current size). Errors come from SQLite (dest exists, disk full). Safe
// for concurrent use.
func (s *Store) Backup(ctx context.Context, dest string) error {
	conn, err := s.d.w.Conn(ctx)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer conn.Close()
	// Only VACUUM uses a connection's page_size once the database exists.
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA page_size = %d", pageSize)); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	// The copy is written beside dest under a temporary name and renamed
	// into place whole: a failure (a full disk) leaves nothing behind
	// that would block the retry.
	// CreateTemp makes the file 0600; VACUUM INTO accepts an empty file.
	f, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".partial-*")
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	tmp := f.Name()
	f.Close()
	defer func() {
		os.Remove(tmp)
		os.Remove(tmp + "-journal")
	}()
	if _, err := conn.ExecContext(ctx, "VACUUM INTO ?", tmp); err != nil {
		return fmt.Errorf("backup: %w", dbErr("vacuum into", err))
	}
	if err := syncFile(tmp); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	// A hard link never replaces an existing dest; the deferred Remove
	// then drops the temporary name.
	if err := os.Link(tmp, dest); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	return nil
}

// ProbeStorage checks that the database's file system takes writes: it
// writes, syncs and removes a 256 KiB file beside the database, leaving
// the log untouched. A full disk is a CodeStorageFull error. Safe for
// concurrent use (web's /healthz calls it while degraded).
func (s *Store) ProbeStorage(ctx context.Context) error {
	f, err := os.CreateTemp(filepath.Dir(s.d.opts.Path), ".ledger-probe-*")
	if err != nil {
		return dbErr("storage probe", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := f.Write(make([]byte, 256<<10)); err != nil {
		return dbErr("storage probe", err)
	}
	return dbErr("storage probe", f.Sync())
}

// syncFile flushes a written file to stable storage.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// DB returns the writer database handle, for tools (migrate, backup) that
// need raw access. Do not write through it while the store is in use.
func (s *Store) DB() *sql.DB { return s.d.w }

// Close stops the writer after pending appends and closes the database.
func (s *Store) Close() error {
	s.Log.Close()
	return s.d.close()
}

// close stops the driver's goroutines and closes its connections.
func (d *driver) close() error {
	d.closeOnce.Do(func() {
		if d.stopBuild != nil {
			d.stopBuild()
		}
		d.lifeMu.Lock()
		close(d.done)
		d.lifeMu.Unlock()
		d.wg.Wait()
		if d.stmts != nil {
			d.stmts.close()
		}
	})
	var errs []error
	if d.r != nil {
		errs = append(errs, d.r.Close())
	}
	if d.proofs != nil {
		errs = append(errs, d.proofs.Close())
	}
	if d.ck != nil {
		errs = append(errs, d.ck.Close())
	}
	if d.w != nil {
		errs = append(errs, d.w.Close())
	}
	return errors.Join(errs...)
}

// checkpointInterval is how long the checkpointer lets commits accumulate
// before it copies them into the database file (one fsync of the database
// file per checkpoint).
const checkpointInterval = 20 * time.Millisecond

// checkpointer runs PASSIVE WAL checkpoints after commits, at most one per
// checkpointInterval, until the store closes. A PASSIVE checkpoint never
// blocks the writer or readers (https://sqlite.org/c3ref/wal_checkpoint_v2.html).
func (d *driver) checkpointer() {
	defer d.wg.Done()
	ctx := context.Background()
	for {
		select {
		case <-d.done:
			return
		case <-d.ckSignal:
		}
		select {
		case <-d.done:
			return
		case <-time.After(checkpointInterval):
		}
		var busy, frames, copied int
		if err := d.ck.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied); err != nil {
			d.log.Warn("background WAL checkpoint failed; the writer's auto-checkpoint takes over", "err", err)
		}
	}
}

// walFramesCommitted tells the checkpointer that a commit happened.
func (d *driver) walFramesCommitted() {
	select {
	case d.ckSignal <- struct{}{}:
	default:
	}
}

// OpenAux opens a second writable handle on the database at path, with
// the store's connection settings (WAL, busy timeout, immediate write
// transactions), for state kept beside the log in its own tables (package
// runs). The store must have been opened (and so migrated) first. Writes
// through it wait for the log writer's transactions (busy timeout 10 s).
func OpenAux(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	return db, nil
}
