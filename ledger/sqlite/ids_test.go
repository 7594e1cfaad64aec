package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
)

// openRecent opens the store at path with Options.RecentIDs = recent; the
// caller closes it.
func openRecent(t *testing.T, path string, recent int) *Store {
	t.Helper()
	s, err := Open(context.Background(), Options{Path: path, RecentIDs: recent})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func countIDs(t *testing.T, db *sql.DB) (entry, recent int) {
	t.Helper()
	if err := db.QueryRow("SELECT (SELECT COUNT(*) FROM entry_ids), (SELECT COUNT(*) FROM recent_ids)").Scan(&entry, &recent); err != nil {
		t.Fatal(err)
	}
	return
}

// Ids move from recent_ids into entry_ids every RecentIDs records; a record
// already logged is found (and not appended again) wherever its id is: in
// entry_ids, in recent_ids, earlier in the same transaction or earlier in
// the same request; lookups by id find every entry.
func TestIDIndexMergesAndDedupes(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s := openRecent(t, path, 8)
	defer s.Close()
	ids := map[int]string{}
	for i := 0; i < 30; i += 3 {
		res, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(i)), evRecord(t, sampleEvidence(i+1)), evRecord(t, sampleEvidence(i+2))}, "")
		if err != nil {
			t.Fatal(err)
		}
		for j, e := range res.Entries {
			ids[i+j] = e.ID
		}
	}
	// Merges happened after 9, 18 and 27 leaves.
	if e, r := countIDs(t, s.DB()); e != 27 || r != 3 {
		t.Fatalf("entry_ids %d, recent_ids %d; want 27, 3", e, r)
	}
	for i := 0; i < 30; i++ {
		e, err := s.Entry(ctx, ids[i])
		if err != nil || e.Index != uint64(i) {
			t.Fatalf("entry %d by id: index %d, %v", i, e.Index, err)
		}
	}
	if _, err := s.Entry(ctx, fmt.Sprintf("%032x", 7)); ledger.ErrorCode(err) != ledger.CodeNotFound {
		t.Fatalf("unknown id: %v", err)
	}
	// Resubmissions: merged (0, 13), recent (28), new (30) twice.
	res, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(0)), evRecord(t, sampleEvidence(13)), evRecord(t, sampleEvidence(28)), evRecord(t, sampleEvidence(30)), evRecord(t, sampleEvidence(30))}, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range res.Entries {
		got = append(got, fmt.Sprintf("%d:%v", e.Index, e.Existing))
	}
	if fmt.Sprint(got) != "[0:true 13:true 28:true 30:false 30:true]" || res.Checkpoint.Size != 31 {
		t.Fatalf("got %v, size %d", got, res.Checkpoint.Size)
	}
	// Concurrent requests in one transaction, repeating each other.
	errs := make(chan error, 8)
	for w := 0; w < 8; w++ {
		go func() {
			_, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(40+w%2)), evRecord(t, sampleEvidence(13))}, "")
			errs <- err
		}()
	}
	for w := 0; w < 8; w++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	rep, err := s.Audit(ctx)
	if err != nil || !rep.OK || rep.Leaves != 33 {
		t.Fatalf("audit %+v %v", rep, err)
	}
}

// A second process appending (and merging) beside this one: each writer
// reloads the id tables with the tree and still refuses duplicates.
func TestIDIndexTwoWriters(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	a := openRecent(t, path, 4)
	defer a.Close()
	b := openRecent(t, path, 4)
	defer b.Close()
	for i := 0; i < 12; i++ {
		s := a
		if i%3 == 0 {
			s = b
		}
		if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(i))}, ""); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 12; i++ {
		for _, s := range []*Store{a, b} {
			res, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(i))}, "")
			if err != nil || !res.Entries[0].Existing || res.Entries[0].Index != uint64(i) {
				t.Fatalf("resubmitting %d: %+v %v", i, res, err)
			}
		}
	}
	if rep, err := b.Audit(ctx); err != nil || !rep.OK || rep.Leaves != 12 {
		t.Fatalf("audit %+v %v", rep, err)
	}
}

// Edits of the id tables behind the service's back fail the audit, which
// names the leaf concerned.
func TestAuditDetectsIDIndexTampering(t *testing.T) {
	build := func(t *testing.T) string {
		path := filepath.Join(t.TempDir(), "ledger.db")
		s, err := Open(context.Background(), Options{Path: path, RecentIDs: 10})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 15; i++ {
			if _, err := s.Append(context.Background(), []ledger.Record{evRecord(t, sampleEvidence(i))}, ""); err != nil {
				t.Fatal(err)
			}
		}
		s.Close()
		return path // entry_ids: leaves 0..9, recent_ids: 10..14
	}
	if rep := auditPath(t, build(t)); !rep.OK {
		t.Fatalf("clean log: %+v", rep)
	}
	cases := []struct {
		name  string
		sql   []string
		index int64
	}{
		{"delete-entry-id", []string{"DELETE FROM entry_ids WHERE idx = 4"}, 4},
		{"repoint-entry-id", []string{"UPDATE entry_ids SET idx = 7 WHERE idx = 3"}, 3},
		{"extra-entry-id", []string{"INSERT INTO entry_ids(id, idx) VALUES ('00000000000000000000000000000000', 2)"}, 2},
		{"merged-recent-id-duplicated", []string{"INSERT INTO entry_ids(id, idx) SELECT id, idx FROM recent_ids WHERE idx = 12"}, 12},
		{"delete-recent-id", []string{"DELETE FROM recent_ids WHERE idx = 12"}, 12},
		{"delete-last-recent-id", []string{"DELETE FROM recent_ids WHERE idx = 14"}, 14},
		{"edit-recent-id", []string{"UPDATE recent_ids SET id = '0123456789abcdef0123456789abcdef' WHERE idx = 11"}, 11},
		{"recent-id-moved", []string{"DELETE FROM recent_ids WHERE idx = 10"}, 10},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := build(t)
			rawExec(t, path, tc.sql...)
			rep := auditPath(t, path)
			if rep.OK || rep.FirstBadIndex != tc.index {
				t.Fatalf("audit: ok %v, index %d, want %d (%s)", rep.OK, rep.FirstBadIndex, tc.index, rep.Problem)
			}
			t.Log(rep.Problem)
		})
	}
}

// Migration 5 rebuilds the leaves table: down to 4 and up again keeps
// every leaf, projection and foreign key, and the log audits and dedupes.
func TestMigration5DownAndUp(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 25; i += 5 {
		var recs []ledger.Record
		for j := i; j < i+5; j++ {
			recs = append(recs, evRecord(t, sampleEvidence(j)))
		}
		if _, err := s.Append(ctx, recs, ""); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	db := downTo(t, path, 4)
	var n int
	db.QueryRow("SELECT COUNT(*) FROM sqlite_master WHERE name IN ('entry_ids', 'recent_ids')").Scan(&n)
	var unique string
	db.QueryRow("SELECT sql FROM sqlite_master WHERE name = 'leaves'").Scan(&unique)
	if n != 0 || !strings.Contains(unique, "UNIQUE") {
		t.Fatalf("down to 4: id tables %d, leaves %s", n, unique)
	}
	if _, err := db.Exec("INSERT INTO evidence_index(idx, lane, backend, status, control, repository, commit_id, tree_id, dirty, recorded_at) VALUES (999, 'x', 'cpu', 'passed', 'none', 'r', 'c', 't', 0, 0)"); err == nil {
		t.Fatal("foreign keys do not hold after the down migration")
	}
	db.Close()
	s, err = Open(ctx, Options{Path: path}) // upgrades again
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if e, r := countIDs(t, s.DB()); e != 25 || r != 0 {
		t.Fatalf("after upgrade: entry_ids %d, recent_ids %d", e, r)
	}
	if _, err := s.DB().Exec("INSERT INTO evidence_artifacts(digest, idx, name) VALUES ('d', 999, 'n')"); err == nil {
		t.Fatal("foreign keys do not hold after the upgrade")
	}
	res, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(3)), evRecord(t, sampleEvidence(25))}, "")
	if err != nil || !res.Entries[0].Existing || res.Entries[0].Index != 3 || res.Entries[1].Existing || res.Entries[1].Index != 25 {
		t.Fatalf("after upgrade: %+v %v", res, err)
	}
	if rep, err := s.Audit(ctx); err != nil || !rep.OK || rep.Leaves != 26 {
		t.Fatalf("audit after upgrade %+v %v", rep, err)
	}
}

// A caller's entry_ids lookup that a merge made stale is not trusted: the
// writer looks again and finds the record (no duplicate leaf).
func TestStaleCallerLookup(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s := openRecent(t, path, 4)
	defer s.Close()
	for i := 0; i < 3; i++ {
		if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(i))}, ""); err != nil {
			t.Fatal(err)
		}
	}
	p, err := ledger.PrepareOne(evRecord(t, sampleEvidence(1)))
	if err != nil {
		t.Fatal(err)
	}
	stale := lookupIDsDB(ctx, s.d.r, []ledger.Prepared{p})
	if stale.w != 0 || len(stale.found) != 0 {
		t.Fatalf("lookup before the merge: %+v", stale)
	}
	for i := 3; i < 6; i++ { // the 4th id triggers a merge: leaf 1 moves to entry_ids
		if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(i))}, ""); err != nil {
			t.Fatal(err)
		}
	}
	if fresh := lookupIDsDB(ctx, s.d.r, []ledger.Prepared{p}); fresh.w != 4 || fresh.found[p.ID] != 1 {
		t.Fatalf("lookup after the merge: %+v", fresh)
	}
	s.d.lookupHook = func([]ledger.Prepared) callerLookup { return stale }
	res, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(1))}, "")
	s.d.lookupHook = nil
	if err != nil || len(res.Entries) != 1 || !res.Entries[0].Existing || res.Entries[0].Index != 1 {
		t.Fatalf("stale lookup: %+v %v", res, err)
	}
	if rep, err := s.Audit(ctx); err != nil || !rep.OK || rep.Leaves != 6 {
		t.Fatalf("audit %+v %v", rep, err)
	}
}

// A database from a newer ledger is refused (its writer would not keep what
// newer migrations added); a read-only open (audit) of an older schema says
// to migrate instead of failing on a missing table.
func TestSchemaVersionGuards(t *testing.T) {
	ctx := context.Background()
	path := buildLog(t, 3)
	rawExec(t, path, "INSERT INTO goose_db_version(version_id, is_applied) VALUES (99, 1)")
	for _, ro := range []bool{false, true} {
		if _, err := Open(ctx, Options{Path: path, ReadOnly: ro}); err == nil || !strings.Contains(err.Error(), "schema version 99 is newer") {
			t.Fatalf("read-only %v: %v", ro, err)
		}
	}
	old := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite", dsn(old, false))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := MigrateTo(ctx, db, 4); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := Open(ctx, Options{Path: old, ReadOnly: true}); err == nil || !strings.Contains(err.Error(), "run `ledger migrate`") {
		t.Fatalf("read-only open of schema 4: %v", err)
	}
}

// Leaves appended without content ids (a ledger older than schema 5 writing
// to a migrated database) are found when the tables are loaded and indexed
// by the next append, so resubmitting them appends nothing.
func TestUncoveredLeavesAreIndexed(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		recent int
		drop   string
	}{
		{"tail-after-recent", 100, "DELETE FROM recent_ids WHERE idx >= 3"},
		{"tail-after-merge", 4, "DELETE FROM recent_ids"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.db")
			s := openRecent(t, path, tc.recent)
			for i := 0; i < 6; i++ {
				if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(i))}, ""); err != nil {
					t.Fatal(err)
				}
			}
			s.Close()
			rawExec(t, path, tc.drop)
			if rep := auditPath(t, path); rep.OK {
				t.Fatal("audit passed with ids missing")
			}
			s = openRecent(t, path, tc.recent)
			defer s.Close()
			res, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(5)), evRecord(t, sampleEvidence(0)), evRecord(t, sampleEvidence(10))}, "")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range res.Entries {
				got = append(got, fmt.Sprintf("%d:%v", e.Index, e.Existing))
			}
			if fmt.Sprint(got) != "[5:true 0:true 6:false]" {
				t.Fatalf("got %v", got)
			}
			if rep, err := s.Audit(ctx); err != nil || !rep.OK || rep.Leaves != 7 {
				t.Fatalf("audit %+v %v", rep, err)
			}
		})
	}
}

// A ledger older than schema 5 could append a record the log already holds
// (migration 5 removed the UNIQUE index it relied on). The repeated leaf is
// signed history and stays; its id keeps naming the first leaf for
// resubmissions and readers, merges into entry_ids keep working (they used
// to fail on the UNIQUE key and refuse every later append), and the audit
// passes, counting the duplicate.
func TestDuplicateLeafFromOlderLedger(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s := openRecent(t, path, 4)
	for i := 0; i < 6; i++ { // leaves 0..3 merged into entry_ids
		if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(i))}, ""); err != nil {
			t.Fatal(err)
		}
	}
	// Leaf 6 repeats leaf 0: a lookup that claims the id is nowhere makes
	// the writer append it, as an older ledger would have.
	p, err := ledger.PrepareOne(evRecord(t, sampleEvidence(0)))
	if err != nil {
		t.Fatal(err)
	}
	s.d.lookupHook = func([]ledger.Prepared) callerLookup { return callerLookup{w: s.d.pubW.Load()} }
	res, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(0))}, "")
	s.d.lookupHook = nil
	if err != nil || res.Entries[0].Index != 6 || res.Entries[0].Existing {
		t.Fatalf("forged duplicate: %+v %v", res, err)
	}
	s.Close()
	rawExec(t, path, "DELETE FROM recent_ids WHERE idx = 6") // the older ledger wrote no id row
	if rep := auditPath(t, path); rep.OK || rep.FirstBadIndex != 6 {
		t.Fatalf("audit before the id is indexed: %+v; want a failure naming leaf 6", rep)
	}

	resubmit := func(s *Store) {
		t.Helper()
		res, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(0))}, "")
		if err != nil || !res.Entries[0].Existing || res.Entries[0].Index != 0 {
			if err == nil {
				t.Fatalf("resubmitting leaf 0's record: index %d, existing %v; want 0, true", res.Entries[0].Index, res.Entries[0].Existing)
			}
			t.Fatalf("resubmitting leaf 0's record: %v", err)
		}
		if e, err := s.Entry(ctx, p.ID); err != nil || e.Index != 0 {
			t.Fatalf("entry by id: index %d, %v", e.Index, err)
		}
	}
	s = openRecent(t, path, 4)
	resubmit(s) // indexes leaf 6 without letting it take the id
	s.Close()
	s = openRecent(t, path, 4)
	resubmit(s)               // recent_ids holds leaf 6 under leaf 0's id
	for i := 6; i < 16; i++ { // several merges with leaf 6 in recent_ids
		if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(i))}, ""); err != nil {
			t.Fatalf("append %d after the duplicate: %v", i, err)
		}
	}
	resubmit(s)
	rep, err := s.Audit(ctx)
	if err != nil || !rep.OK || rep.Leaves != 17 || rep.DuplicateLeaves != 1 || rep.FirstDuplicate != 6 {
		t.Fatalf("audit %+v %v; want OK, 17 leaves, one duplicate at 6", rep, err)
	}
	s.Close()
	s = openRecent(t, path, 4)
	defer s.Close()
	resubmit(s)
}

// mergeRecentIDs keeps an id's first leaf when recent_ids holds the id
// more than once (a repeated leaf and its original both still recent),
// and leaves an id that entry_ids already has alone.
func TestMergeRecentIDsKeepsFirstLeaf(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", dsn(filepath.Join(t.TempDir(), "m.db"), false))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO entry_ids(id, idx) VALUES ('c', 1);
		INSERT INTO recent_ids(idx, id) VALUES (2, 'b'), (3, 'a'), (5, 'c'), (7, 'a'), (8, 'b'), (9, 'd')`); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := mergeRecentIDs(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query("SELECT id, idx FROM entry_ids ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var id string
		var idx int
		rows.Scan(&id, &idx)
		got = append(got, fmt.Sprintf("%s:%d", id, idx))
	}
	if want := "a:3 b:2 c:1 d:9"; strings.Join(got, " ") != want {
		t.Fatalf("entry_ids after the merge: %v, want %s", got, want)
	}
	if _, r := countIDs(t, db); r != 0 {
		t.Fatalf("recent_ids keeps %d rows after the merge", r)
	}
}
