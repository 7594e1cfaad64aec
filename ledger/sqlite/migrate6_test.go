package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// downTo opens the closed database at path and runs the down migrations
// to version; the caller closes the handle.
func downTo(t *testing.T, path string, version int64) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		t.Fatal(err)
	}
	p, err := newProvider(db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(context.Background(), version); err != nil {
		t.Fatal(err)
	}
	return db
}

// evidenceAnswers lists the leaf indexes Evidence returns for a few
// filters, so that a schema change can be checked to answer the same.
func evidenceAnswers(t *testing.T, s *Store) map[string][]uint64 {
	t.Helper()
	filters := map[string]ledger.EvidenceFilter{
		"all":      {},
		"lane":     {Lane: "qmv-bias-sum/v1"},
		"commit":   {Commit: sampleEvidence(4).Subject.Commit},
		"lane+cm":  {Lane: "qmv-bias-sum/v1", Commit: sampleEvidence(5).Subject.Commit},
		"prefix":   {Commit: sampleEvidence(7).Subject.Commit[:38]},
		"backend":  {Backend: ledger.BackendCUDA},
		"status":   {Status: ledger.StatusPassed, Backend: ledger.BackendCPU},
		"repo":     {Repository: "github.com/ml-explore/mlx"},
		"artifact": {ArtifactDigest: sampleEvidence(9).Subject.Artifacts["libmlx.so"]},
		"nothing":  {Lane: "other/v1"},
	}
	out := map[string][]uint64{}
	for name, f := range filters {
		es, _, err := s.Evidence(context.Background(), f)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out[name] = []uint64{}
		for _, e := range es {
			out[name] = append(out[name], e.Index)
		}
	}
	return out
}

// Migration 6 moves the evidence projection into the leaves table; down
// restores evidence_index (control, tree and dirty read back from the
// bodies) and up moves it back, with the same query answers, a passing
// audit and foreign keys that hold.
func TestMigration6DownAndUp(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	var recs []ledger.Record
	var evs []ledger.Evidence
	for i := 0; i < 12; i++ {
		e := sampleEvidence(i)
		e.Subject.Dirty = i%3 == 0
		if i%4 == 1 {
			e.Backend = ledger.BackendCUDA
		}
		evs = append(evs, e)
		recs = append(recs, evRecord(t, e))
	}
	head, _ := json.Marshal(ledger.HeadVerification{Repository: "github.com/ml-explore/mlx", Ref: "refs/heads/main",
		Object: strings.Repeat("ab", 20), ObjectType: "commit", Commit: strings.Repeat("ab", 20),
		Verdict: ledger.VerdictGood, Decision: ledger.DecisionTrusted, VerifiedAt: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)})
	recs = append(recs[:6], append([]ledger.Record{{Kind: ledger.KindHead, Body: head}}, recs[6:]...)...)
	if _, err := s.Append(ctx, recs, ""); err != nil {
		t.Fatal(err)
	}
	before := evidenceAnswers(t, s)
	if len(before["all"]) != 12 || len(before["backend"]) != 3 || len(before["commit"]) != 1 || len(before["prefix"]) == 0 || len(before["artifact"]) != 1 {
		t.Fatalf("unexpected answers before the round trip: %v", before)
	}
	s.Close()

	db := downTo(t, path, 5)
	rows, err := db.Query("SELECT e.idx, l.key, e.lane, e.backend, e.status, e.control, e.repository, e.commit_id, e.tree_id, e.dirty, e.recorded_at = l.recorded_at FROM evidence_index e JOIN leaves l ON l.idx = e.idx ORDER BY e.idx")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var idx, dirty int
		var key, lane, backend, status, control, repo, commit, tree string
		var sameTime bool
		if err := rows.Scan(&idx, &key, &lane, &backend, &status, &control, &repo, &commit, &tree, &dirty, &sameTime); err != nil {
			t.Fatal(err)
		}
		e := evs[n]
		want := fmt.Sprint(e.Lane, e.Lane, e.Backend, e.Status, e.Control, e.Subject.Repository, e.Subject.Commit, e.Subject.Tree, e.Subject.Dirty, true)
		if got := fmt.Sprint(key, lane, backend, status, control, repo, commit, tree, dirty == 1, sameTime); got != want {
			t.Errorf("evidence_index row %d after down: %s, want %s", idx, got, want)
		}
		n++
	}
	rows.Close()
	if n != 12 {
		t.Fatalf("down to 5: %d evidence_index rows, want 12", n)
	}
	var cols int
	db.QueryRow("SELECT COUNT(*) FROM pragma_table_info('leaves') WHERE name IN ('backend', 'status', 'repository', 'commit_id')").Scan(&cols)
	if cols != 0 {
		t.Fatalf("down to 5 left %d projection columns in leaves", cols)
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
	var tables int
	s.DB().QueryRow("SELECT COUNT(*) FROM sqlite_master WHERE name = 'evidence_index'").Scan(&tables)
	if tables != 0 {
		t.Fatal("evidence_index survived the upgrade")
	}
	if after := evidenceAnswers(t, s); !reflect.DeepEqual(after, before) {
		t.Fatalf("answers changed across the round trip:\nbefore %v\nafter  %v", before, after)
	}
	if _, err := s.DB().Exec("INSERT INTO evidence_artifacts(digest, idx, name) VALUES ('d', 999, 'n')"); err == nil {
		t.Fatal("foreign keys do not hold after the upgrade")
	}
	if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(40))}, ""); err != nil {
		t.Fatal(err)
	}
	if rep, err := s.Audit(ctx); err != nil || !rep.OK || rep.Leaves != 14 {
		t.Fatalf("audit after upgrade %+v %v", rep, err)
	}
}

// A database made with 4 KiB pages (the size before the fourth session)
// is backed up into a copy with the current page size that audits clean.
func TestBackupConvertsPageSize(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	old := pageSize
	pageSize = 4096
	s, err := Open(ctx, Options{Path: filepath.Join(dir, "old.db")})
	pageSize = old
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 0; i < 3; i++ {
		recs := []ledger.Record{evRecord(t, sampleEvidence(2*i)), evRecord(t, sampleEvidence(2*i+1))}
		if _, err := s.Append(ctx, recs, ""); err != nil {
			t.Fatal(err)
		}
	}
	pageSizeOf := func(db *sql.DB) (n int) {
		if err := db.QueryRow("PRAGMA page_size").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := pageSizeOf(s.DB()); n != 4096 {
		t.Fatalf("source page size %d, want 4096", n)
	}
	dest := filepath.Join(dir, "copy.db")
	if err := s.Backup(ctx, dest); err != nil {
		t.Fatal(err)
	}
	if err := s.Backup(ctx, dest); err == nil {
		t.Fatal("backup over an existing file succeeded")
	}
	c, err := Open(ctx, Options{Path: dest, KeyDir: dir, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n := pageSizeOf(c.d.r.DB); n != pageSize {
		t.Fatalf("copy page size %d, want %d", n, pageSize)
	}
	if rep, err := c.Audit(ctx); err != nil || !rep.OK || rep.Leaves != 6 {
		t.Fatalf("audit of the copy: %+v %v", rep, err)
	}
}
