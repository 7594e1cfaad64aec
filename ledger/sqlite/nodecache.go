package sqlite

import "sync"

// nodeCache keeps the hashes of recently committed tree nodes (leaves
// included, keyed by sqlstore.NodeOrd) so that the inclusion proofs answered right
// after an append, which need mostly the newest nodes, do not read them
// back from the database. Nodes are immutable once committed, so a cached
// hash is never stale; the writer publishes nodes only after its COMMIT
// returned.
//
// It keeps two generations of at most limit/2 nodes each: when the newer
// one is full it becomes the older and the older is dropped, so the cache
// holds the newest limit/2 to limit nodes. (A map evicting node by node
// would leave deleted slots behind that lengthen every probe.) Safe for
// concurrent use.
type nodeCache struct {
	mu       sync.RWMutex
	cur, old map[int64][]byte
	gen      int // the most nodes one generation holds
}

func newNodeCache(limit int) *nodeCache {
	gen := max(1, limit/2)
	return &nodeCache{cur: make(map[int64][]byte, gen), gen: gen}
}

// add publishes committed nodes.
func (c *nodeCache) add(ords []int64, hashes [][]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, o := range ords {
		if _, ok := c.cur[o]; ok {
			continue
		}
		if len(c.cur) >= c.gen {
			c.old, c.cur = c.cur, make(map[int64][]byte, c.gen)
		}
		c.cur[o] = hashes[i]
	}
}

// take moves every cached ord of ords into got and returns the misses.
func (c *nodeCache) take(ords []int64, got map[int64][]byte) []int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	miss := ords[:0:0]
	for _, o := range ords {
		if h, ok := c.cur[o]; ok {
			got[o] = h
		} else if h, ok := c.old[o]; ok {
			got[o] = h
		} else {
			miss = append(miss, o)
		}
	}
	return miss
}
