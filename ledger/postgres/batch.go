package postgres

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlstore"
	"github.com/evidence-ledger/ledger/ledger/tlog"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/transparency-dev/merkle/compact"
)

// storedSizeQuery counts the stored leaves (the next leaf index).
const storedSizeQuery = "SELECT COALESCE(MAX(idx)+1, 0) FROM leaves"

// ReadNodes implements tlog.NodeReader on the pool.
func (d *driver) ReadNodes(ctx context.Context, ids []compact.NodeID) ([][]byte, error) {
	return fetchNodes(ctx, d.db, ids)
}

// StoredCheckpoint implements tlog.Driver.
func (d *driver) StoredCheckpoint(ctx context.Context, size uint64) (ledger.Checkpoint, error) {
	return checkpointAt(ctx, d.db, size)
}

// SignedSize implements tlog.Driver.
func (d *driver) SignedSize(ctx context.Context) (uint64, error) {
	var n int64
	err := d.db.QueryRowContext(ctx, "SELECT COALESCE(MAX(size), 0) FROM checkpoints").Scan(&n)
	return uint64(n), dbErr("size", err)
}

// BeginBatch implements tlog.Driver: a transaction on one pooled
// connection that holds the sequencer's advisory lock (SequencerLock)
// until it ends, so batches of every process on the database run one at
// a time. BEGIN, the lock, the stored size and the content ids of the
// queued requests (LookupIDs) are one pipelined round trip; the size and
// id statements are statements of their own, so under READ COMMITTED
// their snapshots are taken after the lock is granted and count what
// every other server committed.
func (d *driver) BeginBatch(ctx context.Context) (tlog.Batch, error) {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return nil, dbErr("begin", err)
	}
	b := &batch{d: d, tx: conn, ids: map[string]uint64{}}
	gen, ids := d.takeHints()
	var n int64
	err = b.pipe(ctx, func(q *pgx.Batch) {
		q.Queue("BEGIN")
		// A cached generic plan is made once per connection and kept
		// until the table's statistics change: one made while a new log's
		// leaves table was nearly empty scans it whole, by id, on every
		// batch after. The batch's statements are planned with their
		// arguments and the table's size of the moment instead.
		q.Queue("SET LOCAL plan_cache_mode = force_custom_plan")
		q.Queue("SELECT pg_advisory_xact_lock($1)", SequencerLock)
		q.Queue(storedSizeQuery).QueryRow(func(r pgx.Row) error { return r.Scan(&n) })
		b.queuePrefetch(q, ids)
	})
	if err != nil {
		// The connection's state is unknown (lost, terminated, or failed
		// mid-pipeline): close it rather than return it to the pool.
		b.final = nil
		b.release(err)
		return nil, dbErr("sequencer lock", err)
	}
	b.size, b.sized, b.gen = uint64(n), true, gen
	b.leaf = newRowBuf("leaves", "idx, id, kind, key, recorded_at, leaf, leaf_hash, backend, status, repository, commit_id", 11)
	b.node = newRowBuf("tree_nodes", "ord, hash", 2)
	b.art = newRowBuf("evidence_artifacts", "idx, name, digest", 3)
	b.head = newRowBuf("heads_index", "idx, repository, ref, commit_id, verdict, decision", 6)
	return b, nil
}

// batch is the PostgreSQL tlog.Batch: one transaction under the
// sequencer lock, on a connection taken from the pool for the batch's
// life, and the rows it buffers. Used by the engine's sequencer goroutine
// only.
type batch struct {
	d                     *driver
	tx                    *sql.Conn // in a transaction from BeginBatch to Commit or Rollback; nil after
	leaf, node, art, head *rowBuf
	tokOps                sqlstore.TokenOps
	ids                   map[string]uint64 // content ids appended in this batch
	reqIDs                []string          // of them, the current request's
	nodes                 []cachedNode      // tree nodes written, for the driver's cache after Commit
	reqNodes              int               // len(nodes) when the current request began
	gen                   uint64            // the generation of the ids looked up in BeginBatch
	pre                   map[string]uint64 // those ids' stored indexes
	marks                 [4]int            // len(args) of bufs() at the current request's start
	unsafe                bool              // the current request has rows that must be written at once (storableLeaf)
	sp                    bool
	size                  uint64             // the stored size read with the lock
	sized                 bool               // size is unread by the engine
	final                 []func(*pgx.Batch) // statements sent with COMMIT
}

// pipe sends the statements fill queues as one pipelined round trip (a
// pgx batch) on the batch's connection and reads every answer; it returns
// the first error, after which PostgreSQL skipped the rest (and, inside
// the transaction, refuses everything but a rollback).
func (b *batch) pipe(ctx context.Context, fill func(*pgx.Batch)) error {
	q := &pgx.Batch{}
	fill(q)
	if q.Len() == 0 {
		return nil
	}
	return b.tx.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("pooled connection is %T, not pgx's", dc)
		}
		return c.Conn().SendBatch(ctx, q).Close()
	})
}

func (b *batch) bufs() []*rowBuf { return []*rowBuf{b.leaf, b.node, b.art, b.head} }

// Size implements tlog.Batch; read after the lock was taken, it counts
// what every other server committed.
func (b *batch) Size(ctx context.Context) (uint64, error) {
	if b.sized {
		b.sized = false
		return b.size, nil
	}
	if err := b.flushPending(ctx); err != nil {
		return 0, err
	}
	var n int64
	err := b.tx.QueryRowContext(ctx, storedSizeQuery).Scan(&n)
	return uint64(n), dbErr("size", err)
}

// StoredCheckpoint implements tlog.Batch.
func (b *batch) StoredCheckpoint(ctx context.Context, size uint64) (ledger.Checkpoint, error) {
	if err := b.flushPending(ctx); err != nil {
		return ledger.Checkpoint{}, err
	}
	return checkpointAt(ctx, b.tx, size)
}

// ReadNodes implements tlog.NodeReader inside the transaction: the
// driver's cached nodes, the rest from the database (cached too while the
// batch has written no node: they were then read as committed).
func (b *batch) ReadNodes(ctx context.Context, ids []compact.NodeID) ([][]byte, error) {
	if err := b.flushPending(ctx); err != nil {
		return nil, err
	}
	return b.d.cache.readThrough(ctx, ids, len(b.nodes) == 0, func(ctx context.Context, ids []compact.NodeID) ([][]byte, error) {
		return fetchNodes(ctx, b.tx, ids)
	})
}

// Start implements tlog.Batch: the driver derives nothing from the
// stored log; on a reload its node cache is checked against the stored
// size.
func (b *batch) Start(_ context.Context, size uint64, reload bool) error {
	if reload {
		b.d.cache.forgetBeyond(size)
	}
	return nil
}

// BeginRequest implements tlog.Batch (a savepoint is a SQL SAVEPOINT).
func (b *batch) BeginRequest(ctx context.Context, savepoint bool) error {
	if savepoint {
		if _, err := b.tx.ExecContext(ctx, "SAVEPOINT req"); err != nil {
			return lost("savepoint", err)
		}
	}
	b.sp = savepoint
	b.reqIDs = b.reqIDs[:0]
	b.reqNodes = len(b.nodes)
	b.markDone()
	b.unsafe = false
	return nil
}

// EndRequest implements tlog.Batch.
func (b *batch) EndRequest(ctx context.Context, ok bool) error {
	if ok {
		b.reqIDs = b.reqIDs[:0]
		b.markDone()
		if b.sp {
			_, err := b.tx.ExecContext(ctx, "RELEASE SAVEPOINT req")
			return lost("savepoint", err)
		}
		return nil
	}
	b.dropRequest()
	b.nodes = b.nodes[:b.reqNodes]
	for _, id := range b.reqIDs {
		delete(b.ids, id)
	}
	b.reqIDs = b.reqIDs[:0]
	if !b.sp {
		return nil
	}
	_, err := b.tx.ExecContext(ctx, "ROLLBACK TO SAVEPOINT req")
	if _, rerr := b.tx.ExecContext(ctx, "RELEASE SAVEPOINT req"); err == nil {
		err = rerr
	}
	return lost("savepoint", err)
}

// Find implements tlog.Batch: ids appended in this batch, then the
// ids BeginBatch looked up when hint was among them, else the leaves
// table (committed by any server, or flushed by this batch).
func (b *batch) Find(ctx context.Context, recs []ledger.Prepared, hint any) (map[string]uint64, error) {
	if out, ok := b.prefetched(recs, hint); ok {
		return out, nil
	}
	var out map[string]uint64
	var ask []string
	for i := range recs {
		if idx, ok := b.ids[recs[i].ID]; ok {
			if out == nil {
				out = map[string]uint64{}
			}
			out[recs[i].ID] = idx
		} else {
			ask = append(ask, recs[i].ID)
		}
	}
	if len(ask) == 0 {
		return out, nil
	}
	rows, err := b.tx.QueryContext(ctx, "SELECT id, idx FROM leaves WHERE id = ANY($1)", ask)
	if err != nil {
		return nil, lost("find", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var idx int64
		if err := rows.Scan(&id, &idx); err != nil {
			return nil, lost("find", err)
		}
		if out == nil {
			out = map[string]uint64{}
		}
		out[id] = uint64(idx)
	}
	return out, rows.Err()
}

// EntryAt implements tlog.Batch.
func (b *batch) EntryAt(ctx context.Context, index uint64) (ledger.Entry, error) {
	if err := b.flushPending(ctx); err != nil {
		return ledger.Entry{}, err
	}
	e, err := scanEntry(b.tx.QueryRowContext(ctx, entryAtQuery, int64(index)))
	return e, dbErr("entry", err)
}

// EntryByID implements tlog.Batch.
func (b *batch) EntryByID(ctx context.Context, id string) (ledger.Entry, error) {
	if err := b.flushPending(ctx); err != nil {
		return ledger.Entry{}, err
	}
	return entryByID(ctx, b.tx, id)
}

// Idempotency implements tlog.Batch: keys older than
// Options.IdempotencyTTL are not found.
func (b *batch) Idempotency(ctx context.Context, key string) (tlog.IdempotentAnswer, bool, error) {
	var ans tlog.IdempotentAnswer
	var idsJSON string
	var size int64
	if err := b.flushPending(ctx); err != nil {
		return ans, false, err
	}
	cutoff := b.d.opts.Now().Add(-b.d.opts.IdempotencyTTL).UnixNano()
	err := b.tx.QueryRowContext(ctx, "SELECT request_hash, entry_ids, size FROM idempotency WHERE key = $1 AND created_at >= $2", idemKey(key), cutoff).Scan(&ans.RequestHash, &idsJSON, &size)
	if errors.Is(err, sql.ErrNoRows) {
		return ans, false, nil
	}
	if err != nil {
		return ans, false, lost("idempotency", err)
	}
	ans.Size = uint64(size)
	if err := json.Unmarshal([]byte(idsJSON), &ans.IDs); err != nil {
		return ans, false, err
	}
	return ans, true, nil
}

// AddLeaf implements tlog.Batch: the leaf row (with the evidence
// projection columns; the lane is p.Key) and the projection rows kept
// outside it.
func (b *batch) AddLeaf(e ledger.Entry, p *ledger.Prepared) {
	var backend, status, repo, commit any
	if ev := p.Evidence; ev != nil {
		backend, status, repo, commit = string(ev.Backend), string(ev.Status), ev.Subject.Repository, ev.Subject.Commit
	}
	lh := e.LeafHash
	b.leaf.add(int64(e.Index), e.ID, string(e.Kind), p.Key, e.RecordedAt.UnixNano(), e.Raw, lh[:], backend, status, repo, commit)
	b.ids[e.ID] = e.Index
	b.reqIDs = append(b.reqIDs, e.ID)
	if !b.unsafe && !storableLeaf(&e, p) {
		b.unsafe = true
	}
	switch {
	case p.Evidence != nil:
		for name, dg := range p.Evidence.Subject.Artifacts {
			b.art.add(int64(e.Index), name, dg)
		}
	case p.Head != nil:
		h := p.Head
		b.head.add(int64(e.Index), h.Repository, h.Ref, h.Commit, string(h.Verdict), string(h.Decision))
	case p.Kind == ledger.KindToken || p.Kind == ledger.KindTokenRevocation:
		b.tokOps.Add(e.Index, p.Kind, p.Body)
	}
}

// AddNode implements tlog.Batch; level-0 nodes are the leaf hashes,
// kept in the leaves table.
func (b *batch) AddNode(id compact.NodeID, hash []byte) {
	n := cachedNode{ord: sqlstore.NodeOrd(id)}
	copy(n.hash[:], hash)
	b.nodes = append(b.nodes, n)
	if id.Level > 0 {
		b.node.add(sqlstore.NodeOrd(id), hash)
	}
}

// Flush implements tlog.Batch: outside a savepoint, a request whose
// rows only the batch as a whole can fail keeps them buffered (see
// pending.go); otherwise every buffered row of every table goes in one
// pipelined round trip (leaves first: the projections refer to them).
func (b *batch) Flush(ctx context.Context) error {
	if !b.sp && !b.unsafe {
		return nil
	}
	err := b.pipe(ctx, func(q *pgx.Batch) {
		for _, r := range b.bufs() {
			r.queue(q)
		}
		b.queueTokens(q)
	})
	b.reset()
	return lost("append", err)
}

func (b *batch) reset() {
	for _, r := range b.bufs() {
		if r != nil { // nil until BeginBatch took the lock
			r.args = r.args[:0]
		}
	}
	b.marks = [4]int{}
	b.tokOps = b.tokOps[:0]
}

// PutIdempotency implements tlog.Batch; its statements are sent with
// COMMIT (Commit), so an error shows there. An expired row of the same
// key is replaced; a key another server stored first is kept (ON
// CONFLICT DO NOTHING); at most once per idemPruneEvery puts (or
// idemPruneAge) the expired keys and, beyond Options.IdempotencyMax rows,
// the oldest go.
func (b *batch) PutIdempotency(_ context.Context, key string, ans tlog.IdempotentAnswer, at time.Time) error {
	idsJSON, _ := json.Marshal(ans.IDs)
	d := b.d
	cutoff := at.Add(-d.opts.IdempotencyTTL).UnixNano()
	prune := false
	if d.idemPuts++; d.idemPuts >= idemPruneEvery || at.Sub(d.idemPruned) >= idemPruneAge {
		d.idemPuts, d.idemPruned = 0, at
		prune = true
	}
	k := idemKey(key)
	b.final = append(b.final, func(q *pgx.Batch) {
		q.Queue("DELETE FROM idempotency WHERE key = $1 AND created_at < $2", k, cutoff)
		if prune {
			q.Queue("DELETE FROM idempotency WHERE created_at < $1", cutoff)
			q.Queue("DELETE FROM idempotency WHERE created_at <= (SELECT created_at FROM idempotency ORDER BY created_at DESC LIMIT 1 OFFSET $1)", d.opts.IdempotencyMax)
		}
		q.Queue("INSERT INTO idempotency(key, request_hash, entry_ids, size, created_at) VALUES ($1,$2,$3,$4,$5) ON CONFLICT (key) DO NOTHING",
			k, ans.RequestHash, string(idsJSON), int64(ans.Size), at.UnixNano())
	})
	return nil
}

// PutCheckpoint implements tlog.Batch; the INSERT is sent with COMMIT
// (Commit), so an error shows there.
func (b *batch) PutCheckpoint(_ context.Context, cp ledger.Checkpoint) error {
	note, created := cp.Note, cp.CreatedAt.UnixNano()
	root := append([]byte(nil), cp.Root[:]...)
	b.final = append(b.final, func(q *pgx.Batch) {
		q.Queue("INSERT INTO checkpoints(size, root, note, created_at) VALUES ($1,$2,$3,$4)", int64(cp.Size), root, note, created)
	})
	return nil
}

// Commit implements tlog.Batch: the rows still buffered, the
// idempotency and checkpoint statements and COMMIT (which releases the
// lock) in one pipelined round trip. On error the transaction is rolled back, nothing of it stored
// unless the error came after PostgreSQL committed (a lost connection).
func (b *batch) Commit(ctx context.Context, size uint64) error {
	final := b.final
	err := b.pipe(ctx, func(q *pgx.Batch) {
		for _, r := range b.bufs() {
			r.queue(q)
		}
		for _, f := range final {
			f(q)
		}
		q.Queue("COMMIT")
	})
	if err != nil {
		b.Rollback()
		if connLost(err) {
			// COMMIT may have reached the server before the connection
			// went: whether the batch is in the log is unknown here. A
			// request sent again is answered from the log either way (its
			// records by content id, its idempotency key by its answer).
			return &ledger.Error{Code: ledger.CodeUnavailable, Message: "the database is unavailable (the connection to PostgreSQL was lost during the commit): whether these records were appended is unknown; send the request again shortly (records already appended are answered as existing)", Err: &unavailable{err}}
		}
		return err
	}
	b.reset()
	b.final = nil
	b.d.cache.add(b.nodes)
	b.nodes = nil
	b.release(nil)
	return nil
}

// Rollback implements tlog.Batch; a connection whose rollback fails is
// closed rather than returned to the pool.
func (b *batch) Rollback() {
	b.reset()
	b.final = nil
	b.nodes = nil
	if b.tx == nil {
		return
	}
	_, err := b.tx.ExecContext(context.Background(), "ROLLBACK")
	b.release(err)
}

// release returns the batch's connection to the pool, or closes it when
// failed is not nil (its transaction state is unknown).
func (b *batch) release(failed error) {
	if failed != nil {
		b.tx.Raw(func(dc any) error {
			if c, ok := dc.(*stdlib.Conn); ok {
				c.Conn().Close(context.Background())
			}
			return sqldriver.ErrBadConn
		})
	}
	b.tx.Close()
	b.tx = nil
}

// queryer is what *sql.DB, *sql.Tx and *sql.Conn offer.
type queryer = sqlstore.Execer

// fetchNodes returns the hashes of the given perfect-subtree nodes: inner
// nodes from tree_nodes, leaves' from leaves.leaf_hash, one query each.
func fetchNodes(ctx context.Context, q queryer, ids []compact.NodeID) ([][]byte, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var inner, leaves []int64
	for _, id := range ids {
		if id.Level == 0 {
			leaves = append(leaves, int64(id.Index))
		} else {
			inner = append(inner, sqlstore.NodeOrd(id))
		}
	}
	got := make(map[int64][]byte, len(ids)) // by ord
	if err := fetchAny(ctx, q, "SELECT ord, hash FROM tree_nodes WHERE ord = ANY($1)", inner, nil, got); err != nil {
		return nil, lost("read the tree", err)
	}
	if err := fetchAny(ctx, q, "SELECT idx, leaf_hash FROM leaves WHERE idx = ANY($1)", leaves, func(idx int64) int64 { return (idx + 1) << 6 }, got); err != nil {
		return nil, lost("read the tree", err)
	}
	return sqlstore.NodeHashes(ids, got)
}

func fetchAny(ctx context.Context, q queryer, query string, keys []int64, toOrd func(int64) int64, got map[int64][]byte) error {
	if len(keys) == 0 {
		return nil
	}
	rows, err := q.QueryContext(ctx, query, keys)
	if err != nil {
		return lost("read", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k int64
		var h []byte
		if err := rows.Scan(&k, &h); err != nil {
			return lost("read", err)
		}
		if toOrd != nil {
			k = toOrd(k)
		}
		got[k] = h
	}
	return rows.Err()
}

// checkpointAt reads the stored checkpoint of size (0: the largest).
func checkpointAt(ctx context.Context, q queryer, size uint64) (ledger.Checkpoint, error) {
	var row *sql.Row
	if size == 0 {
		row = q.QueryRowContext(ctx, "SELECT size, root, note, created_at FROM checkpoints ORDER BY size DESC LIMIT 1")
	} else {
		row = q.QueryRowContext(ctx, "SELECT size, root, note, created_at FROM checkpoints WHERE size = $1", int64(size))
	}
	var cp ledger.Checkpoint
	var root []byte
	var n, created int64
	if err := row.Scan(&n, &root, &cp.Note, &created); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			if size == 0 {
				return cp, ledger.NotFound("the log is empty")
			}
			return cp, ledger.NotFound("no checkpoint of size %d", size)
		}
		return cp, dbErr("checkpoint", err)
	}
	cp.Size = uint64(n)
	copy(cp.Root[:], root)
	cp.CreatedAt = time.Unix(0, created).UTC()
	return cp, nil
}

// idemKey is the idempotency table's key column for key: key itself when
// TEXT holds it and it does not begin with U+0001, else "\x01" and the
// hex of its bytes (an idempotency key is a header's bytes, which need be
// neither UTF-8 nor free of NUL). The mapping is one-to-one.
func idemKey(key string) string {
	if !unstorable(key) && !strings.HasPrefix(key, "\x01") {
		return key
	}
	return "\x01" + hex.EncodeToString([]byte(key))
}

// EncodeIdempotencyKey is the idempotency table's key column for a key
// (see idemKey), for tools that copy the table from another store.
func EncodeIdempotencyKey(key string) string { return idemKey(key) }

// DecodeIdempotencyKey inverts EncodeIdempotencyKey.
func DecodeIdempotencyKey(col string) string {
	if h, ok := strings.CutPrefix(col, "\x01"); ok {
		if b, err := hex.DecodeString(h); err == nil {
			return string(b)
		}
	}
	return col
}
