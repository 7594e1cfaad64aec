package sqlstore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/transparency-dev/merkle/compact"
)

// Execer is a Queryer that also runs statements: *sql.DB, *sql.Tx,
// *sql.Conn.
type Execer interface {
	Queryer
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
}

// NodeOrd is the tree_nodes key of a node: (end_exclusive << 6) | level,
// which sorts nodes in the order an appending compact range completes
// them (the same key in both drivers, so rows copy unchanged).
func NodeOrd(id compact.NodeID) int64 {
	end := (id.Index + 1) << id.Level
	return int64(end<<6 | uint64(id.Level))
}

// OrdNode is the inverse of NodeOrd; an ord NodeOrd never gives decodes
// to a node of level 255, which no tree has.
func OrdNode(ord int64) compact.NodeID {
	level := uint(ord & 63)
	end := uint64(ord) >> 6
	id := compact.NewNodeID(level, (end>>level)-1)
	if ord < 0 || end == 0 || end&(1<<level-1) != 0 || NodeOrd(id) != ord {
		return compact.NodeID{Level: 255, Index: uint64(ord)}
	}
	return id
}

// NodeHashes returns the hashes of ids, in order, from got (by NodeOrd).
// A node missing from got, or whose hash is not 32 bytes, is an error
// naming it: the database is inconsistent.
func NodeHashes(ids []compact.NodeID, got map[int64][]byte) ([][]byte, error) {
	out := make([][]byte, len(ids))
	for i, id := range ids {
		h, ok := got[NodeOrd(id)]
		if !ok || len(h) != 32 {
			return nil, fmt.Errorf("tree node (level %d, index %d) is missing: the database is inconsistent, run ledger audit", id.Level, id.Index)
		}
		out[i] = h
	}
	return out, nil
}
