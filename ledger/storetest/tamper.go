package storetest

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
)

// TamperSQL is edit of leaf i as SQL statements on the tables of the
// ledger's migrations, for a SQL driver's Harness.Tamper (Evidence(i) is
// at index i: passed records have "cases_exact":216 and device model
// "test"). replaceInLeaf returns the engine's statement replacing from with
// to in the bytes of leaf i; zeroRoot is its expression of 32 zero bytes.
// It panics on an Edit it has no SQL for.
func TamperSQL(edit Edit, i uint64, replaceInLeaf func(from, to string, i uint64) string, zeroRoot string) []string {
	switch edit {
	case EditLeafBody:
		return []string{replaceInLeaf(`"cases_exact":216`, `"cases_exact":215`, i)}
	case EditLeafBodyRehash:
		return []string{replaceInLeaf("test", "tess", i)}
	case DeleteLeaf:
		return []string{fmt.Sprintf("DELETE FROM evidence_artifacts WHERE idx = %d", i), fmt.Sprintf("DELETE FROM leaves WHERE idx = %d", i)}
	case TruncateFrom:
		return []string{fmt.Sprintf("DELETE FROM evidence_artifacts WHERE idx >= %d", i), fmt.Sprintf("DELETE FROM leaves WHERE idx >= %d", i)}
	case SwapLeaves:
		return []string{
			fmt.Sprintf("UPDATE leaves SET idx = -1 WHERE idx = %d", i),
			fmt.Sprintf("UPDATE leaves SET idx = %d WHERE idx = %d", i, i+8),
			fmt.Sprintf("UPDATE leaves SET idx = %d WHERE idx = -1", i+8),
		}
	case InsertLeaf:
		return []string{fmt.Sprintf("INSERT INTO leaves(idx, id, kind, key, recorded_at, leaf, leaf_hash) SELECT %d, 'forged', kind, key, recorded_at, leaf, leaf_hash FROM leaves WHERE idx = 0", i)}
	case EditProjection:
		return []string{fmt.Sprintf("UPDATE leaves SET status = CASE status WHEN 'failed' THEN 'passed' ELSE 'failed' END WHERE idx = %d", i)}
	case EditCheckpoint:
		return []string{fmt.Sprintf("UPDATE checkpoints SET root = %s WHERE size = %d", zeroRoot, i+1)}
	case EditProjectionCommit:
		return []string{fmt.Sprintf("UPDATE leaves SET commit_id = '%s' WHERE idx = %d", strings.Repeat("0", 40), i)}
	}
	panic(fmt.Sprintf("no SQL for %v", edit))
}

// FixIDAndHash recomputes leaf idx's content id (in its bytes and its
// column) and its leaf hash in db, as a careful attacker would. sql spells
// a statement written with "?" placeholders in the engine's dialect.
func FixIDAndHash(t testing.TB, db *sql.DB, idx int64, sql func(string) string) {
	t.Helper()
	var raw []byte
	if err := db.QueryRow(sql("SELECT leaf FROM leaves WHERE idx = ?"), idx).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	l, err := ledger.DecodeLeaf(raw)
	if err != nil {
		t.Fatal(err)
	}
	l.ID = ledger.EntryID(l.Kind, l.Body)
	raw, _ = ledger.EncodeLeaf(l)
	h := ledger.LeafHash(raw)
	if _, err := db.Exec(sql("UPDATE leaves SET leaf = ?, leaf_hash = ?, id = ? WHERE idx = ?"), raw, h[:], l.ID, idx); err != nil {
		t.Fatal(err)
	}
}
