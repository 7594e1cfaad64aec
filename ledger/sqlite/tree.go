package sqlite

import (
	"context"
	"database/sql"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
)

var rangeFactory = &compact.RangeFactory{Hash: rfc6962.DefaultHasher.HashChildren}

// nodeOrd is the tree_nodes key of a node: (end_exclusive << 6) | level,
// which sorts nodes in the order an appending compact range completes them.
func nodeOrd(id compact.NodeID) int64 {
	end := (id.Index + 1) << id.Level
	return int64(end<<6 | uint64(id.Level))
}

// treeState is the writer's in-memory compact range over [0, size) and the
// latest checkpoint. Only the writer goroutine mutates it.
type treeState struct {
	rng    *compact.Range
	latest ledger.Checkpoint
}

func (t *treeState) size() uint64 { return t.rng.End() }

func (t *treeState) clone() *treeState {
	hs := make([][]byte, len(t.rng.Hashes()))
	copy(hs, t.rng.Hashes())
	r, _ := rangeFactory.NewRange(0, t.rng.End(), hs)
	return &treeState{rng: r, latest: t.latest}
}

func (t *treeState) root() ledger.Hash {
	var h ledger.Hash
	if t.rng.End() == 0 {
		copy(h[:], rfc6962.DefaultHasher.EmptyRoot())
		return h
	}
	r, _ := t.rng.GetRootHash(nil)
	copy(h[:], r)
	return h
}

// queryer is what both *sql.DB and *sql.Tx offer.
type queryer interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
}

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
		ords[i] = nodeOrd(id)
	}
	got := make(map[int64][]byte, len(ids))
	if err := fetchOrds(ctx, q, ords, got); err != nil {
		return nil, err
	}
	out := make([][]byte, len(ids))
	for i, id := range ids {
		h, ok := got[nodeOrd(id)]
		if !ok || len(h) != 32 {
			return nil, fmt.Errorf("tree node (level %d, index %d) is missing: the database is inconsistent, run ledger audit", id.Level, id.Index)
		}
		out[i] = h
	}
	return out, nil
}

// rangeAt rebuilds the compact range [0, size) from stored nodes.
func rangeAt(ctx context.Context, q queryer, size uint64) (*compact.Range, error) {
	ids := compact.RangeNodes(0, size, nil)
	hs, err := fetchNodes(ctx, q, ids)
	if err != nil {
		return nil, err
	}
	return rangeFactory.NewRange(0, size, hs)
}

func rootAt(ctx context.Context, q queryer, size uint64) (ledger.Hash, error) {
	var h ledger.Hash
	if size == 0 {
		copy(h[:], rfc6962.DefaultHasher.EmptyRoot())
		return h, nil
	}
	r, err := rangeAt(ctx, q, size)
	if err != nil {
		return h, err
	}
	root, err := r.GetRootHash(nil)
	if err != nil {
		return h, err
	}
	copy(h[:], root)
	return h, nil
}

// checkpointText is the body of a checkpoint note (the tlog checkpoint
// format: origin, decimal size, base64 root, each on its own line).
func checkpointText(origin string, size uint64, root ledger.Hash) string {
	return fmt.Sprintf("%s\n%d\n%s\n", origin, size, base64.StdEncoding.EncodeToString(root[:]))
}

// parseCheckpointText parses checkpointText's output.
func parseCheckpointText(text string) (origin string, size uint64, root ledger.Hash, err error) {
	lines := strings.Split(text, "\n")
	if len(lines) < 4 || lines[len(lines)-1] != "" {
		return "", 0, root, fmt.Errorf("malformed checkpoint text")
	}
	size, err = strconv.ParseUint(lines[1], 10, 64)
	if err != nil {
		return "", 0, root, fmt.Errorf("malformed checkpoint size: %w", err)
	}
	b, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(b) != 32 {
		return "", 0, root, fmt.Errorf("malformed checkpoint root")
	}
	copy(root[:], b)
	return lines[0], size, root, nil
}

// inclusion builds an inclusion proof for index in the tree of size.
func inclusion(ctx context.Context, q queryer, index, size uint64) (ledger.InclusionProof, error) {
	p := ledger.InclusionProof{Index: index, TreeSize: size}
	nodes, err := proof.Inclusion(index, size)
	if err != nil {
		return p, ledger.FieldError("index", "%v", err)
	}
	hs, err := fetchNodes(ctx, q, nodes.IDs)
	if err != nil {
		return p, err
	}
	hs, err = nodes.Rehash(hs, rfc6962.DefaultHasher.HashChildren)
	if err != nil {
		return p, err
	}
	leaf, err := fetchNodes(ctx, q, []compact.NodeID{compact.NewNodeID(0, index)})
	if err != nil {
		return p, err
	}
	copy(p.LeafHash[:], leaf[0])
	p.Hashes = make([]ledger.Hash, len(hs))
	for i, h := range hs {
		copy(p.Hashes[i][:], h)
	}
	if p.Root, err = rootAt(ctx, q, size); err != nil {
		return p, err
	}
	return p, nil
}

// inclusionMany builds inclusion proofs for several leaves in one tree of
// the given size and root, fetching the union of the needed nodes at once.
func inclusionMany(ctx context.Context, q queryer, idx []uint64, size uint64, root ledger.Hash) ([]ledger.InclusionProof, error) {
	plans := make([]proof.Nodes, len(idx))
	var ords []int64
	seen := map[int64]bool{}
	add := func(id compact.NodeID) {
		o := nodeOrd(id)
		if !seen[o] {
			seen[o] = true
			ords = append(ords, o)
		}
	}
	for i, ix := range idx {
		n, err := proof.Inclusion(ix, size)
		if err != nil {
			return nil, err
		}
		plans[i] = n
		for _, id := range n.IDs {
			add(id)
		}
		add(compact.NewNodeID(0, ix))
	}
	got := make(map[int64][]byte, len(ords))
	if err := fetchOrds(ctx, q, ords, got); err != nil {
		return nil, err
	}
	out := make([]ledger.InclusionProof, len(idx))
	for i, ix := range idx {
		hs := make([][]byte, len(plans[i].IDs))
		for j, id := range plans[i].IDs {
			h, ok := got[nodeOrd(id)]
			if !ok {
				return nil, fmt.Errorf("tree node (level %d, index %d) is missing: run ledger audit", id.Level, id.Index)
			}
			hs[j] = h
		}
		hs, err := plans[i].Rehash(hs, rfc6962.DefaultHasher.HashChildren)
		if err != nil {
			return nil, err
		}
		p := ledger.InclusionProof{Index: ix, TreeSize: size, Root: root, Hashes: make([]ledger.Hash, len(hs))}
		copy(p.LeafHash[:], got[nodeOrd(compact.NewNodeID(0, ix))])
		for j, h := range hs {
			copy(p.Hashes[j][:], h)
		}
		out[i] = p
	}
	return out, nil
}
