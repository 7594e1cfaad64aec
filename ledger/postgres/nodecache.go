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

// nodeCache holds the tree nodes (leaf hashes included) of the batches
// this process committed, by ord, so that the inclusion proofs of append
// answers, built right after their batch commits, read no node that this
// process wrote. A committed node never changes (the log only grows), so
// a cached hash is the stored one; nodes committed by another server are
// not cached and are read from the database. Safe for concurrent use.
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
// nodes first, the rest from the database in one ReadNodes query pair.
type answerNodes struct{ d *driver }

// AnswerNodes implements tlog.AnswerNodeReader.
func (d *driver) AnswerNodes() tlog.NodeReader { return answerNodes{d} }

// ReadNodes implements tlog.NodeReader.
func (a answerNodes) ReadNodes(ctx context.Context, ids []compact.NodeID) ([][]byte, error) {
	out := make([][]byte, len(ids))
	var miss []compact.NodeID
	var at []int
	c := a.d.cache
	c.mu.Lock()
	for i, id := range ids {
		if h, ok := c.m[sqlstore.NodeOrd(id)]; ok {
			out[i] = h[:]
		} else {
			miss, at = append(miss, id), append(at, i)
		}
	}
	c.mu.Unlock()
	if len(miss) == 0 {
		return out, nil
	}
	hs, err := fetchNodes(ctx, a.d.db, miss)
	if err != nil {
		return nil, err
	}
	for j, i := range at {
		out[i] = hs[j]
	}
	return out, nil
}
