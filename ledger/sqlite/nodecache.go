package sqlite

import "sync"

// nodeCache keeps the hashes of recently committed tree nodes (leaves
// included, keyed by nodeOrd) so that the inclusion proofs answered right
// after an append, which need mostly the newest nodes, do not read them
// back from the database. Nodes are immutable once committed, so a cached
// hash is never stale; the writer publishes nodes only after its COMMIT
// returned. It holds at most capacity nodes, evicting the oldest first.
// Safe for concurrent use.
type nodeCache struct {
	mu    sync.RWMutex
	m     map[int64][]byte
	ring  []int64
	next  int
	limit int
}

func newNodeCache(limit int) *nodeCache {
	return &nodeCache{m: make(map[int64][]byte, limit), ring: make([]int64, 0, limit), limit: limit}
}

// add publishes committed nodes.
func (c *nodeCache) add(ords []int64, hashes [][]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, o := range ords {
		if _, ok := c.m[o]; ok {
			continue
		}
		if len(c.ring) < c.limit {
			c.ring = append(c.ring, o)
		} else {
			delete(c.m, c.ring[c.next])
			c.ring[c.next] = o
			c.next = (c.next + 1) % c.limit
		}
		c.m[o] = hashes[i]
	}
}

// take moves every cached ord of ords into got and returns the misses.
func (c *nodeCache) take(ords []int64, got map[int64][]byte) []int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	miss := ords[:0:0]
	for _, o := range ords {
		if h, ok := c.m[o]; ok {
			got[o] = h
		} else {
			miss = append(miss, o)
		}
	}
	return miss
}
