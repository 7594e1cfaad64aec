package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/storetest"
)

// The conformance suite against SQLite stores in temporary directories;
// Tamper edits the database file with SQL, as someone with the file but
// not the key would.
func TestConformance(t *testing.T) {
	var mu sync.Mutex
	paths := map[ledger.Store]string{}
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T) ledger.Store {
			path := filepath.Join(t.TempDir(), "ledger.db")
			s, err := Open(context.Background(), Options{Path: path})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			mu.Lock()
			paths[s] = path
			mu.Unlock()
			return s
		},
		Tamper: func(t *testing.T, s ledger.Store, edit storetest.Edit, i uint64) ledger.Store {
			mu.Lock()
			path := paths[s]
			mu.Unlock()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			rawExec(t, path, tamperSQL(edit, i)...)
			if edit == storetest.EditLeafBodyRehash {
				fixLeafHash(t, path, int(i))
				fixID(t, path, int(i))
			}
			ro, err := Open(context.Background(), Options{Path: path, ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ro.Close() })
			return ro
		},
	})
}

// tamperSQL is each storetest.Edit as SQL on the tables of migrations/
// (storetest.Evidence(i) is at index i: passed records have
// "cases_exact":216 and device model "test").
func tamperSQL(edit storetest.Edit, i uint64) []string {
	switch edit {
	case storetest.EditLeafBody:
		return []string{fmt.Sprintf(`UPDATE leaves SET leaf = CAST(replace(CAST(leaf AS TEXT), '"cases_exact":216', '"cases_exact":215') AS BLOB) WHERE idx = %d`, i)}
	case storetest.EditLeafBodyRehash:
		return []string{fmt.Sprintf(`UPDATE leaves SET leaf = CAST(replace(CAST(leaf AS TEXT), 'test', 'tess') AS BLOB) WHERE idx = %d`, i)}
	case storetest.DeleteLeaf:
		return []string{fmt.Sprintf("DELETE FROM evidence_artifacts WHERE idx = %d", i), fmt.Sprintf("DELETE FROM leaves WHERE idx = %d", i)}
	case storetest.TruncateFrom:
		return []string{fmt.Sprintf("DELETE FROM evidence_artifacts WHERE idx >= %d", i), fmt.Sprintf("DELETE FROM leaves WHERE idx >= %d", i)}
	case storetest.SwapLeaves:
		return []string{
			fmt.Sprintf("UPDATE leaves SET idx = -1 WHERE idx = %d", i),
			fmt.Sprintf("UPDATE leaves SET idx = %d WHERE idx = %d", i, i+8),
			fmt.Sprintf("UPDATE leaves SET idx = %d WHERE idx = -1", i+8),
		}
	case storetest.InsertLeaf:
		return []string{fmt.Sprintf("INSERT INTO leaves(idx, id, kind, key, recorded_at, leaf, leaf_hash) SELECT %d, 'forged', kind, key, recorded_at, leaf, leaf_hash FROM leaves WHERE idx = 0", i)}
	case storetest.EditProjection:
		return []string{fmt.Sprintf("UPDATE leaves SET status = CASE status WHEN 'failed' THEN 'passed' ELSE 'failed' END WHERE idx = %d", i)}
	case storetest.EditCheckpoint:
		return []string{fmt.Sprintf("UPDATE checkpoints SET root = zeroblob(32) WHERE size = %d", i+1)}
	case storetest.EditProjectionCommit:
		return []string{fmt.Sprintf("UPDATE leaves SET commit_id = '%s' WHERE idx = %d", strings.Repeat("0", 40), i)}
	}
	panic(fmt.Sprintf("no SQL for %v", edit))
}
