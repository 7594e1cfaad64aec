package tlog

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
)

// NodeReader reads the log's Merkle tree: the hashes of perfect subtrees
// (compact.NodeID; level 0 is a leaf hash). Drivers implement it over
// their stored nodes.
type NodeReader interface {
	// ReadNodes returns the 32-byte hash of each node of ids, in order. A
	// node that is not stored is an error (the store is inconsistent).
	ReadNodes(ctx context.Context, ids []compact.NodeID) ([][]byte, error)
}

var rangeFactory = &compact.RangeFactory{Hash: rfc6962.DefaultHasher.HashChildren}

// treeState is the writer's compact range over leaves [0, size) and the
// latest signed checkpoint. Only the writer goroutine uses it.
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

func (t *treeState) root() ledger.Hash { return rangeRoot(t.rng) }

// rangeRoot is the root of a compact range starting at 0 (the empty root
// for an empty range).
func rangeRoot(r *compact.Range) ledger.Hash {
	var h ledger.Hash
	if r.End() == 0 {
		copy(h[:], rfc6962.DefaultHasher.EmptyRoot())
		return h
	}
	root, _ := r.GetRootHash(nil)
	copy(h[:], root)
	return h
}

// rangeAt rebuilds the compact range [0, size) from stored nodes.
func rangeAt(ctx context.Context, nr NodeReader, size uint64) (*compact.Range, error) {
	ids := compact.RangeNodes(0, size, nil)
	var hs [][]byte
	if len(ids) > 0 {
		var err error
		if hs, err = nr.ReadNodes(ctx, ids); err != nil {
			return nil, err
		}
	}
	return rangeFactory.NewRange(0, size, hs)
}

// RootAt returns the Merkle root over leaves [0, size) computed from the
// stored nodes (the empty root for size 0).
func RootAt(ctx context.Context, nr NodeReader, size uint64) (ledger.Hash, error) {
	r, err := rangeAt(ctx, nr, size)
	if err != nil {
		return ledger.Hash{}, err
	}
	return rangeRoot(r), nil
}

// CheckpointText is the body of a checkpoint note in the tlog checkpoint
// format (c2sp.org/tlog-checkpoint): origin, decimal size and base64 root,
// each on its own line.
func CheckpointText(origin string, size uint64, root ledger.Hash) string {
	return fmt.Sprintf("%s\n%d\n%s\n", origin, size, base64.StdEncoding.EncodeToString(root[:]))
}

// ParseCheckpointText parses CheckpointText's output (extension lines
// after the root are allowed and ignored).
func ParseCheckpointText(text string) (origin string, size uint64, root ledger.Hash, err error) {
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

// memNodes reads nodes from m first and the rest from next (one
// ReadNodes call for the misses, none when m holds every node). m is not
// modified.
type memNodes struct {
	m    map[compact.NodeID][]byte
	next NodeReader
}

// ReadNodes implements NodeReader.
func (r memNodes) ReadNodes(ctx context.Context, ids []compact.NodeID) ([][]byte, error) {
	out := make([][]byte, len(ids))
	var miss []compact.NodeID
	var at []int
	for i, id := range ids {
		if h, ok := r.m[id]; ok {
			out[i] = h
		} else {
			miss, at = append(miss, id), append(at, i)
		}
	}
	if len(miss) == 0 {
		return out, nil
	}
	got, err := r.next.ReadNodes(ctx, miss)
	if err != nil {
		return nil, err
	}
	for j, i := range at {
		out[i] = got[j]
	}
	return out, nil
}

// inclusionMany builds inclusion proofs for the leaves idx in the tree of
// the given size and root, reading the union of the nodes they need in one
// ReadNodes call.
func inclusionMany(ctx context.Context, nr NodeReader, idx []uint64, size uint64, root ledger.Hash) ([]ledger.InclusionProof, error) {
	plans := make([]proof.Nodes, len(idx))
	var ids []compact.NodeID
	pos := map[compact.NodeID]int{}
	add := func(id compact.NodeID) {
		if _, ok := pos[id]; !ok {
			pos[id] = len(ids)
			ids = append(ids, id)
		}
	}
	for i, ix := range idx {
		n, err := proof.Inclusion(ix, size)
		if err != nil {
			return nil, ledger.FieldError("index", "%v", err)
		}
		plans[i] = n
		for _, id := range n.IDs {
			add(id)
		}
		add(compact.NewNodeID(0, ix))
	}
	var got [][]byte
	if len(ids) > 0 {
		var err error
		if got, err = nr.ReadNodes(ctx, ids); err != nil {
			return nil, err
		}
	}
	out := make([]ledger.InclusionProof, len(idx))
	for i, ix := range idx {
		hs := make([][]byte, len(plans[i].IDs))
		for j, id := range plans[i].IDs {
			hs[j] = got[pos[id]]
		}
		hs, err := plans[i].Rehash(hs, rfc6962.DefaultHasher.HashChildren)
		if err != nil {
			return nil, err
		}
		p := ledger.InclusionProof{Index: ix, TreeSize: size, Root: root, Hashes: make([]ledger.Hash, len(hs))}
		copy(p.LeafHash[:], got[pos[compact.NewNodeID(0, ix)]])
		for j, h := range hs {
			copy(p.Hashes[j][:], h)
		}
		out[i] = p
	}
	return out, nil
}

// inclusion builds the inclusion proof of leaf index in the tree of size,
// with the root computed from the stored nodes.
func inclusion(ctx context.Context, nr NodeReader, index, size uint64) (ledger.InclusionProof, error) {
	root, err := RootAt(ctx, nr, size)
	if err != nil {
		return ledger.InclusionProof{Index: index, TreeSize: size}, err
	}
	ps, err := inclusionMany(ctx, nr, []uint64{index}, size, root)
	if err != nil {
		return ledger.InclusionProof{Index: index, TreeSize: size}, err
	}
	return ps[0], nil
}

// consistency builds the consistency proof from tree size from to size to,
// with both roots computed from the stored nodes.
func consistency(ctx context.Context, nr NodeReader, from, to uint64) (ledger.ConsistencyProof, error) {
	out := ledger.ConsistencyProof{From: from, To: to}
	nodes, err := proof.Consistency(from, to)
	if err != nil {
		return out, ledger.FieldError("from", "%v", err)
	}
	var hs [][]byte
	if len(nodes.IDs) > 0 {
		if hs, err = nr.ReadNodes(ctx, nodes.IDs); err != nil {
			return out, err
		}
	}
	if hs, err = nodes.Rehash(hs, rfc6962.DefaultHasher.HashChildren); err != nil {
		return out, err
	}
	out.Hashes = make([]ledger.Hash, len(hs))
	for i, h := range hs {
		copy(out.Hashes[i][:], h)
	}
	if out.FromRoot, err = RootAt(ctx, nr, from); err != nil {
		return out, err
	}
	if out.ToRoot, err = RootAt(ctx, nr, to); err != nil {
		return out, err
	}
	return out, nil
}
