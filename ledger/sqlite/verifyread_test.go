package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlog"
)

// TestVerifiedStoreRefusesEditedLeaves: through tlog.VerifiedStore a
// clean log reads as the store does; a leaf edited behind the log (with
// or without its leaf hash fixed, or its projection column changed) is a
// *tlog.TamperError naming its index on every read path that returns
// it, and never its bytes.
func TestVerifiedStoreRefusesEditedLeaves(t *testing.T) {
	ctx := context.Background()
	open := func(path string) (*Store, *tlog.VerifiedStore) {
		s, err := Open(ctx, Options{Path: path, KeyDir: filepath.Dir(path), ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s, tlog.NewVerifiedStore(s, s.Log, nil)
	}
	clean := buildLog(t, 20)
	s, v := open(clean)
	for i := range uint64(20) {
		a, err1 := s.EntryAt(ctx, i)
		b, err2 := v.EntryAt(ctx, i)
		if err1 != nil || err2 != nil || a.LeafHash != b.LeafHash {
			t.Fatalf("clean leaf %d: %v %v", i, err1, err2)
		}
	}
	if es, _, err := v.Evidence(ctx, ledger.EvidenceFilter{Limit: 1000}); err != nil || len(es) != 20 {
		t.Fatalf("clean evidence: %d %v", len(es), err)
	}
	for _, tc := range []struct {
		name string
		sql  []string
		fix  bool
	}{
		{"edit-bytes", []string{"UPDATE leaves SET leaf = CAST(replace(CAST(leaf AS TEXT), 'passed', 'failed') AS BLOB) WHERE idx = 7"}, false},
		{"edit-bytes-and-rehash", []string{"UPDATE leaves SET leaf = CAST(replace(CAST(leaf AS TEXT), 'passed', 'failed') AS BLOB) WHERE idx = 7"}, true},
		{"edit-projection", []string{"UPDATE leaves SET status = 'failed' WHERE idx = 7"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := buildLog(t, 20)
			rawExec(t, path, tc.sql...)
			if tc.fix {
				fixLeafHash(t, path, 7)
			}
			_, v := open(path)
			var te *tlog.TamperError
			// An edited projection column shows only in a query that
			// filters by it; edited bytes show in every read of the leaf.
			reads := map[string]func() error{}
			if tc.name == "edit-projection" {
				reads["evidence-by-status"] = func() error {
					_, _, err := v.Evidence(ctx, ledger.EvidenceFilter{Status: ledger.StatusFailed, Limit: 1000})
					return err
				}
			} else {
				reads["entry-at"] = func() error { _, err := v.EntryAt(ctx, 7); return err }
				reads["evidence"] = func() error { _, _, err := v.Evidence(ctx, ledger.EvidenceFilter{Limit: 1000}); return err }
				reads["entries"] = func() error {
					_, _, err := v.Entries(ctx, ledger.EntryFilter{Kind: ledger.KindEvidence, Key: sampleEvidence(7).Lane, Limit: 1000})
					return err
				}
			}
			for name, read := range reads {
				err := read()
				if !errors.As(err, &te) || te.Index != 7 || strings.Contains(err.Error(), "failed") {
					t.Fatalf("%s: %v", name, err)
				}
			}
			if _, err := v.EntryAt(ctx, 8); err != nil {
				t.Fatalf("an untouched leaf: %v", err)
			}
		})
	}
}

// BenchmarkReadPath reads one leaf by index and one page of 50 evidence
// records, through the store (plain) and through tlog.VerifiedStore
// (checked), on a log of 20,000 leaves; compare the two as a ratio.
func BenchmarkReadPath(b *testing.B) {
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "ledger.db")
	s, err := Open(ctx, Options{Path: path})
	if err != nil {
		b.Fatal(err)
	}
	var recs []ledger.Record
	for i := range 20000 {
		recs = append(recs, evRecord(b, sampleEvidence(i)))
		if len(recs) == 500 {
			if _, err := s.Append(ctx, recs, ""); err != nil {
				b.Fatal(err)
			}
			recs = recs[:0]
		}
	}
	defer s.Close()
	v := tlog.NewVerifiedStore(s, s.Log, nil)
	readers := []struct {
		name string
		rd   ledger.Reader
	}{{"plain", s}, {"checked", v}}
	for _, r := range readers {
		b.Run("entry-at/"+r.name, func(b *testing.B) {
			i := uint64(0)
			for b.Loop() {
				if _, err := r.rd.EntryAt(ctx, i*7919%20000); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
	for _, r := range readers {
		b.Run("evidence-page-50/"+r.name, func(b *testing.B) {
			for b.Loop() {
				es, _, err := r.rd.Evidence(ctx, ledger.EvidenceFilter{Limit: 50})
				if err != nil || len(es) != 50 {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAppendSignedState appends one record per iteration (one
// checkpoint each) without and with the signed-state journal
// (OnCheckpoint: a line appended and fsynced per checkpoint); compare
// the two as a ratio.
func BenchmarkAppendSignedState(b *testing.B) {
	ctx := context.Background()
	for _, journal := range []bool{false, true} {
		name := "no-journal"
		if journal {
			name = "journal"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			opts := Options{Path: filepath.Join(dir, "ledger.db")}
			if journal {
				st, err := tlog.OpenSignedState(filepath.Join(dir, tlog.SignedStateFile))
				if err != nil {
					b.Fatal(err)
				}
				opts.OnCheckpoint = st.Record
			}
			s, err := Open(ctx, opts)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			i := 0
			for b.Loop() {
				if _, err := s.Append(ctx, []ledger.Record{evRecord(b, sampleEvidence(i))}, ""); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
