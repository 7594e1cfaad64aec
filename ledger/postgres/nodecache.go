package postgres

import (
	"context"
	"sync"

	"github.com/evidence-ledger/ledger/ledger/sqlstore"
	"github.com/evidence-ledger/ledger/ledger/tlog"
	"github.com/transparency-dev/merkle/compact"
)

// Node cache bounds: nodes of levels below cacheKeepLevel are kept while
// they end within cacheWindow leaves of the largest committed size this
// process saw; nodes of higher levels (one per 2^cacheKeepLevel leaves
// and level) are kept for the process's life. An inclusion proof of a
// leaf in the last cacheWindow leaves needs no other node of this
// process's commits.
const (
	cacheWindow    = 1 << 14
	cacheKeepLevel = 14
)

// cachedNode is one tree node a batch wrote: its ord (sqlstore.NodeOrd;
// level 0 is a leaf hash) and hash.
type cachedNode struct {
	ord  int64
	hash [32]byte
}

// nodeCache holds tree nodes (leaf hashes included) by ord: those of the
// batches this process committed and those it read as committed (another
// server's), so that the inclusion proofs of append answers, built right
// after their batch commits, and a batch's reload of the tree after
// another server appended read few nodes from the database. A committed
// node never changes (the log only grows), so a cached hash is the stored
// one. Safe for concurrent use.
type nodeCache struct {
	mu     sync.Mutex
	m      map[int64][32]byte
	end    uint64 // largest leaf count a cached node ends at
	pruned uint64 // end at the last prune
}

func newNodeCache() *nodeCache { return &nodeCache{m: map[int64][32]byte{}} }

// add caches the nodes of a committed batch.
func (c *nodeCache) add(nodes []cachedNode) {
	if len(nodes) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range nodes {
		c.m[n.ord] = n.hash
		c.end = max(c.end, uint64(n.ord)>>6)
	}
	if c.end-c.pruned >= cacheWindow {
		c.pruned = c.end
		for ord := range c.m {
			if ord&63 < cacheKeepLevel && uint64(ord)>>6+cacheWindow < c.end {
				delete(c.m, ord)
			}
		}
	}
}

// addRead caches nodes read as committed.
func (c *nodeCache) addRead(ids []compact.NodeID, hs [][]byte) {
	nodes := make([]cachedNode, 0, len(ids))
	for i, id := range ids {
		if len(hs[i]) == 32 {
			n := cachedNode{ord: sqlstore.NodeOrd(id)}
			copy(n.hash[:], hs[i])
			nodes = append(nodes, n)
		}
	}
	c.add(nodes)
}

// read fills out[i] for each cached node of ids and returns the others
// with their positions.
func (c *nodeCache) read(ids []compact.NodeID, out [][]byte) (miss []compact.NodeID, at []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, id := range ids {
		if h, ok := c.m[sqlstore.NodeOrd(id)]; ok {
			out[i] = h[:]
		} else {
			miss, at = append(miss, id), append(at, i)
		}
	}
	return miss, at
}

// readThrough reads ids from the cache and the rest with fetch; fetched
// nodes are cached when committed says they were read as committed.
func (c *nodeCache) readThrough(ctx context.Context, ids []compact.NodeID, committed bool, fetch func(context.Context, []compact.NodeID) ([][]byte, error)) ([][]byte, error) {
	out := make([][]byte, len(ids))
	miss, at := c.read(ids, out)
	if len(miss) == 0 {
		return out, nil
	}
	hs, err := fetch(ctx, miss)
	if err != nil {
		return nil, err
	}
	for j, i := range at {
		out[i] = hs[j]
	}
	if committed {
		c.addRead(miss, hs)
	}
	return out, nil
}

// forgetBeyond empties the cache when the stored log holds fewer than
// size leaves than it has nodes of (the database went back under the
// process; the engine then refuses to sign, and no cached node must
// answer for what the database no longer holds).
func (c *nodeCache) forgetBeyond(size uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.end > size {
		c.m, c.end, c.pruned = map[int64][32]byte{}, 0, 0
	}
}

// answerNodes is the driver's tlog.NodeReader for append answers: cached
// nodes first, the rest from the database in one query pair (and then
// cached).
type answerNodes struct{ d *driver }

// AnswerNodes implements tlog.AnswerNodeReader.
func (d *driver) AnswerNodes() tlog.NodeReader { return answerNodes{d} }

// ReadNodes implements tlog.NodeReader.
func (a answerNodes) ReadNodes(ctx context.Context, ids []compact.NodeID) ([][]byte, error) {
	return a.d.cache.readThrough(ctx, ids, true, func(ctx context.Context, ids []compact.NodeID) ([][]byte, error) {
		return fetchNodes(ctx, a.d.db, ids)
	})
}
