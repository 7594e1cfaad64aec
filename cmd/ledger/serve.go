package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"time"

	"github.com/evidence-ledger/ledger/ingest"
	"github.com/evidence-ledger/ledger/internal/logbuf"
	"github.com/evidence-ledger/ledger/ledger/keys"
	"github.com/evidence-ledger/ledger/ledger/postgres"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
	"github.com/evidence-ledger/ledger/ledger/tlog"
	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/evidence-ledger/ledger/web"
	"github.com/spf13/cobra"
)

// ServeConfig configures `ledger serve`. Fields come from flags, then
// LEDGER_* environment variables, then the defaults of defaultServeConfig.
type ServeConfig struct {
	DB       string // LEDGER_DB
	KeyDir   string // LEDGER_DATA_DIR
	Addr     string // LEDGER_ADDR
	MaxBody  int64  // LEDGER_MAX_BODY (bytes)
	ReadAuth bool   // LEDGER_READ_AUTH
	// IdempotencyTTL is how long an Idempotency-Key's answer is replayed
	// (LEDGER_IDEMPOTENCY_TTL, a Go duration; default 24h).
	IdempotencyTTL time.Duration
	// WitnessPolicy is a c2sp.org/tlog-policy file of the witnesses that
	// cosign checkpoints (LEDGER_WITNESS_POLICY); WitnessState their state
	// file (default witness-state.json in KeyDir).
	WitnessPolicy string
	WitnessState  string
	// RepoRoots are the directories under which an admin's head
	// verification may name a repository on this machine (--repo-root,
	// repeatable); none: requests read no repository from disk.
	RepoRoots []string
	// CPUProfile, when set, is a file the server writes a CPU profile of
	// its whole run to (runtime/pprof; read it with go tool pprof), created
	// 0600 at start and complete once the server has stopped (--cpuprofile).
	CPUProfile string
	// FullScan runs the background full verification after start
	// (LEDGER_FULL_SCAN; default true): every leaf up to the signed size at
	// start, checked against its leaf hash and the signed tree, in chunks
	// of ScanChunk leaves with ScanPause between them, then the store's
	// audit, which compares every projection row and column with its leaf.
	// A finding puts the server in the tampered state (see
	// tlog.Log.FullScan). Once a
	// scan passes, another runs ScanEvery later over the log as signed
	// then (LEDGER_FULL_SCAN_EVERY, --full-scan-every; default 1h; 0: only
	// the scan at start), so that an edit made under the running server is
	// found too.
	FullScan  bool
	ScanChunk int
	ScanPause time.Duration
	ScanEvery time.Duration
	// FileCheckEvery is how often the server checks that the SQLite
	// database file at its path is the one it opened (watchFile); it
	// stops, exit 2, once it is not. 0: no check (appends are still
	// refused by the driver after a change).
	FileCheckEvery time.Duration
	// keyDir is the data directory RunServe resolved (the tampered
	// marker's home).
	keyDir string
	// SigstoreTrustedRoot is a Sigstore trusted_root.json and
	// SigstorePolicy the rules and public keys file (ingest.ParseSigstorePolicy)
	// Sigstore bundles posted to /api/v1/evidence are verified with
	// (--sigstore-trusted-root, --sigstore-policy; env
	// LEDGER_SIGSTORE_TRUSTED_ROOT, LEDGER_SIGSTORE_POLICY). Both or
	// neither; neither: bundles are refused with a 409 naming the setting.
	SigstoreTrustedRoot string
	SigstorePolicy      string
	// VerifierID is the verifier.id the readiness verdict's VSA and SVR
	// name (--verifier-id, env LEDGER_VERIFIER_ID): an absolute URI
	// (web.CheckVerifierID), such as the server's public URL. Empty:
	// web.DefaultVerifierID of the log's origin ("urn:ledger:<origin>").
	VerifierID string
	// Ready, when non-nil, receives the bound address once listening.
	Ready func(addr net.Addr)
	Log   *slog.Logger
	// AccessLog receives the one Info record per request (web.Config's
	// AccessLog); nil: Log. `ledger serve` points it at a logbuf.Writer
	// over stderr, closed after the server has shut down.
	AccessLog *slog.Logger
	// LeaseTTL is how long a run's lease lasts unless its agent extends it
	// (--lease-ttl, default 30s); PollWait caps an agent's long poll
	// (--poll-wait, default 25s); LeaseSweep is how often expired leases
	// are looked for (--lease-sweep, default LeaseTTL/4).
	LeaseTTL   time.Duration
	PollWait   time.Duration
	LeaseSweep time.Duration

	// IngestBudget is the memory in bytes request bodies being decoded
	// may take together (web.Config.IngestBudget; 0: the default).
	IngestBudget int64
}

// defaultServeConfig returns the defaults overridden by LEDGER_*
// environment variables; envErr reports a variable that does not parse (a
// typo in LEDGER_READ_AUTH must not leave reads open silently).
func defaultServeConfig() (c ServeConfig, envErr error) {
	c = ServeConfig{DB: "./var/ledger.db", Addr: envOr("LEDGER_ADDR", "127.0.0.1:8080"), MaxBody: 4 << 20, WitnessPolicy: envOr("LEDGER_WITNESS_POLICY", ""), FullScan: true, ScanChunk: 1024, ScanPause: time.Millisecond, ScanEvery: time.Hour, FileCheckEvery: time.Second,
		SigstoreTrustedRoot: envOr("LEDGER_SIGSTORE_TRUSTED_ROOT", ""), SigstorePolicy: envOr("LEDGER_SIGSTORE_POLICY", ""),
		VerifierID: envOr("LEDGER_VERIFIER_ID", "")}
	if v := os.Getenv("LEDGER_FULL_SCAN"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return c, fmt.Errorf("LEDGER_FULL_SCAN=%q: want true or false (1/0, t/f)", v)
		}
		c.FullScan = b
	}
	if v := os.Getenv("LEDGER_FULL_SCAN_EVERY"); v != "" {
		d, err := parseDuration(v)
		if err != nil {
			return c, fmt.Errorf("LEDGER_FULL_SCAN_EVERY=%q: want %s (0: only at start)", v, durationHelp)
		}
		c.ScanEvery = d
	}
	if v := os.Getenv("LEDGER_MAX_BODY"); v != "" {
		n, err := parseSize(v)
		if err != nil {
			return c, fmt.Errorf("LEDGER_MAX_BODY: %v", err)
		}
		c.MaxBody = n
	}
	c.IdempotencyTTL = sqlite.DefaultIdempotencyTTL
	if v := os.Getenv("LEDGER_IDEMPOTENCY_TTL"); v != "" {
		d, err := parseDuration(v)
		if err != nil {
			return c, fmt.Errorf("LEDGER_IDEMPOTENCY_TTL=%q: want %s", v, durationHelp)
		}
		c.IdempotencyTTL = d
	}
	if v := os.Getenv("LEDGER_READ_AUTH"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return c, fmt.Errorf("LEDGER_READ_AUTH=%q: want true or false (1/0, t/f)", v)
		}
		c.ReadAuth = b
	}
	return c, nil
}

// Validate reports the first bad setting.
func (c ServeConfig) Validate() error {
	if c.DB == "" {
		return errors.New("--db is required")
	}
	if c.Addr == "" {
		return errors.New("--addr is required")
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("--addr %q: %v", c.Addr, err)
	}
	if c.MaxBody < 1024 || c.MaxBody > 1<<30 {
		return fmt.Errorf("--max-body %d: must be between 1 KiB and 1 GiB", c.MaxBody)
	}
	if c.IngestBudget < 0 {
		return fmt.Errorf("--ingest-budget %d: must not be negative (0: %d times --max-body)", c.IngestBudget, web.DefaultIngestBudget(1))
	}
	for _, r := range c.RepoRoots {
		if !filepath.IsAbs(r) {
			return fmt.Errorf("--repo-root %q: must be an absolute directory", r)
		}
		if fi, err := os.Stat(r); err != nil || !fi.IsDir() {
			return fmt.Errorf("--repo-root %q: not a directory", r)
		}
	}
	if (c.SigstoreTrustedRoot == "") != (c.SigstorePolicy == "") {
		return errors.New("--sigstore-trusted-root and --sigstore-policy go together: a trusted root without identity rules would accept any certificate")
	}
	if c.VerifierID != "" {
		if err := web.CheckVerifierID(c.VerifierID); err != nil {
			return fmt.Errorf("--verifier-id: %w", err)
		}
	}
	if c.IdempotencyTTL != 0 && c.IdempotencyTTL < time.Minute {
		return fmt.Errorf("--idempotency-ttl %s: must be at least 1m", c.IdempotencyTTL)
	}
	if c.FileCheckEvery < 0 {
		return fmt.Errorf("--file-check-every %s: must not be negative (0: no check)", c.FileCheckEvery)
	}
	if c.ScanEvery < 0 {
		return fmt.Errorf("--full-scan-every %s: must not be negative (0: only at start)", c.ScanEvery)
	}
	return nil
}

// RunServe opens (creating and migrating) the database, serves the API and
// dashboard until ctx ends, then shuts down gracefully.
func RunServe(ctx context.Context, c ServeConfig) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.CPUProfile != "" {
		stop, err := startCPUProfile(c.CPUProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	keyDir, err := serveKeyDir(c)
	if err != nil {
		return err
	}
	st, state, err := openChecked(ctx, c.DB, keyDir, c.Log, false, c.IdempotencyTTL)
	if err != nil {
		return err
	}
	defer st.Close()
	// Every batch checks the database against the newest checkpoint any
	// server sharing the journal signed (several servers on one
	// PostgreSQL share the data directory, see RELIABILITY.md).
	st.Log.UseJournal(state)
	// Every leaf the API and the dashboard serve (and the gates read) is
	// checked against its leaf hash and the signed tree first.
	checked := tlog.NewVerifiedStore(st, st.Log, c.Log)
	// Fold the log into the verified query index now, so the first
	// readiness answer does not wait for it (a failure is logged; the
	// first query then folds again).
	go func() {
		if err := checked.BuildIndex(ctx); err != nil && ctx.Err() == nil {
			c.Log.Warn("query index: could not fold the log at start", "err", err)
		}
	}()
	wit, served, stopWitnesser, err := startWitnesser(ctx, checked, c.WitnessPolicy, c.WitnessState, c.KeyDir, c.Log)
	if err != nil {
		return err
	}
	defer stopWitnesser()
	var sig *ingest.SigstoreConfig
	if c.SigstoreTrustedRoot != "" {
		if sig, err = ingest.LoadSigstoreConfig(c.SigstoreTrustedRoot, c.SigstorePolicy); err != nil {
			return err
		}
	}
	runStore, err := openRunStore(ctx, c.DB)
	if err != nil {
		return err
	}
	defer runStore.Close()
	c.keyDir = keyDir
	verifiedAtStart, err := scanIfMarked(ctx, st, c)
	if err != nil {
		return err
	}
	srv, err := web.New(web.Config{Store: served, Log: c.Log, AccessLog: c.AccessLog, MaxBody: c.MaxBody, IngestBudget: c.IngestBudget, ReadAuth: c.ReadAuth, Witnesser: wit, RepoRoots: c.RepoRoots,
		Runs: runStore, LeaseTTL: c.LeaseTTL, PollWait: c.PollWait, Integrity: st.Log.Tampered, Sigstore: sig, VerifierID: c.VerifierID,
		CaseLanes: runner.CaseLanes()})
	if err != nil {
		return err
	}
	runsCtx, stopRuns := context.WithCancel(ctx)
	defer stopRuns()
	if err := srv.StartRuns(runsCtx, c.LeaseSweep); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.Addr, err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second, WriteTimeout: 120 * time.Second, IdleTimeout: 120 * time.Second}
	c.Log.Info("ledger serving", "url", "http://"+ln.Addr().String()+"/", "db", dbName(c.DB), "verifier_key", st.VerifierKey())
	if c.Ready != nil {
		c.Ready(ln.Addr())
	}
	scanCtx, stopScan := context.WithCancel(ctx)
	defer stopScan()
	startFullScan(scanCtx, st, c, verifiedAtStart)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	var stopErr error
	select {
	case err := <-errc:
		return err
	case stopErr = <-watchFile(scanCtx, st, c):
		c.Log.Error("ledger stopping", "err", stopErr, "db", dbName(c.DB))
	case <-ctx.Done():
	}
	c.Log.Info("ledger shutting down: finishing requests in flight (up to 15 s)")
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return err
	}
	c.Log.Info("ledger stopped")
	return stopErr
}

// serveKeyDir is the data directory of c: --data-dir, or the SQLite
// database's directory (PostgreSQL needs --data-dir).
func serveKeyDir(c ServeConfig) (string, error) {
	if c.KeyDir != "" {
		return c.KeyDir, nil
	}
	if isPostgres(c.DB) {
		return "", fmt.Errorf("serve: a PostgreSQL database needs the key directory (--data-dir)")
	}
	path, err := sqlitePath(c.DB)
	if err != nil {
		return "", err
	}
	return sqliteDataDir(path), nil
}

// openRunStore opens the run state (package runs) on its own handle to
// the same database as the log.
func openRunStore(ctx context.Context, db string) (*runs.Store, error) {
	if isPostgres(db) {
		rdb, _, err := postgres.Connect(ctx, db, 10*time.Second)
		if err != nil {
			return nil, err
		}
		return runs.NewPostgres(rdb, nil), nil
	}
	path, err := sqlitePath(db)
	if err != nil {
		return nil, err
	}
	rdb, err := sqlite.OpenAux(path)
	if err != nil {
		return nil, err
	}
	return runs.New(rdb, nil), nil
}

// startFullScan starts the background full verification (c.FullScan):
// now, or, when the start already verified the whole log (the tampered
// marker), after c.ScanEvery.
func startFullScan(ctx context.Context, st *Store, c ServeConfig, verifiedAtStart bool) {
	switch {
	case !c.FullScan:
	case !verifiedAtStart:
		go fullScan(ctx, st, c)
	case c.ScanEvery > 0:
		go func() {
			select {
			case <-ctx.Done():
			case <-time.After(c.ScanEvery):
				fullScan(ctx, st, c)
			}
		}()
	}
}

// watchFile checks every c.FileCheckEvery, between appends, that the
// database still holds the log this server signed (tlog.Log.CheckStored:
// not rolled back, not another root at the size it signed; on a finding
// the server goes into the tampered state and leaves the tampered
// marker) and, for SQLite, that the file at --db is still the file it
// opened (sqlite.Store.FileUnchanged). It sends the file error once the
// file was replaced: the server is put in the tampered state (healthz
// degraded) and then stops rather than go on with connections split
// between the old file and the new one. Appends are refused from the
// moment of either change by the engine's and the driver's own checks.
// Nothing is checked with interval 0.
func watchFile(ctx context.Context, st *Store, c ServeConfig) <-chan error {
	out := make(chan error, 1)
	if c.FileCheckEvery <= 0 {
		return out
	}
	go func() {
		t := time.NewTicker(c.FileCheckEvery)
		defer t.Stop()
		marked := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if st.lite != nil {
				if err := st.lite.FileUnchanged(); err != nil {
					cp, _ := st.Log.CheckpointAt(ctx, 0)
					st.Log.MarkTampered(max(cp.Size, 1)-1, "the database file was replaced or removed under the running server")
					out <- err
					return
				}
			}
			if err := st.Log.CheckStored(ctx); err != nil && !marked {
				marked = keepTamperMarker(st, c)
			}
		}
	}()
	return out
}

// TamperMarkerFile is the file, beside the signing key and the
// signed-state journal, that a full verification's finding leaves behind
// (the TamperState as JSON), so that the tampered state outlives the
// process: the next start verifies the whole log before it serves.
const TamperMarkerFile = "tampered.json"

// keepTamperMarker writes the log's tamper state, when it has one, as
// the tampered marker in c's data directory (a failure is logged: the
// state in memory holds until the process ends either way), and reports
// whether the log is in that state.
func keepTamperMarker(st *Store, c ServeConfig) bool {
	ts, ok := st.Log.Tampered()
	if !ok || c.keyDir == "" {
		return ok
	}
	if err := writeTamperMarker(c.keyDir, ts); err != nil {
		c.Log.Error("write the tampered marker", "err", err.Error())
	}
	return true
}

func writeTamperMarker(dir string, ts tlog.TamperState) error {
	b, err := json.Marshal(ts)
	if err != nil {
		return err
	}
	return keys.WriteAtomic(filepath.Join(dir, TamperMarkerFile), append(b, '\n'), 0o600)
}

// scanIfMarked runs, when a previous run left the tampered marker, the
// full verification before the server listens, whatever --full-scan says
// (verified reports that it ran): a log that fails it again is served in
// the tampered state from the first request (no append or signature in
// between); one that passes (repaired since) is served normally and the
// marker is removed. A verification that cannot finish refuses the start.
func scanIfMarked(ctx context.Context, st *Store, c ServeConfig) (verified bool, _ error) {
	path := filepath.Join(c.keyDir, TamperMarkerFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("serve: read the tampered marker %s: %w", path, err)
	}
	var prev tlog.TamperState
	if err := json.Unmarshal(b, &prev); err != nil {
		return false, fmt.Errorf("serve: the tampered marker %s does not parse (a previous run found tampering): remove it only after `ledger audit` passes", path)
	}
	c.Log.Warn("a previous run found tampering: verifying the whole log before serving", "leaf", prev.Index, "problem", prev.Problem, "since", prev.Since.Format(time.RFC3339))
	cp, err := st.Checkpoint(ctx)
	if err != nil {
		return false, fmt.Errorf("serve: read the checkpoint for the verification a previous finding requires: %w", err)
	}
	err = st.Log.FullScan(ctx, st, cp.Size, tlog.ScanOptions{Chunk: c.ScanChunk})
	var te *tlog.TamperError
	switch {
	case err == nil:
		if err := os.Remove(path); err != nil {
			return false, fmt.Errorf("serve: the log verifies again but the tampered marker %s stays: %w", path, err)
		}
		c.Log.Info("the log verifies again: the tampered marker is removed", "size", cp.Size)
	case errors.As(err, &te):
		keepTamperMarker(st, c)
	default:
		return false, fmt.Errorf("serve: the full verification a previous finding requires (%s) could not finish: %w", path, err)
	}
	return true, nil
}

// fullScan is the server's background full verification of the log up
// to its signed size at start (tlog.Log.FullScan), logged when it ends,
// then again every c.ScanEvery up to the size signed then (also after one
// that could not finish), until one finds tampering or ctx ends.
func fullScan(ctx context.Context, st *Store, c ServeConfig) {
	for fullScanOnce(ctx, st, c) && c.ScanEvery > 0 {
		select {
		case <-ctx.Done():
			return
		case <-time.After(c.ScanEvery):
		}
	}
}

// fullScanOnce runs one full verification and reports whether another
// may follow: false once it found tampering or ctx ended.
func fullScanOnce(ctx context.Context, st *Store, c ServeConfig) bool {
	cp, err := st.Checkpoint(ctx)
	if err != nil {
		if ctx.Err() != nil {
			c.Log.Info("full verification stopped before it started")
			return false
		}
		c.Log.Error("full verification: read the checkpoint", "err", err.Error())
		return true
	}
	start := time.Now()
	c.Log.Info("full verification started", "size", cp.Size)
	err = st.Log.FullScan(ctx, st, cp.Size, tlog.ScanOptions{Chunk: c.ScanChunk, Pause: c.ScanPause})
	var te *tlog.TamperError
	switch {
	case err == nil:
		c.Log.Info("full verification passed", "size", cp.Size, "took", time.Since(start).Round(time.Millisecond).String())
		return true
	case errors.As(err, &te):
		// FullScan logged the tampering and set the state; the marker
		// keeps it across a restart.
		keepTamperMarker(st, c)
	case ctx.Err() != nil:
		c.Log.Info("full verification stopped", "size", cp.Size)
	default:
		c.Log.Error("full verification could not finish", "err", err.Error())
		return true
	}
	return false
}

func newServeCmd(a *app) *cobra.Command {
	c, envErr := defaultServeConfig()
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the HTTP API and the reviewer dashboard (creates and migrates the database on first start)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if envErr != nil {
				return errExit(2, "serve: %v", envErr)
			}
			c.DB, c.KeyDir, c.Log = a.DB, a.dataDir(), a.log
			if c.Ready == nil {
				c.Ready = func(addr net.Addr) { fmt.Fprintf(a.stdout, "ledger: serving on http://%s/\n", addr) }
			}
			// The access log is buffered (1 MiB, flushed every 5 ms and
			// at shutdown) so that no request waits on stderr; errors
			// and tampering reports stay unbuffered on a.log.
			var access *logbuf.Writer
			c.AccessLog, access = logbuf.AccessLogger(a.stderr, a.logLevel())
			defer access.Close()
			if err := RunServe(cmd.Context(), c); err != nil {
				return errExit(2, "serve: %v", err)
			}
			return access.Close()
		},
	}
	cmd.Flags().StringVar(&c.Addr, "addr", c.Addr, "listen address (env LEDGER_ADDR)")
	cmd.Flags().Var((*sizeValue)(&c.MaxBody), "max-body", "request body cap in bytes, or with a unit: 8MiB, 64MiB (env LEDGER_MAX_BODY)")
	cmd.Flags().Var((*sizeValue)(&c.IngestBudget), "ingest-budget", fmt.Sprintf("memory (bytes, or with a unit: 2GiB) that request bodies being decoded may take together; a request past it waits up to 10s, then gets 503 with Retry-After (0: %d times --max-body, two maximum-size bodies at %d bytes per body byte)", web.DefaultIngestBudget(1), web.IngestFactor))
	durationVar(cmd.Flags(), &c.IdempotencyTTL, "idempotency-ttl", c.IdempotencyTTL, "how long an Idempotency-Key's answer is replayed (env LEDGER_IDEMPOTENCY_TTL)")
	cmd.Flags().BoolVar(&c.ReadAuth, "read-auth", c.ReadAuth, "require a read token for GET requests (env LEDGER_READ_AUTH)")
	cmd.Flags().StringVar(&c.WitnessPolicy, "witness-policy", c.WitnessPolicy, "c2sp.org/tlog-policy file of the witnesses that cosign checkpoints (env LEDGER_WITNESS_POLICY)")
	cmd.Flags().StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile of the server's run to this file (for go tool pprof; complete after shutdown)")
	cmd.Flags().StringVar(&c.WitnessState, "witness-state", "", "witness state file (default: witness-state.json in the data directory)")
	cmd.Flags().BoolVar(&c.FullScan, "full-scan", c.FullScan, "verify every leaf against its leaf hash and the signed tree, then every projection row against its leaf (the audit), in the background after start, and refuse to sign once one fails (env LEDGER_FULL_SCAN); off: a leaf edited below the journal's last size is found only by `ledger audit` and when it is served, an edited projection row only by `ledger audit`")
	cmd.Flags().IntVar(&c.ScanChunk, "full-scan-chunk", c.ScanChunk, "leaves the full verification checks at a time")
	durationVar(cmd.Flags(), &c.ScanPause, "full-scan-pause", c.ScanPause, "pause between chunks of the full verification (yields the database to requests)")
	durationVar(cmd.Flags(), &c.FileCheckEvery, "file-check-every", c.FileCheckEvery, "how often to check that the SQLite database file at --db is still the file the server opened; the server stops (exit 2) once it was replaced or removed (0: no check)")
	durationVar(cmd.Flags(), &c.ScanEvery, "full-scan-every", c.ScanEvery, "run the full verification again this long after the last one passed (env LEDGER_FULL_SCAN_EVERY; 0: only at start)")
	cmd.Flags().StringVar(&c.SigstoreTrustedRoot, "sigstore-trusted-root", c.SigstoreTrustedRoot, "Sigstore trusted_root.json that posted Sigstore bundles are verified against, offline (needs --sigstore-policy; env LEDGER_SIGSTORE_TRUSTED_ROOT)")
	cmd.Flags().StringVar(&c.SigstorePolicy, "sigstore-policy", c.SigstorePolicy, "YAML file of rules for Sigstore bundles: rules: [{lane, token, issuer|issuer_regexp + san|san_regexp, or public_key: NAME; timestamp_only}], public_keys: [{name, pem}] (env LEDGER_SIGSTORE_POLICY)")
	cmd.Flags().StringVar(&c.VerifierID, "verifier-id", c.VerifierID, "absolute URI that names this server as verifier.id in signed readiness verdicts (?format=vsa, ?format=svr), such as its public URL https://ledger.example.com/ (env LEDGER_VERIFIER_ID; default urn:ledger:<log origin>)")
	cmd.Flags().StringArrayVar(&c.RepoRoots, "repo-root", nil, "absolute directory under which an admin's POST /api/v1/heads/verify may name a repository (repo_path); repeatable; none: no repository is read from disk")
	durationVar(cmd.Flags(), &c.LeaseTTL, "lease-ttl", 30*time.Second, "how long a run's lease lasts unless its agent extends it")
	durationVar(cmd.Flags(), &c.PollWait, "poll-wait", 25*time.Second, "the longest an agent's poll for a run waits")
	durationVar(cmd.Flags(), &c.LeaseSweep, "lease-sweep", 0, "how often expired leases are looked for (default: lease-ttl/4)")
	return cmd
}

// startCPUProfile starts a CPU profile into a new file at path (0600, not
// replacing an existing file) and returns the function that ends it.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
