package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/client"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/spf13/cobra"
)

// app holds the global flags shared by every subcommand. Values come from
// flags, then LEDGER_* environment variables, then defaults.
type app struct {
	DB      string        // path of the SQLite database
	DataDir string        // where the log's signing key lives; default: the database's directory
	JSON    bool          // machine output
	Server  string        // base URL of a ledger server, for client commands
	Token   string        // bearer token for the server
	Timeout time.Duration // bound of one request to the server
	Verbose bool

	dbExplicit bool // --db or LEDGER_DB was given
	mayCreate  bool // the command may create a new database at the default path

	stdout io.Writer
	stderr io.Writer
	log    *slog.Logger
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

// logLevel is the level of the command's logs: Debug with --verbose,
// else Info.
func (a *app) logLevel() slog.Level {
	if a.Verbose {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// newRootCmd builds the whole command tree: the global flags and every
// subcommand, in one place.
func newRootCmd() *cobra.Command {
	a := &app{stdout: os.Stdout, stderr: os.Stderr}
	root := &cobra.Command{
		Use:           "ledger",
		Short:         "Evidence ledger for ML runtime release validation",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			a.log = slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: a.logLevel()}))
			if v := os.Getenv("LEDGER_TIMEOUT"); v != "" && !cmd.Flags().Changed("timeout") {
				d, err := parseDuration(v)
				if err != nil {
					return errExit(2, "LEDGER_TIMEOUT=%q: want %s", v, durationHelp)
				}
				a.Timeout = d
			}
			if a.Timeout <= 0 {
				return errExit(2, "--timeout must be positive, got %v", a.Timeout)
			}
			_, envDB := os.LookupEnv("LEDGER_DB")
			a.dbExplicit = envDB || cmd.Flags().Changed("db")
			// Tokens are made in the database itself: with a server named
			// and no database, a token made in the default ./var/ledger.db
			// would be one the server never sees.
			for c := cmd; c != nil; c = c.Parent() {
				if c.Name() == "token" && c.Parent() != nil && c.Parent().Parent() == nil && a.Server != "" && !a.dbExplicit {
					return errExit(2, "token works on the ledger's database itself, not through a server (%s, from --server or LEDGER_SERVER): run it where the database is, with --db PATH", a.Server)
				}
			}
			for c := cmd; c != nil; c = c.Parent() {
				switch c.Name() {
				case "serve", "migrate", "token", "run":
					a.mayCreate = true
				}
			}
			return nil
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.DB, "db", envOr("LEDGER_DB", "./var/ledger.db"), "the database: a SQLite file path (or sqlite://PATH), or a PostgreSQL URL postgres://USER@HOST/DB (env LEDGER_DB)")
	pf.StringVar(&a.DataDir, "data-dir", envOr("LEDGER_DATA_DIR", ""), "directory of the log signing key and signed-state journal (env LEDGER_DATA_DIR; default: for DIR/NAME.db, DIR/NAME.ledger when that directory exists, else DIR; ./var for PostgreSQL)")
	pf.BoolVar(&a.JSON, "json", false, "print machine-readable JSON")
	pf.StringVar(&a.Server, "server", envOr("LEDGER_SERVER", ""), "ledger server base URL for client commands (env LEDGER_SERVER)")
	pf.StringVar(&a.Token, "token", envOr("LEDGER_TOKEN", ""), "bearer token for the server (env LEDGER_TOKEN)")
	durationVar(pf, &a.Timeout, "timeout", client.DefaultTimeout, "bound of each request to --server (env LEDGER_TIMEOUT)")
	pf.BoolVarP(&a.Verbose, "verbose", "v", false, "debug logging")
	root.AddCommand(
		newServeCmd(a),
		newRunCmd(a),
		newRecordCmd(a),
		newVerifyCmd(a),
		newReleaseCmd(a),
		newSupersedeCmd(a),
		newAuditCmd(a),
		newBackupCmd(a),
		newRestoreCmd(a),
		newCopyCmd(a),
		newKeyCmd(a),
		newMigrateCmd(a),
		newTokenCmd(a),
		newProofCmd(a),
		newPolicyCmd(a),
		newRunnerCmd(a),
		newAgentCmd(a),
		newRunsCmd(a),
		newEvidenceCmd(a),
	)
	root.Version = versionString()
	root.SetVersionTemplate("ledger {{.Version}}\n")
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	strictTree(root)
	return root
}

// dataDir returns the directory holding the signing key.
func (a *app) dataDir() string {
	if a.DataDir != "" {
		return a.DataDir
	}
	if isPostgres(a.DB) {
		return "./var"
	}
	path, _ := sqlitePath(a.DB)
	return sqliteDataDir(path)
}

// sqliteDataDir is the default data directory (signing key, signed-state
// journal) of the SQLite database at path: the directory named after the
// database, beside it (DIR/NAME.ledger for DIR/NAME.db), when it exists,
// else the database's own directory. A second database in a directory
// whose key and journal belong to another log is refused
// (refuseForeignDataDir); creating DIR/NAME.ledger gives it its own.
func sqliteDataDir(path string) string {
	if own := ownDataDir(path); own != "" {
		if fi, err := os.Stat(own); err == nil && fi.IsDir() {
			return own
		}
	}
	return filepath.Dir(path)
}

// ownDataDir is the data directory named after the SQLite database at
// path (DIR/NAME.ledger for DIR/NAME.db), "" for an unnamed path.
func ownDataDir(path string) string {
	base := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	if base == "" || base == "." || base == string(filepath.Separator) {
		return ""
	}
	return filepath.Join(filepath.Dir(path), base+".ledger")
}

// openStore opens (creating and migrating) the local database. A database
// is created only where one was asked for: by --db or LEDGER_DB, or by a
// command that exists to create one (serve, migrate, token); otherwise a
// missing default database is an error rather than a silent new ledger.
func (a *app) openStore(ctx context.Context) (*Store, error) {
	if strings.TrimSpace(a.DB) == "" {
		return nil, fmt.Errorf("--db is empty")
	}
	path, err := sqlitePath(a.DB)
	if err != nil {
		return nil, err
	}
	created := false
	if isPostgres(a.DB) {
		// The database must exist on the server; its tables are created
		// (migrated) on first use.
	} else if _, err := os.Stat(path); err != nil {
		if !a.dbExplicit && !a.mayCreate {
			return nil, fmt.Errorf("no ledger database at %s: give --server URL (with --token) to use a server, or --db PATH (or LEDGER_DB) for a local database", path)
		}
		created = true
	}
	st, _, err := openChecked(ctx, a.DB, a.dataDir(), a.log, false, 0)
	if err == nil && created {
		fmt.Fprintf(a.stderr, "ledger: created a new ledger database at %s\n", path)
	}
	return st, err
}

// printJSON writes v as indented JSON to stdout.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// errExit returns an error that makes the command exit with code and print
// the message.
func errExit(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

var _ ledger.Store = (*Store)(nil)
