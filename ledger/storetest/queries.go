package storetest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// pageAll reads every page of a query with page size limit and checks
// that the pages are newest first with no gaps or repeats between them.
// It returns the indexes in order.
func pageAll(t *testing.T, what string, limit int, page func(cursor string, limit int) ([]uint64, string, error)) []uint64 {
	t.Helper()
	var all []uint64
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10000 {
			t.Fatalf("%s: the cursor never ends", what)
		}
		idx, next, err := page(cursor, limit)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if limit > 0 && len(idx) > limit {
			t.Fatalf("%s: page of %d entries, limit %d", what, len(idx), limit)
		}
		if next != "" && len(idx) == 0 {
			t.Fatalf("%s: an empty page with a next cursor", what)
		}
		all = append(all, idx...)
		if next == "" {
			break
		}
		cursor = next
	}
	for i := 1; i < len(all); i++ {
		if all[i] >= all[i-1] {
			t.Fatalf("%s: index %d after %d: not newest first, or repeated", what, all[i], all[i-1])
		}
	}
	return all
}

func wantIndexes(t *testing.T, what string, got, want []uint64) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: got indexes %v, want %v", what, got, want)
	}
}

// queryLog is a log of evidence, head, release and waiver leaves for the
// filter tests: the leaf index of each fixture, by kind and number.
type queryLog struct {
	s        ledger.Store
	evidence map[uint64]ledger.Evidence
	heads    map[uint64]ledger.HeadVerification
	releases map[uint64]string // release leaf -> version
	waivers  map[uint64]string
	entries  map[uint64]ledger.Entry
	size     uint64
}

// buildQueryLog appends n evidence records interleaved with heads,
// releases and waivers, in calls of a few records.
func buildQueryLog(t *testing.T, h Harness, n int) *queryLog {
	q := &queryLog{s: h.Open(t), evidence: map[uint64]ledger.Evidence{}, heads: map[uint64]ledger.HeadVerification{}, releases: map[uint64]string{}, waivers: map[uint64]string{}, entries: map[uint64]ledger.Entry{}}
	for i := 0; i < n; i += 4 {
		var recs []ledger.Record
		var kinds []func(idx uint64)
		for j := i; j < i+4 && j < n; j++ {
			recs = append(recs, evRec(t, j))
			kinds = append(kinds, func(idx uint64) { q.evidence[idx] = Evidence(j) })
		}
		hn := i / 4
		recs = append(recs, headRec(t, hn))
		kinds = append(kinds, func(idx uint64) { q.heads[idx] = Head(hn) })
		version := []string{"1.0", "2.0"}[hn%2]
		recs = append(recs, releaseRec(t, ledger.KindRelease, version, hn), releaseRec(t, ledger.KindWaiver, version, hn))
		kinds = append(kinds, func(idx uint64) { q.releases[idx] = version }, func(idx uint64) { q.waivers[idx] = version })
		res := appendOK(t, q.s, recs...)
		for k, e := range res.Entries {
			kinds[k](e.Index)
			q.entries[e.Index] = e.Entry
		}
		q.size = res.Checkpoint.Size
	}
	return q
}

// matching returns the indexes of m's leaves that keep accepts, newest
// first.
func matching[V any](m map[uint64]V, keep func(idx uint64, v V) bool) []uint64 {
	var out []uint64
	for idx, v := range m {
		if keep(idx, v) {
			out = append(out, idx)
		}
	}
	slices.Sort(out)
	slices.Reverse(out)
	return out
}

func (q *queryLog) evidencePages(t *testing.T, f ledger.EvidenceFilter, limit int) []uint64 {
	return pageAll(t, fmt.Sprintf("evidence %+v", f), limit, func(cursor string, limit int) ([]uint64, string, error) {
		f.Cursor, f.Limit = cursor, limit
		es, next, err := q.s.Evidence(context.Background(), f)
		var idx []uint64
		for _, e := range es {
			if e.Kind != ledger.KindEvidence || e.Evidence.Lane != q.evidence[e.Index].Lane || e.Evidence.Subject.Commit != q.evidence[e.Index].Subject.Commit {
				t.Fatalf("evidence answer at %d is not the record appended there", e.Index)
			}
			if e.LeafHash != leafHashOf(t, e.Entry) {
				t.Fatalf("evidence answer at %d: leaf hash does not match its fields", e.Index)
			}
			idx = append(idx, e.Index)
		}
		return idx, next, err
	})
}

// testEvidenceFilters: each filter field alone and combined selects
// exactly the matching evidence, at every page size, as of any size.
func testEvidenceFilters(t *testing.T, h Harness) {
	q := buildQueryLog(t, h, 64)
	ev := q.evidence
	all := func(uint64, ledger.Evidence) bool { return true }
	e9 := Evidence(9)
	since := q.entries[matching(ev, func(_ uint64, e ledger.Evidence) bool { return e.Details != nil && string(e.Details) == `{"n":30}` })[0]].RecordedAt
	cases := []struct {
		f    ledger.EvidenceFilter
		keep func(uint64, ledger.Evidence) bool
	}{
		{ledger.EvidenceFilter{}, all},
		{ledger.EvidenceFilter{Lane: lanes[1]}, func(_ uint64, e ledger.Evidence) bool { return e.Lane == lanes[1] }},
		{ledger.EvidenceFilter{Backend: ledger.BackendCUDA}, func(_ uint64, e ledger.Evidence) bool { return e.Backend == ledger.BackendCUDA }},
		{ledger.EvidenceFilter{Status: ledger.StatusFailed}, func(_ uint64, e ledger.Evidence) bool { return e.Status == ledger.StatusFailed }},
		{ledger.EvidenceFilter{Status: ledger.StatusPassed}, func(_ uint64, e ledger.Evidence) bool { return e.Status == ledger.StatusPassed }},
		{ledger.EvidenceFilter{Repository: repos[1]}, func(_ uint64, e ledger.Evidence) bool { return e.Subject.Repository == repos[1] }},
		{ledger.EvidenceFilter{Commit: e9.Subject.Commit}, func(_ uint64, e ledger.Evidence) bool { return e.Subject.Commit == e9.Subject.Commit }},
		{ledger.EvidenceFilter{Commit: e9.Subject.Commit[:39]}, func(_ uint64, e ledger.Evidence) bool {
			return strings.HasPrefix(e.Subject.Commit, e9.Subject.Commit[:39])
		}},
		{ledger.EvidenceFilter{ArtifactDigest: e9.Subject.Artifacts["libmlx.so"]}, func(_ uint64, e ledger.Evidence) bool {
			return e.Subject.Artifacts["libmlx.so"] == e9.Subject.Artifacts["libmlx.so"]
		}},
		{ledger.EvidenceFilter{ArtifactDigest: strings.TrimPrefix(e9.Subject.Artifacts["libmlx.so"], "sha256:")[:63]}, func(_ uint64, e ledger.Evidence) bool {
			return strings.HasPrefix(e.Subject.Artifacts["libmlx.so"], e9.Subject.Artifacts["libmlx.so"][:7+63])
		}},
		{ledger.EvidenceFilter{Since: since}, func(idx uint64, _ ledger.Evidence) bool { return !q.entries[idx].RecordedAt.Before(since) }},
		{ledger.EvidenceFilter{Since: time.Now().Add(time.Hour)}, func(uint64, ledger.Evidence) bool { return false }},
		{ledger.EvidenceFilter{AsOfSize: 23}, func(idx uint64, _ ledger.Evidence) bool { return idx < 23 }},
		{ledger.EvidenceFilter{Lane: lanes[0], Backend: ledger.BackendCPU, Status: ledger.StatusPassed, AsOfSize: q.size - 10}, func(idx uint64, e ledger.Evidence) bool {
			return e.Lane == lanes[0] && e.Backend == ledger.BackendCPU && e.Status == ledger.StatusPassed && idx < q.size-10
		}},
		{ledger.EvidenceFilter{Lane: "no-such-lane/v1"}, func(uint64, ledger.Evidence) bool { return false }},
	}
	for _, c := range cases {
		want := matching(ev, c.keep)
		if len(want) == 0 && c.f.Lane == "" && c.f.Since.IsZero() {
			t.Fatalf("filter %+v matches nothing in the fixtures: the case tests nothing", c.f)
		}
		for _, limit := range []int{0, 1, 7, 1000} {
			wantIndexes(t, fmt.Sprintf("evidence %+v, limit %d", c.f, limit), q.evidencePages(t, c.f, limit), want)
		}
	}
}

// testEvidenceFilterErrors: filters that could never match, and
// malformed cursors, are field errors.
func testEvidenceFilterErrors(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	appendOK(t, s, evRec(t, 1))
	for _, c := range []struct {
		f     ledger.EvidenceFilter
		field string
	}{
		{ledger.EvidenceFilter{Commit: "xyz1"}, "commit"},
		{ledger.EvidenceFilter{Commit: "abc"}, "commit"},
		{ledger.EvidenceFilter{Commit: "ABCD1234"}, "commit"},
		{ledger.EvidenceFilter{Commit: strings.Repeat("a", 65)}, "commit"},
		{ledger.EvidenceFilter{ArtifactDigest: "md5:abcdef"}, "artifact"},
		{ledger.EvidenceFilter{ArtifactDigest: "sha256:zz12"}, "artifact"},
		{ledger.EvidenceFilter{Cursor: "not a cursor"}, "cursor"},
	} {
		_, _, err := s.Evidence(ctx, c.f)
		wantError(t, fmt.Sprintf("evidence %+v", c.f), err, ledger.CodeInvalid, c.field)
	}
	_, _, err := s.Entries(ctx, ledger.EntryFilter{Kind: ledger.KindRelease, Cursor: "%%%"})
	wantError(t, "entries with a malformed cursor", err, ledger.CodeInvalid, "cursor")
	_, _, err = s.Heads(ctx, ledger.HeadFilter{Cursor: "%%%"})
	wantError(t, "heads with a malformed cursor", err, ledger.CodeInvalid, "cursor")
	_, _, err = s.Heads(ctx, ledger.HeadFilter{Commit: "xyz1"})
	wantError(t, "heads with a non-hex commit", err, ledger.CodeInvalid, "commit")
}

// testEntryFilters: entries of one kind and key, as of any size.
func testEntryFilters(t *testing.T, h Harness) {
	q := buildQueryLog(t, h, 40)
	ctx := context.Background()
	for _, c := range []struct {
		f    ledger.EntryFilter
		want []uint64
	}{
		{ledger.EntryFilter{Kind: ledger.KindRelease}, matching(q.releases, func(uint64, string) bool { return true })},
		{ledger.EntryFilter{Kind: ledger.KindRelease, Key: "2.0"}, matching(q.releases, func(_ uint64, v string) bool { return v == "2.0" })},
		{ledger.EntryFilter{Kind: ledger.KindWaiver, Key: "1.0", AsOfSize: 30}, matching(q.waivers, func(idx uint64, v string) bool { return v == "1.0" && idx < 30 })},
		{ledger.EntryFilter{Kind: ledger.KindEvidence, Key: lanes[0]}, matching(q.evidence, func(_ uint64, e ledger.Evidence) bool { return e.Lane == lanes[0] })},
		{ledger.EntryFilter{Kind: ledger.KindApproval}, nil},
	} {
		for _, limit := range []int{0, 2} {
			f := c.f
			got := pageAll(t, fmt.Sprintf("entries %+v", f), limit, func(cursor string, limit int) ([]uint64, string, error) {
				f.Cursor, f.Limit = cursor, limit
				es, next, err := q.s.Entries(ctx, f)
				var idx []uint64
				for _, e := range es {
					if e.Kind != f.Kind || e.ID != q.entries[e.Index].ID {
						t.Fatalf("entries %+v: answer at %d is not the entry appended there", f, e.Index)
					}
					idx = append(idx, e.Index)
				}
				return idx, next, err
			})
			wantIndexes(t, fmt.Sprintf("entries %+v", f), got, c.want)
		}
	}
}

// testHeadFilters: head verifications by repository, commit (exact or
// prefix) and verdict, as of any size.
func testHeadFilters(t *testing.T, h Harness) {
	q := buildQueryLog(t, h, 80)
	ctx := context.Background()
	h5 := Head(5)
	for _, c := range []struct {
		f    ledger.HeadFilter
		keep func(uint64, ledger.HeadVerification) bool
	}{
		{ledger.HeadFilter{}, func(uint64, ledger.HeadVerification) bool { return true }},
		{ledger.HeadFilter{Repository: repos[1]}, func(_ uint64, v ledger.HeadVerification) bool { return v.Repository == repos[1] }},
		{ledger.HeadFilter{Commit: h5.Commit}, func(_ uint64, v ledger.HeadVerification) bool { return v.Commit == h5.Commit }},
		{ledger.HeadFilter{Commit: h5.Commit[:39]}, func(_ uint64, v ledger.HeadVerification) bool { return strings.HasPrefix(v.Commit, h5.Commit[:39]) }},
		{ledger.HeadFilter{Verdict: ledger.VerdictBad}, func(_ uint64, v ledger.HeadVerification) bool { return v.Verdict == ledger.VerdictBad }},
		{ledger.HeadFilter{Repository: repos[0], Verdict: ledger.VerdictGood, AsOfSize: 60}, func(idx uint64, v ledger.HeadVerification) bool {
			return v.Repository == repos[0] && v.Verdict == ledger.VerdictGood && idx < 60
		}},
	} {
		want := matching(q.heads, c.keep)
		if len(want) == 0 {
			t.Fatalf("filter %+v matches nothing in the fixtures: the case tests nothing", c.f)
		}
		for _, limit := range []int{0, 3} {
			f := c.f
			got := pageAll(t, fmt.Sprintf("heads %+v", f), limit, func(cursor string, limit int) ([]uint64, string, error) {
				f.Cursor, f.Limit = cursor, limit
				hs, next, err := q.s.Heads(ctx, f)
				var idx []uint64
				for _, e := range hs {
					if e.Kind != ledger.KindHead || e.Head.Commit != q.heads[e.Index].Commit || e.Head.Repository != q.heads[e.Index].Repository {
						t.Fatalf("heads %+v: answer at %d is not the head appended there", f, e.Index)
					}
					idx = append(idx, e.Index)
				}
				return idx, next, err
			})
			wantIndexes(t, fmt.Sprintf("heads %+v", f), got, want)
		}
	}
}

// testPaging: the default page is 50 entries and the largest 1000; a
// cursor pages to the end; appends after a cursor was handed out do not
// shift the pages that follow it.
func testPaging(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	const n = 1205
	for i := 0; i < n; i += 241 {
		recs := make([]ledger.Record, 241)
		for j := range recs {
			recs[j] = evRec(t, i+j)
		}
		appendOK(t, s, recs...)
	}
	first, next, err := s.Evidence(ctx, ledger.EvidenceFilter{})
	if err != nil || len(first) != 50 || next == "" || first[0].Index != n-1 {
		t.Fatalf("default page: %d entries, next %q, %v", len(first), next, err)
	}
	big, next, err := s.Evidence(ctx, ledger.EvidenceFilter{Limit: 5000})
	if err != nil || len(big) != 1000 || next == "" {
		t.Fatalf("page of limit 5000: %d entries, next %q, %v", len(big), next, err)
	}
	// New leaves after the cursor was handed out: the next page continues
	// below the cursor.
	appendOK(t, s, evRec(t, n), evRec(t, n+1))
	rest, more, err := s.Evidence(ctx, ledger.EvidenceFilter{Cursor: next, Limit: 1000})
	if err != nil || more != "" || len(rest) != n-1000 || rest[0].Index != n-1001 || rest[len(rest)-1].Index != 0 {
		t.Fatalf("page after the cursor: %d entries, next %q, %v; want leaves %d down to 0", len(rest), more, err, n-1001)
	}
	var want []uint64
	for i := n + 1; i >= 0; i-- {
		want = append(want, uint64(i))
	}
	got := pageAll(t, "evidence, limit 97", 97, func(cursor string, limit int) ([]uint64, string, error) {
		es, next, err := s.Evidence(ctx, ledger.EvidenceFilter{Cursor: cursor, Limit: limit})
		var idx []uint64
		for _, e := range es {
			idx = append(idx, e.Index)
		}
		return idx, next, err
	})
	wantIndexes(t, "every page", got, want)
}

// testTokens: tokens are created with a secret shown once, authenticate
// until revoked, and bad input is a field error.
func testTokens(t *testing.T, h Harness) {
	ctx := context.Background()
	s := h.Open(t)
	secret, tok, err := s.CreateToken(ctx, "ci-main", ledger.ScopeRecord, []string{"release-manager"})
	if err != nil {
		t.Fatal(err)
	}
	if secret == "" || tok.ID == "" || tok.Name != "ci-main" || tok.Scope != ledger.ScopeRecord || fmt.Sprint(tok.Roles) != "[release-manager]" || tok.RevokedAt != nil {
		t.Fatalf("created token %+v", tok)
	}
	got, err := s.Authenticate(ctx, secret)
	if err != nil || got.ID != tok.ID || got.Scope != ledger.ScopeRecord || fmt.Sprint(got.Roles) != "[release-manager]" {
		t.Fatalf("authenticate: %+v %v", got, err)
	}
	_, err = s.Authenticate(ctx, secret+"x")
	wantError(t, "unknown secret", err, ledger.CodeUnauthorized, "-")
	_, _, err = s.CreateToken(ctx, "ci-main", ledger.ScopeRead, nil)
	wantError(t, "duplicate name", err, ledger.CodeConflict, "-")
	_, _, err = s.CreateToken(ctx, "bad name!", ledger.ScopeRead, nil)
	wantError(t, "bad name", err, ledger.CodeInvalid, "name")
	_, _, err = s.CreateToken(ctx, "reader", "superuser", nil)
	wantError(t, "bad scope", err, ledger.CodeInvalid, "scope")
	_, _, err = s.CreateToken(ctx, "reader", ledger.ScopeRead, []string{"no spaces allowed"})
	wantError(t, "bad role", err, ledger.CodeInvalid, "roles")
	secret2, tok2, err := s.CreateToken(ctx, "reader", ledger.ScopeRead, nil)
	if err != nil {
		t.Fatal(err)
	}
	list, err := s.Tokens(ctx)
	if err != nil || len(list) != 2 || list[0].ID != tok.ID || list[1].ID != tok2.ID {
		t.Fatalf("tokens: %+v %v", list, err)
	}
	if err := s.RevokeToken(ctx, "ci-main"); err != nil {
		t.Fatal(err)
	}
	_, err = s.Authenticate(ctx, secret)
	wantError(t, "revoked token", err, ledger.CodeUnauthorized, "-")
	err = s.RevokeToken(ctx, "ci-main")
	wantError(t, "revoking twice", err, ledger.CodeNotFound, "-")
	if err := s.RevokeToken(ctx, tok2.ID); err != nil {
		t.Fatalf("revoke by id: %v", err)
	}
	_, err = s.Authenticate(ctx, secret2)
	wantError(t, "token revoked by id", err, ledger.CodeUnauthorized, "-")
	list, err = s.Tokens(ctx)
	if err != nil || len(list) != 2 || list[0].RevokedAt == nil || list[1].RevokedAt == nil {
		t.Fatalf("tokens after revoking: %+v %v", list, err)
	}
}
