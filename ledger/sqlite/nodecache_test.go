package sqlite

import "testing"

func TestNodeCacheEvictsOldestAndReportsMisses(t *testing.T) {
	c := newNodeCache(3)
	c.add([]int64{1, 2, 3}, [][]byte{{1}, {2}, {3}})
	c.add([]int64{4}, [][]byte{{4}}) // evicts 1
	got := map[int64][]byte{}
	miss := c.take([]int64{1, 2, 3, 4, 5}, got)
	if len(miss) != 2 || miss[0] != 1 || miss[1] != 5 {
		t.Fatalf("misses %v, want [1 5]", miss)
	}
	if len(got) != 3 || got[4][0] != 4 || got[2][0] != 2 {
		t.Fatalf("got %v", got)
	}
}
