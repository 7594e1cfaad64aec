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

// fetchNodes returns the hashes of the given perfect-subtree nodes.
func fetchNodes(ctx context.Context, q queryer, ids []compact.NodeID) ([][]byte, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	ph := make([]string, len(ids))
	args := make([]any, len(ids))
	for i, id := range ids {
		ph[i] = "?"
		args[i] = nodeOrd(id)
	}
	rows, err := q.QueryContext(ctx, "SELECT ord, hash FROM tree_nodes WHERE ord IN ("+strings.Join(ph, ",")+")", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	got := make(map[int64][]byte, len(ids))
	for rows.Next() {
		var ord int64
		var h []byte
		if err := rows.Scan(&ord, &h); err != nil {
			return nil, err
		}
		got[ord] = h
	}
	if err := rows.Err(); err != nil {
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
