package tlog

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/transparency-dev/merkle/compact"
)

// lingerRecords: a batch with this many records starts at once (see
// gather).
const lingerRecords = 64

// sequencer is the single goroutine that writes the log: it gathers the
// queued requests into batches and commits each batch in one driver
// transaction with one signed checkpoint.
func (l *Log) sequencer() {
	defer l.wg.Done()
	defer close(l.exited)
	lastBatch := 0
	for {
		select {
		case <-l.done:
			for {
				select {
				case r := <-l.reqs:
					l.commitBatch([]*appendReq{r})
				default:
					return
				}
			}
		case r := <-l.reqs:
			batch := l.gather(r, lastBatch)
			lastBatch = len(batch)
			l.commitBatch(batch)
		case r := <-l.rots:
			// A key rotation is a batch of its own: its checkpoint is the
			// last the old key signs.
			l.commitBatch([]*appendReq{r})
		}
	}
}

// gather returns first and the requests queued behind it, at most
// MaxBatch. Under concurrency (the last batch, of lastBatch requests, had
// company) it lingers briefly so that more appends share this batch's
// commit; a lone writer is never delayed, and neither is a batch that
// already has lingerRecords records of work (the commit is then a small
// share of its cost, and waiting would idle the sequencer).
func (l *Log) gather(first *appendReq, lastBatch int) []*appendReq {
	batch := []*appendReq{first}
	recs := len(first.recs)
	var linger <-chan time.Time
	if lastBatch > 1 && l.opts.Linger > 0 {
		linger = time.After(l.opts.Linger)
	}
	for len(batch) < l.opts.MaxBatch {
		select {
		case r := <-l.reqs:
			batch = append(batch, r)
			recs += len(r.recs)
			continue
		default:
		}
		if linger == nil || len(batch) >= lastBatch || recs >= lingerRecords {
			break
		}
		select {
		case r := <-l.reqs:
			batch = append(batch, r)
			recs += len(r.recs)
		case <-linger:
			return batch
		}
	}
	return batch
}

// commitBatch appends a batch of requests in one driver batch with one
// signed checkpoint, answering every request.
//
// The first attempt is optimistic: no savepoints (a savepoint journals
// every page it touches, in SQLite). When a write of one request in a
// batch of several fails, the whole batch is rolled back and runs again
// carefully, each request under its own savepoint, so that only the
// failing request fails. Records already in the log are found by content
// id in either attempt (apply) and answered with their original entries.
func (l *Log) commitBatch(batch []*appendReq) {
	if retry := l.runBatch(batch, false); retry {
		l.runBatch(batch, true)
	}
}

// batchRun is one attempt at a batch.
type batchRun struct {
	l       *Log
	b       Batch
	reqs    []*appendReq
	results []appendResp
	before  *treeState // the tree before the batch
	now     time.Time
	idems   []int             // requests whose idempotency key to store
	keys    map[string][]byte // idempotency key -> request hash, this batch
	guards  map[string]error  // AppendGuard key -> its Check's answer, this batch
	// deferFlush: evidence-only requests leave their rows buffered for one
	// Flush of the whole batch (multi-row INSERTs over every request)
	// instead of one Flush each; set on the optimistic attempt only.
	deferFlush bool
	// unflushed: rows of earlier requests are buffered, not yet flushed.
	unflushed bool
	// added are the entries this batch appended, by index - before.size(),
	// read here rather than through the Batch (their rows may be
	// unflushed).
	added []ledger.Entry
	// nodes are the tree nodes the batch's inserts completed (see
	// batchNodes); nil until the first insert.
	nodes map[compact.NodeID][]byte
}

// fail answers every request not answered yet with err.
func (run *batchRun) fail(err error) {
	for i, r := range run.reqs {
		if run.results[i].err == nil {
			run.results[i] = appendResp{err: err}
		}
		r.resp <- run.results[i]
	}
}

// abort rolls the batch back and answers every request with err.
func (run *batchRun) abort(err error) {
	run.l.tree = run.before
	run.b.Rollback()
	run.fail(err)
}

// runBatch is one attempt at commitBatch. Not careful, it returns true,
// having answered nothing and written nothing, when a request's writes
// failed; the caller then runs the batch again carefully, where every
// request is answered.
func (l *Log) runBatch(batch []*appendReq, careful bool) (retry bool) {
	ctx := context.Background()
	run := &batchRun{l: l, reqs: batch, results: make([]appendResp, len(batch)), now: l.opts.Now().UTC(), keys: map[string][]byte{}, deferFlush: !careful}
	if err := run.open(ctx); err != nil {
		run.fail(err)
		return false
	}
	// A request alone in its batch needs no savepoint: the batch is its
	// savepoint.
	savepoints := careful && len(batch) > 1
	for i := range batch {
		wroteErr, err := run.request(ctx, i, savepoints)
		if err != nil {
			run.abort(err)
			return false
		}
		if wroteErr != nil {
			// Some of this request's rows may be written, and there is no
			// savepoint to return to.
			run.l.tree = run.before
			run.b.Rollback()
			if !careful {
				return true
			}
			run.fail(internal("append", wroteErr))
			return false
		}
	}
	if run.unflushed {
		if err := run.b.Flush(ctx); err != nil {
			// Only the optimistic attempt defers rows: run again carefully.
			run.l.tree = run.before
			run.b.Rollback()
			return true
		}
	}
	run.finish(ctx)
	return false
}

// open begins the driver batch and brings the engine's tree up to the
// stored log: another process (a CLI `ledger record --db` beside a
// running server) may have appended since the sequencer last looked, so
// under the write lock the tree is reloaded when the stored size differs.
// On error the batch is rolled back.
func (run *batchRun) open(ctx context.Context) error {
	l := run.l
	b, err := l.d.BeginBatch(ctx)
	if err != nil {
		return internal("begin", err)
	}
	stored, err := b.Size(ctx)
	if err != nil {
		b.Rollback()
		return internal("size", err)
	}
	reload := l.tree == nil || stored != l.tree.size()
	if reload {
		if l.tree != nil {
			if err := l.checkExtends(ctx, b, stored); err != nil {
				b.Rollback()
				return err
			}
			l.opts.Logger.Info("log grew outside this process; reloading the tree", "ours", l.tree.size(), "stored", stored)
		}
		t, err := l.loadTree(ctx, b, stored)
		if err != nil {
			b.Rollback()
			l.tree = nil
			return internal("load log", err)
		}
		if err := l.checkSignerInForce(ctx, b, t.latest); err != nil {
			b.Rollback()
			l.tree = nil
			if c := ledger.ErrorCode(err); c == ledger.CodeUnavailable || c == ledger.CodeStorageFull {
				return err // the database could not be read: no finding about the key
			}
			l.opts.Logger.Error("refusing to sign", "problem", err.Error())
			return &ledger.Error{Code: ledger.CodeInternal, Message: "refusing to sign: " + err.Error(), Err: err}
		}
		l.tree = t
	}
	if err := l.checkJournal(ctx, b, stored, reload); err != nil {
		b.Rollback()
		l.tree = nil
		return err
	}
	run.b, run.before = b, l.tree.clone()
	if err := b.Start(ctx, stored, reload); err != nil {
		l.tree = run.before
		b.Rollback()
		return internal("start batch", err)
	}
	return nil
}

// checkExtends is the engine's guard against a database that went back
// or forked under the running process: the stored log (stored leaves, as
// the batch reads it under the write lock) must extend the tree this
// process last committed and signed, so it may be longer (another
// process appended) but never shorter, and its root at this process's
// size must be the root this process signed there. Otherwise the log is
// put in the tampered state (no append, approval or signature until a
// restart, whose start-up checks the file against the signed-state
// journal) and the error is ledger.CodeUnavailable, naming both sizes; signing
// on would give a second root for a size already signed (a fork).
func (l *Log) checkExtends(ctx context.Context, b Batch, stored uint64) error {
	ours := l.tree.size()
	problem := ""
	if stored < ours {
		problem = fmt.Sprintf("holds %d leaves, fewer than the %d this process signed", stored, ours)
	} else if root, err := RootAt(ctx, b, ours); err != nil {
		return internal("check the stored log against the signed tree", err)
	} else if root != l.tree.root() {
		problem = fmt.Sprintf("does not extend the tree this process signed at size %d (another root there)", ours)
	}
	if problem == "" {
		return nil
	}
	l.opts.Logger.Error("tampering: the database changed under the running process; refusing to sign", "stored", stored, "signed", ours, "problem", problem)
	l.tamper.CompareAndSwap(nil, &TamperState{Index: ours - 1, Problem: "the stored log " + problem + " (the database was rolled back or replaced under the running server)", Since: l.opts.Now().UTC()})
	return &ledger.Error{Code: ledger.CodeUnavailable, Message: fmt.Sprintf("refusing to sign: the stored log %s: the database was rolled back or replaced under the running server; restart it so that start-up checks the database against the signed-state journal", problem)}
}

// CheckStored compares the stored log with the latest checkpoint this
// process committed, outside any batch, for a watchdog between appends:
// the latest stored checkpoint must not be smaller, the one of the
// committed size must still be there with the same root. Otherwise the
// log is put in the tampered state, as checkExtends does at the next
// append, and a ledger.CodeUnavailable error names the problem; read failures
// are other errors and change nothing. Nothing is checked before the first commit.
// Two indexed reads of the checkpoints; safe for concurrent use.
func (l *Log) CheckStored(ctx context.Context) error {
	ours := l.committed.Load()
	if ours == nil {
		return nil
	}
	latest, err := l.d.StoredCheckpoint(ctx, 0)
	if err != nil && ledger.ErrorCode(err) != ledger.CodeNotFound {
		return err
	}
	problem := ""
	switch {
	case err != nil || latest.Size < ours.Size:
		problem = fmt.Sprintf("ends at a checkpoint of size %d, below the %d this process signed", latest.Size, ours.Size)
	case latest.Size == ours.Size && latest.Root != ours.Root:
		problem = fmt.Sprintf("has another root at size %d than this process signed", ours.Size)
	case latest.Size > ours.Size:
		at, err := l.d.StoredCheckpoint(ctx, ours.Size)
		if ledger.ErrorCode(err) == ledger.CodeNotFound || (err == nil && at.Root != ours.Root) {
			problem = fmt.Sprintf("no longer holds the checkpoint of size %d this process signed", ours.Size)
		} else if err != nil {
			return err
		}
	}
	if problem == "" {
		return nil
	}
	// A commit after the reads moves the committed size on: only a state
	// still behind it is a finding.
	if now := l.committed.Load(); now != ours {
		return nil
	}
	ts := &TamperState{Index: ours.Size - 1, Problem: "the stored log " + problem + " (the database was rolled back or replaced under the running server)", Since: l.opts.Now().UTC()}
	if l.tamper.CompareAndSwap(nil, ts) {
		l.opts.Logger.Error("tampering: the database changed under the running process; refusing to sign", "problem", ts.Problem)
	}
	return &ledger.Error{Code: ledger.CodeUnavailable, Message: "refusing to sign: " + ts.Problem}
}

// loadTree rebuilds the compact range of a log of n leaves and checks it
// against the latest signed checkpoint (size and root).
func (l *Log) loadTree(ctx context.Context, b Batch, n uint64) (*treeState, error) {
	rng, err := rangeAt(ctx, b, n)
	if err != nil {
		return nil, err
	}
	t := &treeState{rng: rng}
	if n > 0 {
		cp, err := b.StoredCheckpoint(ctx, 0)
		if err != nil {
			return nil, fmt.Errorf("latest checkpoint: %w", err)
		}
		if cp.Size != n || cp.Root != t.root() {
			return nil, fmt.Errorf("log state does not match the latest signed checkpoint (size %d vs %d leaves): run `ledger audit`", cp.Size, n)
		}
		cp.Origin = l.origin
		t.latest = cp
	}
	return t, nil
}

// request runs request i of the batch. A failure that the request alone
// can absorb becomes its answer. wroteErr is a write failure after some
// of its rows may have reached the batch without a savepoint to undo them
// (the caller rolls the whole batch back); err is a failure of the batch
// itself (the caller aborts it).
func (run *batchRun) request(ctx context.Context, i int, savepoint bool) (wroteErr, err error) {
	r := run.reqs[i]
	if r.ctx.Err() != nil {
		run.results[i].err = r.ctx.Err()
		return nil, nil
	}
	if r.idemKey != "" {
		if h, ok := run.keys[r.idemKey]; ok && !bytes.Equal(h, r.reqHash) {
			run.results[i].err = &ledger.Error{Code: ledger.CodeConflict, Field: "Idempotency-Key", Message: "already used with a different request: use a new key for a new request"}
			return nil, nil
		}
	}
	if g := r.guard; g != nil {
		err, seen := run.guards[g.Key()]
		if !seen {
			// A guard reads through the batch: earlier requests' rows
			// first reach it.
			if run.unflushed {
				if err := run.b.Flush(ctx); err != nil {
					return err, nil
				}
				run.unflushed = false
			}
			err = g.Check(ctx, run.b)
			if run.guards == nil {
				run.guards = map[string]error{}
			}
			run.guards[g.Key()] = err
		}
		if err != nil {
			run.results[i].err = err
			return nil, nil
		}
	}
	if err := run.b.BeginRequest(ctx, savepoint); err != nil {
		run.results[i].err = internal("savepoint", err)
		return nil, nil
	}
	saved, nAdded := run.l.tree.clone(), len(run.added)
	// apply only reads; its rows are buffered in the batch until Flush.
	res, replay, err := run.apply(ctx, r)
	wrote := false
	if err == nil {
		wrote = true
		if run.deferFlush && evidenceOnly(r) {
			run.unflushed = run.unflushed || len(run.added) > nAdded
		} else {
			err = run.b.Flush(ctx)
			run.unflushed = false
		}
	}
	if err != nil {
		endErr := run.b.EndRequest(ctx, false)
		run.l.tree = saved
		run.added = run.added[:nAdded]
		// Without a savepoint, dropping this request's rows drops the
		// buffered rows of earlier requests too: the batch runs again.
		if (wrote || run.unflushed) && !savepoint {
			return err, nil
		}
		if endErr != nil {
			return nil, internal("roll back to savepoint", endErr)
		}
		run.results[i].err = internal("append", err)
		return nil, nil
	}
	if err := run.b.EndRequest(ctx, true); err != nil {
		return nil, internal("release savepoint", err)
	}
	run.results[i] = res
	if r.idemKey != "" && !replay {
		run.keys[r.idemKey] = r.reqHash
		run.idems = append(run.idems, i)
	}
	return nil, nil
}

// apply appends one request's records to the batch. replay is true when
// the answer comes from a stored idempotency key. Records already in the
// log (by content id) are answered with their original entries; only new
// records are buffered for insertion.
func (run *batchRun) apply(ctx context.Context, r *appendReq) (res appendResp, replay bool, err error) {
	if r.rotate != nil {
		p, err := r.rotate(run.l.tree.size())
		if err != nil {
			return res, false, err
		}
		r.recs = []ledger.Prepared{p}
	}
	if r.idemKey != "" {
		ans, found, err := run.b.Idempotency(ctx, r.idemKey)
		if err != nil {
			return res, false, err
		}
		if found {
			res, err := run.replay(ctx, r, ans)
			return res, true, err
		}
	}
	stored, err := run.b.Find(ctx, r.recs, r.hint)
	if err != nil {
		return res, false, err
	}
	res.entries = make([]ledger.Entry, 0, len(r.recs))
	res.existing = make([]bool, 0, len(r.recs))
	pending := map[string]ledger.Entry{} // inserted by this request
	for i := range r.recs {
		p := &r.recs[i]
		if e, ok := pending[p.ID]; ok {
			res.entries, res.existing = append(res.entries, e), append(res.existing, true)
			continue
		}
		if idx, ok := stored[p.ID]; ok {
			e, err := run.entryAt(ctx, idx)
			if err != nil {
				return res, false, err
			}
			if e.ID != p.ID {
				return res, false, fmt.Errorf("id index names leaf %d for %s, which holds %s: run `ledger audit`", idx, p.ID, e.ID)
			}
			res.entries, res.existing = append(res.entries, e), append(res.existing, true)
			continue
		}
		e, err := run.insert(p)
		if err != nil {
			return res, false, err
		}
		pending[p.ID] = e
		res.entries, res.existing = append(res.entries, e), append(res.existing, false)
	}
	return res, false, nil
}

// replay answers a request from its idempotency key's stored answer.
func (run *batchRun) replay(ctx context.Context, r *appendReq, ans IdempotentAnswer) (appendResp, error) {
	var res appendResp
	if !bytes.Equal(ans.RequestHash, r.reqHash) {
		return res, &ledger.Error{Code: ledger.CodeConflict, Field: "Idempotency-Key", Message: "already used with a different request: use a new key for a new request"}
	}
	for _, id := range ans.IDs {
		e, err := run.b.EntryByID(ctx, id)
		if err != nil {
			return res, err
		}
		res.entries = append(res.entries, e)
		res.existing = append(res.existing, true)
	}
	res.size = ans.Size
	return res, nil
}

// insert buffers p as the next leaf and appends its hash to the tree.
func (run *batchRun) insert(p *ledger.Prepared) (ledger.Entry, error) {
	t := run.l.tree
	idx := t.size()
	// p.Body is compact canonical JSON (ledger.PrepareRecords), so the leaf is
	// assembled without re-encoding it (ledger.AppendLeaf).
	raw := ledger.AppendLeaf(make([]byte, 0, len(p.Body)+160), ledger.Leaf{V: 1, Index: idx, Kind: p.Kind, ID: p.ID, RecordedAt: run.now, Body: p.Body})
	lh := ledger.LeafHash(raw)
	e := ledger.Entry{Index: idx, ID: p.ID, Kind: p.Kind, RecordedAt: run.now, LeafHash: lh, Body: p.Body, Raw: raw}
	run.b.AddLeaf(e, p)
	if run.nodes == nil {
		run.nodes = make(map[compact.NodeID][]byte, 4*len(run.reqs))
	}
	if err := t.rng.Append(lh[:], run.addNode); err != nil {
		return ledger.Entry{}, err
	}
	run.added = append(run.added, e)
	return e, nil
}

// finish stores the idempotency answers and the signed checkpoint,
// commits, and answers every request.
func (run *batchRun) finish(ctx context.Context) {
	l, b := run.l, run.b
	size := l.tree.size()
	for _, i := range run.idems {
		ids := make([]string, len(run.results[i].entries))
		for j, e := range run.results[i].entries {
			ids[j] = e.ID
		}
		r := run.reqs[i]
		if err := b.PutIdempotency(ctx, r.idemKey, IdempotentAnswer{RequestHash: r.reqHash, IDs: ids, Size: size}, run.now); err != nil {
			run.abort(internal("idempotency", err))
			return
		}
	}
	if size != run.before.size() {
		root := l.tree.root()
		signed, err := l.SignNote(CheckpointText(l.origin, size, root))
		if err != nil {
			run.abort(err)
			return
		}
		cp := ledger.Checkpoint{Origin: l.origin, Size: size, Root: root, Note: signed, CreatedAt: run.now}
		if err := b.PutCheckpoint(ctx, cp); err != nil {
			run.abort(internal("checkpoint", err))
			return
		}
		l.tree.latest = cp
	}
	if err := b.Commit(ctx, size); err != nil {
		l.tree = nil // reload from the store on the next batch
		run.fail(internal("commit", err))
		return
	}
	latest := l.tree.latest
	if latest.Size > 0 {
		l.committed.Store(&latest)
	}
	for _, r := range run.reqs {
		if r.after != nil && size != run.before.size() {
			r.after(latest)
		}
	}
	if l.opts.OnCheckpoint != nil && size != run.before.size() {
		if err := l.opts.OnCheckpoint(latest); err != nil {
			e := internal("committed, but the signed state was not recorded", err)
			if ledger.IsStorageFull(err) {
				e = &ledger.Error{Code: ledger.CodeStorageFull, Err: err, Message: "the disk holding the database is full: the records were appended and their checkpoint signed, but the signed-state journal could not record it; free space on the server and send the request again (its records are then answered as existing)"}
			}
			run.fail(e)
			return
		}
	}
	nodes := run.batchNodes()
	for i, r := range run.reqs {
		if run.results[i].err == nil && run.results[i].size == 0 {
			run.results[i].size = size
		}
		run.results[i].nodes = nodes
		if run.results[i].size == latest.Size && latest.Note != "" {
			run.results[i].cp = &latest
		}
		r.resp <- run.results[i]
	}
}
