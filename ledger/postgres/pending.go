package postgres

import (
	"context"
	"sync"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/jackc/pgx/v5"
)

// A batch's round trips. The content ids of every request queued when a
// batch begins are looked up in BeginBatch's pipeline, under the
// sequencer lock (idLookup); a request outside that lookup is looked up
// alone in Find. Outside a savepoint, a request whose rows cannot fail
// for a reason of its own (evidence and head leaves whose text
// PostgreSQL's TEXT holds: under the lock no other server writes their
// indexes or ids, and Find found this batch's ids) keeps them buffered
// past Flush: they go with the next request that must write at once, the
// next read of the batch (flushPending), or Commit's pipeline, as
// multi-row INSERTs. A single-record batch of K such requests then makes
// two round trips: BEGIN with the lock, size and ids; the rows with the
// idempotency and checkpoint rows and COMMIT. A failure of rows so kept
// is a failure of the batch (a lost connection, a full disk), which the
// engine answers for every request of the batch alike.

// idLookup is LookupIDs' hint: the content ids of one append request,
// looked up by the BeginBatch of generation gen (0: none yet).
type idLookup struct {
	ids []string
	gen uint64 // written and read by the sequencer goroutine only
}

// idHints are the hints of requests not yet taken by a BeginBatch.
type idHints struct {
	mu   sync.Mutex
	list []*idLookup
	gen  uint64 // the last batch generation (sequencer goroutine only)
}

// LookupIDs implements tlog.Driver: it registers the request's content
// ids for the next BeginBatch's lookup and returns them as Find's hint.
func (d *driver) LookupIDs(_ context.Context, recs []ledger.Prepared) any {
	h := &idLookup{ids: make([]string, len(recs))}
	for i := range recs {
		h.ids[i] = recs[i].ID
	}
	d.hints.mu.Lock()
	d.hints.list = append(d.hints.list, h)
	d.hints.mu.Unlock()
	return h
}

// takeHints returns a new batch generation and the ids of every
// registered hint, which it marks as looked up by that generation.
func (d *driver) takeHints() (gen uint64, ids []string) {
	d.hints.mu.Lock()
	list := d.hints.list
	d.hints.list = nil
	d.hints.mu.Unlock()
	d.hints.gen++
	gen = d.hints.gen
	for _, h := range list {
		h.gen = gen
		ids = append(ids, h.ids...)
	}
	return gen, ids
}

// queuePrefetch adds the lookup of ids (stored leaves' indexes by
// content id) to q; its answers go to b.pre.
func (b *batch) queuePrefetch(q *pgx.Batch, ids []string) {
	b.pre = map[string]uint64{}
	if len(ids) == 0 {
		return
	}
	q.Queue("SELECT id, idx FROM leaves WHERE id = ANY($1)", ids).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id string
			var idx int64
			if err := rows.Scan(&id, &idx); err != nil {
				return err
			}
			b.pre[id] = uint64(idx)
		}
		return rows.Err()
	})
}

// prefetched answers Find from the batch's lookup when hint was part of
// it; ok is false otherwise.
func (b *batch) prefetched(recs []ledger.Prepared, hint any) (out map[string]uint64, ok bool) {
	h, _ := hint.(*idLookup)
	if h == nil || h.gen != b.gen || len(h.ids) != len(recs) {
		return nil, false
	}
	for i := range recs {
		if recs[i].ID != h.ids[i] {
			return nil, false
		}
		idx, found := b.ids[recs[i].ID]
		if !found {
			idx, found = b.pre[recs[i].ID]
		}
		if found {
			if out == nil {
				out = map[string]uint64{}
			}
			out[recs[i].ID] = idx
		}
	}
	return out, true
}

// markDone records the buffered rows as those of finished requests
// (flushPending sends them; EndRequest(false) keeps them).
func (b *batch) markDone() {
	for i, r := range b.bufs() {
		b.marks[i] = len(r.args)
	}
}

// dropRequest drops the rows the current request buffered.
func (b *batch) dropRequest() {
	for i, r := range b.bufs() {
		r.args = r.args[:min(b.marks[i], len(r.args))]
	}
	b.tokOps = b.tokOps[:0]
}

// flushPending writes the kept rows of finished requests (not the
// current request's) in one pipelined round trip, so that a read of the
// batch sees every finished request's writes.
func (b *batch) flushPending(ctx context.Context) error {
	n := 0
	for i := range b.marks {
		n += b.marks[i]
	}
	if n == 0 {
		return nil
	}
	err := b.pipe(ctx, func(q *pgx.Batch) {
		for i, r := range b.bufs() {
			r.queueRows(q, b.marks[i]/r.ncol)
		}
	})
	for i, r := range b.bufs() {
		r.args = append(r.args[:0], r.args[b.marks[i]:]...)
		b.marks[i] = 0
	}
	return lost("append", err)
}

// storable reports whether PostgreSQL can store the leaf's text columns
// and projection rows as they are (see unstorable), and whether they are
// of a kind whose rows only the batch as a whole can fail (no tokens
// rows, whose UNIQUE name may refuse a request).
func storableLeaf(e *ledger.Entry, p *ledger.Prepared) bool {
	if unstorable(e.ID, string(e.Kind), p.Key) {
		return false
	}
	switch {
	case p.Evidence != nil:
		ev := p.Evidence
		if unstorable(string(ev.Backend), string(ev.Status), ev.Subject.Repository, ev.Subject.Commit) {
			return false
		}
		for name, dg := range ev.Subject.Artifacts {
			if unstorable(name, dg) {
				return false
			}
		}
		return true
	case p.Head != nil:
		h := p.Head
		return !unstorable(h.Repository, h.Ref, h.Commit, string(h.Verdict), string(h.Decision))
	}
	return p.Kind != ledger.KindToken && p.Kind != ledger.KindTokenRevocation
}
