package sqlite

import (
	"context"
	"database/sql"
	"encoding/hex"
	"sync"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlstore"
	"github.com/evidence-ledger/ledger/ledger/tlog"
	"github.com/transparency-dev/merkle/compact"
)

// Audit implements ledger.Auditor through the engine's audit
// (tlog.RunAudit) over one read snapshot of the database; the driver's
// checks cover the evidence projection columns, heads_index, the
// artifact rows and the content-id tables. It reads through the read-only
// pool and may run while the service appends (it audits the snapshot it
// sees at the start).
func (s *Store) Audit(ctx context.Context) (ledger.AuditReport, error) {
	return sqlstore.Audit[auditProj](ctx, dialect, s.d.openAudit, s.VerifierKey(), s.Origin())
}

// auditProj is the projection a leaf row carries (sqlstore.Projection)
// and what the driver's check derived from its body.
type auditProj struct {
	sqlstore.Projection

	idBytes   [16]byte
	artifacts int64
	artSum    artSum
}

type auditRow = tlog.AuditRow[auditProj]

// auditSrc is the SQLite tlog.AuditSource: one read transaction (the
// snapshot) streaming the leaves with their projections, a second
// connection streaming tree_nodes in order, and a third summing the
// artifact rows (auditart.go) meanwhile.
type auditSrc struct {
	conn, conn2 *sql.Conn
	tx          *sql.Tx
	leafRows    *sql.Rows // read by RunAudit's reader goroutine only
	heads       headsStream
	nodeRows    *sql.Rows
	snapSize    uint64
	beyond      sql.NullInt64 // the first tree_nodes ord past a tree of snapSize, in the snapshot
	waitArt     func() artResult

	artifacts, wantHead int64  // counted from the leaves
	wantArt             artSum // the artifact rows the leaves imply
	idPairs             []idPair

	tokens tlog.TokenProjection // the tokens rows the token leaves imply (tokens.go)
}

type artResult struct {
	sum artSum
	err error
}

// openAudit opens the snapshot and starts the artifact sum.
func (d *driver) openAudit(ctx context.Context) (*auditSrc, error) {
	a := &auditSrc{}
	var err error
	if a.conn, err = d.r.Conn(ctx); err != nil {
		return nil, err
	}
	if a.tx, err = a.conn.BeginTx(ctx, &sql.TxOptions{ReadOnly: true}); err != nil {
		a.Close()
		return nil, err
	}
	// The snapshot begins with this first read.
	if err := a.tx.QueryRowContext(ctx, storedSizeQuery).Scan(&a.snapSize); err != nil {
		a.Close()
		return nil, err
	}
	// tree_nodes streams on another connection, whose snapshot may hold
	// the nodes of leaves appended since: it reads only the nodes a tree
	// of snapSize leaves completes, and a node beyond them is looked for
	// here, in the snapshot.
	if err := a.tx.QueryRowContext(ctx, "SELECT MIN(ord) FROM tree_nodes WHERE ord >= ?", nodeBound(a.snapSize)).Scan(&a.beyond); err != nil {
		a.Close()
		return nil, err
	}
	if a.conn2, err = d.r.Conn(ctx); err != nil {
		a.Close()
		return nil, err
	}
	// The artifact rows' multiset hash is summed on another connection
	// while the leaves stream. That connection's snapshot may be newer;
	// rows are only ever added, for new leaves, so counting only the rows
	// of leaves in this snapshot makes the two agree.
	done := make(chan artResult, 1)
	go func() {
		conn3, err := d.r.Conn(ctx)
		if err != nil {
			done <- artResult{err: err}
			return
		}
		sum, err := tableArtifacts(ctx, conn3, a.snapSize, nil)
		// Released before the answer: once close has the answer, the
		// store may close the pool, which closes only released connections
		// at once (a connection still held would close later, and its
		// WAL checkpoint could then hold the file's lock).
		conn3.Close()
		done <- artResult{sum, err}
	}()
	a.waitArt = sync.OnceValue(func() artResult { return <-done })
	return a, nil
}

// Close waits for the artifact sum (it uses the read pool) and releases
// the connections.
func (a *auditSrc) Close() {
	if a.waitArt != nil {
		a.waitArt()
	}
	for _, r := range []*sql.Rows{a.leafRows, a.heads.rows, a.nodeRows} {
		if r != nil {
			r.Close()
		}
	}
	if a.tx != nil {
		a.tx.Rollback()
	}
	for _, c := range []*sql.Conn{a.conn, a.conn2} {
		if c != nil {
			c.Close()
		}
	}
}

// Checkpoints implements tlog.AuditSource.
func (a *auditSrc) Checkpoints(ctx context.Context) ([]ledger.Checkpoint, error) {
	return dialect.AuditCheckpoints(ctx, a.tx)
}

// KeyRotations implements tlog.KeyRotationSource: the snapshot's
// key-rotation leaves in index order.
func (a *auditSrc) KeyRotations(ctx context.Context) ([]tlog.AuditLeaf, error) {
	return dialect.AuditKeyRotations(ctx, a.tx)
}

// ReadLeaves implements tlog.AuditSource. The leaves and heads_index
// are read in index order by two statements of the snapshot and merged
// on idx (heads_index.idx is its primary key): what leaves LEFT JOIN
// heads_index gives, without five NULL columns on every other leaf.
func (a *auditSrc) ReadLeaves(ctx context.Context, batch []auditRow) ([]auditRow, error) {
	if a.leafRows == nil {
		var err error
		a.leafRows, err = a.tx.QueryContext(ctx, "SELECT idx, id, kind, key, recorded_at, leaf, leaf_hash, backend, status, repository, commit_id FROM leaves ORDER BY idx")
		if err != nil {
			return nil, err
		}
		if a.heads.rows, err = a.tx.QueryContext(ctx, "SELECT idx, repository, ref, commit_id, verdict, decision FROM heads_index ORDER BY idx"); err != nil {
			return nil, err
		}
	}
	// Rows are scanned in place; the bytes go into the buffers an
	// earlier batch's row left (sql.RawBytes: copied before the next row).
	var raw, hash sql.RawBytes
	dest := make([]any, 0, 11)
	for len(batch) < cap(batch) && a.leafRows.Next() {
		batch = batch[:len(batch)+1]
		r := &batch[len(batch)-1]
		rawBuf, hashBuf := r.Raw[:0], r.LeafHash[:0]
		*r = auditRow{}
		p := &r.Proj
		dest = append(dest[:0], &r.Index, &r.ID, &r.Kind, &r.Key, &r.RecordedAt, &raw, &hash, &p.EBackend, &p.EStatus, &p.ERepo, &p.ECommit)
		if err := a.leafRows.Scan(dest...); err != nil {
			return nil, err
		}
		r.Raw, r.LeafHash = append(rawBuf, raw...), append(hashBuf, hash...)
		if err := a.heads.join(r.Index, &p.Projection); err != nil {
			return nil, err
		}
	}
	if len(batch) == 0 {
		if err := a.leafRows.Err(); err != nil {
			return nil, err
		}
		return nil, a.heads.rows.Err()
	}
	return batch, nil
}

// headsStream is heads_index read in idx order, one row ahead.
type headsStream struct {
	rows *sql.Rows
	idx  int64
	row  [5]sql.NullString // repository, ref, commit_id, verdict, decision
	have bool              // idx and row hold the next unjoined row
	done bool
}

// join sets p's heads_index columns from the row of leaf idx, when there
// is one; rows of smaller indexes (no leaf of theirs was read) are
// passed over, as a LEFT JOIN leaves them out. Leaves come in increasing
// idx.
func (h *headsStream) join(idx uint64, p *sqlstore.Projection) error {
	for !h.done && (!h.have || h.idx < int64(idx)) {
		if !h.rows.Next() {
			h.done, h.have = true, false
			return h.rows.Err()
		}
		if err := h.rows.Scan(&h.idx, &h.row[0], &h.row[1], &h.row[2], &h.row[3], &h.row[4]); err != nil {
			return err
		}
		h.have = true
	}
	if h.have && h.idx == int64(idx) {
		p.HRepo, p.HRef, p.HCommit, p.HVerdict, p.HDecision = h.row[0], h.row[1], h.row[2], h.row[3], h.row[4]
		h.have = false
	}
	return nil
}

// NextNode implements tlog.AuditSource over tree_nodes in ord order
// (the order an appending compact range completes nodes).
func (a *auditSrc) NextNode(ctx context.Context) (compact.NodeID, []byte, bool, error) {
	if a.nodeRows == nil {
		var err error
		if a.nodeRows, err = a.conn2.QueryContext(ctx, "SELECT ord, hash FROM tree_nodes WHERE ord < ? ORDER BY ord", nodeBound(a.snapSize)); err != nil {
			return compact.NodeID{}, nil, false, err
		}
	}
	if !a.nodeRows.Next() {
		if err := a.nodeRows.Err(); err != nil {
			return compact.NodeID{}, nil, false, err
		}
		if a.beyond.Valid {
			// Once: the node the snapshot holds past its last leaf.
			ord := a.beyond.Int64
			a.beyond.Valid = false
			return sqlstore.OrdNode(ord), nil, true, nil
		}
		return compact.NodeID{}, nil, false, nil
	}
	var ord int64
	var h []byte
	if err := a.nodeRows.Scan(&ord, &h); err != nil {
		return compact.NodeID{}, nil, false, err
	}
	return sqlstore.OrdNode(ord), h, true, nil
}

// CheckLeaf implements tlog.AuditSource: the leaf's projection columns
// and heads_index row against its body (sqlstore.Projection.CheckLeaf),
// and the artifact rows it implies.
func (a *auditSrc) CheckLeaf(r *auditRow, b *tlog.AuditBody) string {
	p := &r.Proj
	hex.Decode(p.idBytes[:], []byte(r.ID))
	return p.Projection.CheckLeaf(&r.AuditLeaf, b, false, func() string {
		// The rows evidence_artifacts must hold for this leaf, as a count
		// and a multiset hash (auditart.go).
		for name, dg := range b.Subject.Artifacts {
			p.artSum.addRow(r.Index, name, dg)
		}
		p.artifacts = int64(len(b.Subject.Artifacts))
		return ""
	})
}

// AddLeaf implements tlog.AuditSource.
func (a *auditSrc) AddLeaf(r *auditRow) {
	a.artifacts += r.Proj.artifacts
	a.wantArt.add(r.Proj.artSum)
	if ledger.Kind(r.Kind) == ledger.KindHead {
		a.wantHead++
	}
	if r.Proj.Tok != nil {
		a.tokens.Fold(*r.Proj.Tok)
	}
	a.idPairs = append(a.idPairs, idPair{id: r.Proj.idBytes, idx: r.Index})
}

// Finish implements tlog.AuditSource: the id tables, then the
// projection tables' row counts, then the artifact rows' sum.
func (a *auditSrc) Finish(ctx context.Context, n uint64) (tlog.AuditFinding, error) {
	idx, problem, dups, err := auditIDTables(ctx, a.tx, a.idPairs)
	if err != nil {
		return tlog.AuditFinding{}, err
	}
	f := tlog.AuditFinding{Index: -1, DuplicateLeaves: dups.count, FirstDuplicate: dups.first}
	if problem != "" {
		f.Index, f.Problem = idx, problem
		return f, nil
	}
	if f.Problem, err = sqlstore.AuditCounts(ctx, a.tx, a.wantHead, a.artifacts); err != nil || f.Problem != "" {
		return f, err
	}
	if idx, problem, err := sqlstore.AuditTokens(ctx, a.tx, &a.tokens); err != nil || problem != "" {
		f.Index, f.Problem = idx, problem
		return f, err
	}
	res := a.waitArt()
	if res.err != nil {
		return f, res.err
	}
	if res.sum != a.wantArt {
		idx, err := firstArtifactMismatch(ctx, a.tx)
		if err != nil {
			return f, err
		}
		f.Index, f.Problem = idx, sqlstore.ArtifactsProblem(idx)
	}
	return f, nil
}
