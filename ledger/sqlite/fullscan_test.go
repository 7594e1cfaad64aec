package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlog"
)

// TestFullScan: a clean log scans clean and keeps signing; a leaf edited
// with its leaf hash fixed (which only the tree catches) is named by the
// scan, and the log then refuses appends and notes with CodeUnavailable.
func TestFullScan(t *testing.T) {
	ctx := context.Background()
	for _, chunk := range []int{1, 7, 1024} {
		path := buildLog(t, 30)
		s, err := Open(ctx, Options{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.FullScan(ctx, s, 30, tlog.ScanOptions{Chunk: chunk}); err != nil {
			t.Fatalf("clean log: %v", err)
		}
		if _, bad := s.Tampered(); bad {
			t.Fatal("clean log marked tampered")
		}
		s.Close()
		rawExec(t, path, "UPDATE leaves SET leaf = CAST(replace(CAST(leaf AS TEXT), 'test', 'tess') AS BLOB) WHERE idx = 9")
		db, err := sql.Open("sqlite", "file:"+path)
		if err != nil {
			t.Fatal(err)
		}
		var raw []byte
		db.QueryRow("SELECT leaf FROM leaves WHERE idx = 9").Scan(&raw)
		lh := ledger.LeafHash(raw)
		if _, err := db.Exec("UPDATE leaves SET leaf_hash = ? WHERE idx = 9", lh[:]); err != nil {
			t.Fatal(err)
		}
		db.Close()
		s, err = Open(ctx, Options{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		err = s.FullScan(ctx, s, 30, tlog.ScanOptions{Chunk: chunk})
		var te *tlog.TamperError
		if !errors.As(err, &te) || te.Index != 9 {
			t.Fatalf("chunk %d: scan of the edited log: %v", chunk, err)
		}
		if ts, bad := s.Tampered(); !bad || ts.Index != 9 {
			t.Fatalf("tamper state: %+v %v", ts, bad)
		}
		if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(99))}, ""); ledger.ErrorCode(err) != ledger.CodeUnavailable {
			t.Fatalf("append on a tampered log: %v", err)
		}
		if _, err := s.SignNote("release 1.0 is ready"); ledger.ErrorCode(err) != ledger.CodeUnavailable {
			t.Fatalf("note on a tampered log: %v", err)
		}
		ctx2, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.FullScan(ctx2, s, 30, tlog.ScanOptions{Chunk: chunk}); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled scan: %v", err)
		}
		s.Close()
	}
}

// TestFullScanConsistentForgery: a leaf rewritten whole (body, content
// id, leaf bytes and leaf hash all consistent) passes every check of its
// own; the recomputed tree catches it, named by the checkpoints around it.
func TestFullScanConsistentForgery(t *testing.T) {
	ctx := context.Background()
	path := buildLog(t, 30)
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	var raw []byte
	db.QueryRow("SELECT leaf FROM leaves WHERE idx = 12").Scan(&raw)
	lf, err := ledger.DecodeLeaf(raw)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := ledger.CanonicalJSON([]byte(strings.Replace(string(lf.Body), "test", "tess", 1)))
	lf.Body, lf.ID = body, ledger.EntryID(lf.Kind, body)
	forged, err := ledger.EncodeLeaf(lf)
	if err != nil {
		t.Fatal(err)
	}
	lh := ledger.LeafHash(forged)
	if _, err := db.Exec("UPDATE leaves SET leaf = ?, id = ?, leaf_hash = ? WHERE idx = 12", forged, lf.ID, lh[:]); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s, err := Open(ctx, Options{Path: path, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.FullScan(ctx, s, 30, tlog.ScanOptions{Chunk: 5})
	var te *tlog.TamperError
	if !errors.As(err, &te) || te.Index != 12 {
		t.Fatalf("scan of the forged log: %v", err)
	}
	if ts, _ := s.Tampered(); !strings.Contains(ts.Problem, "do not give the root signed at size 13") {
		t.Fatalf("problem: %q", ts.Problem)
	}
}

// TestFullScanProjectionTables: projection edits the audit finds only
// over a whole table (an evidence_artifacts row deleted, so that a query
// by artifact digest misses the record; a lane column edited) put the
// log in the tampered state through the full verification, the row
// count named at the last leaf, the column at its own leaf.
func TestFullScanProjectionTables(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, sql string
		index     uint64
		want      string
	}{
		{"artifact-row-deleted", "DELETE FROM evidence_artifacts WHERE idx = 11", 29, "evidence_artifacts holds 29 rows"},
		{"lane-edited", "UPDATE leaves SET key = 'other/v1' WHERE idx = 13", 13, "key column does not match the leaf body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := buildLog(t, 30)
			rawExec(t, path, tc.sql)
			s, err := Open(ctx, Options{Path: path})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			err = s.FullScan(ctx, s, 30, tlog.ScanOptions{Chunk: 8})
			var te *tlog.TamperError
			if !errors.As(err, &te) || te.Index != tc.index {
				t.Fatalf("scan: %v, want leaf %d", err, tc.index)
			}
			if ts, bad := s.Tampered(); !bad || ts.Index != tc.index || !strings.Contains(ts.Problem, tc.want) {
				t.Fatalf("tamper state: %+v %v, want %q", ts, bad, tc.want)
			}
			if _, err := s.Append(ctx, []ledger.Record{evRecord(t, sampleEvidence(99))}, ""); ledger.ErrorCode(err) != ledger.CodeUnavailable {
				t.Fatalf("append on a tampered log: %v", err)
			}
		})
	}
}
