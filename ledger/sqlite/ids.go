package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
)

// Content ids (ledger.EntryID) are hashes. Kept in one B-tree keyed by id,
// every appended record lands on a random page, so a batch of 100 records
// dirties about 100 pages (and writes about 100 WAL frames). Migration 5
// splits the id index in two (an LSM tree of two levels):
//
//   - recent_ids(idx, id): the ids of the newest leaves, appended in leaf
//     order (a sequential insert per record) and scanned by lookups;
//   - entry_ids(id, idx): every older id, keyed by id. When recent_ids
//     reaches Options.RecentIDs rows, the writer merges them into entry_ids
//     in sorted order and empties recent_ids, in the transaction of the
//     batch that crossed the threshold. A merge of k sorted ids into a tree
//     of p pages dirties at most min(k, p) pages, instead of about k.
//
// Together the two tables hold every leaf's id exactly once: recent_ids the
// leaves [w, size) and entry_ids the leaves [0, w). One leaf per id is not
// a UNIQUE constraint but the writer's check (the engine's de-duplication
// with this driver's Batch.Find): the ids of the request, of the open
// transaction, of recent_ids (kept in memory, idIndex) and then a lookup in
// entry_ids. `ledger audit` checks both tables
// against the leaves.

// DefaultRecentIDs is the default Options.RecentIDs.
const DefaultRecentIDs = 4096

// idIndex is the writer's in-memory side of the id tables. It is owned by
// the writer goroutine.
type idIndex struct {
	w       int64             // the first leaf index not in entry_ids
	covered uint64            // leaves [0, covered) have their ids in the tables
	recent  map[string]uint64 // recent_ids as committed: id -> leaf index
	txNew   map[string]uint64 // ids appended in the open transaction
	reqNew  []string          // ids appended by the current request
}

// loadIDs reads recent_ids into a fresh idIndex for a log of n leaves and
// finds how many leaves the id tables cover. Normally all of them; fewer
// when a ledger older than migration 5 appended to this database (it
// writes leaves without ids): the writer then indexes the rest (see
// indexUncovered).
func loadIDs(ctx context.Context, q queryer, n uint64) (*idIndex, error) {
	// A leaf that repeats an earlier leaf's id (see indexUncovered) has a
	// row here too; the id keeps naming the earlier leaf.
	rows, err := q.QueryContext(ctx, "SELECT r.idx, r.id, EXISTS(SELECT 1 FROM entry_ids e WHERE e.id = r.id) FROM recent_ids r ORDER BY r.idx")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	ix := &idIndex{w: int64(n), recent: map[string]uint64{}, txNew: map[string]uint64{}}
	var top uint64
	for rows.Next() {
		var idx uint64
		var id string
		var merged bool
		if err := rows.Scan(&idx, &id, &merged); err != nil {
			return nil, err
		}
		if _, seen := ix.recent[id]; !seen && !merged {
			ix.recent[id] = idx
		}
		ix.w = min(ix.w, int64(idx))
		top = max(top, idx+1)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows.Close()
	if len(ix.recent) > 0 {
		ix.covered = top
		return ix, nil
	}
	// recent_ids is empty: entry_ids covers a prefix of the leaves; find
	// its end (normally all n, checked with one lookup).
	inEntryIDs := func(idx uint64) (bool, error) {
		var ok bool
		err := q.QueryRowContext(ctx, "SELECT EXISTS(SELECT 1 FROM leaves l JOIN entry_ids e ON e.id = l.id AND e.idx = l.idx WHERE l.idx = ?)", idx).Scan(&ok)
		return ok, err
	}
	lo, hi := uint64(0), n // leaves [0, lo) covered, [hi, n) not
	if n > 0 {
		ok, err := inEntryIDs(n - 1)
		if err != nil {
			return nil, err
		}
		if ok {
			lo = n
		}
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		ok, err := inEntryIDs(mid)
		if err != nil {
			return nil, err
		}
		if ok {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	ix.w, ix.covered = int64(lo), lo
	return ix, nil
}

// indexUncovered adds the ids of leaves [covered, n) to recent_ids inside
// tx (see loadIDs). A leaf whose id another leaf already has (an older
// ledger appended a duplicate) is indexed too and reported in the log.
func (d *driver) indexUncovered(ctx context.Context, tx *sql.Tx, st *stmts) error {
	ix := d.ids
	rows, err := tx.QueryContext(ctx, "SELECT idx, id FROM leaves WHERE idx >= ? ORDER BY idx", ix.covered)
	if err != nil {
		return err
	}
	type leafID struct {
		idx uint64
		id  string
	}
	var tail []leafID
	for rows.Next() {
		var l leafID
		if err := rows.Scan(&l.idx, &l.id); err != nil {
			rows.Close()
			return err
		}
		tail = append(tail, l)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	ids := make([]string, len(tail))
	for i, l := range tail {
		ids[i] = l.id
	}
	inEntry, err := st.ids.find(ctx, tx, ids)
	if err != nil {
		return err
	}
	for _, l := range tail {
		// Every leaf gets its recent_ids row; an id an earlier leaf has
		// keeps naming that leaf (mergeRecentIDs keeps the first too).
		st.rid.add(l.idx, l.id)
		first, ok := ix.known(l.id)
		if !ok {
			first, ok = inEntry[l.id]
		}
		if ok {
			d.log.Warn("leaf repeats the content id of an earlier leaf (appended by a ledger older than schema 5); the id keeps naming the earlier leaf", "leaf", l.idx, "first", first)
			continue
		}
		ix.txNew[l.id] = l.idx
	}
	if err := st.rid.flush(ctx, tx); err != nil {
		return err
	}
	if ix.w > int64(ix.covered) {
		ix.w = int64(ix.covered)
	}
	d.log.Warn("indexed the content ids of leaves appended without them (by a ledger older than schema 5)", "from", ix.covered, "to", ix.covered+uint64(len(tail)))
	return nil
}

// known returns the leaf index of id when the open transaction or
// recent_ids holds it.
func (ix *idIndex) known(id string) (uint64, bool) {
	if idx, ok := ix.txNew[id]; ok {
		return idx, true
	}
	idx, ok := ix.recent[id]
	return idx, ok
}

func (ix *idIndex) add(id string, idx uint64) {
	ix.txNew[id] = idx
	ix.reqNew = append(ix.reqNew, id)
}

// beginRequest starts tracking a request's ids; dropRequest forgets them
// (the request was rolled back).
func (ix *idIndex) beginRequest() { ix.reqNew = ix.reqNew[:0] }

func (ix *idIndex) dropRequest() {
	for _, id := range ix.reqNew {
		delete(ix.txNew, id)
	}
	ix.reqNew = ix.reqNew[:0]
}

// rollback forgets the open transaction's ids.
func (ix *idIndex) rollback() {
	clear(ix.txNew)
	ix.reqNew = ix.reqNew[:0]
}

// committed records the transaction's ids as committed; merged reports
// that the transaction moved recent_ids into entry_ids, making the log's
// size the new watermark.
func (ix *idIndex) committed(merged bool, size uint64) {
	ix.covered = size
	if merged {
		clear(ix.recent)
		ix.w = int64(size)
	} else {
		for id, idx := range ix.txNew {
			ix.recent[id] = idx
		}
	}
	clear(ix.txNew)
	ix.reqNew = ix.reqNew[:0]
}

// pending is the number of ids recent_ids holds once the open transaction
// commits.
func (ix *idIndex) pending() int { return len(ix.recent) + len(ix.txNew) }

// mergeRecentIDs moves recent_ids into entry_ids (sorted by id, so that
// consecutive inserts share pages) inside tx. An id keeps its first leaf:
// a leaf that repeats an earlier leaf's id (appended by a ledger older than
// schema 5, see indexUncovered) gets no row of its own: rows go in in
// (id, idx) order and OR IGNORE drops every later one (the same as
// GROUP BY id with MIN(idx), without the aggregate's cost).
func mergeRecentIDs(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, "INSERT OR IGNORE INTO entry_ids(id, idx) SELECT id, idx FROM recent_ids ORDER BY id, idx"); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, "DELETE FROM recent_ids")
	return err
}

// idLookup finds ids in entry_ids with prepared statements for chunks of
// 64, 32, ..., 1 ids.
type idLookup struct {
	stmts [chunkBits + 1]*sql.Stmt
}

func (l *idLookup) prepare(ctx context.Context, db *sql.DB) error {
	for k := range l.stmts {
		q := "SELECT id, idx FROM entry_ids WHERE id IN (" + strings.TrimSuffix(strings.Repeat("?,", 1<<k), ",") + ")"
		var err error
		if l.stmts[k], err = db.PrepareContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

func (l *idLookup) close() {
	for _, s := range l.stmts {
		if s != nil {
			s.Close()
		}
	}
}

// find returns the leaf index of each of ids that entry_ids holds.
func (l *idLookup) find(ctx context.Context, tx *sql.Tx, ids []string) (map[string]uint64, error) {
	found := map[string]uint64{}
	err := queryIDChunks(ids, func(k int, args []any) (*sql.Rows, error) {
		return tx.StmtContext(ctx, l.stmts[k]).QueryContext(ctx, args...)
	}, func(id string, idx int64) error {
		found[id] = uint64(idx)
		return nil
	})
	return found, err
}

// queryIDChunks runs query for ids in chunks (see chunks), with the
// chunk's ids as arguments, and calls row for every (id, idx) row.
func queryIDChunks(ids []string, query func(k int, args []any) (*sql.Rows, error), row func(id string, idx int64) error) error {
	args := make([]any, 0, chunkRows)
	return chunks(len(ids), func(lo, k int) error {
		args = args[:0]
		for _, id := range ids[lo : lo+1<<k] {
			args = append(args, id)
		}
		rows, err := query(k, args)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var idx int64
			if err := rows.Scan(&id, &idx); err != nil {
				return err
			}
			if err := row(id, idx); err != nil {
				return err
			}
		}
		return rows.Err()
	})
}

// callerLookup is what an appending caller found in entry_ids before
// handing its records to the writer (on the read pool, so that the writer
// does not spend its time on it): the leaf index of each id found, and the
// watermark w (see idIndex) of the snapshot it read. entry_ids only grows,
// and only when w moves, so when the writer's w still equals w the ids not
// found are not in entry_ids. w is -1 when the lookup is unusable (chunks
// read different snapshots, or an error): the writer then looks up itself.
type callerLookup struct {
	found map[string]uint64
	w     int64
}

// lookupIDs is the callers' lookup (see callerLookup): the ids the
// content-id filter may hold are looked up in entry_ids (lookupIDsDB), the
// others are in no table at the watermark read before the filter was
// tested.
func (d *driver) lookupIDs(ctx context.Context, recs []ledger.Prepared) callerLookup {
	w := d.pubW.Load()
	if w < 0 || !d.idf.ready.Load() {
		return lookupIDsDB(ctx, d.r, recs)
	}
	maybe := d.idf.maybe(recs)
	if len(maybe) == 0 {
		return callerLookup{w: w}
	}
	l := lookupIDsDB(ctx, d.r, maybe)
	if l.w != w {
		// A merge between the two reads: let the writer look.
		return callerLookup{w: -1}
	}
	return l
}

// lookupIDsDB is the callers' entry_ids lookup, through the read pool's
// cached statements (one per chunk size), each chunk also reading the
// watermark in the same statement, hence the same snapshot.
func lookupIDsDB(ctx context.Context, q interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}, recs []ledger.Prepared) callerLookup {
	out := callerLookup{found: map[string]uint64{}, w: -2}
	ids := make([]string, len(recs))
	for i, p := range recs {
		ids[i] = p.ID
	}
	errStale := errors.New("chunks read different snapshots")
	err := queryIDChunks(ids, func(k int, args []any) (*sql.Rows, error) {
		return q.QueryContext(ctx, callerLookupQuery[k], args...)
	}, func(id string, idx int64) error {
		if id == "" { // the watermark row
			if out.w != -2 && out.w != idx {
				return errStale
			}
			out.w = idx
			return nil
		}
		out.found[id] = uint64(idx)
		return nil
	})
	if err != nil || out.w < 0 {
		return callerLookup{w: -1}
	}
	return out
}

// callerLookupQuery[k] looks up 1<<k ids and reads the watermark.
var callerLookupQuery = func() (qs [chunkBits + 1]string) {
	for k := range qs {
		qs[k] = "SELECT '', COALESCE((SELECT MIN(idx) FROM recent_ids), (SELECT COALESCE(MAX(idx)+1, 0) FROM leaves)) " +
			"UNION ALL SELECT id, idx FROM entry_ids WHERE id IN (" + strings.TrimSuffix(strings.Repeat("?,", 1<<k), ",") + ")"
	}
	return
}()

// idxOfID is the lookup of a content id for readers: entry_ids first (a
// seek), then recent_ids (a scan of at most Options.RecentIDs rows).
// A repeated id (see indexUncovered) names its first leaf.
const idxOfID = "(SELECT idx FROM entry_ids WHERE id = ?1 UNION ALL SELECT MIN(idx) FROM recent_ids WHERE id = ?1 AND NOT EXISTS (SELECT 1 FROM entry_ids WHERE id = ?1))"
