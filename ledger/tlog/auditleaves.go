package tlog

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"sync"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/transparency-dev/merkle/compact"
)

// The audit's stream of leaves (RunAudit): read in batches on one
// goroutine, checked on GOMAXPROCS workers, fed into the tree in order.

// leaves streams the leaves: one goroutine reads them in order, GOMAXPROCS
// workers verify a batch at a time (hashing, decoding, projection checks
// are independent per leaf), and the batch is fed into the tree in order.
func (a *auditRun[P]) leaves(ctx context.Context) (bad bool, err error) {
	batches := make(chan []AuditRow[P], 2)
	// Batches whose rows were added go back to the reader (the reader,
	// the channel and the checker hold at most 4 at a time).
	free := make(chan []AuditRow[P], 4)
	readErr := make(chan error, 1)
	stopRead := make(chan struct{})
	defer close(stopRead)
	go func() {
		defer close(batches)
		for {
			var rows []AuditRow[P]
			select {
			case rows = <-free:
			default:
				rows = make([]AuditRow[P], 0, auditBatch)
			}
			batch, err := a.src.ReadLeaves(ctx, rows[:0])
			if err != nil || len(batch) == 0 {
				readErr <- err
				return
			}
			select {
			case batches <- batch:
			case <-stopRead:
				readErr <- nil
				return
			}
		}
	}()
	workers := max(1, runtime.GOMAXPROCS(0))
	for batch := range batches {
		a.check(batch, workers)
		if bad, err := a.apply(batch); bad || err != nil {
			return bad, err
		}
		select {
		case free <- batch:
		default:
		}
	}
	return false, <-readErr
}

// check runs checkLeaf over batch on workers goroutines.
func (a *auditRun[P]) check(batch []AuditRow[P], workers int) {
	var wg sync.WaitGroup
	per := (len(batch) + workers - 1) / workers
	for lo := 0; lo < len(batch); lo += per {
		rows := batch[lo:min(len(batch), lo+per)]
		wg.Go(func() {
			for i := range rows {
				checkLeaf(a.src, &rows[i])
			}
		})
	}
	wg.Wait()
}

// apply feeds a checked batch into the tree in order, comparing the
// stored nodes and the checkpoints' roots on the way.
func (a *auditRun[P]) apply(batch []AuditRow[P]) (bad bool, err error) {
	for i := range batch {
		r := &batch[i]
		idx := r.Index
		switch {
		case idx > a.expect:
			a.bad(int64(a.expect), "leaf %d is missing (next stored leaf is %d)", a.expect, idx)
			return true, nil
		case idx < a.expect:
			a.bad(int64(idx), "leaf index %d repeats", idx)
			return true, nil
		case a.latest == 0 || idx >= a.latest:
			a.bad(int64(idx), "leaf %d is not covered by any signed checkpoint (latest size %d): inserted behind the service's back", idx, a.latest)
			return true, nil
		case r.problem != "":
			a.bad(int64(idx), "leaf %d (kind %s, %s check): %s", idx, ledger.Clip(r.Kind), r.failure, r.problem)
			a.rep.BadKind, a.rep.Failure = r.Kind, r.failure
			return true, nil
		}
		if ledger.Kind(r.Kind) == ledger.KindKeyRotation {
			if h, ok := a.rots[idx]; !ok || !bytes.Equal(h, r.LeafHash) {
				a.bad(int64(idx), "key rotation leaf %d is not the one the snapshot listed", idx)
				return true, nil
			}
			a.rotSeen++
		}
		a.src.AddLeaf(r)
		// A copy: the range keeps the slices it is given, and the
		// batch's rows are read into again.
		h := r.Hash
		if err := a.rng.Append(h[:], a.visit); err != nil {
			return false, err
		}
		if a.nodeErr != nil {
			return false, fmt.Errorf("read stored tree nodes: %w", a.nodeErr)
		}
		if a.nodeProblem != "" {
			a.bad(a.nodeBad, "%s", a.nodeProblem)
			return true, nil
		}
		a.expect++
		if a.rootsMismatch() {
			return true, nil
		}
	}
	return false, nil
}

// rootsMismatch compares the root of the leaves so far with every
// checkpoint of that size; on a mismatch it records the problem.
func (a *auditRun[P]) rootsMismatch() bool {
	for a.cpi < len(a.cps) && a.cps[a.cpi].size == a.expect {
		if rangeRoot(a.rng) != a.cps[a.cpi].root {
			from := uint64(0)
			if a.cpi > 0 {
				from = a.cps[a.cpi-1].size
			}
			a.bad(int64(from), "root over leaves [0, %d) does not match the signed checkpoint: a leaf in [%d, %d) was changed", a.expect, from, a.expect)
			return true
		}
		a.verified = a.expect
		a.cpi++
	}
	return false
}

// visit compares a node the recomputed tree completed with the next
// stored node.
func (a *auditRun[P]) visit(id compact.NodeID, h []byte) {
	if a.nodeProblem != "" || a.nodeErr != nil || id.Level == 0 {
		return
	}
	first := max(int64(id.Index<<id.Level), int64(a.verified))
	sid, stored, ok, err := a.src.NextNode(context.Background())
	switch {
	case err != nil:
		a.nodeErr = err
		return
	case !ok:
		a.nodeProblem = fmt.Sprintf("tree node (level %d, index %d) is missing", id.Level, id.Index)
	case sid != id:
		a.nodeProblem = fmt.Sprintf("tree node order broken at (level %d, index %d): stored nodes were inserted, deleted or reordered", id.Level, id.Index)
	case !bytes.Equal(stored, h):
		a.nodeProblem = fmt.Sprintf("tree node (level %d, index %d) does not match the hash recomputed from the leaves", id.Level, id.Index)
	default:
		return
	}
	a.nodeBad = first
}
