package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/storetest"
	"github.com/evidence-ledger/ledger/ledger/storetest/pgtest"
	"github.com/evidence-ledger/ledger/migrations"
	pgmig "github.com/evidence-ledger/ledger/migrations/postgres"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// openTest opens a store on a fresh database with a key in a temporary
// directory.
func openTest(t *testing.T, dsn, keyDir string, ro bool) *Store {
	t.Helper()
	s, err := Open(context.Background(), Options{DSN: dsn, KeyDir: keyDir, ReadOnly: ro})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The conformance suite against PostgreSQL databases of a throwaway
// cluster; Tamper edits the tables with SQL as the database's owner, with
// foreign keys off, as someone with the database but not the key would.
func TestConformance(t *testing.T) {
	type where struct{ dsn, keyDir string }
	var mu sync.Mutex
	dsns := map[ledger.Store]where{}
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T) ledger.Store {
			w := where{pgtest.NewDatabase(t), t.TempDir()}
			s := openTest(t, w.dsn, w.keyDir, false)
			mu.Lock()
			dsns[s] = w
			mu.Unlock()
			return s
		},
		Tamper: func(t *testing.T, s ledger.Store, edit storetest.Edit, i uint64) ledger.Store {
			mu.Lock()
			w := dsns[s]
			mu.Unlock()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			rawExec(t, w.dsn, tamperSQL(edit, i)...)
			if edit == storetest.EditLeafBodyRehash {
				fixIDAndHash(t, w.dsn, int64(i))
			}
			return openTest(t, w.dsn, w.keyDir, true)
		},
	})
}

// tamperSQL is each storetest.Edit as SQL on the tables of
// migrations/postgres.
func tamperSQL(edit storetest.Edit, i uint64) []string {
	return storetest.TamperSQL(edit, i, func(from, to string, i uint64) string {
		return fmt.Sprintf(`UPDATE leaves SET leaf = convert_to(replace(convert_from(leaf, 'UTF8'), '%s', '%s'), 'UTF8') WHERE idx = %d`, from, to, i)
	}, "decode(repeat('00', 32), 'hex')")
}

// rawExec runs statements on one connection with foreign keys off
// (session_replication_role replica skips their triggers).
func rawExec(t *testing.T, dsn string, stmts ...string) {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range append([]string{"SET session_replication_role = replica"}, stmts...) {
		if _, err := conn.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// fixIDAndHash recomputes leaf idx's content id (in its bytes and its
// column) and its leaf hash, as a careful attacker would.
func fixIDAndHash(t *testing.T, dsn string, idx int64) {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	storetest.FixIDAndHash(t, db, idx, dialect.SQL)
}

// TestMigrationSetsInLockstep fails when the PostgreSQL migrations and the
// SQLite ones (package migrations, SQL and Go) differ in version or name.
func TestMigrationSetsInLockstep(t *testing.T) {
	names := func(fsys fs.FS) []string {
		var out []string
		ents, err := fs.ReadDir(fsys, ".")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if n := e.Name(); strings.HasSuffix(n, ".sql") {
				out = append(out, strings.TrimSuffix(n, ".sql"))
			}
		}
		return out
	}
	lite := names(migrations.FS)
	// The Go migrations' names are their source files', which the
	// embedded FS does not hold: take them from the directory.
	goFiles, err := filepath.Glob(filepath.Join("..", "..", "migrations", "0*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range goFiles {
		lite = append(lite, strings.TrimSuffix(filepath.Base(f), ".go"))
	}
	if len(goFiles) != len(migrations.Go) {
		t.Fatalf("migrations/ has %d Go migration files but migrations.Go lists %d", len(goFiles), len(migrations.Go))
	}
	slices.Sort(lite)
	pg := names(pgmig.FS)
	slices.Sort(pg)
	if !slices.Equal(lite, pg) {
		t.Fatalf("migration sets differ:\nsqlite:   %v\npostgres: %v\nport every SQLite migration to migrations/postgres under the same number and name", lite, pg)
	}
	vs, err := Versions()
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != len(pg) {
		t.Fatalf("goose sees %d PostgreSQL migrations, the directory holds %d", len(vs), len(pg))
	}
}

func TestMigrateTwiceIsNoop(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	ctx := context.Background()
	db, _, err := Connect(ctx, dsn, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	schema := func() string {
		var s string
		if err := db.QueryRow(`SELECT string_agg(table_name || '.' || column_name || ':' || data_type, ',' ORDER BY table_name, column_name) FROM information_schema.columns WHERE table_schema = 'public'`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		var idx string
		db.QueryRow(`SELECT string_agg(indexdef, ';' ORDER BY indexname) FROM pg_indexes WHERE schemaname = 'public'`).Scan(&idx)
		return s + idx
	}
	if err := Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	s1 := schema()
	if err := Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if s2 := schema(); s1 != s2 {
		t.Fatalf("second migration changed the schema")
	}
	cur, latest, err := MigrationStatus(ctx, db)
	files, _ := fs.Glob(pgmig.FS, "*.sql")
	if want := int64(len(files)); err != nil || cur != latest || latest != want {
		t.Fatalf("version %d of %d (%v), want %d of %d", cur, latest, err, want, want)
	}
	if !strings.Contains(s1, "leaves.commit_id") || strings.Contains(s1, "evidence_index.") {
		t.Fatalf("schema after migration 6 is not the one the driver writes: %s", s1)
	}
}

// A refused connection fails at Open, naming the host and port and the
// user, never the password, and nothing falls back to another store.
func TestConnectRefusedNamesHostNotPassword(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	const pw = "s3cr3t-pw-do-not-print"
	_, err = Open(context.Background(), Options{DSN: "postgres://ledger:" + pw + "@" + addr + "/ledgerdb?sslmode=disable", KeyDir: t.TempDir(), ConnectTimeout: 2 * time.Second})
	if err == nil {
		t.Fatal("Open succeeded with nothing listening")
	}
	msg := err.Error()
	if strings.Contains(msg, pw) {
		t.Fatalf("error echoes the password: %s", msg)
	}
	if !strings.Contains(msg, addr) || !strings.Contains(msg, "ledgerdb") || !strings.Contains(msg, `"ledger"`) {
		t.Fatalf("error does not name %s, the database and the user: %s", addr, msg)
	}
	t.Log(msg)
}

// A wrong password is refused by the server: the error says so and does
// not print the password.
func TestConnectBadDSN(t *testing.T) {
	_, err := Open(context.Background(), Options{DSN: "postgres://u:pw-xyz@[::1/db", KeyDir: t.TempDir()})
	if err == nil || strings.Contains(err.Error(), "pw-xyz") {
		t.Fatalf("bad DSN: %v", err)
	}
}

// Filter values and keys TEXT cannot hold (NUL, invalid UTF-8) match
// nothing, as in SQLite, instead of failing the query; an idempotency key
// of such bytes is stored and replayed like any other.
func TestUnstorableStrings(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, pgtest.NewDatabase(t), t.TempDir(), false)
	for _, v := range []string{"\x00", "a\x00b", "\xff\xfe", "\xc3\x28"} {
		if got, _, err := s.Evidence(ctx, ledger.EvidenceFilter{Lane: v, Repository: v}); err != nil || len(got) != 0 {
			t.Fatalf("evidence filter %q: %v, %d", v, err, len(got))
		}
		if got, _, err := s.Heads(ctx, ledger.HeadFilter{Repository: v}); err != nil || len(got) != 0 {
			t.Fatalf("heads filter %q: %v, %d", v, err, len(got))
		}
		if _, err := s.Entry(ctx, v); ledger.ErrorCode(err) != ledger.CodeNotFound {
			t.Fatalf("entry %q: %v", v, err)
		}
		if err := s.RevokeToken(ctx, v); ledger.ErrorCode(err) != ledger.CodeNotFound {
			t.Fatalf("revoke %q: %v", v, err)
		}
	}
	body := storetest.Evidence(1)
	raw, _ := json.Marshal(body)
	recs := []ledger.Record{{Kind: ledger.KindEvidence, Body: raw}}
	first, err := s.Append(ctx, recs, "k\xff\x00")
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.Append(ctx, recs, "k\xff\x00")
	if err != nil || again.Entries[0].ID != first.Entries[0].ID || again.Checkpoint.Size != first.Checkpoint.Size {
		t.Fatalf("replay: %v %+v", err, again)
	}
	// A different key of the same hex spelling is another key.
	other, err := s.Append(ctx, recs, "\x01"+"6bff00")
	if err != nil || !other.Entries[0].Existing {
		t.Fatalf("other key: %v", err)
	}
}

// The projections the storetest edits do not reach: an edited or deleted
// artifact row, a forged heads_index row and an edited tokens row are
// each reported by the audit.
func TestAuditProjectionTables(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, sql, want string
	}{
		{"artifact digest", "UPDATE evidence_artifacts SET digest = 'sha256:' || repeat('e', 64) WHERE idx = 3", "evidence_artifacts rows of leaf 3"},
		{"artifact deleted", "DELETE FROM evidence_artifacts WHERE idx = 4", "evidence_artifacts rows of leaf 4"},
		{"artifact added", "INSERT INTO evidence_artifacts(digest, idx, name) VALUES ('sha256:00', 5, 'extra')", "evidence_artifacts rows of leaf 5"},
		{"head row forged", "INSERT INTO heads_index(idx, repository, ref, commit_id, verdict, decision) VALUES (6, 'r', 'refs/heads/main', 'c', 'good', 'trusted')", "evidence leaf has a head index row"},
		{"token scope", "UPDATE tokens SET scope = 'admin'", "scope differs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn, keyDir := pgtest.NewDatabase(t), t.TempDir()
			s := openTest(t, dsn, keyDir, false)
			for i := range 8 {
				raw, _ := json.Marshal(storetest.Evidence(i))
				if _, err := s.Append(ctx, []ledger.Record{{Kind: ledger.KindEvidence, Body: raw}}, ""); err != nil {
					t.Fatal(err)
				}
			}
			if _, _, err := s.CreateToken(ctx, "ci", ledger.ScopeRecord, nil); err != nil {
				t.Fatal(err)
			}
			if rep, err := s.Audit(ctx); err != nil || !rep.OK {
				t.Fatalf("audit before the edit: %+v %v", rep, err)
			}
			s.Close()
			rawExec(t, dsn, tc.sql)
			rep, err := openTest(t, dsn, keyDir, true).Audit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK || !strings.Contains(rep.Problem, tc.want) {
				t.Fatalf("audit after %s: ok=%v %q, want %q", tc.name, rep.OK, rep.Problem, tc.want)
			}
		})
	}
}
