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

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/keys"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
	"github.com/spf13/cobra"
)

// app holds the global flags shared by every subcommand. Values come from
// flags, then LEDGER_* environment variables, then defaults.
type app struct {
	DB      string // path of the SQLite database
	DataDir string // where the log's signing key lives; default: the database's directory
	JSON    bool   // machine output
	Server  string // base URL of a ledger server, for client commands
	Token   string // bearer token for the server
	Verbose bool

	dbExplicit bool // --db or LEDGER_DB was given
	mayCreate  bool // the command may create a new database at the default path

	stdout io.Writer
	stderr io.Writer
	log    *slog.Logger
}

// subcommands registers constructors of subcommands; each command file adds
// its own in init so that files stay independent.
var subcommands []func(*app) *cobra.Command

func register(f func(*app) *cobra.Command) { subcommands = append(subcommands, f) }

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

func newRootCmd() *cobra.Command {
	a := &app{stdout: os.Stdout, stderr: os.Stderr}
	root := &cobra.Command{
		Use:           "ledger",
		Short:         "Evidence ledger for ML runtime release validation",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			lvl := slog.LevelInfo
			if a.Verbose {
				lvl = slog.LevelDebug
			}
			a.log = slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: lvl}))
			_, envDB := os.LookupEnv("LEDGER_DB")
			a.dbExplicit = envDB || cmd.Flags().Changed("db")
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
	pf.StringVar(&a.DB, "db", envOr("LEDGER_DB", "./var/ledger.db"), "SQLite database path (env LEDGER_DB)")
	pf.StringVar(&a.DataDir, "data-dir", envOr("LEDGER_DATA_DIR", ""), "directory of the log signing key (env LEDGER_DATA_DIR; default: the database's directory)")
	pf.BoolVar(&a.JSON, "json", false, "print machine-readable JSON")
	pf.StringVar(&a.Server, "server", envOr("LEDGER_SERVER", ""), "ledger server base URL for client commands (env LEDGER_SERVER)")
	pf.StringVar(&a.Token, "token", envOr("LEDGER_TOKEN", ""), "bearer token for the server (env LEDGER_TOKEN)")
	pf.BoolVarP(&a.Verbose, "verbose", "v", false, "debug logging")
	for _, f := range subcommands {
		root.AddCommand(f(a))
	}
	return root
}

// dataDir returns the directory holding the signing key.
func (a *app) dataDir() string {
	if a.DataDir != "" {
		return a.DataDir
	}
	return filepath.Dir(a.DB)
}

// openStore opens (creating and migrating) the local database. A database
// is created only where one was asked for: by --db or LEDGER_DB, or by a
// command that exists to create one (serve, migrate, token); otherwise a
// missing default database is an error rather than a silent new ledger.
func (a *app) openStore(ctx context.Context) (*sqlite.Store, error) {
	if strings.TrimSpace(a.DB) == "" {
		return nil, fmt.Errorf("--db is empty")
	}
	if _, err := os.Stat(a.DB); err != nil {
		if !a.dbExplicit && !a.mayCreate {
			return nil, fmt.Errorf("no ledger database at %s: give --server URL (with --token) to use a server, or --db PATH (or LEDGER_DB) for a local database", a.DB)
		}
		fmt.Fprintf(a.stderr, "ledger: creating a new ledger database at %s\n", a.DB)
	}
	key, err := keys.Load(a.dataDir(), true)
	if err != nil {
		return nil, err
	}
	return sqlite.Open(ctx, sqlite.Options{Path: a.DB, Key: key, Logger: a.log})
}

// printJSON writes v as indented JSON to stdout.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// codeExit maps an application error to the documented exit code 2 with a
// clear message.
func errExit(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

var _ ledger.Store = (*sqlite.Store)(nil)
