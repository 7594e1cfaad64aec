package sqlite

import (
	"context"
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
		{"SELECT e.idx FROM evidence_index e WHERE e.lane = ? AND e.commit_id = ? ORDER BY e.idx DESC LIMIT 10", []any{"x/v1", "ab"}, "evidence_lane_commit"},
		{"SELECT e.idx FROM evidence_index e WHERE e.lane = ? ORDER BY e.idx DESC LIMIT 10", []any{"x/v1"}, "evidence_lane"},
	}
	for _, p := range plans {
		rows, err := s.r.DB.QueryContext(ctx, "EXPLAIN QUERY PLAN "+p.query, p.args...)
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
		if !strings.Contains(joined, p.want) || strings.Contains(joined, "SCAN") && !strings.Contains(joined, "USING") {
			t.Errorf("%s\nplan: %s\nwant it to use %s", p.query, joined, p.want)
		}
	}
}
