package sqlite

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/evidence-ledger/ledger/ledger"
)

// idFilter is a Bloom filter (github.com/bits-and-blooms/bloom/v3) over the
// content ids of the log's leaves. It spares appending callers their
// entry_ids lookup (see driver.lookupIDs): an id the filter has never seen is in
// no table, and a new record's id almost never is (a false positive, about
// 1 in 1,000 per stage, costs one indexed lookup).
//
// What it holds is a superset of the ids of the leaves [0, upTo) once
// ready: a builder goroutine, started by the store's first Append, adds the
// ids of a snapshot of the id tables, the writer adds every id it commits and every id another
// process appended (when it reloads the log). The writer publishes the
// id watermark (idIndex.w, in Store.pubW) only after adding a commit's
// ids, so a caller that reads the watermark before testing the filter
// tests a filter that holds every id entry_ids held at that watermark; a
// merge since then moves the watermark, and the writer then looks the ids
// up itself (applyReq).
//
// Bloom filters cannot grow, so the filter is a list of stages: when the
// newest holds its capacity, a stage twice as large is added. Memory is
// about 1.8 bytes per id (14.4 bits at a 0.1% false-positive rate).
// Safe for concurrent use.
type idFilter struct {
	mu     sync.RWMutex
	stages []*bloom.BloomFilter
	n      uint // ids added to the newest stage
	limit  uint // the newest stage's capacity
	ready  atomic.Bool

	// Writer goroutine only.
	started bool   // the writer has loaded the log once
	from    uint64 // the log size the writer started adding at
	upTo    uint64 // the writer has added the ids of leaves [from, upTo)
	built   chan uint64
}

// idFilterFP is each stage's false-positive rate.
const idFilterFP = 0.001

// idFilterMinCap is the smallest first stage (a variable for tests).
var idFilterMinCap uint = 1 << 16

func newIDFilter(capacity uint) *idFilter {
	capacity = max(capacity, idFilterMinCap)
	return &idFilter{stages: []*bloom.BloomFilter{bloom.NewWithEstimates(capacity, idFilterFP)}, limit: capacity, built: make(chan uint64, 1)}
}

// add adds ids.
func (f *idFilter) add(ids ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		f.addLocked(id)
	}
}

func (f *idFilter) addLocked(id string) {
	if f.n >= f.limit {
		f.limit *= 2
		f.stages = append(f.stages, bloom.NewWithEstimates(f.limit, idFilterFP))
		f.n = 0
	}
	f.stages[len(f.stages)-1].AddString(id)
	f.n++
}

// maybe returns the ids of recs that the filter may hold. Only a ready
// filter answers for the whole log (driver.lookupIDs checks).
func (f *idFilter) maybe(recs []ledger.Prepared) []ledger.Prepared {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []ledger.Prepared
	for _, p := range recs {
		for _, st := range f.stages {
			if st.TestString(p.ID) {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// startIDFilter starts the filter's builder once (Append calls it: a
// one-shot command that opens the store for a single append closes it
// before the filter would help).
func (d *driver) startIDFilter() {
	d.buildOnce.Do(func() {
		d.lifeMu.Lock()
		defer d.lifeMu.Unlock()
		select {
		case <-d.done:
		default:
			d.wg.Add(1)
			go d.buildIDFilter(d.buildCtx)
		}
	})
}

// buildIDFilter adds the ids of the id tables as one read snapshot sees them and
// sends the log size of that snapshot to the writer (f.built), which
// closes any gap and then marks the filter ready (see writerSync). On an
// error the filter stays not ready: callers keep looking ids up in the
// database.
func (d *driver) buildIDFilter(ctx context.Context) {
	defer d.wg.Done()
	start := time.Now()
	size, err := func() (uint64, error) {
		tx, err := d.r.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback()
		var n uint64
		if err := tx.QueryRowContext(ctx, storedSizeQuery).Scan(&n); err != nil {
			return 0, err
		}
		for _, q := range []string{"SELECT id FROM entry_ids", "SELECT id FROM recent_ids"} {
			rows, err := tx.QueryContext(ctx, q)
			if err != nil {
				return 0, err
			}
			batch := make([]string, 0, 4096)
			for rows.Next() {
				var id string
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return 0, err
				}
				if batch = append(batch, id); len(batch) == cap(batch) {
					d.idf.add(batch...)
					batch = batch[:0]
				}
			}
			if err := rows.Err(); err != nil {
				rows.Close()
				return 0, err
			}
			rows.Close()
			d.idf.add(batch...)
		}
		return n, nil
	}()
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("content-id filter not built; appends look every id up in the database", "err", err)
		}
		return
	}
	if size > 0 {
		d.log.Debug("content-id filter built", "leaves", size, "took", time.Since(start).Round(time.Millisecond))
	}
	d.idf.built <- size
}

// writerSync brings the filter up to the log size n that the writer has
// just loaded (inside its write transaction, q): the ids of leaves another
// process appended are added, and once the builder has finished, the
// leaves its snapshot of the id tables did not hold too: those between
// its snapshot and the writer's start, and those the id tables do not
// cover yet (leaves [covered, n), appended by a ledger older than schema
// 5, which this batch indexes). The filter is then ready. Called by the
// writer goroutine only.
func (f *idFilter) writerSync(ctx context.Context, q queryer, n, covered uint64) error {
	if !f.started {
		f.started, f.from, f.upTo = true, n, n
	}
	if n > f.upTo {
		if err := f.addLeaves(ctx, q, f.upTo, n); err != nil {
			return err
		}
		f.upTo = n
	}
	if f.ready.Load() {
		return nil
	}
	select {
	case snap := <-f.built:
		if lo := min(snap, covered); lo < f.from {
			if err := f.addLeaves(ctx, q, lo, f.from); err != nil {
				// Try again at the next batch.
				f.built <- snap
				return err
			}
		}
		f.ready.Store(true)
	default:
	}
	return nil
}

// addLeaves adds the ids of leaves [lo, hi).
func (f *idFilter) addLeaves(ctx context.Context, q queryer, lo, hi uint64) error {
	rows, err := q.QueryContext(ctx, "SELECT id FROM leaves WHERE idx >= ? AND idx < ?", lo, hi)
	if err != nil {
		return err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	f.add(ids...)
	return nil
}

// addCommitted adds the ids a transaction committed (id -> leaf index) and
// notes the log size it reached. Writer goroutine only.
func (f *idFilter) addCommitted(ids map[string]uint64, size uint64) {
	f.mu.Lock()
	for id := range ids {
		f.addLocked(id)
	}
	f.mu.Unlock()
	f.upTo = max(f.upTo, size)
}
