package sqlite

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlog"
)

// indexEvidence is record i of the query-index tests: three lanes, four
// commits, so that each lane and commit pair holds a few records.
func indexEvidence(i int) ledger.Evidence {
	e := sampleEvidence(i)
	e.Lane = fmt.Sprintf("lane-%d/v1", i%3)
	e.Subject.Commit = fmt.Sprintf("%040x", 0xc0+(i/3)%4)
	return e
}

func headRecord(t testing.TB, commit string, i int) ledger.Record {
	h := ledger.HeadVerification{Repository: "example/core", Ref: "refs/heads/main", Object: commit, ObjectType: "commit", Commit: commit,
		Verdict: ledger.VerdictGood, Decision: ledger.DecisionTrusted, VerifiedAt: time.Date(2026, 12, 1, 0, 0, i, 0, time.UTC)}
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	return ledger.Record{Kind: ledger.KindHead, Body: b}
}

// appendIndexLog appends records from..to-1 (indexEvidence, with a head
// verification after every seventh) in batches of five.
func appendIndexLog(t *testing.T, s *Store, from, to int) {
	t.Helper()
	var recs []ledger.Record
	for i := from; i < to; i++ {
		recs = append(recs, evRecord(t, indexEvidence(i)))
		if i%7 == 6 {
			recs = append(recs, headRecord(t, indexEvidence(i).Subject.Commit, i))
		}
		if len(recs) >= 5 || i == to-1 {
			if _, err := s.Append(context.Background(), recs, ""); err != nil {
				t.Fatal(err)
			}
			recs = recs[:0]
		}
	}
}

// indexQuery is one query the index answers, read to its last page.
type indexQuery struct {
	name string
	read func(ledger.Reader, string, int, uint64) ([]uint64, string, error)
}

func indexQueries() []indexQuery {
	var qs []indexQuery
	for l := range 3 {
		lane := fmt.Sprintf("lane-%d/v1", l)
		qs = append(qs, indexQuery{"lane " + lane, func(r ledger.Reader, c string, lim int, asOf uint64) ([]uint64, string, error) {
			es, next, err := r.Evidence(context.Background(), ledger.EvidenceFilter{Lane: lane, Cursor: c, Limit: lim, AsOfSize: asOf})
			return evIdx(es), next, err
		}})
		qs = append(qs, indexQuery{"entries " + lane, func(r ledger.Reader, c string, lim int, asOf uint64) ([]uint64, string, error) {
			es, next, err := r.Entries(context.Background(), ledger.EntryFilter{Kind: ledger.KindEvidence, Key: lane, Cursor: c, Limit: lim, AsOfSize: asOf})
			return entIdx(es), next, err
		}})
		for k := range 5 {
			commit := fmt.Sprintf("%040x", 0xc0+k) // the fifth commit has no record
			qs = append(qs, indexQuery{"lane+commit " + lane + " " + commit, func(r ledger.Reader, c string, lim int, asOf uint64) ([]uint64, string, error) {
				es, next, err := r.Evidence(context.Background(), ledger.EvidenceFilter{Lane: lane, Commit: commit, Cursor: c, Limit: lim, AsOfSize: asOf})
				return evIdx(es), next, err
			}})
		}
	}
	for k := range 5 {
		commit := fmt.Sprintf("%040x", 0xc0+k)
		qs = append(qs, indexQuery{"heads " + commit, func(r ledger.Reader, c string, lim int, asOf uint64) ([]uint64, string, error) {
			hs, next, err := r.Heads(context.Background(), ledger.HeadFilter{Commit: commit, Cursor: c, Limit: lim, AsOfSize: asOf})
			var out []uint64
			for _, h := range hs {
				if h.Head.Commit != commit {
					return nil, "", fmt.Errorf("head %d is about %s", h.Index, h.Head.Commit)
				}
				out = append(out, h.Index)
			}
			return out, next, err
		}})
	}
	for _, k := range []ledger.Kind{ledger.KindHead, ledger.KindRelease} {
		qs = append(qs, indexQuery{"kind " + string(k), func(r ledger.Reader, c string, lim int, asOf uint64) ([]uint64, string, error) {
			es, next, err := r.Entries(context.Background(), ledger.EntryFilter{Kind: k, Cursor: c, Limit: lim, AsOfSize: asOf})
			return entIdx(es), next, err
		}})
		qs = append(qs, indexQuery{"kind+key " + string(k), func(r ledger.Reader, c string, lim int, asOf uint64) ([]uint64, string, error) {
			es, next, err := r.Entries(context.Background(), ledger.EntryFilter{Kind: k, Key: "example/core", Cursor: c, Limit: lim, AsOfSize: asOf})
			return entIdx(es), next, err
		}})
	}
	return qs
}

func evIdx(es []ledger.EvidenceEntry) []uint64 {
	var out []uint64
	for _, e := range es {
		out = append(out, e.Index)
	}
	return out
}

func entIdx(es []ledger.Entry) []uint64 {
	var out []uint64
	for _, e := range es {
		out = append(out, e.Index)
	}
	return out
}

// readAll pages q to its end; pages are the indexes of each page.
func readAll(t *testing.T, r ledger.Reader, q indexQuery, lim int, asOf uint64) (pages [][]uint64) {
	t.Helper()
	c := ""
	for {
		idx, next, err := q.read(r, c, lim, asOf)
		if err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		pages = append(pages, idx)
		if next == "" {
			return pages
		}
		c = next
	}
}

// TestVerifiedIndexAnswersAsTheStore: on an untouched log, every query
// the query index answers gives exactly the store's pages (the same
// leaves, newest first, the same page breaks and cursors), at the latest
// size and at an earlier checkpoint, also after more appends fold into an
// index that was already built.
func TestVerifiedIndexAnswersAsTheStore(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, Options{Path: filepath.Join(t.TempDir(), "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	v := tlog.NewVerifiedStore(s, s.Log, nil)
	compare := func(asOf uint64) {
		t.Helper()
		for _, q := range indexQueries() {
			for _, lim := range []int{1, 3, 1000} {
				want, got := readAll(t, s, q, lim, asOf), readAll(t, v, q, lim, asOf)
				if !slices.EqualFunc(want, got, slices.Equal) {
					t.Fatalf("%s (limit %d, as of %d): store %v, verified %v", q.name, lim, asOf, want, got)
				}
			}
		}
	}
	appendIndexLog(t, s, 0, 60)
	cp, err := s.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	compare(0)
	appendIndexLog(t, s, 60, 100)
	compare(0)
	compare(cp.Size)
}

// TestVerifiedIndexIgnoresEditedProjection: editing a projection (an
// evidence row's commit_id or key, a heads_index row) changes what the
// store's queries return, never what VerifiedStore answers from its
// index: an edit made after the index was built and one made before it (a
// new VerifiedStore, as after a restart) alike. An edited kind column
// makes every answer that holds the leaf a *tlog.TamperError naming it
// (the row no longer matches its bytes), never an answer without it. An
// edited leaf is a *tlog.TamperError on the first query that folds it.
func TestVerifiedIndexIgnoresEditedProjection(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(ctx, Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	appendIndexLog(t, s, 0, 40)
	qs := indexQueries()
	want := map[string][][]uint64{}
	for _, q := range qs {
		want[q.name] = readAll(t, s, q, 1000, 0)
	}
	live := tlog.NewVerifiedStore(s, s.Log, nil)
	if _, _, err := live.Evidence(ctx, ledger.EvidenceFilter{Lane: "lane-0/v1"}); err != nil {
		t.Fatal(err)
	}
	var ev, head int64
	if err := s.DB().QueryRow("SELECT idx FROM leaves WHERE kind = 'evidence' AND key = 'lane-1/v1' ORDER BY idx LIMIT 1 OFFSET 2").Scan(&ev); err != nil {
		t.Fatal(err)
	}
	if err := s.DB().QueryRow("SELECT idx FROM heads_index ORDER BY idx LIMIT 1").Scan(&head); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		fmt.Sprintf("UPDATE leaves SET commit_id = '%040x' WHERE idx = %d", 0xdead, ev),
		fmt.Sprintf("UPDATE leaves SET key = 'lane-2/v1' WHERE idx = %d", ev+3),
		fmt.Sprintf("DELETE FROM heads_index WHERE idx = %d", head),
	} {
		if _, err := s.DB().Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	changed := 0
	for _, q := range qs {
		if !slices.EqualFunc(want[q.name], readAll(t, s, q, 1000, 0), slices.Equal) {
			changed++
		}
	}
	if changed < 3 {
		t.Fatalf("the edits changed only %d of the store's answers", changed)
	}
	restarted := tlog.NewVerifiedStore(s, s.Log, nil)
	for name, v := range map[string]*tlog.VerifiedStore{"built before the edit": live, "built after the edit": restarted} {
		for _, q := range qs {
			for _, lim := range []int{2, 1000} {
				got := slices.Concat(readAll(t, v, q, lim, 0)...)
				if w := slices.Concat(want[q.name]...); !slices.Equal(w, got) {
					t.Fatalf("%s: %s (limit %d): %v, want %v", name, q.name, lim, got, w)
				}
			}
		}
	}

	if _, err := s.DB().Exec(fmt.Sprintf("UPDATE leaves SET kind = 'release' WHERE idx = %d", ev+6)); err != nil {
		t.Fatal(err)
	}
	var te *tlog.TamperError
	for name, v := range map[string]*tlog.VerifiedStore{"built before the edit": live, "built after the edit": tlog.NewVerifiedStore(s, s.Log, nil)} {
		for _, q := range qs {
			w := slices.Concat(want[q.name]...)
			got, _, err := q.read(v, "", 1000, 0)
			switch {
			case slices.Contains(w, uint64(ev+6)):
				if !errors.As(err, &te) || te.Index != uint64(ev+6) {
					t.Fatalf("%s: %s holds the leaf whose kind was edited: %v, %v", name, q.name, got, err)
				}
			case err != nil || !slices.Equal(w, got):
				t.Fatalf("%s: %s: %v %v, want %v", name, q.name, got, err, w)
			}
		}
	}

	if _, err := s.DB().Exec(fmt.Sprintf("UPDATE leaves SET leaf = CAST(replace(CAST(leaf AS TEXT), 'passed', 'failed') AS BLOB) WHERE idx = %d", ev+1)); err != nil {
		t.Fatal(err)
	}
	fresh := tlog.NewVerifiedStore(s, s.Log, nil)
	for range 2 { // a failed fold leaves nothing behind: the next query folds again and fails again
		if _, _, err := fresh.Evidence(ctx, ledger.EvidenceFilter{Lane: "lane-0/v1"}); !errors.As(err, &te) || te.Index != uint64(ev+1) {
			t.Fatalf("a query folding the edited leaf %d: %v", ev+1, err)
		}
	}
}

// TestVerifiedIndexFollowsRestoredLog: a log cut back to an earlier
// signed checkpoint under a running process (a restore accepted on
// another server of the log) is folded again: the index answers the
// restored history, never leaves that are no longer in the log.
func TestVerifiedIndexFollowsRestoredLog(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, Options{Path: filepath.Join(t.TempDir(), "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	appendIndexLog(t, s, 0, 20)
	cp, err := s.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	appendIndexLog(t, s, 20, 40)
	v := tlog.NewVerifiedStore(s, s.Log, nil)
	q := indexQueries()[0]
	if got := slices.Concat(readAll(t, v, q, 1000, 0)...); len(got) == 0 || got[0] < cp.Size {
		t.Fatalf("%s before the restore: %v", q.name, got)
	}
	for _, stmt := range []string{
		fmt.Sprintf("DELETE FROM heads_index WHERE idx >= %d", cp.Size),
		fmt.Sprintf("DELETE FROM evidence_artifacts WHERE idx >= %d", cp.Size),
		fmt.Sprintf("DELETE FROM leaves WHERE idx >= %d", cp.Size),
		fmt.Sprintf("DELETE FROM checkpoints WHERE size > %d", cp.Size),
	} {
		if _, err := s.DB().Exec(stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	want := slices.Concat(readAll(t, s, q, 1000, 0)...)
	if got := slices.Concat(readAll(t, v, q, 1000, 0)...); len(want) == 0 || !slices.Equal(got, want) {
		t.Fatalf("%s after the restore to size %d: %v, want %v", q.name, cp.Size, got, want)
	}
}

// TestVerifiedIndexFoldsAcrossChunksFromAnyLeaf: an index that covers a
// size that is not a multiple of the fold's chunk (3 leaves here) folds
// thousands more in several chunks to the signed root, without a refold
// or a tampering report (the tree range keeps the leaf hashes it is
// given: a reused buffer must never be one of them).
func TestVerifiedIndexFoldsAcrossChunksFromAnyLeaf(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, Options{Path: filepath.Join(t.TempDir(), "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var logBuf bytes.Buffer
	v := tlog.NewVerifiedStore(s, s.Log, slog.New(slog.NewTextHandler(&logBuf, nil)))
	appendIndexLog(t, s, 0, 3)
	if err := v.BuildIndex(ctx); err != nil {
		t.Fatal(err)
	}
	appendIndexLog(t, s, 3, 4600) // with heads: more than two chunks of 2,048 leaves
	if err := v.BuildIndex(ctx); err != nil {
		t.Fatalf("fold from a size that is not a chunk multiple: %v", err)
	}
	if strings.Contains(logBuf.String(), "folding the log again") || strings.Contains(logBuf.String(), "tampering") {
		t.Fatalf("the fold did not give the signed root at once: %s", logBuf.String())
	}
}
