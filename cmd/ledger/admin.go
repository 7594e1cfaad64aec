package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/keys"
	"github.com/evidence-ledger/ledger/ledger/postgres"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
	"github.com/evidence-ledger/ledger/ledger/tlog"
	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"
)

// runAudit audits the database at path without changing it, with the
// verifier key file pubPath alone: PRAGMA integrity_check (a damaged
// file is reported as such, before any finding of the log's audit), the
// key against the key that signed the checkpoints, the whole log
// (tlog.RunAudit), and, when statePath names a signed-state journal,
// every checkpoint size it recorded (tlog.AuditSignedState). The
// integrity check of a SQLite file runs on its own connection while the
// log is audited; its verdict is awaited before any answer. noState is
// true when statePath was given but no journal is there.
func runAudit(ctx context.Context, db, pubPath, statePath string) (rep ledger.AuditReport, noState bool, err error) {
	var check chan error
	if !isPostgres(db) {
		path, err := sqlitePath(db)
		if err != nil {
			return rep, false, err
		}
		if _, err := os.Stat(path); err != nil {
			return rep, false, fmt.Errorf("database %s: %w", path, err)
		}
		check = make(chan error, 1)
		go func() { check <- sqlite.CheckFile(ctx, path, true) }()
	}
	rep, noState, err = auditLog(ctx, db, pubPath, statePath)
	if check == nil {
		return rep, noState, err
	}
	// A damaged file explains whatever the log's audit found or failed
	// to read in it.
	if cerr := <-check; errors.Is(cerr, sqlite.ErrCorrupt) {
		return ledger.AuditReport{FirstBadIndex: -1, FirstDuplicate: -1, Problem: fmt.Sprintf("%v (PRAGMA integrity_check): the file is damaged, not only the log in it; restore the newest backup", cerr)}, false, nil
	} else if cerr != nil {
		return rep, false, cerr
	}
	return rep, noState, err
}

// auditLog is runAudit's audit of the log itself: the key, RunAudit and
// the signed-state journal.
func auditLog(ctx context.Context, db, pubPath, statePath string) (rep ledger.AuditReport, noState bool, err error) {
	failed := func(format string, args ...any) ledger.AuditReport {
		return ledger.AuditReport{FirstBadIndex: -1, FirstDuplicate: -1, Problem: fmt.Sprintf(format, args...)}
	}
	st, vkey, err := openPublic(ctx, db, pubPath, nil)
	if err != nil {
		return rep, false, err
	}
	defer st.Close()
	if p, err := keyProblem(ctx, st, vkey, pubPath); err != nil {
		return rep, false, err
	} else if p != "" {
		return failed("%s", p), false, nil
	}
	if rep, err = st.Audit(ctx); err != nil || !rep.OK || statePath == "" {
		return rep, false, err
	}
	ents, err := tlog.ReadSignedState(statePath)
	if errors.Is(err, fs.ErrNotExist) {
		return rep, true, nil
	}
	if err != nil {
		return rep, false, err
	}
	p, at, err := tlog.AuditSignedState(ctx, st, rep.Leaves, ents)
	if err != nil {
		return rep, false, err
	}
	if p != "" {
		rep.OK, rep.Problem, rep.FirstBadIndex = false, p, int64(min(at, rep.Leaves))
	}
	return rep, false, nil
}

// keyProblem says why the verifier key vkey (read from pubPath) is not
// the key that signed the log's latest checkpoint, or "" when it is.
func keyProblem(ctx context.Context, st *Store, vkey, pubPath string) (string, error) {
	cp, err := st.CheckpointAt(ctx, 0)
	if ledger.ErrorCode(err) == ledger.CodeNotFound || (err == nil && cp.Size == 0) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return fmt.Sprintf("--key %s: %v", pubPath, err), nil
	}
	_, err = note.Open([]byte(cp.Note), note.VerifierList(v))
	if err == nil {
		return "", nil
	}
	// After a rotation the latest checkpoint is signed by a later key of
	// the chain: the key given is good when the chain holds it (the audit
	// then checks every link and checkpoint).
	if rots, rerr := ledger.RotationLeaves(ctx, st, cp.Size); rerr == nil && len(rots) > 0 {
		chain, cerr := ledger.BuildKeyChain(st.Origin(), vkey, rots)
		if cerr != nil || chain.Index(vkey) >= 0 {
			return "", nil // RunAudit checks every link (and reports a broken one with its index)
		}
		ids := make([]string, len(chain))
		for i, e := range chain {
			ids[i] = ledger.KeyID(e.Key)
		}
		return fmt.Sprintf("the key in %s (%s) is not in the log's key chain (%s): the public key was replaced, or this is another log", pubPath, ledger.KeyID(vkey), strings.Join(ids, " -> ")), nil
	}
	signers := "an unknown key"
	var ue *note.UnverifiedNoteError
	if errors.As(err, &ue) && len(ue.Note.UnverifiedSigs) > 0 {
		s := ue.Note.UnverifiedSigs[0]
		signers = fmt.Sprintf("%s+%08x", s.Name, s.Hash)
	}
	return fmt.Sprintf("the key in %s (%s+%08x) did not sign the log's checkpoints (the latest, size %d, is signed by %s): the public key was replaced, or this is another log", pubPath, v.Name(), v.KeyHash(), cp.Size, signers), nil
}

func newAuditCmd(a *app) *cobra.Command {
	var against []string
	var key, state, cpuProfile string
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Recompute every leaf hash and the Merkle tree from the database and check every signed checkpoint",
		Long: `Audit the log in --db: recompute every leaf hash and tree node from the stored
bytes, check the query projections, and verify every stored checkpoint's
signature and root. Any edit, deletion, reordering or insertion done behind the
service's back is reported with the first bad leaf index.

With --against FILE|URL (repeatable), prove instead that the log (--db, or
--server) extends each saved signed checkpoint, with the public key alone
(--key, default the data directory's ledger.pub); see docs/operations/witnesses.md.

Exit codes: 0 the log is intact, 1 the audit found a problem, 2 error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(against) > 0 {
				return runAuditAgainst(cmd.Context(), a, against, key)
			}
			if a.Server != "" {
				return errExit(2, "audit reads the database itself: run it where the database is, with --db (not --server)")
			}
			if cpuProfile != "" {
				stop, err := startCPUProfile(cpuProfile)
				if err != nil {
					return errExit(2, "audit: %v", err)
				}
				defer stop()
			}
			statePath := state
			if statePath == "" {
				statePath = filepath.Join(a.dataDir(), tlog.SignedStateFile)
			}
			rep, noState, err := runAudit(cmd.Context(), a.DB, a.keyPath(key), statePath)
			if errors.Is(err, fs.ErrNotExist) && !isPostgres(a.DB) {
				return errExit(2, "audit: %v: no ledger database there; give --db PATH (or LEDGER_DB) of the ledger to audit", err)
			}
			if err != nil {
				return errExit(2, "audit: %v", err)
			}
			if noState && rep.OK && rep.Leaves > 0 {
				fmt.Fprintf(a.stderr, "note: no signed-state journal at %s: checkpoints deleted with their leaves (a cut tail) and deleted checkpoint rows are found only with it, or by `ledger audit --against` a saved checkpoint\n", statePath)
			}
			if a.JSON {
				a.printJSON(rep)
			} else if rep.OK {
				fmt.Fprintf(a.stdout, "audit passed: %d leaves, %d signed checkpoints, root %s\n", rep.Leaves, rep.Checkpoints, rep.Root)
				if len(rep.KeyChain) > 1 {
					fmt.Fprintf(a.stdout, "key chain: %d keys:", len(rep.KeyChain))
					for _, e := range rep.KeyChain {
						fmt.Fprintf(a.stdout, " %s from size %d;", ledger.KeyID(e.Key), e.From)
					}
					fmt.Fprintln(a.stdout)
				}
				if rep.DuplicateLeaves > 0 {
					fmt.Fprintf(a.stdout, "note: %d leaves repeat an earlier leaf's content id (the first at index %d), appended by a ledger older than schema 5; they stay in the log, and their id names the earlier leaf\n", rep.DuplicateLeaves, rep.FirstDuplicate)
				}
			} else {
				fmt.Fprintf(a.stdout, "audit FAILED %s: %s\n", auditWhere(rep), rep.Problem)
			}
			if !rep.OK {
				return &exitError{code: 1}
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&against, "against", nil, "a saved signed checkpoint (file or http(s) URL: a note, checkpoint JSON or tlog-proof) the log must extend; repeatable")
	cmd.Flags().StringVar(&key, "key", "", "the log's public verifier key file (default: ledger.pub in the data directory); the audit needs no private key")
	cmd.Flags().StringVar(&state, "state", "", "the signed-state journal whose every checkpoint size the database must hold (default: signed-state in the data directory)")
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the audit to this new file (for go tool pprof)")
	return cmd
}

func newMigrateCmd(a *app) *cobra.Command {
	var status bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create the database if needed and apply pending migrations (a no-op when up to date)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if status {
				// Read the version without opening the store: that refuses
				// an older schema read-only, and this is how to see it.
				if isPostgres(a.DB) {
					db, _, err := postgres.Connect(cmd.Context(), a.DB, 10*time.Second)
					if err != nil {
						return errExit(2, "migrate: %v", err)
					}
					defer db.Close()
					cur, latest, err := postgres.MigrationStatus(cmd.Context(), db)
					if err != nil {
						return errExit(2, "migrate: %v", err)
					}
					if a.JSON {
						return a.printJSON(map[string]int64{"version": cur, "newest": latest})
					}
					fmt.Fprintf(a.stdout, "schema version %d, newest %d\n", cur, latest)
					return nil
				}
				path, err := sqlitePath(a.DB)
				if err != nil {
					return errExit(2, "migrate: %v", err)
				}
				if _, err := os.Stat(path); err != nil {
					return errExit(2, "migrate: %v", err)
				}
				db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_busy_timeout=10000")
				if err != nil {
					return errExit(2, "migrate: %v", err)
				}
				defer db.Close()
				cur, latest, err := sqlite.MigrationStatus(cmd.Context(), db)
				if err != nil {
					return errExit(2, "migrate: %v", err)
				}
				if a.JSON {
					return a.printJSON(map[string]int64{"version": cur, "newest": latest})
				}
				fmt.Fprintf(a.stdout, "schema version %d, newest %d\n", cur, latest)
				return nil
			}
			st, err := a.openStore(cmd.Context())
			if err != nil {
				return errExit(2, "migrate: %v", err)
			}
			defer st.Close()
			cur, latest, err := st.migrationStatus(cmd.Context())
			if err != nil {
				return errExit(2, "migrate: %v", err)
			}
			fmt.Fprintf(a.stdout, "database %s at schema version %d (newest %d)\n", dbName(a.DB), cur, latest)
			return nil
		},
	}
	cmd.Flags().BoolVar(&status, "status", false, "only show the schema version")
	return cmd
}

func newTokenCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Create, list and revoke API tokens (stored only as hashes)"}
	var scope, name string
	var roles, repos, lanes, backends []string
	var expires time.Duration
	create := &cobra.Command{
		Use:   "create",
		Short: "Create a token (a token leaf); the secret is printed once",
		Long: `Create a token. Its creation is a leaf of the log (with the SHA-256 of the
secret, never the secret), so ` + "`ledger audit`" + ` detects an edited tokens table.

--repository, --lane and --backend (each repeatable or a comma-separated list)
restrict the evidence the token may record: POST /api/v1/evidence refuses a
record outside them with 403 naming the field. A --lane without /vN covers every
version of the lane. --expires is a duration from now (720h = 30 days); without
it the token never expires (revoke it with ` + "`ledger token revoke`" + `).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if expires < 0 {
				return errExit(2, "token create: --expires must be a positive duration such as 720h, got %s", expires)
			}
			st, err := a.openStore(cmd.Context())
			if err != nil {
				return errExit(2, "%v", err)
			}
			defer st.Close()
			spec := ledger.TokenSpec{Name: name, Scope: ledger.Scope(scope), Roles: roles, Repositories: repos, Lanes: lanes}
			for _, b := range backends {
				spec.Backends = append(spec.Backends, ledger.Backend(b))
			}
			if expires > 0 {
				at := time.Now().UTC().Add(expires)
				spec.ExpiresAt = &at
			}
			secret, t, err := st.CreateScopedToken(cmd.Context(), spec)
			if err != nil {
				return errExit(2, "token create: %v", err)
			}
			if a.JSON {
				return a.printJSON(map[string]any{"token": t, "secret": secret})
			}
			fmt.Fprintln(a.stdout, secret)
			exp := "never expires"
			if t.ExpiresAt != nil {
				exp = "expires " + t.ExpiresAt.Format(time.RFC3339)
			}
			fmt.Fprintf(a.stderr, "created token %s (%s, scope %s, evidence %s, %s); the secret above is shown only once\n", t.Name, t.ID, t.Scope, t.ScopeText(), exp)
			return nil
		},
	}
	create.Flags().StringVar(&scope, "scope", "record", "read, record, run or admin")
	create.Flags().StringVar(&name, "name", "", "unique token name (required)")
	create.Flags().StringSliceVar(&roles, "role", nil, "role for manual gates (repeatable)")
	create.Flags().StringSliceVar(&repos, "repository", nil, "repository the token may record evidence for (repeatable; default any)")
	create.Flags().StringSliceVar(&lanes, "lane", nil, "lane (name or name/vN) the token may record evidence for (repeatable; default any)")
	create.Flags().StringSliceVar(&backends, "backend", nil, "backend the token may record evidence for (repeatable; default any)")
	durationVar(create.Flags(), &expires, "expires", 0, "lifetime from now, e.g. 720h or 30d (default: never expires)")
	create.MarkFlagRequired("name")
	list := &cobra.Command{
		Use: "list", Short: "List tokens (never their secrets)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := a.openStore(cmd.Context())
			if err != nil {
				return errExit(2, "%v", err)
			}
			defer st.Close()
			ts, err := st.Tokens(cmd.Context())
			if err != nil {
				return errExit(2, "token list: %v", err)
			}
			if a.JSON {
				return a.printJSON(ts)
			}
			tw := tabwriter.NewWriter(a.stdout, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tSCOPE\tROLES\tEVIDENCE\tCREATED\tEXPIRES\tREVOKED")
			for _, t := range ts {
				rev, exp := "-", "-"
				if t.RevokedAt != nil {
					rev = t.RevokedAt.Format("2006-01-02T15:04:05Z")
				}
				if t.ExpiresAt != nil {
					exp = t.ExpiresAt.Format("2006-01-02T15:04:05Z")
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, t.Scope, strings.Join(t.Roles, ","), t.ScopeText(), t.CreatedAt.Format("2006-01-02T15:04:05Z"), exp, rev)
			}
			return tw.Flush()
		},
	}
	revoke := &cobra.Command{
		Use: "revoke ID|NAME", Short: "Revoke a token (a token-revocation leaf)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := a.openStore(cmd.Context())
			if err != nil {
				return errExit(2, "%v", err)
			}
			defer st.Close()
			if err := st.RevokeToken(cmd.Context(), args[0]); err != nil {
				return errExit(2, "token revoke: %v", err)
			}
			fmt.Fprintf(a.stdout, "revoked %s\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(create, list, revoke)
	return cmd
}

func newBackupCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "backup DEST",
		Short: "Write a consistent online copy of the database (VACUUM INTO) and audit the copy",
		Long: `Write a consistent copy of --db to DEST while the service may keep running
(SQLite's VACUUM INTO reads one snapshot), copy the verifier and signing keys
beside it, then audit the copy. The copy has 16 KiB pages whatever the
source's. Restore by stopping the service, deleting the database's -wal and
-shm files (a leftover -wal would be replayed onto the copy), and putting
the copy (and its key files) in place of the database.

Exit codes: 0 copied and audited clean, 1 the copy does not audit, 2 error.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dest := args[0]
			if isPostgres(a.DB) {
				return errExit(2, "backup: --db is a PostgreSQL database: back it up with PostgreSQL's own tools (pg_dump, or a base backup with WAL archiving), or copy it to a SQLite file with `ledger copy --from DSN --to sqlite://DEST`")
			}
			if fi, err := os.Stat(dest); err == nil && fi.IsDir() || strings.HasSuffix(dest, string(filepath.Separator)) {
				dest = filepath.Join(dest, "ledger.db") // a directory, existing or to be made
			}
			if _, err := os.Stat(dest); err == nil {
				return errExit(2, "backup: %s already exists: choose a new file or an empty directory", dest)
			}
			if err := os.MkdirAll(filepath.Dir(dest), 0o700); err != nil {
				return errExit(2, "backup: create directory %s: %v", filepath.Dir(dest), err)
			}
			if p, err := sqlitePath(a.DB); err != nil {
				return errExit(2, "backup: %v", err)
			} else if _, err := os.Stat(p); err != nil {
				return errExit(2, "backup: database %s: %v", p, err)
			}
			// The copy is verified with the key files beside it: refuse a
			// directory that holds another ledger's keys.
			for _, f := range []string{"ledger.key", "ledger.pub"} {
				src, dst := filepath.Join(a.dataDir(), f), filepath.Join(filepath.Dir(dest), f)
				theirs, err := os.ReadFile(dst)
				if err != nil || filepath.Clean(src) == filepath.Clean(dst) {
					continue
				}
				if ours, err := os.ReadFile(src); err == nil && !bytes.Equal(bytes.TrimSpace(ours), bytes.TrimSpace(theirs)) {
					return errExit(2, "backup: %s belongs to another ledger (it differs from %s): back up into an empty directory", dst, src)
				}
			}
			st, err := a.openStore(cmd.Context())
			if err != nil {
				return errExit(2, "%v", err)
			}
			if err := st.lite.Backup(cmd.Context(), dest); err != nil {
				st.Close()
				return errExit(2, "%v", err)
			}
			st.Close()
			if err := os.Chmod(dest, 0o600); err != nil {
				return errExit(2, "backup: %v", err)
			}
			keyDir := filepath.Dir(dest)
			for _, f := range []string{"ledger.key", "ledger.pub"} {
				src := filepath.Join(a.dataDir(), f)
				dst := filepath.Join(keyDir, f)
				if filepath.Clean(src) == filepath.Clean(dst) {
					continue
				}
				if _, err := os.Stat(dst); err == nil {
					continue
				}
				b, err := os.ReadFile(src)
				if err != nil {
					return errExit(2, "backup: copy key: %v", err)
				}
				mode := os.FileMode(0o644)
				if f == "ledger.key" {
					mode = 0o600
				}
				if err := os.WriteFile(dst, b, mode); err != nil {
					return errExit(2, "backup: copy key: %v", err)
				}
			}
			rep, _, err := runAudit(cmd.Context(), dest, filepath.Join(keyDir, keys.PubFile), "")
			if err != nil {
				return errExit(2, "backup: audit copy: %v", err)
			}
			if !rep.OK {
				fmt.Fprintf(a.stdout, "backup written to %s but its audit FAILED %s: %s\n", dest, auditWhere(rep), rep.Problem)
				return &exitError{code: 1}
			}
			if a.JSON {
				return a.printJSON(map[string]any{"dest": dest, "audit": rep})
			}
			fmt.Fprintf(a.stdout, "backup written to %s: %d leaves, audit passed (root %s)\n", dest, rep.Leaves, rep.Root)
			return nil
		},
	}
}

// auditWhere says where a failed audit found its problem: at a leaf index,
// or not tied to one leaf (FirstBadIndex -1, e.g. projection row counts).
func auditWhere(rep ledger.AuditReport) string {
	if rep.FirstBadIndex < 0 {
		return "(not tied to one leaf)"
	}
	return fmt.Sprintf("at index %d", rep.FirstBadIndex)
}
