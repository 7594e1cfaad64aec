package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAuditHeadsIndexEdits: heads_index edited behind the service's back
// (a row deleted, edited, moved, added to an evidence leaf, added for no
// leaf) is found, at the leaf it concerns, as the join of each leaf with
// its heads_index row finds it.
func TestAuditHeadsIndexEdits(t *testing.T) {
	ctx := context.Background()
	base := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(ctx, Options{Path: base})
	if err != nil {
		t.Fatal(err)
	}
	appendIndexLog(t, s, 0, 30)
	var head, head2, ev, n int64
	if err := s.DB().QueryRow("SELECT MIN(idx), MAX(idx) FROM heads_index").Scan(&head, &head2); err != nil {
		t.Fatal(err)
	}
	if err := s.DB().QueryRow("SELECT MIN(idx) FROM leaves WHERE kind = 'evidence' AND idx > ?", head).Scan(&ev); err != nil {
		t.Fatal(err)
	}
	if err := s.DB().QueryRow("SELECT COUNT(*) FROM leaves").Scan(&n); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if head == head2 {
		t.Fatalf("the log needs two head leaves, has one at %d", head)
	}
	if rep := auditPath(t, base); !rep.OK {
		t.Fatalf("clean log: %+v", rep)
	}
	copyRow := func(to int64) string {
		return fmt.Sprintf("INSERT INTO heads_index(idx, repository, ref, commit_id, verdict, decision) SELECT %d, repository, ref, commit_id, verdict, decision FROM heads_index WHERE idx = %d", to, head)
	}
	for _, tc := range []struct {
		name  string
		sql   []string
		index int64
		want  string
	}{
		{"delete-a-row", []string{fmt.Sprintf("DELETE FROM heads_index WHERE idx = %d", head2)}, head2, "head index row does not match"},
		{"edit-a-verdict", []string{fmt.Sprintf("UPDATE heads_index SET verdict = 'forged' WHERE idx = %d", head)}, head, "head index row does not match"},
		{"edit-a-decision", []string{fmt.Sprintf("UPDATE heads_index SET decision = 'forged' WHERE idx = %d", head2)}, head2, "head index row does not match"},
		{"row-on-an-evidence-leaf", []string{copyRow(ev)}, ev, "evidence leaf has a head index row"},
		{"move-a-row-past-the-log", []string{fmt.Sprintf("UPDATE heads_index SET idx = %d WHERE idx = %d", n+5, head)}, head, "head index row does not match"},
		{"move-a-row-onto-evidence", []string{fmt.Sprintf("UPDATE heads_index SET idx = %d WHERE idx = %d", ev, head)}, head, "head index row does not match"},
		{"row-of-no-leaf", []string{copyRow(n + 3)}, -1, "heads_index holds"},
		{"row-of-a-negative-index", []string{copyRow(-4)}, -1, "heads_index holds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.db")
			copyDB(t, base, path)
			rawExec(t, path, tc.sql...)
			rep := auditPath(t, path)
			if rep.OK || rep.FirstBadIndex != tc.index || !strings.Contains(rep.Problem, tc.want) {
				t.Fatalf("want index %d and %q, got %+v", tc.index, tc.want, rep)
			}
		})
	}
}

// copyDB copies a closed database file (and its -wal, when one is left)
// and the key files beside it.
func copyDB(t *testing.T, from, to string) {
	t.Helper()
	for _, f := range [][2]string{{from, to}, {from + "-wal", to + "-wal"},
		{filepath.Join(filepath.Dir(from), "ledger.key"), filepath.Join(filepath.Dir(to), "ledger.key")},
		{filepath.Join(filepath.Dir(from), "ledger.pub"), filepath.Join(filepath.Dir(to), "ledger.pub")}} {
		b, err := os.ReadFile(f[0])
		if os.IsNotExist(err) && strings.HasSuffix(f[0], "-wal") {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f[1], b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
