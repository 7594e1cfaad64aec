package sqlite

import (
	"context"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlstore"
	"strings"
	"testing"
)

// TestQueryPlansUseIndexes guards "indexes, not scans" for the queries the
// gates and filters run on large logs.
func TestQueryPlansUseIndexes(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	plans := []struct {
		query string
		args  []any
		want  string
	}{
		{"SELECT l.idx FROM leaves l WHERE l.kind = ? AND l.kind <> 'evidence' AND l.key = ? ORDER BY l.idx DESC LIMIT 1", []any{"release", "1.0"}, "leaves_kind_key"},
		{"SELECT a.idx FROM evidence_artifacts a WHERE a.digest >= ? AND a.digest < ?", []any{"sha256:ab", "sha256:abg"}, "PRIMARY KEY"},
		// Every authentication runs it: the token-leaf count must not scan the leaves.
		{sqlstore.AuthRowQuery, []any{[]byte{1}}, "SEARCH leaves USING COVERING INDEX leaves_kind_key (kind=?)"},
	}
	// The evidence queries as Evidence builds them.
	commit := strings.Repeat("ab", 20)
	for _, f := range []struct {
		filter ledger.EvidenceFilter
		want   string
	}{
		{ledger.EvidenceFilter{Lane: "x/v1", Commit: commit}, "evidence_lane_commit (key=? AND commit_id=?"},
		{ledger.EvidenceFilter{Lane: "x/v1"}, "evidence_lane (key=?"},
		{ledger.EvidenceFilter{Commit: commit}, "evidence_commit (commit_id=?"},
		{ledger.EvidenceFilter{Commit: "abcd"}, "evidence_commit (commit_id>? AND commit_id<?"},
		{ledger.EvidenceFilter{Lane: "x/v1", Backend: "cpu", Status: "passed"}, "evidence_lane (key=?"},
		{ledger.EvidenceFilter{Status: "inconclusive"}, "evidence_unpassed (status=?"},
		{ledger.EvidenceFilter{Status: "failed", Backend: "cuda"}, "evidence_unpassed (status=?"},
		{ledger.EvidenceFilter{ArtifactDigest: "sha256:abcd"}, "SEARCH a USING PRIMARY KEY (digest>? AND digest<?)"},
		// No index on backend: the newest-first scan of the primary key
		// stops at the page limit (no sort).
		{ledger.EvidenceFilter{Backend: "cpu"}, "SCAN l"},
	} {
		q, args, _, err := dialect.EvidenceQuery(f.filter)
		if err != nil {
			t.Fatal(err)
		}
		plans = append(plans, struct {
			query string
			args  []any
			want  string
		}{q, args, f.want})
	}
	for _, p := range plans {
		rows, err := s.d.r.DB.QueryContext(ctx, "EXPLAIN QUERY PLAN "+p.query, p.args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		joined := strings.Join(plan, " | ")
		scanned := strings.Contains(joined, "SCAN") && !strings.Contains(joined, "USING") && !strings.HasPrefix(p.want, "SCAN")
		// Newest-first pages come straight from an index, without a sort,
		// except for commit prefixes (a range of commits).
		sorted := strings.Contains(joined, "TEMP B-TREE") && !strings.Contains(p.want, "commit_id>?")
		if !strings.Contains(joined, p.want) || scanned || sorted {
			t.Errorf("%s\nplan: %s\nwant it to use %s", p.query, joined, p.want)
		}
	}
}
