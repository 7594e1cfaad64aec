package tlog

import (
	"context"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/transparency-dev/merkle/compact"
)

// entryAt is the leaf at idx: appended by this batch (run.added) or
// stored before it.
func (run *batchRun) entryAt(ctx context.Context, idx uint64) (ledger.Entry, error) {
	if base := run.before.size(); idx >= base && idx-base < uint64(len(run.added)) {
		return run.added[idx-base], nil
	}
	return run.b.EntryAt(ctx, idx)
}

// evidenceOnly reports whether r appends evidence records only: rows
// that no guard or later request of the batch reads through the Batch,
// so their Flush may wait for the batch's end.
func evidenceOnly(r *appendReq) bool {
	if r.rotate != nil {
		return false
	}
	for i := range r.recs {
		if r.recs[i].Kind != ledger.KindEvidence {
			return false
		}
	}
	return true
}

// addNode buffers a node the tree completed in the batch and keeps it for
// the answers' proofs. A node of a request that failed afterwards is
// replaced by the same node of a later request, or lies beyond the
// batch's final size, where no proof of a committed size reaches.
func (run *batchRun) addNode(id compact.NodeID, hash []byte) {
	run.b.AddNode(id, hash)
	run.nodes[id] = hash
}

// batchNodes returns the nodes the answers' inclusion proofs read first:
// those the batch completed and the compact range of the log before it
// (the perfect subtrees left of the batch's leaves). Together they hold
// every node the proof of a leaf the batch appended needs, so answers
// read none from the store; nil when the batch appended nothing. Called
// once the batch committed; the map is read-only from then on.
func (run *batchRun) batchNodes() map[compact.NodeID][]byte {
	if run.nodes == nil {
		return nil
	}
	if n := run.before.size(); n > 0 {
		for i, id := range compact.RangeNodes(0, n, nil) {
			run.nodes[id] = run.before.rng.Hashes()[i]
		}
	}
	return run.nodes
}
