package sqlite

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/transparency-dev/merkle/compact"
)

// lingerRecords: a batch with this many records starts at once (see
// writer).
const lingerRecords = 64

// MaxRecordsPerAppend caps one Append call.
const MaxRecordsPerAppend = 10000

type prepared struct {
	kind ledger.Kind
	body []byte
	id   string
	key  string
	ev   *ledger.Evidence
	head *ledger.HeadVerification
}

type appendReq struct {
	ctx     context.Context
	recs    []prepared
	lookup  callerLookup // what the caller found in entry_ids
	idemKey string
	reqHash []byte
	resp    chan appendResp
}

type appendResp struct {
	entries  []ledger.Entry
	existing []bool
	size     uint64             // proofs are against this size
	cp       *ledger.Checkpoint // the checkpoint of that size when the writer has it
	err      error
}

// Append implements ledger.Store. Each record is validated (see
// ledger.PrepareRecord); with several records, error fields are prefixed by
// the record's position ("[3].lane"). The call blocks until the batch that
// carries it has committed (fsynced) or failed.
func (s *Store) Append(ctx context.Context, recs []ledger.Record, idemKey string) (*ledger.AppendResult, error) {
	if s.opts.ReadOnly {
		return nil, ledger.Errorf(ledger.CodeInternal, "store opened read-only")
	}
	if len(recs) == 0 {
		return nil, ledger.FieldError("", "no records to append")
	}
	if len(recs) > MaxRecordsPerAppend {
		return nil, ledger.FieldError("", "at most %d records per append, got %d: split them over several requests", MaxRecordsPerAppend, len(recs))
	}
	if len(idemKey) > 256 {
		return nil, ledger.FieldError("Idempotency-Key", "at most 256 characters")
	}
	s.startIDFilter()
	req := &appendReq{ctx: ctx, idemKey: idemKey, resp: make(chan appendResp, 1)}
	var err error
	if req.recs, err = prepareAll(recs); err != nil {
		return nil, err
	}
	req.lookup = s.lookupIDs(ctx, req.recs)
	h := sha256.New()
	for _, p := range req.recs {
		h.Write([]byte(p.id))
	}
	req.reqHash = h.Sum(nil)

	select {
	case s.reqs <- req:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.done:
		return nil, ledger.Errorf(ledger.CodeInternal, "store is closed")
	}
	var resp appendResp
	select {
	case resp = <-req.resp:
	case <-s.done:
		// The writer drains pending requests before it exits.
		resp = <-req.resp
	}
	if resp.err != nil {
		return nil, resp.err
	}
	return s.answer(ctx, resp)
}

// answer builds the AppendResult (proofs and checkpoint) outside the writer.
func (s *Store) answer(ctx context.Context, resp appendResp) (*ledger.AppendResult, error) {
	var cp ledger.Checkpoint
	if resp.cp != nil && resp.cp.Size == resp.size {
		cp = *resp.cp
	} else {
		var err error
		if cp, err = s.CheckpointAt(ctx, resp.size); err != nil {
			return nil, err
		}
	}
	out := &ledger.AppendResult{Checkpoint: cp}
	idx := make([]uint64, len(resp.entries))
	for i, e := range resp.entries {
		idx[i] = e.Index
	}
	proofs, err := inclusionMany(ctx, s.r, idx, resp.size, cp.Root)
	if err != nil {
		return nil, dbErr("inclusion proof", err)
	}
	for i, e := range resp.entries {
		out.Entries = append(out.Entries, ledger.AppendedEntry{Entry: e, Existing: resp.existing[i], Proof: proofs[i]})
	}
	return out, nil
}

func prefixField(err error, prefix string) error {
	var le *ledger.Error
	if errors.As(err, &le) {
		c := *le
		if c.Field == "" {
			c.Field = prefix
		} else {
			c.Field = prefix + "." + c.Field
		}
		return &c
	}
	return err
}

// prepareParallelMin is the batch size from which prepareAll spreads the
// records over GOMAXPROCS goroutines. Below it one goroutine does: on the
// 2-core benchmark machine, two goroutines gave no measurable gain for
// batches of 100 (interleaved runs, BENCHMARKS.md), while a batch of 1024
// or more is long enough to pay for waking another processor.
const prepareParallelMin = 1024

// prepareAll validates and canonicalizes recs, in parallel for large
// batches. The error is the one of the first invalid record in order,
// with its position as the field prefix when there are several records.
func prepareAll(recs []ledger.Record) ([]prepared, error) {
	out := make([]prepared, len(recs))
	errs := make([]error, len(recs))
	workers := min(runtime.GOMAXPROCS(0), len(recs)/(prepareParallelMin/2))
	if workers <= 1 {
		for i, r := range recs {
			if out[i], errs[i] = prepare(r); errs[i] != nil {
				break
			}
		}
	} else {
		var wg sync.WaitGroup
		per := (len(recs) + workers - 1) / workers
		for lo := 0; lo < len(recs); lo += per {
			hi := min(len(recs), lo+per)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := lo; i < hi; i++ {
					if out[i], errs[i] = prepare(recs[i]); errs[i] != nil {
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	for i, err := range errs {
		if err != nil {
			if len(recs) > 1 {
				err = prefixField(err, fmt.Sprintf("[%d]", i))
			}
			return nil, err
		}
	}
	return out, nil
}

func prepare(r ledger.Record) (prepared, error) {
	if !ledger.ValidKind(r.Kind) {
		return prepared{}, ledger.FieldError("kind", "unknown entry kind %q", r.Kind)
	}
	p := prepared{kind: r.Kind}
	var err error
	switch r.Kind {
	case ledger.KindEvidence:
		var e ledger.Evidence
		e, p.body, err = ledger.PrepareEvidence(r.Body)
		p.ev, p.key = &e, e.Lane
	case ledger.KindHead:
		var h ledger.HeadVerification
		h, p.body, err = ledger.PrepareHead(r.Body)
		p.head, p.key = &h, h.Repository
	default:
		p.body, err = ledger.PrepareRecord(r.Kind, r.Body)
		if err == nil {
			p.key = ledger.EntryKey(r.Kind, p.body)
		}
	}
	if err != nil {
		return p, err
	}
	p.id = ledger.EntryID(r.Kind, p.body)
	return p, nil
}

// writer is the single goroutine that owns the writer connection.
func (s *Store) writer() {
	defer s.wg.Done()
	lastBatch := 0
	for {
		select {
		case <-s.done:
			for {
				select {
				case r := <-s.reqs:
					s.commitBatch([]*appendReq{r})
				default:
					return
				}
			}
		case r := <-s.reqs:
			batch := []*appendReq{r}
			recs := len(r.recs)
			// Under concurrency (the last batch had company) linger briefly
			// so that more appends share this transaction's fsync; a lone
			// writer is never delayed, and neither is a batch that already
			// has lingerRecords records of work (the fsync is then a small
			// share of its cost, and waiting would idle the writer).
			var linger <-chan time.Time
			if lastBatch > 1 && s.opts.Linger > 0 {
				linger = time.After(s.opts.Linger)
			}
		drain:
			for len(batch) < s.opts.MaxBatch {
				select {
				case r := <-s.reqs:
					batch = append(batch, r)
					recs += len(r.recs)
					continue
				default:
				}
				if linger == nil || len(batch) >= lastBatch || recs >= lingerRecords {
					break drain
				}
				select {
				case r := <-s.reqs:
					batch = append(batch, r)
					recs += len(r.recs)
				case <-linger:
					break drain
				}
			}
			lastBatch = len(batch)
			s.commitBatch(batch)
		}
	}
}

// storedSizeQuery counts the stored leaves (the next leaf index).
const storedSizeQuery = "SELECT COALESCE(MAX(idx)+1, 0) FROM leaves"

// loadTree loads the compact range and latest checkpoint, checking that
// they agree (size and root).
func (s *Store) loadTree(ctx context.Context) error { return s.loadTreeFrom(ctx, s.w) }

func (s *Store) loadTreeFrom(ctx context.Context, q queryer) error {
	var n uint64
	if err := q.QueryRowContext(ctx, storedSizeQuery).Scan(&n); err != nil {
		return err
	}
	rng, err := rangeAt(ctx, q, n)
	if err != nil {
		return err
	}
	t := &treeState{rng: rng}
	if n > 0 {
		cp, err := s.checkpointAt(ctx, q, 0)
		if err != nil {
			return fmt.Errorf("latest checkpoint: %w", err)
		}
		if cp.Size != n || cp.Root != t.root() {
			return fmt.Errorf("log state does not match the latest signed checkpoint (size %d vs %d leaves): run `ledger audit`", cp.Size, n)
		}
		t.latest = cp
	}
	ids, err := loadIDs(ctx, q, n)
	if err != nil {
		return fmt.Errorf("recent ids: %w", err)
	}
	s.tree, s.ids = t, ids
	return nil
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
// leaves those rows for the caller to undo, and runBatch always does (it
// rolls back the transaction, or the request's savepoint). The journal
// was 11% of the inserts' time in a profile; with FAIL the inserts of a
// batched-ingest run took 18% less CPU.
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
	ids                        idLookup
	// newOrds/newHashes are the tree nodes (leaves included) appended in
	// this batch, published to the read cache after COMMIT.
	newOrds   []int64
	newHashes [][]byte
	reqOrds   int // len(newOrds) when the current request began
}

func (st *stmts) bufs() []*rowBuf { return []*rowBuf{st.leaf, st.node, st.art, st.head, st.rid} }

func (st *stmts) close() {
	for _, b := range st.bufs() {
		b.close()
	}
	for _, q := range []*sql.Stmt{st.idem, st.entry, st.size, st.cp, st.idemGet} {
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
	return nil
}

func (st *stmts) reset() {
	for _, b := range st.bufs() {
		b.reset()
	}
}

// dropRequest forgets the nodes of a request rolled back to its savepoint.
func (st *stmts) dropRequest() {
	st.newOrds, st.newHashes = st.newOrds[:st.reqOrds], st.newHashes[:st.reqOrds]
}

// prepareStmts returns the writer's statements, prepared once on the
// writer connection and bound to each transaction with tx.StmtContext.
func (s *Store) prepareStmts(ctx context.Context) (*stmts, error) {
	if s.stmts != nil {
		return s.stmts, nil
	}
	db := s.w
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
		{&st.entry, entryAtQuery},
		{&st.size, storedSizeQuery},
		{&st.cp, "INSERT INTO checkpoints(size, root, note, created_at) VALUES (?,?,?,?)"},
		{&st.idemGet, "SELECT request_hash, entry_ids, size FROM idempotency WHERE key = ?"},
	} {
		if *p.dst, err = db.PrepareContext(ctx, p.q); err != nil {
			st.close()
			return nil, err
		}
	}
	s.stmts = st
	return st, nil
}

// commitBatch appends a batch of requests in one IMMEDIATE transaction
// with one signed checkpoint, answering every request.
//
// The first attempt is optimistic: no savepoints (a savepoint journals every
// page it touches). When a write of one request in a batch of several
// fails, the whole transaction is rolled back and the batch runs again
// carefully, each request in its own savepoint, so that only the failing
// request fails. Records already in the log are found by content id in
// either attempt (applyReq) and answered with their original entries.
func (s *Store) commitBatch(batch []*appendReq) {
	if retry := s.runBatch(batch, false); retry {
		s.runBatch(batch, true)
	}
}

// runBatch is one attempt at commitBatch. Not careful, it returns true,
// having answered nothing and written nothing, when a request's writes
// failed; the caller then runs the batch again carefully, where every
// request is answered.
func (s *Store) runBatch(batch []*appendReq, careful bool) (retry bool) {
	ctx := context.Background()
	results := make([]appendResp, len(batch))
	fail := func(err error) {
		for i, r := range batch {
			if results[i].err == nil {
				results[i] = appendResp{err: err}
			}
			r.resp <- results[i]
		}
	}
	if s.tree == nil {
		if err := s.loadTree(ctx); err != nil {
			fail(dbErr("load log", err))
			return false
		}
	}
	now := s.opts.Now().UTC()
	before := s.tree.clone()
	st, err := s.prepareStmts(ctx)
	if err != nil {
		fail(dbErr("prepare", err))
		return false
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		fail(dbErr("begin", err))
		return false
	}
	// Another process (a CLI `ledger record --db` beside a running server)
	// may have appended since this writer last looked: under the write lock,
	// reload the tree when the stored size differs from ours.
	var stored uint64
	if err := tx.StmtContext(ctx, st.size).QueryRowContext(ctx).Scan(&stored); err != nil {
		tx.Rollback()
		fail(dbErr("size", err))
		return false
	}
	if stored != s.tree.size() {
		s.log.Info("log grew outside this process; reloading the tree", "ours", s.tree.size(), "stored", stored)
		if err := s.loadTreeFrom(ctx, tx); err != nil {
			tx.Rollback()
			s.tree = nil
			fail(dbErr("reload log", err))
			return false
		}
		before = s.tree.clone()
	}
	st.newOrds, st.newHashes, st.reqOrds = st.newOrds[:0], st.newHashes[:0], 0
	defer st.reset()
	// abort rolls the batch back and answers every request with err.
	abort := func(err error) bool {
		s.tree = before
		s.ids.rollback()
		tx.Rollback()
		fail(err)
		return false
	}
	if err := s.idf.writerSync(ctx, tx, s.tree.size(), s.ids.covered); err != nil {
		return abort(dbErr("content-id filter", err))
	}
	s.pubW.Store(s.ids.w)
	if s.ids.covered < s.tree.size() {
		if err := s.indexUncovered(ctx, tx, st); err != nil {
			return abort(dbErr("index content ids", err))
		}
	}
	// A request alone in its batch needs no savepoint: the transaction is
	// its savepoint.
	savepoints := careful && len(batch) > 1
	type idem struct {
		req *appendReq
		i   int
	}
	var idems []idem
	batchKeys := map[string][]byte{}
	for i, r := range batch {
		if r.ctx.Err() != nil {
			results[i].err = r.ctx.Err()
			continue
		}
		if r.idemKey != "" {
			if h, ok := batchKeys[r.idemKey]; ok && !bytes.Equal(h, r.reqHash) {
				results[i].err = ledger.Errorf(ledger.CodeConflict, "Idempotency-Key %q was already used with a different request", r.idemKey)
				continue
			}
		}
		if savepoints {
			if _, err := tx.ExecContext(ctx, "SAVEPOINT req"); err != nil {
				results[i].err = dbErr("savepoint", err)
				continue
			}
		}
		saved := s.tree.clone()
		st.reqOrds = len(st.newOrds)
		s.ids.beginRequest()
		// applyReq only reads; its rows are buffered in st until flush.
		res, replay, err := s.applyReq(ctx, tx, st, r, now)
		wrote := false
		if err == nil {
			wrote = true
			err = st.flush(ctx, tx)
		}
		if err != nil {
			st.reset()
			st.dropRequest()
			s.ids.dropRequest()
			s.tree = saved
			if wrote && !savepoints {
				// Some of this request's rows may be written, and there is
				// no savepoint to return to.
				s.tree = before
				s.ids.rollback()
				tx.Rollback()
				if !careful {
					return true
				}
				fail(dbErr("append", err))
				return false
			}
			if savepoints {
				tx.ExecContext(ctx, "ROLLBACK TO req")
				tx.ExecContext(ctx, "RELEASE req")
			}
			results[i].err = dbErr("append", err)
			continue
		}
		if savepoints {
			if _, err := tx.ExecContext(ctx, "RELEASE req"); err != nil {
				return abort(dbErr("release savepoint", err))
			}
		}
		results[i] = res
		if r.idemKey != "" && !replay {
			batchKeys[r.idemKey] = r.reqHash
			idems = append(idems, idem{r, i})
		}
	}
	size := s.tree.size()
	merged := false
	if size != before.size() && s.ids.pending() >= s.opts.RecentIDs {
		if err := mergeRecentIDs(ctx, tx); err != nil {
			return abort(dbErr("merge recent ids", err))
		}
		merged = true
	}
	for _, im := range idems {
		ids := make([]string, len(results[im.i].entries))
		for j, e := range results[im.i].entries {
			ids[j] = e.ID
		}
		idsJSON, _ := json.Marshal(ids)
		if _, err := tx.StmtContext(ctx, st.idem).ExecContext(ctx, im.req.idemKey, im.req.reqHash, string(idsJSON), size, now.UnixNano()); err != nil && !strings.Contains(err.Error(), "UNIQUE") {
			return abort(dbErr("idempotency", err))
		}
	}
	if size != before.size() {
		root := s.tree.root()
		text := checkpointText(s.origin, size, root)
		signed, err := s.SignNote(text)
		if err != nil {
			return abort(err)
		}
		if _, err := tx.StmtContext(ctx, st.cp).ExecContext(ctx, size, root[:], signed, now.UnixNano()); err != nil {
			return abort(dbErr("checkpoint", err))
		}
		s.tree.latest = ledger.Checkpoint{Origin: s.origin, Size: size, Root: root, Note: signed, CreatedAt: now}
	}
	if err := tx.Commit(); err != nil {
		s.tree, s.ids = nil, nil // reload from disk on the next batch
		fail(dbErr("commit", err))
		return false
	}
	// The filter holds the batch's ids before the watermark that they
	// may be merged under is published (see idFilter).
	s.idf.addCommitted(s.ids.txNew, size)
	s.ids.committed(merged, size)
	s.pubW.Store(s.ids.w)
	s.r.nodes.add(st.newOrds, st.newHashes)
	s.walFramesCommitted()
	latest := s.tree.latest
	for i, r := range batch {
		if results[i].err == nil && results[i].size == 0 {
			results[i].size = size
		}
		if results[i].size == latest.Size && latest.Note != "" {
			results[i].cp = &latest
		}
		r.resp <- results[i]
	}
	return false
}

// applyReq appends one request's records inside the open transaction.
// replay is true when the answer comes from a stored idempotency key.
// Records already in the log (by content id) are answered with their
// original entries; only new records are buffered for insertion.
func (s *Store) applyReq(ctx context.Context, tx *sql.Tx, st *stmts, r *appendReq, now time.Time) (appendResp, bool, error) {
	var res appendResp
	if r.idemKey != "" {
		var hash []byte
		var idsJSON string
		var size uint64
		err := tx.StmtContext(ctx, st.idemGet).QueryRowContext(ctx, r.idemKey).Scan(&hash, &idsJSON, &size)
		if err == nil {
			if !bytes.Equal(hash, r.reqHash) {
				return res, false, ledger.Errorf(ledger.CodeConflict, "Idempotency-Key %q was already used with a different request", r.idemKey)
			}
			var ids []string
			if err := json.Unmarshal([]byte(idsJSON), &ids); err != nil {
				return res, false, err
			}
			for _, id := range ids {
				e, err := entryByID(ctx, tx, id)
				if err != nil {
					return res, false, err
				}
				res.entries = append(res.entries, e)
				res.existing = append(res.existing, true)
			}
			res.size = size
			return res, true, nil
		} else if !errors.Is(err, sql.ErrNoRows) {
			return res, false, err
		}
	}
	pending := map[string]ledger.Entry{} // inserted by this request, not flushed yet
	// Which records are already in the log: the open transaction's and
	// recent_ids' ids are in memory, the rest are looked up in entry_ids.
	stored := r.lookup.found
	if r.lookup.w != s.ids.w {
		// entry_ids changed since the caller looked (or it could not look).
		var ask []string
		for _, p := range r.recs {
			if _, ok := s.ids.known(p.id); !ok {
				ask = append(ask, p.id)
			}
		}
		var err error
		if stored, err = st.ids.find(ctx, tx, ask); err != nil {
			return res, false, err
		}
	}
	for _, p := range r.recs {
		if e, ok := pending[p.id]; ok {
			res.entries = append(res.entries, e)
			res.existing = append(res.existing, true)
			continue
		}
		idx, ok := s.ids.known(p.id)
		if !ok {
			idx, ok = stored[p.id]
		}
		if ok {
			e, err := scanEntry(tx.StmtContext(ctx, st.entry).QueryRowContext(ctx, idx))
			if err != nil {
				return res, false, err
			}
			if e.ID != p.id {
				return res, false, fmt.Errorf("id index names leaf %d for %s, which holds %s: run `ledger audit`", idx, p.id, e.ID)
			}
			res.entries = append(res.entries, e)
			res.existing = append(res.existing, true)
			continue
		}
		e, err := s.insert(ctx, st, p, now)
		if err != nil {
			return res, false, err
		}
		pending[p.id] = e
		res.entries = append(res.entries, e)
		res.existing = append(res.existing, false)
	}
	return res, false, nil
}

func (s *Store) insert(ctx context.Context, st *stmts, p prepared, now time.Time) (ledger.Entry, error) {
	idx := s.tree.size()
	// p.body came out of prepare (compact canonical JSON), so the leaf can
	// be assembled without re-encoding it (ledger.AppendLeaf).
	raw := ledger.AppendLeaf(make([]byte, 0, len(p.body)+160), ledger.Leaf{V: 1, Index: idx, Kind: p.kind, ID: p.id, RecordedAt: now, Body: p.body})
	lh := ledger.LeafHash(raw)
	// The evidence projection lives in the leaf's row (migration 6; the
	// lane is p.key); other kinds leave it NULL.
	var backend, status, repo, commit any
	if e := p.ev; e != nil {
		backend, status, repo, commit = string(e.Backend), string(e.Status), e.Subject.Repository, e.Subject.Commit
	}
	st.leaf.add(idx, p.id, string(p.kind), p.key, now.UnixNano(), raw, lh[:], backend, status, repo, commit)
	st.rid.add(idx, p.id)
	s.ids.add(p.id, idx)
	if err := s.tree.rng.Append(lh[:], func(id compact.NodeID, h []byte) {
		if id.Level > 0 {
			st.node.add(nodeOrd(id), h)
		}
		st.newOrds = append(st.newOrds, nodeOrd(id))
		st.newHashes = append(st.newHashes, h)
	}); err != nil {
		return ledger.Entry{}, err
	}
	insertProjection(st, idx, p)
	return ledger.Entry{Index: idx, ID: p.id, Kind: p.kind, RecordedAt: now, LeafHash: lh, Body: p.body, Raw: raw}, nil
}

// insertProjection buffers the projection rows of a record kept outside
// its leaf row: evidence artifacts and head verifications.
func insertProjection(st *stmts, idx uint64, p prepared) {
	switch {
	case p.ev != nil:
		for name, d := range p.ev.Subject.Artifacts {
			st.art.add(idx, name, d)
		}
	case p.head != nil:
		h := p.head
		st.head.add(idx, h.Repository, h.Ref, h.Commit, string(h.Verdict), string(h.Decision))
	}
}
