package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlstore"
	"github.com/evidence-ledger/ledger/ledger/tlog"
	"github.com/transparency-dev/merkle/compact"
)

// storedSizeQuery counts the stored leaves (the next leaf index).
const storedSizeQuery = "SELECT COALESCE(MAX(idx)+1, 0) FROM leaves"

// BeginBatch implements tlog.Driver: an IMMEDIATE transaction on the
// writer connection (the DSN's _txlock), the writer's statements prepared
// before it (the writer pool's one connection is then free).
// A database file replaced at its path since open (FileUnchanged) gets
// no batch.
func (d *driver) BeginBatch(ctx context.Context) (tlog.Batch, error) {
	if err := d.fileUnchanged(); err != nil {
		return nil, err
	}
	st, err := d.prepareStmts(ctx)
	if err != nil {
		return nil, dbErr("prepare", err)
	}
	tx, err := d.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, dbErr("begin", err)
	}
	st.newOrds, st.newHashes, st.reqOrds = st.newOrds[:0], st.newHashes[:0], 0
	return &batch{d: d, tx: tx, st: st}, nil
}

// batch is the SQLite tlog.Batch: one write transaction, the rows it
// buffers (stmts) and the writer's id state (idIndex). Used by the
// engine's sequencer goroutine only.
type batch struct {
	d     *driver
	tx    *sql.Tx
	st    *stmts
	start uint64 // the log size the batch started at
	sp    bool   // the current request is under a savepoint
}

// Size implements tlog.Batch.
func (b *batch) Size(ctx context.Context) (uint64, error) {
	var n uint64
	err := b.tx.StmtContext(ctx, b.st.size).QueryRowContext(ctx).Scan(&n)
	return n, dbErr("size", err)
}

// StoredCheckpoint implements tlog.Batch.
func (b *batch) StoredCheckpoint(ctx context.Context, size uint64) (ledger.Checkpoint, error) {
	return checkpointAt(ctx, b.tx, size)
}

// ReadNodes implements tlog.NodeReader inside the transaction.
func (b *batch) ReadNodes(ctx context.Context, ids []compact.NodeID) ([][]byte, error) {
	return fetchNodes(ctx, b.tx, ids)
}

// Start implements tlog.Batch: it (re)loads the id state when asked or
// when the last commit failed, brings the content-id filter up to the log
// (idFilter.writerSync) and indexes the ids of leaves an older ledger
// appended without them.
func (b *batch) Start(ctx context.Context, size uint64, reload bool) error {
	d := b.d
	b.start = size
	if reload || d.ids == nil {
		ids, err := loadIDs(ctx, b.tx, size)
		if err != nil {
			return dbErr("recent ids", err)
		}
		d.ids = ids
	}
	if err := d.idf.writerSync(ctx, b.tx, size, d.ids.covered); err != nil {
		return dbErr("content-id filter", err)
	}
	d.pubW.Store(d.ids.w)
	if d.ids.covered < size {
		if err := d.indexUncovered(ctx, b.tx, b.st); err != nil {
			return dbErr("index content ids", err)
		}
	}
	return nil
}

// BeginRequest implements tlog.Batch.
func (b *batch) BeginRequest(ctx context.Context, savepoint bool) error {
	if savepoint {
		if _, err := b.tx.ExecContext(ctx, "SAVEPOINT req"); err != nil {
			return err
		}
	}
	b.sp = savepoint
	b.st.reqOrds = len(b.st.newOrds)
	b.d.ids.beginRequest()
	return nil
}

// EndRequest implements tlog.Batch.
func (b *batch) EndRequest(ctx context.Context, ok bool) error {
	if ok {
		if b.sp {
			_, err := b.tx.ExecContext(ctx, "RELEASE req")
			return err
		}
		return nil
	}
	b.st.reset()
	b.st.dropRequest()
	b.d.ids.dropRequest()
	if !b.sp {
		return nil
	}
	_, err := b.tx.ExecContext(ctx, "ROLLBACK TO req")
	if _, rerr := b.tx.ExecContext(ctx, "RELEASE req"); err == nil {
		err = rerr
	}
	return err
}

// Find implements tlog.Batch: the ids of the open transaction and of
// recent_ids are in memory (idIndex), the rest are what the caller found
// in entry_ids (callerLookup), looked up again here when entry_ids
// changed since the caller looked (or it could not look).
func (b *batch) Find(ctx context.Context, recs []ledger.Prepared, hint any) (map[string]uint64, error) {
	ix := b.d.ids
	lookup, _ := hint.(*callerLookup)
	var stored map[string]uint64
	if lookup != nil && lookup.w == ix.w {
		stored = lookup.found
	} else {
		var ask []string
		for i := range recs {
			if _, ok := ix.known(recs[i].ID); !ok {
				ask = append(ask, recs[i].ID)
			}
		}
		var err error
		if stored, err = b.st.ids.find(ctx, b.tx, ask); err != nil {
			return nil, err
		}
	}
	// The in-memory ids take precedence; stored is not modified (a batch
	// run again carefully asks again with the same hint).
	var out map[string]uint64
	for i := range recs {
		if idx, ok := ix.known(recs[i].ID); ok {
			if out == nil {
				out = make(map[string]uint64, len(stored)+1)
				for id, x := range stored {
					out[id] = x
				}
			}
			out[recs[i].ID] = idx
		}
	}
	if out == nil {
		return stored, nil
	}
	return out, nil
}

// EntryAt implements tlog.Batch.
func (b *batch) EntryAt(ctx context.Context, index uint64) (ledger.Entry, error) {
	e, err := scanEntry(b.tx.StmtContext(ctx, b.st.entry).QueryRowContext(ctx, index))
	return e, dbErr("entry", err)
}

// EntryByID implements tlog.Batch.
func (b *batch) EntryByID(ctx context.Context, id string) (ledger.Entry, error) {
	return entryByID(ctx, b.tx, id)
}

// Idempotency implements tlog.Batch: keys older than
// Options.IdempotencyTTL are not found.
func (b *batch) Idempotency(ctx context.Context, key string) (tlog.IdempotentAnswer, bool, error) {
	var ans tlog.IdempotentAnswer
	var idsJSON string
	cutoff := b.d.opts.Now().Add(-b.d.opts.IdempotencyTTL).UnixNano()
	err := b.tx.StmtContext(ctx, b.st.idemGet).QueryRowContext(ctx, key, cutoff).Scan(&ans.RequestHash, &idsJSON, &ans.Size)
	if errors.Is(err, sql.ErrNoRows) {
		return ans, false, nil
	}
	if err != nil {
		return ans, false, err
	}
	if err := json.Unmarshal([]byte(idsJSON), &ans.IDs); err != nil {
		return ans, false, err
	}
	return ans, true, nil
}

// AddLeaf implements tlog.Batch: the leaf row (with the evidence
// projection columns; the lane is p.Key), its recent_ids row, and the
// projection rows kept outside it.
func (b *batch) AddLeaf(e ledger.Entry, p *ledger.Prepared) {
	st := b.st
	var backend, status, repo, commit any
	if ev := p.Evidence; ev != nil {
		backend, status, repo, commit = string(ev.Backend), string(ev.Status), ev.Subject.Repository, ev.Subject.Commit
	}
	lh := e.LeafHash // only the hash escapes into the row buffer, not e
	st.leaf.add(e.Index, e.ID, string(e.Kind), p.Key, e.RecordedAt.UnixNano(), e.Raw, lh[:], backend, status, repo, commit)
	st.rid.add(e.Index, e.ID)
	b.d.ids.add(e.ID, e.Index)
	switch {
	case p.Evidence != nil:
		for name, dg := range p.Evidence.Subject.Artifacts {
			st.art.add(e.Index, name, dg)
		}
	case p.Head != nil:
		h := p.Head
		st.head.add(e.Index, h.Repository, h.Ref, h.Commit, string(h.Verdict), string(h.Decision))
	case p.Kind == ledger.KindToken || p.Kind == ledger.KindTokenRevocation:
		st.tokOps.Add(e.Index, p.Kind, p.Body)
	}
}

// AddNode implements tlog.Batch. Level-0 nodes are the leaf hashes,
// kept in the leaves table; every node goes to the read cache after
// COMMIT.
func (b *batch) AddNode(id compact.NodeID, hash []byte) {
	st := b.st
	if id.Level > 0 {
		st.node.add(sqlstore.NodeOrd(id), hash)
	}
	st.newOrds = append(st.newOrds, sqlstore.NodeOrd(id))
	st.newHashes = append(st.newHashes, hash)
}

// Flush implements tlog.Batch.
func (b *batch) Flush(ctx context.Context) error { return b.st.flush(ctx, b.tx) }

// PutIdempotency implements tlog.Batch. An expired row of the same key
// is replaced; at most once per idemPruneEvery the batch also deletes the
// expired keys and, beyond Options.IdempotencyMax rows, the oldest.
func (b *batch) PutIdempotency(ctx context.Context, key string, ans tlog.IdempotentAnswer, at time.Time) error {
	idsJSON, _ := json.Marshal(ans.IDs)
	d := b.d
	cutoff := at.Add(-d.opts.IdempotencyTTL).UnixNano()
	if _, err := b.tx.ExecContext(ctx, "DELETE FROM idempotency WHERE key = ? AND created_at < ?", key, cutoff); err != nil {
		return err
	}
	if d.idemPuts++; d.idemPuts >= idemPruneEvery || at.Sub(d.idemPruned) >= idemPruneAge {
		d.idemPuts, d.idemPruned = 0, at
		if _, err := b.tx.ExecContext(ctx, "DELETE FROM idempotency WHERE created_at < ?", cutoff); err != nil {
			return err
		}
		if _, err := b.tx.ExecContext(ctx, "DELETE FROM idempotency WHERE created_at <= (SELECT created_at FROM idempotency ORDER BY created_at DESC LIMIT 1 OFFSET ?)", d.opts.IdempotencyMax); err != nil {
			return err
		}
	}
	_, err := b.tx.StmtContext(ctx, b.st.idem).ExecContext(ctx, key, ans.RequestHash, string(idsJSON), ans.Size, at.UnixNano())
	if err != nil && !strings.Contains(err.Error(), "UNIQUE") {
		return err
	}
	return nil
}

// PutCheckpoint implements tlog.Batch.
func (b *batch) PutCheckpoint(ctx context.Context, cp ledger.Checkpoint) error {
	_, err := b.tx.StmtContext(ctx, b.st.cp).ExecContext(ctx, cp.Size, cp.Root[:], cp.Note, cp.CreatedAt.UnixNano())
	return err
}

// Commit implements tlog.Batch: recent_ids is merged into entry_ids
// when it holds Options.RecentIDs ids, the transaction commits, and then
// the filter, the id state, the published watermark and the node cache
// learn what it added (the filter holds the batch's ids before the
// watermark they may be merged under is published; see idFilter).
func (b *batch) Commit(ctx context.Context, size uint64) error {
	d, st := b.d, b.st
	defer st.reset()
	merged := false
	if size != b.start && d.ids.pending() >= d.opts.RecentIDs {
		if err := mergeRecentIDs(ctx, b.tx); err != nil {
			b.tx.Rollback()
			d.ids = nil
			return dbErr("merge recent ids", err)
		}
		merged = true
	}
	if err := b.tx.Commit(); err != nil {
		d.ids = nil // reload from disk on the next batch
		return err
	}
	d.idf.addCommitted(d.ids.txNew, size)
	d.ids.committed(merged, size)
	d.pubW.Store(d.ids.w)
	d.r.nodes.add(st.newOrds, st.newHashes)
	d.walFramesCommitted()
	return nil
}

// Rollback implements tlog.Batch.
func (b *batch) Rollback() {
	if b.d.ids != nil {
		b.d.ids.rollback()
	}
	b.st.reset()
	b.tx.Rollback()
}

// rowBuf buffers rows of one table and writes them with multi-row
// INSERTs: per-statement overhead, not SQLite's B-tree work, dominates
// single-row inserts through database/sql. Rows go out in chunks of
// 64, 32, ..., 2, 1 rows, each chunk size's statement prepared once on the
// writer connection, so that no batch size compiles a statement.
//
// The statements are INSERT OR FAIL: on a constraint error a plain
// (ABORT) multi-row INSERT undoes its own earlier rows, so SQLite copies
// every page the statement first touches into a statement journal; FAIL
// leaves those rows for the caller to undo, and the engine always does (it
// rolls back the batch, or the request's savepoint), so FAIL spares the
// journal (figures in BENCHMARKS.md).
type rowBuf struct {
	head  string // "INSERT INTO t(a, b) VALUES "
	tuple string // "(?,?)"
	ncol  int
	args  []any
	db    *sql.DB                  // the writer; statements are prepared on it once
	stmts [chunkBits + 1]*sql.Stmt // stmts[k] inserts 1<<k rows
}

const (
	chunkBits = 6
	chunkRows = 1 << chunkBits
)

func newRowBuf(db *sql.DB, table, cols string, ncol int) *rowBuf {
	return &rowBuf{db: db, head: "INSERT OR FAIL INTO " + table + "(" + cols + ") VALUES ", tuple: "(" + strings.TrimSuffix(strings.Repeat("?,", ncol), ",") + ")", ncol: ncol}
}

func (r *rowBuf) add(vals ...any) { r.args = append(r.args, vals...) }

func (r *rowBuf) query(n int) string {
	return r.head + strings.TrimSuffix(strings.Repeat(r.tuple+",", n), ",")
}

// prepare prepares every chunk size's statement on the writer connection
// (before any transaction: the writer pool's one connection is then free).
func (r *rowBuf) prepare(ctx context.Context) error {
	for k := range r.stmts {
		var err error
		if r.stmts[k], err = r.db.PrepareContext(ctx, r.query(1<<k)); err != nil {
			return err
		}
	}
	return nil
}

// flush writes the buffered rows inside tx.
func (r *rowBuf) flush(ctx context.Context, tx *sql.Tx) error {
	err := chunks(len(r.args)/r.ncol, func(lo, k int) error {
		_, err := tx.StmtContext(ctx, r.stmts[k]).ExecContext(ctx, r.args[lo*r.ncol:(lo+1<<k)*r.ncol]...)
		return err
	})
	if err != nil {
		return err
	}
	r.args = r.args[:0]
	return nil
}

// chunks calls f(lo, k) for consecutive chunks [lo, lo+1<<k) that cover
// [0, n), largest first (k <= chunkBits), and stops at f's first error.
func chunks(n int, f func(lo, k int) error) error {
	for lo, k := 0, chunkBits; lo < n; lo += 1 << k {
		for 1<<k > n-lo {
			k--
		}
		if err := f(lo, k); err != nil {
			return err
		}
	}
	return nil
}

func (r *rowBuf) reset() { r.args = r.args[:0] }

func (r *rowBuf) close() {
	for _, s := range r.stmts {
		if s != nil {
			s.Close()
		}
	}
}

type stmts struct {
	leaf, node, art, head, rid *rowBuf
	idem                       *sql.Stmt // records an idempotency key's answer
	entry                      *sql.Stmt // a stored leaf by index (resubmissions)
	size                       *sql.Stmt // the stored log size (storedSizeQuery)
	cp                         *sql.Stmt // inserts a signed checkpoint
	idemGet                    *sql.Stmt // an idempotency key's original answer
	tokenRow                   *sql.Stmt // a tokens row with the token-leaf count (sqlstore.AuthRowQuery)
	ids                        idLookup
	// newOrds/newHashes are the tree nodes (leaves included) appended in
	// this batch, published to the read cache after COMMIT.
	newOrds   []int64
	newHashes [][]byte
	reqOrds   int // len(newOrds) when the current request began
	// tokOps are the tokens-table writes of buffered token leaves (tokens.go).
	tokOps sqlstore.TokenOps
}

func (st *stmts) bufs() []*rowBuf { return []*rowBuf{st.leaf, st.node, st.art, st.head, st.rid} }

func (st *stmts) close() {
	for _, b := range st.bufs() {
		b.close()
	}
	for _, q := range []*sql.Stmt{st.idem, st.entry, st.size, st.cp, st.idemGet, st.tokenRow} {
		if q != nil {
			q.Close()
		}
	}
	st.ids.close()
}

// flush writes every buffered row (leaves first: the projections refer to
// them).
func (st *stmts) flush(ctx context.Context, tx *sql.Tx) error {
	for _, b := range st.bufs() {
		if err := b.flush(ctx, tx); err != nil {
			return err
		}
	}
	return st.flushTokens(ctx, tx)
}

func (st *stmts) reset() {
	for _, b := range st.bufs() {
		b.reset()
	}
	st.tokOps = st.tokOps[:0]
}

// dropRequest forgets the nodes of a request rolled back to its savepoint.
func (st *stmts) dropRequest() {
	st.newOrds, st.newHashes = st.newOrds[:st.reqOrds], st.newHashes[:st.reqOrds]
}

// prepareStmts returns the writer's statements, prepared once on the
// writer connection and bound to each transaction with tx.StmtContext.
func (d *driver) prepareStmts(ctx context.Context) (*stmts, error) {
	if d.stmts != nil {
		return d.stmts, nil
	}
	db := d.w
	st := &stmts{
		leaf: newRowBuf(db, "leaves", "idx, id, kind, key, recorded_at, leaf, leaf_hash, backend, status, repository, commit_id", 11),
		node: newRowBuf(db, "tree_nodes", "ord, hash", 2),
		art:  newRowBuf(db, "evidence_artifacts", "idx, name, digest", 3),
		head: newRowBuf(db, "heads_index", "idx, repository, ref, commit_id, verdict, decision", 6),
		rid:  newRowBuf(db, "recent_ids", "idx, id", 2),
	}
	var err error
	// Prepared before the transaction begins: the writer pool has exactly
	// one connection, which an open transaction holds.
	for _, b := range st.bufs() {
		if err = b.prepare(ctx); err != nil {
			st.close()
			return nil, err
		}
	}
	if err = st.ids.prepare(ctx, db); err != nil {
		st.close()
		return nil, err
	}
	for _, p := range []struct {
		dst **sql.Stmt
		q   string
	}{
		{&st.idem, "INSERT INTO idempotency(key, request_hash, entry_ids, size, created_at) VALUES (?,?,?,?,?)"},
		{&st.entry, sqlstore.EntryAtQuery},
		{&st.size, storedSizeQuery},
		{&st.cp, "INSERT INTO checkpoints(size, root, note, created_at) VALUES (?,?,?,?)"},
		{&st.idemGet, "SELECT request_hash, entry_ids, size FROM idempotency WHERE key = ? AND created_at >= ?"},
		{&st.tokenRow, sqlstore.AuthRowQuery},
	} {
		if *p.dst, err = db.PrepareContext(ctx, p.q); err != nil {
			st.close()
			return nil, err
		}
	}
	d.stmts = st
	return st, nil
}
