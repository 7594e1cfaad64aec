package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger/postgres"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
	"github.com/spf13/cobra"
)

// copyTable is one table `ledger copy` moves, with its columns' kinds:
// i integer, I nullable integer, t text, T nullable text, b bytes, k an
// idempotency key (text, encoded per store).
type copyTable struct {
	name, cols, kinds, order string
}

// copyTables are every table of the schema (version 10) that holds a fact,
// a projection or run state (the runs queue and the agents' registrations,
// which an approval is checked against); copyDerived are the rest.
var copyTables = []copyTable{
	{"leaves", "idx, id, kind, key, recorded_at, leaf, leaf_hash, backend, status, repository, commit_id", "itttibbTTTT", "idx"},
	{"tree_nodes", "ord, hash", "ib", "ord"},
	{"checkpoints", "size, root, note, created_at", "ibti", "size"},
	{"evidence_artifacts", "digest, idx, name", "tit", "idx, name"},
	{"heads_index", "idx, repository, ref, commit_id, verdict, decision", "ittttt", "idx"},
	{"tokens", "id, name, scope, secret_hash, created_at, revoked_at, roles, repositories, lanes, backends, expires_at, leaf_idx, revoked_idx", "tttbiIttttIII", "id"},
	{"idempotency", "key, request_hash, entry_ids, size, created_at", "kbtii", "created_at, key"},
	{"runs", "id, created_at, updated_at, created_by, state, backend, lanes, labels, repository, commit_id, attempt, max_attempts, agent, lease_id, lease_until, progress, attempts, evidence, outcome_entry, message, selection", "tiitttttttiittitttttt", "id"},
	{"agents", "name, key_id, public_key, backend, labels, spec, health, registered_at, last_seen, current_run", "tttttttiit", "name"},
}

// copyDerived are the tables of the schema `ledger copy` does not move:
// SQLite's content-id index, rebuilt from the leaves at the destination,
// and goose's own version table, written by the migration.
var copyDerived = []string{"entry_ids", "recent_ids", "goose_db_version"}

// copyEnd is one side of a copy: a database handle and its dialect.
type copyEnd struct {
	db   *sql.DB
	pg   bool
	name string // for messages, never a password
}

func (e copyEnd) ph(i int) string {
	if e.pg {
		return "$" + strconv.Itoa(i)
	}
	return "?"
}

// openCopyEnd opens db for a copy: the source read-only and at the newest
// schema, the destination created and migrated to it.
func openCopyEnd(ctx context.Context, db string, dest bool) (copyEnd, error) {
	e := copyEnd{pg: isPostgres(db), name: dbName(db)}
	var err error
	if e.pg {
		if e.db, _, err = postgres.Connect(ctx, db, 10*time.Second); err != nil {
			return e, err
		}
		if dest {
			if err := postgres.Migrate(ctx, e.db); err != nil {
				e.db.Close()
				return e, err
			}
		}
	} else {
		path, err := sqlitePath(db)
		if err != nil {
			return e, err
		}
		q := "?_pragma=busy_timeout(10000)&mode=ro"
		if dest {
			if fi, err := os.Stat(path); err == nil && fi.Size() > 0 {
				return e, fmt.Errorf("destination %s exists: copy into a new file (or an empty PostgreSQL database)", path)
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				return e, err
			}
			q = "?_pragma=page_size(16384)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(10000)"
		} else if _, err := os.Stat(path); err != nil {
			return e, fmt.Errorf("source %s: %w", path, err)
		}
		if e.db, err = sql.Open("sqlite", "file:"+path+q); err != nil {
			return e, err
		}
		if dest {
			if err := sqlite.Migrate(ctx, e.db); err != nil {
				e.db.Close()
				return e, err
			}
			os.Chmod(path, 0o600)
		}
	}
	var cur, latest int64
	if e.pg {
		cur, latest, err = postgres.MigrationStatus(ctx, e.db)
	} else {
		cur, latest, err = sqlite.MigrationStatus(ctx, e.db)
	}
	if err == nil && cur != latest {
		err = fmt.Errorf("%s is at schema version %d, this ledger's is %d: run `ledger migrate` on it first", e.name, cur, latest)
	}
	if err != nil {
		e.db.Close()
	}
	return e, err
}

// copyLedger copies every table of from into to in one transaction of to,
// reading one snapshot of from. A destination holding any leaf, token or
// checkpoint is refused; on any error nothing is written. It returns the
// number of rows copied per table.
func copyLedger(ctx context.Context, from, to copyEnd) (map[string]int64, error) {
	rtx, err := from.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead})
	if !from.pg && err != nil {
		// SQLite takes its snapshot with the first read of a deferred
		// transaction whatever the isolation asked.
		rtx, err = from.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	}
	if err != nil {
		return nil, fmt.Errorf("copy: read %s: %w", from.name, err)
	}
	defer rtx.Rollback()
	wtx, err := to.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("copy: write %s: %w", to.name, err)
	}
	defer wtx.Rollback()
	var n int64
	if err := wtx.QueryRowContext(ctx, "SELECT (SELECT COUNT(*) FROM leaves) + (SELECT COUNT(*) FROM tokens) + (SELECT COUNT(*) FROM checkpoints)").Scan(&n); err != nil {
		return nil, fmt.Errorf("copy: read %s: %w", to.name, err)
	}
	if n > 0 {
		return nil, fmt.Errorf("copy: destination %s is not empty (it holds leaves, tokens or checkpoints): copy into an empty database", to.name)
	}
	counts := map[string]int64{}
	for _, tb := range copyTables {
		c, err := copyOne(ctx, rtx, wtx, from, to, tb)
		if err != nil {
			return nil, fmt.Errorf("copy %s: %w", tb.name, err)
		}
		counts[tb.name] = c
	}
	if !to.pg {
		// SQLite finds content ids through entry_ids (recent_ids empty).
		if _, err := wtx.ExecContext(ctx, "INSERT INTO entry_ids(id, idx) SELECT id, idx FROM leaves ORDER BY id"); err != nil {
			return nil, fmt.Errorf("copy: index content ids: %w", err)
		}
	}
	if err := wtx.Commit(); err != nil {
		return nil, fmt.Errorf("copy: commit %s: %w", to.name, err)
	}
	return counts, nil
}

// copyRows is how many rows one INSERT carries.
const copyRows = 500

func copyOne(ctx context.Context, rtx, wtx *sql.Tx, from, to copyEnd, tb copyTable) (int64, error) {
	kinds := strings.ReplaceAll(tb.kinds, " ", "")
	ncol := len(kinds)
	rows, err := rtx.QueryContext(ctx, "SELECT "+tb.cols+" FROM "+tb.name+" ORDER BY "+tb.order)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var buf []any
	var total int64
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		var sb strings.Builder
		sb.WriteString("INSERT INTO " + tb.name + "(" + tb.cols + ") VALUES ")
		p := 1
		for r := 0; r < len(buf)/ncol; r++ {
			if r > 0 {
				sb.WriteByte(',')
			}
			sb.WriteByte('(')
			for c := range ncol {
				if c > 0 {
					sb.WriteByte(',')
				}
				sb.WriteString(to.ph(p))
				p++
			}
			sb.WriteByte(')')
		}
		if _, err := wtx.ExecContext(ctx, sb.String(), buf...); err != nil {
			if strings.Contains(err.Error(), "leaves_id_key") {
				return errors.New("the source holds leaves with the same content id (appended before schema 5); PostgreSQL keeps content ids unique, so this log cannot move there")
			}
			return err
		}
		buf = buf[:0]
		return nil
	}
	for rows.Next() {
		vals, err := scanCopyRow(rows, kinds)
		if err != nil {
			return total, err
		}
		buf = append(buf, copyValues(vals, kinds, from, to)...)
		total++
		if len(buf) >= copyRows*ncol {
			if err := flush(); err != nil {
				return total, err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return total, err
	}
	return total, flush()
}

func newCopyCmd(a *app) *cobra.Command {
	var from, to string
	cmd := &cobra.Command{
		Use:   "copy --from DB --to DB",
		Short: "Copy a whole ledger between stores (SQLite file <-> PostgreSQL), then audit both",
		Long: `Copy every table of the ledger at --from (a SQLite path or sqlite://PATH, or a
postgres:// URL) into --to, which must be empty (a new SQLite file, or a
PostgreSQL database without ledger rows): the log's leaves, tree nodes and
signed checkpoints, the projections, tokens (hashes only) and idempotency
keys. Policies, runner keys, releases, waivers and approvals are leaves and
move with the log. The source is read in one snapshot; the destination is
written in one transaction (nothing is left behind on an error). Then both
are audited with the verifier key of --data-dir (ledger.pub): they must
audit clean with the same size and root.

The signing key and the signed-state journal stay in --data-dir: the
copy is the same log. Stop the server writing --from first, or appends
made during the copy are not in it.

Exit codes: 0 copied and both audit clean with the same root, 1 an audit
failed or the roots differ, 2 error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if from == "" || to == "" {
				return errExit(2, "copy: --from and --to are required")
			}
			pub := a.keyPath("")
			if a.DataDir == "" && !isPostgres(from) {
				p, _ := sqlitePath(from)
				pub = filepath.Join(sqliteDataDir(p), "ledger.pub")
			}
			if _, err := readVerifierKey(pub); err != nil {
				return errExit(2, "copy: %v (the copy is audited with the log's verifier key: give --data-dir)", err)
			}
			src, err := openCopyEnd(ctx, from, false)
			if err != nil {
				return errExit(2, "copy: %v", err)
			}
			defer src.db.Close()
			dst, err := openCopyEnd(ctx, to, true)
			if err != nil {
				return errExit(2, "copy: %v", err)
			}
			t0 := time.Now()
			counts, err := copyLedger(ctx, src, dst)
			dst.db.Close()
			if err != nil {
				return errExit(2, "%v", err)
			}
			took := time.Since(t0)
			srcRep, _, err := runAudit(ctx, from, pub, "")
			if err != nil {
				return errExit(2, "copy: audit %s: %v", src.name, err)
			}
			dstRep, _, err := runAudit(ctx, to, pub, "")
			if err != nil {
				return errExit(2, "copy: audit %s: %v", dst.name, err)
			}
			if a.JSON {
				a.printJSON(map[string]any{"rows": counts, "seconds": took.Seconds(), "source_audit": srcRep, "destination_audit": dstRep})
			} else {
				fmt.Fprintf(a.stdout, "copied %d leaves, %d checkpoints, %d tokens, %d runs, %d agents from %s to %s in %s\n", counts["leaves"], counts["checkpoints"], counts["tokens"], counts["runs"], counts["agents"], src.name, dst.name, took.Round(time.Millisecond))
				fmt.Fprintf(a.stdout, "source audit: ok=%v, %d leaves, root %s\n", srcRep.OK, srcRep.Leaves, srcRep.Root)
				fmt.Fprintf(a.stdout, "destination audit: ok=%v, %d leaves, root %s\n", dstRep.OK, dstRep.Leaves, dstRep.Root)
			}
			switch {
			case !srcRep.OK:
				return errExit(1, "copy: the source does not audit: %s", srcRep.Problem)
			case !dstRep.OK:
				return errExit(1, "copy: the copy does not audit: %s", dstRep.Problem)
			case srcRep.Root != dstRep.Root || srcRep.Leaves != dstRep.Leaves:
				return errExit(1, "copy: the source (%d leaves, root %s) changed during the copy (%d leaves, root %s): stop its server and copy again into a new destination", srcRep.Leaves, srcRep.Root, dstRep.Leaves, dstRep.Root)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the ledger to copy: a SQLite path (or sqlite://PATH) or a postgres:// URL")
	cmd.Flags().StringVar(&to, "to", "", "the empty destination: a new SQLite path (or sqlite://PATH) or an empty PostgreSQL database's postgres:// URL")
	return cmd
}

// scanCopyRow scans one row into values typed by kinds (see copyTable).
func scanCopyRow(rows *sql.Rows, kinds string) ([]any, error) {
	vals := make([]any, len(kinds))
	for i, k := range kinds {
		switch k {
		case 'i':
			vals[i] = new(int64)
		case 'I':
			vals[i] = new(sql.NullInt64)
		case 't', 'k':
			vals[i] = new(string)
		case 'T':
			vals[i] = new(sql.NullString)
		case 'b':
			vals[i] = new([]byte)
		}
	}
	return vals, rows.Scan(vals...)
}

// copyValues turns scanned values into the destination's arguments: NULLs
// as nil, idempotency keys re-encoded for the destination store.
func copyValues(vals []any, kinds string, from, to copyEnd) []any {
	out := make([]any, len(vals))
	for i, k := range kinds {
		switch k {
		case 'i':
			out[i] = *vals[i].(*int64)
		case 'I':
			if v := *vals[i].(*sql.NullInt64); v.Valid {
				out[i] = v.Int64
			}
		case 't':
			out[i] = *vals[i].(*string)
		case 'k':
			key := *vals[i].(*string)
			if from.pg {
				key = postgres.DecodeIdempotencyKey(key)
			}
			if to.pg {
				key = postgres.EncodeIdempotencyKey(key)
			}
			out[i] = key
		case 'T':
			if v := *vals[i].(*sql.NullString); v.Valid {
				out[i] = v.String
			}
		case 'b':
			out[i] = *vals[i].(*[]byte)
		}
	}
	return out
}
