package sqlite

import (
	"context"
	"strings"

	"github.com/evidence-ledger/ledger/ledger/sqlstore"
	"github.com/transparency-dev/merkle/compact"
)

// nodeBound is the least ord of a node that a tree of size leaves has
// not completed: a node's ord is end<<6 | level with end the tree size
// at which it completes, so a tree of size holds exactly the nodes with
// ord below (size+1)<<6.
func nodeBound(size uint64) int64 { return int64((size + 1) << 6) }

// queryer is what both *sql.DB and *sql.Tx offer.
type queryer = sqlstore.Execer

// fetchOrds loads the hashes of the given node keys into got, in chunks of
// at most 500 placeholders (sizes are rounded up to a few fixed shapes so
// SQLite's statement cache is reused).
func fetchOrds(ctx context.Context, q queryer, ords []int64, got map[int64][]byte) error {
	if db, ok := q.(*stmtDB); ok && db.nodes != nil {
		ords = db.nodes.take(ords, got)
	}
	// Level-0 nodes are the leaf hashes, kept in the leaves table.
	var inner []int64
	var leaves []int64
	for _, o := range ords {
		if o&63 == 0 {
			leaves = append(leaves, o)
		} else {
			inner = append(inner, o)
		}
	}
	if err := fetchIn(ctx, q, "SELECT ord, hash FROM tree_nodes WHERE ord IN ", inner, nil, got); err != nil {
		return err
	}
	// leaf idx = (ord >> 6) - 1
	return fetchIn(ctx, q, "SELECT idx, leaf_hash FROM leaves WHERE idx IN ", leaves, func(o int64) int64 { return (o >> 6) - 1 }, got)
}

// fetchIn runs q+"(?,...)" over keys (mapped by conv when non-nil) and
// stores each answer under its original key.
func fetchIn(ctx context.Context, q queryer, query string, ords []int64, conv func(int64) int64, got map[int64][]byte) error {
	back := map[int64]int64{}
	if conv != nil {
		for _, o := range ords {
			back[conv(o)] = o
		}
	}
	for len(ords) > 0 {
		n := min(len(ords), 500)
		chunk := ords[:n]
		ords = ords[n:]
		size := 8
		for size < n {
			size *= 4
		}
		size = min(size, 512)
		ph := strings.TrimSuffix(strings.Repeat("?,", size), ",")
		args := make([]any, size)
		for i := range args {
			v := chunk[min(i, n-1)]
			if conv != nil {
				v = conv(v)
			}
			args[i] = v
		}
		rows, err := q.QueryContext(ctx, query+"("+ph+")", args...)
		if err != nil {
			return err
		}
		for rows.Next() {
			var ord int64
			var h []byte
			if err := rows.Scan(&ord, &h); err != nil {
				rows.Close()
				return err
			}
			if conv != nil {
				ord = back[ord]
			}
			got[ord] = h
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// fetchNodes returns the hashes of the given perfect-subtree nodes.
func fetchNodes(ctx context.Context, q queryer, ids []compact.NodeID) ([][]byte, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	ords := make([]int64, len(ids))
	for i, id := range ids {
		ords[i] = sqlstore.NodeOrd(id)
	}
	got := make(map[int64][]byte, len(ids))
	if err := fetchOrds(ctx, q, ords, got); err != nil {
		return nil, err
	}
	return sqlstore.NodeHashes(ids, got)
}
