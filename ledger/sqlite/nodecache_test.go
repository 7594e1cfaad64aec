package sqlite

import "testing"

// The cache holds the newest nodes: with a limit of 4 (generations of 2),
// the oldest generation is dropped once a third one starts.
func TestNodeCacheEvictsOldestAndReportsMisses(t *testing.T) {
	c := newNodeCache(4)
	c.add([]int64{1, 2, 3}, [][]byte{{1}, {2}, {3}})
	c.add([]int64{3, 4}, [][]byte{{3}, {4}}) // 3 again: kept once
	c.add([]int64{5}, [][]byte{{5}})         // {1, 2} dropped
	got := map[int64][]byte{}
	miss := c.take([]int64{1, 2, 3, 4, 5, 6}, got)
	if len(miss) != 3 || miss[0] != 1 || miss[1] != 2 || miss[2] != 6 {
		t.Fatalf("misses %v, want [1 2 6]", miss)
	}
	if len(got) != 3 || got[3][0] != 3 || got[4][0] != 4 || got[5][0] != 5 {
		t.Fatalf("got %v", got)
	}
}
