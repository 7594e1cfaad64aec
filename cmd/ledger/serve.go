package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/evidence-ledger/ledger/ingest"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
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
	// SigstoreTrustedRoot is a Sigstore trusted_root.json and
	// SigstorePolicy the identity rules file (ingest.ParseSigstoreRules)
	// Sigstore bundles posted to /api/v1/evidence are verified with
	// (--sigstore-trusted-root, --sigstore-policy; env
	// LEDGER_SIGSTORE_TRUSTED_ROOT, LEDGER_SIGSTORE_POLICY). Both or
	// neither; neither: bundles are refused with a 409 naming the setting.
	SigstoreTrustedRoot string
	SigstorePolicy      string
	// Ready, when non-nil, receives the bound address once listening.
	Ready func(addr net.Addr)
	Log   *slog.Logger
}

// defaultServeConfig returns the defaults overridden by LEDGER_*
// environment variables; envErr reports a variable that does not parse (a
// typo in LEDGER_READ_AUTH must not leave reads open silently).
func defaultServeConfig() (c ServeConfig, envErr error) {
	c = ServeConfig{DB: "./var/ledger.db", Addr: envOr("LEDGER_ADDR", "127.0.0.1:8080"), MaxBody: 4 << 20, WitnessPolicy: envOr("LEDGER_WITNESS_POLICY", ""),
		SigstoreTrustedRoot: envOr("LEDGER_SIGSTORE_TRUSTED_ROOT", ""), SigstorePolicy: envOr("LEDGER_SIGSTORE_POLICY", "")}
	if v := os.Getenv("LEDGER_MAX_BODY"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return c, fmt.Errorf("LEDGER_MAX_BODY=%q: want a number of bytes", v)
		}
		c.MaxBody = n
	}
	c.IdempotencyTTL = sqlite.DefaultIdempotencyTTL
	if v := os.Getenv("LEDGER_IDEMPOTENCY_TTL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return c, fmt.Errorf("LEDGER_IDEMPOTENCY_TTL=%q: want a duration such as 24h", v)
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
	if c.IdempotencyTTL != 0 && c.IdempotencyTTL < time.Minute {
		return fmt.Errorf("--idempotency-ttl %s: must be at least 1m", c.IdempotencyTTL)
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
	keyDir := c.KeyDir
	if keyDir == "" {
		keyDir = filepath.Dir(c.DB)
	}
	st, _, err := openChecked(ctx, c.DB, keyDir, c.Log, false, c.IdempotencyTTL)
	if err != nil {
		return err
	}
	defer st.Close()
	// Every leaf the API and the dashboard serve (and the gates read) is
	// checked against its leaf hash and the signed tree first.
	checked := ledger.NewVerifiedStore(st, st.Log, c.Log)
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
	srv, err := web.New(web.Config{Store: served, Log: c.Log, MaxBody: c.MaxBody, ReadAuth: c.ReadAuth, Witnesser: wit, RepoRoots: c.RepoRoots, Sigstore: sig})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.Addr, err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second, WriteTimeout: 120 * time.Second, IdleTimeout: 120 * time.Second}
	c.Log.Info("ledger serving", "url", "http://"+ln.Addr().String()+"/", "db", c.DB, "verifier_key", st.VerifierKey())
	if c.Ready != nil {
		c.Ready(ln.Addr())
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	c.Log.Info("ledger shutting down: finishing requests in flight (up to 15 s)")
	sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return err
	}
	c.Log.Info("ledger stopped")
	return nil
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
			if err := RunServe(cmd.Context(), c); err != nil {
				return errExit(2, "serve: %v", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&c.Addr, "addr", c.Addr, "listen address (env LEDGER_ADDR)")
	cmd.Flags().Int64Var(&c.MaxBody, "max-body", c.MaxBody, "request body cap in bytes (env LEDGER_MAX_BODY)")
	cmd.Flags().DurationVar(&c.IdempotencyTTL, "idempotency-ttl", c.IdempotencyTTL, "how long an Idempotency-Key's answer is replayed (env LEDGER_IDEMPOTENCY_TTL)")
	cmd.Flags().BoolVar(&c.ReadAuth, "read-auth", c.ReadAuth, "require a read token for GET requests (env LEDGER_READ_AUTH)")
	cmd.Flags().StringVar(&c.WitnessPolicy, "witness-policy", c.WitnessPolicy, "c2sp.org/tlog-policy file of the witnesses that cosign checkpoints (env LEDGER_WITNESS_POLICY)")
	cmd.Flags().StringVar(&c.WitnessState, "witness-state", "", "witness state file (default: witness-state.json in the data directory)")
	cmd.Flags().StringVar(&c.SigstoreTrustedRoot, "sigstore-trusted-root", c.SigstoreTrustedRoot, "Sigstore trusted_root.json that posted Sigstore bundles are verified against, offline (needs --sigstore-policy; env LEDGER_SIGSTORE_TRUSTED_ROOT)")
	cmd.Flags().StringVar(&c.SigstorePolicy, "sigstore-policy", c.SigstorePolicy, "YAML file of identity rules for Sigstore bundles: rules: [{lane, token, issuer|issuer_regexp, san|san_regexp}] (env LEDGER_SIGSTORE_POLICY)")
	cmd.Flags().StringArrayVar(&c.RepoRoots, "repo-root", nil, "absolute directory under which an admin's POST /api/v1/heads/verify may name a repository (repo_path); repeatable; none: no repository is read from disk")
	return cmd
}
