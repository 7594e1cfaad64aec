package sqlite

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/migrations"
	"github.com/pressly/goose/v3"
	"golang.org/x/mod/sumdb/note"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// Options configures Open.
type Options struct {
	// Path of the database file; its directory is created (0700) if missing.
	Path string
	// KeyDir holds the log's signing key (ledger.key, mode 0600) and its
	// verifier key (ledger.pub). Default: the database's directory. The key is
	// generated on first open.
	KeyDir string
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Now is the clock; default time.Now. Tests pin it.
	Now func() time.Time
	// MaxBatch caps how many append requests share one transaction
	// (default 256).
	MaxBatch int
	// Linger is how long the writer waits for more concurrent appends to
	// join a batch once the previous batch showed concurrency (default
	// 500µs; negative disables). It never delays a lone writer, and it
	// stops waiting as soon as the batch is as large as the previous one.
	Linger time.Duration
	// RecentIDs is how many content ids recent_ids collects before the
	// writer merges them into entry_ids (default DefaultRecentIDs; see
	// ids.go). Larger values mean fewer merges and longer scans when an
	// entry is looked up by id.
	RecentIDs int
	// ReadOnly opens without starting the writer or migrating (used by audit
	// of a database that must not change). Appends fail.
	ReadOnly bool
}

// Store is the SQLite ledger.Store. It is safe for concurrent use.
type Store struct {
	w      *sql.DB
	r      *stmtDB // read-only pool with cached statements
	opts   Options
	log    *slog.Logger
	signer note.Signer
	vkey   string
	origin string

	stmts     *stmts       // the writer's prepared statements (writer goroutine only)
	ids       *idIndex     // the writer's view of the id tables (writer goroutine only; loaded with tree)
	idf       *idFilter    // content ids seen (nil when read-only)
	pubW      atomic.Int64 // ids.w as last published by the writer; -1 before
	buildOnce sync.Once    // the filter's builder starts with the first append
	lifeMu    sync.Mutex   // orders closing done with starting goroutines
	buildCtx  context.Context
	stopBuild context.CancelFunc
	reqs      chan *appendReq
	ck        *sql.DB       // the background checkpointer's connection
	ckSignal  chan struct{} // a commit happened (buffered, 1)
	closeOnce sync.Once
	done      chan struct{}
	wg        sync.WaitGroup

	mu    sync.Mutex // guards tree (owned by the writer goroutine; read for size)
	tree  *treeState
	ready error // non-nil when the tree could not be loaded
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

// pageSize is the page size, in bytes, of databases this package creates
// and of the copies Backup writes. An existing database keeps the page
// size it was created with (SQLite cannot change it in WAL mode).
//
// 16 KiB since the fourth session (4 KiB before): once the random-page
// content-id index was gone (migration 5) and the evidence projection had
// moved into the leaf rows (migration 6), a batch's pages are mostly
// appended in order, and larger pages mean fewer WAL frames (two write
// calls each), fewer page splits of the leaves table (a 4 KiB page holds
// about three leaves) and shallower trees. Measured in interleaved runs
// (BENCHMARKS.md): batched ingest 1.04x at store level on a fresh log and
// 1.05x on a 1,000,000-leaf log, 1.13x through HTTP with four clients;
// inclusion proofs and the audit of 1,000,000 leaves unchanged.
var pageSize = 16384

// Open opens the database at opts.Path, creating it and applying migrations
// when needed, loads or generates the signing key, and starts the writer.
// Errors name what failed (directory, key file, migration).
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.Path == "" {
		return nil, errors.New("open store: empty database path")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 256
	}
	if opts.RecentIDs <= 0 {
		opts.RecentIDs = DefaultRecentIDs
	}
	if opts.Linger == 0 {
		opts.Linger = 500 * time.Microsecond
	}
	if opts.KeyDir == "" {
		opts.KeyDir = filepath.Dir(opts.Path)
	}
	if opts.ReadOnly {
		if _, err := os.Stat(opts.Path); err != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
	} else if err := os.MkdirAll(filepath.Dir(opts.Path), 0o700); err != nil {
		return nil, fmt.Errorf("open store: create directory: %w", err)
	}
	s := &Store{opts: opts, log: opts.Logger, done: make(chan struct{}), reqs: make(chan *appendReq, 1024)}
	s.pubW.Store(-1)
	var err error
	if s.w, err = sql.Open("sqlite", dsn(opts.Path, false)); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	s.w.SetMaxOpenConns(1)
	s.w.SetConnMaxLifetime(0)
	rdb, err := sql.Open("sqlite", dsn(opts.Path, true))
	if err != nil {
		s.w.Close()
		return nil, fmt.Errorf("open store: %w", err)
	}
	s.r = newStmtDB(rdb)
	s.r.SetMaxOpenConns(max(4, 2*runtime.NumCPU()))
	// Keep every reader connection (and its prepared statements) alive.
	s.r.SetMaxIdleConns(max(4, 2*runtime.NumCPU()))
	s.r.SetConnMaxLifetime(0)
	// A database written by a newer ledger must not be written (or read)
	// by this one: its writer would not keep what newer migrations added.
	cur, latest, err := MigrationStatus(ctx, s.w)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("open store: read schema version: %w", err)
	}
	if cur > latest {
		s.Close()
		return nil, fmt.Errorf("open store: database schema version %d is newer than this ledger knows (%d): use the ledger version that wrote it, or a newer one", cur, latest)
	}
	if opts.ReadOnly && cur < latest {
		s.Close()
		return nil, fmt.Errorf("open store: database schema version %d is older than this ledger's (%d): run `ledger migrate` (back it up first with the older ledger's `ledger backup`, or stop it and copy the database file)", cur, latest)
	}
	if !opts.ReadOnly && cur < latest {
		if err := Migrate(ctx, s.w); err != nil {
			s.Close()
			return nil, err
		}
		if cur > 0 {
			s.log.Info("migrated the database schema", "from", cur, "to", latest, "path", opts.Path)
		}
	}
	if err := s.loadKey(); err != nil {
		s.Close()
		return nil, err
	}
	if !opts.ReadOnly {
		// The checkpointer copies committed WAL frames into the database
		// file from its own connection, off the writer's path; the
		// writer's own auto-checkpoint (every 1000 frames) stays as the
		// backstop when it falls behind.
		if s.ck, err = sql.Open("sqlite", dsn(opts.Path, false)); err != nil {
			s.Close()
			return nil, fmt.Errorf("open store: %w", err)
		}
		s.ck.SetMaxOpenConns(1)
		s.ck.SetConnMaxLifetime(0)
		s.ckSignal = make(chan struct{}, 1)
		var n uint64
		if err := s.r.QueryRowContext(ctx, storedSizeQuery).Scan(&n); err != nil {
			s.Close()
			return nil, fmt.Errorf("open store: %w", err)
		}
		s.idf = newIDFilter(uint(2 * n))
		s.buildCtx, s.stopBuild = context.WithCancel(context.Background())
		s.wg.Add(2)
		go s.writer()
		go s.checkpointer()
	}
	return s, nil
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
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer conn.Close()
	// Only VACUUM uses a connection's page_size once the database exists.
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA page_size = %d", pageSize)); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "VACUUM INTO ?", dest); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	return nil
}

// DB returns the writer database handle, for tools (migrate, backup) that
// need raw access. Do not write through it while the store is in use.
func (s *Store) DB() *sql.DB { return s.w }

const keyFile, pubFile = "ledger.key", "ledger.pub"

// loadKey reads the signing key or generates one (mode 0600).
func (s *Store) loadKey() error {
	kp := filepath.Join(s.opts.KeyDir, keyFile)
	b, err := os.ReadFile(kp)
	if errors.Is(err, fs.ErrNotExist) && !s.opts.ReadOnly {
		if err := os.MkdirAll(s.opts.KeyDir, 0o700); err != nil {
			return fmt.Errorf("create key directory: %w", err)
		}
		var rnd [4]byte
		rand.Read(rnd[:])
		host, _ := os.Hostname()
		host = strings.Map(func(r rune) rune {
			if r == '+' || r == ' ' || r == '\n' || r < 0x21 || r > 0x7e {
				return '-'
			}
			return r
		}, host)
		if host == "" {
			host = "localhost"
		}
		name := fmt.Sprintf("ledger.%s.%x", host, rnd)
		skey, vkey, err := note.GenerateKey(rand.Reader, name)
		if err != nil {
			return fmt.Errorf("generate signing key: %w", err)
		}
		f, err := os.OpenFile(kp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("write signing key: %w", err)
		}
		if _, err := f.WriteString(skey + "\n"); err != nil {
			f.Close()
			return fmt.Errorf("write signing key: %w", err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return fmt.Errorf("write signing key: %w", err)
		}
		f.Close()
		if err := os.WriteFile(filepath.Join(s.opts.KeyDir, pubFile), []byte(vkey+"\n"), 0o644); err != nil {
			return fmt.Errorf("write verifier key: %w", err)
		}
		b = []byte(skey)
	} else if err != nil {
		return fmt.Errorf("read signing key %s: %w", kp, err)
	}
	if st, err := os.Stat(kp); err == nil && st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("signing key %s has mode %v: must not be readable by group or others (chmod 600)", kp, st.Mode().Perm())
	}
	skey := strings.TrimSpace(string(b))
	signer, err := note.NewSigner(skey)
	if err != nil {
		return fmt.Errorf("parse signing key %s: %w", kp, err)
	}
	s.signer = signer
	s.origin = signer.Name()
	vkey, err := verifierFromSigner(skey)
	if err != nil {
		return err
	}
	s.vkey = vkey
	return nil
}

// verifierFromSigner derives the verifier key "name+hash+base64(alg||pub)"
// from a signer key "PRIVATE+KEY+name+hash+base64(alg||priv)".
func verifierFromSigner(skey string) (string, error) {
	parts := strings.SplitN(skey, "+", 5)
	if len(parts) != 5 {
		return "", errors.New("derive verifier key: malformed signer key")
	}
	raw, err := base64.StdEncoding.DecodeString(parts[4])
	if err != nil || len(raw) != 1+ed25519.SeedSize || raw[0] != 1 {
		return "", errors.New("derive verifier key: not an Ed25519 signer key")
	}
	pub := ed25519.NewKeyFromSeed(raw[1:]).Public().(ed25519.PublicKey)
	vk, err := note.NewEd25519VerifierKey(parts[2], pub)
	if err != nil {
		return "", fmt.Errorf("derive verifier key: %w", err)
	}
	return vk, nil
}

// VerifierKey returns the signed-note verifier key of the checkpoints.
func (s *Store) VerifierKey() string { return s.vkey }

// Origin returns the log origin (the first line of every checkpoint).
func (s *Store) Origin() string { return s.origin }

// SignNote signs text (which must end in a newline) as a signed note with
// the log's key.
func (s *Store) SignNote(text string) (string, error) {
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	b, err := note.Sign(&note.Note{Text: text}, s.signer)
	if err != nil {
		return "", fmt.Errorf("sign note: %w", err)
	}
	return string(b), nil
}

// Close stops the writer after pending appends and closes the database.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.stopBuild != nil {
			s.stopBuild()
		}
		s.lifeMu.Lock()
		close(s.done)
		s.lifeMu.Unlock()
		s.wg.Wait()
		if s.stmts != nil {
			s.stmts.close()
		}
	})
	var errs []error
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	if s.ck != nil {
		errs = append(errs, s.ck.Close())
	}
	if s.w != nil {
		errs = append(errs, s.w.Close())
	}
	return errors.Join(errs...)
}

// dbErr translates database errors into application errors, in one place.
func dbErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var le *ledger.Error
	if errors.As(err, &le) {
		return err
	}
	if errors.Is(err, sql.ErrNoRows) {
		return ledger.NotFound("%s: not found", op)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return &ledger.Error{Code: ledger.CodeInternal, Message: op + ": " + err.Error(), Err: err}
}

// checkpointInterval is how long the checkpointer lets commits accumulate
// before it copies them into the database file (one fsync of the database
// file per checkpoint).
const checkpointInterval = 20 * time.Millisecond

// checkpointer runs PASSIVE WAL checkpoints after commits, at most one per
// checkpointInterval, until the store closes. A PASSIVE checkpoint never
// blocks the writer or readers (https://sqlite.org/c3ref/wal_checkpoint_v2.html).
func (s *Store) checkpointer() {
	defer s.wg.Done()
	ctx := context.Background()
	for {
		select {
		case <-s.done:
			return
		case <-s.ckSignal:
		}
		select {
		case <-s.done:
			return
		case <-time.After(checkpointInterval):
		}
		var busy, frames, copied int
		if err := s.ck.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied); err != nil {
			s.log.Warn("background WAL checkpoint failed; the writer's auto-checkpoint takes over", "err", err)
		}
	}
}

// walFramesCommitted tells the checkpointer that a commit happened.
func (s *Store) walFramesCommitted() {
	select {
	case s.ckSignal <- struct{}{}:
	default:
	}
}
