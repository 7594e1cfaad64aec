package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
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

// tamperSQL is each storetest.Edit as SQL on the tables of migrations/.
func tamperSQL(edit storetest.Edit, i uint64) []string {
	return storetest.TamperSQL(edit, i, func(from, to string, i uint64) string {
		return fmt.Sprintf(`UPDATE leaves SET leaf = CAST(replace(CAST(leaf AS TEXT), '%s', '%s') AS BLOB) WHERE idx = %d`, from, to, i)
	}, "zeroblob(32)")
}
