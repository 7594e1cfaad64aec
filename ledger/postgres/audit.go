package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlstore"
	"github.com/evidence-ledger/ledger/ledger/tlog"
	"github.com/transparency-dev/merkle/compact"
)

// Audit implements ledger.Auditor through the engine's audit
// (tlog.RunAudit) over one REPEATABLE READ snapshot of the database,
// shared by two connections (pg_export_snapshot): one streams the leaves
// with their projections, the other the tree nodes. The driver's checks
// cover the evidence projection columns, heads_index, evidence_artifacts
// (each leaf's rows, and the table's row count) and tokens. It may run
// while servers append: it audits the snapshot it sees at the start.
func (s *Store) Audit(ctx context.Context) (ledger.AuditReport, error) {
	return sqlstore.Audit[auditProj](ctx, dialect, s.d.openAudit, s.VerifierKey(), s.Origin())
}

// auditProj is the projection a leaf row carries: sqlstore.Projection,
// and the evidence_artifacts rows of the leaf (name, digest pairs sorted,
// newline-separated, and their count).
type auditProj struct {
	sqlstore.Projection
	arts  sql.NullString
	nArts sql.NullInt64

	artifacts int64
}

type auditRow = tlog.AuditRow[auditProj]

// auditSrc is the PostgreSQL tlog.AuditSource.
type auditSrc struct {
	conn, conn2 *sql.Conn
	tx, tx2     *sql.Tx
	leafRows    *sql.Rows
	nodeRows    *sql.Rows

	artifacts, wantHead int64
	tokens              tlog.TokenProjection
}

var snapshotID = regexp.MustCompile(`^[0-9A-Fa-f-]+$`)

func (d *driver) openAudit(ctx context.Context) (*auditSrc, error) {
	a := &auditSrc{}
	ro := &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead}
	var err error
	if a.conn, err = d.db.Conn(ctx); err != nil {
		return nil, err
	}
	if a.tx, err = a.conn.BeginTx(ctx, ro); err != nil {
		a.Close()
		return nil, err
	}
	var snap string
	if err := a.tx.QueryRowContext(ctx, "SELECT pg_export_snapshot()").Scan(&snap); err != nil {
		a.Close()
		return nil, err
	}
	if !snapshotID.MatchString(snap) {
		a.Close()
		return nil, fmt.Errorf("unexpected snapshot id %q", snap)
	}
	if a.conn2, err = d.db.Conn(ctx); err != nil {
		a.Close()
		return nil, err
	}
	if a.tx2, err = a.conn2.BeginTx(ctx, ro); err != nil {
		a.Close()
		return nil, err
	}
	if _, err := a.tx2.ExecContext(ctx, "SET TRANSACTION SNAPSHOT '"+snap+"'"); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// Close releases the snapshot: its rows, transactions and connections.
func (a *auditSrc) Close() {
	for _, r := range []*sql.Rows{a.leafRows, a.nodeRows} {
		if r != nil {
			r.Close()
		}
	}
	for _, tx := range []*sql.Tx{a.tx, a.tx2} {
		if tx != nil {
			tx.Rollback()
		}
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

// auditLeavesQuery streams every leaf with its projections in index
// order; the artifact rows are grouped per leaf once (hash aggregate),
// not looked up per leaf.
const auditLeavesQuery = `SELECT l.idx, l.id, l.kind, l.key, l.recorded_at, l.leaf, l.leaf_hash,
	` + sqlstore.AuditProjectionCols + `, a.arts, a.n
	FROM leaves l LEFT JOIN heads_index h ON h.idx = l.idx
	LEFT JOIN (SELECT idx, string_agg(name || E'\n' || digest, E'\n' ORDER BY name COLLATE "C") AS arts, COUNT(*) AS n
		FROM evidence_artifacts GROUP BY idx) a ON a.idx = l.idx
	ORDER BY l.idx`

// ReadLeaves implements tlog.AuditSource.
func (a *auditSrc) ReadLeaves(ctx context.Context, batch []auditRow) ([]auditRow, error) {
	if a.leafRows == nil {
		var err error
		if a.leafRows, err = a.tx.QueryContext(ctx, auditLeavesQuery); err != nil {
			return nil, err
		}
	}
	for len(batch) < cap(batch) && a.leafRows.Next() {
		var r auditRow
		p := &r.Proj
		var idx int64
		dest := append([]any{&idx, &r.ID, &r.Kind, &r.Key, &r.RecordedAt, &r.Raw, &r.LeafHash}, p.Columns()...)
		if err := a.leafRows.Scan(append(dest, &p.arts, &p.nArts)...); err != nil {
			return nil, err
		}
		r.Index = uint64(idx)
		batch = append(batch, r)
	}
	if len(batch) == 0 {
		return nil, a.leafRows.Err()
	}
	return batch, nil
}

// NextNode implements tlog.AuditSource over tree_nodes in ord order.
func (a *auditSrc) NextNode(ctx context.Context) (compact.NodeID, []byte, bool, error) {
	if a.nodeRows == nil {
		var err error
		if a.nodeRows, err = a.tx2.QueryContext(ctx, "SELECT ord, hash FROM tree_nodes ORDER BY ord"); err != nil {
			return compact.NodeID{}, nil, false, err
		}
	}
	if !a.nodeRows.Next() {
		return compact.NodeID{}, nil, false, a.nodeRows.Err()
	}
	var ord int64
	var h []byte
	if err := a.nodeRows.Scan(&ord, &h); err != nil {
		return compact.NodeID{}, nil, false, err
	}
	return sqlstore.OrdNode(ord), h, true, nil
}

// wantArts is the artifact rows a body implies, as auditLeavesQuery
// aggregates them.
func wantArts(arts map[string]string) string {
	names := make([]string, 0, len(arts))
	for n := range arts {
		names = append(names, n)
	}
	sort.Strings(names)
	var sb strings.Builder
	for i, n := range names {
		if i > 0 {
			sb.WriteByte('\n')
		}
		sb.WriteString(n + "\n" + arts[n])
	}
	return sb.String()
}

// CheckLeaf implements tlog.AuditSource: the leaf's projection columns
// and heads_index row (sqlstore.Projection.CheckLeaf) and artifact rows
// against its body.
func (a *auditSrc) CheckLeaf(r *auditRow, b *tlog.AuditBody) string {
	p := &r.Proj
	return p.Projection.CheckLeaf(&r.AuditLeaf, b, p.nArts.Valid, func() string {
		if len(b.Subject.Artifacts) != int(p.nArts.Int64) || (len(b.Subject.Artifacts) > 0 && p.arts.String != wantArts(b.Subject.Artifacts)) {
			return sqlstore.ArtifactsProblem(int64(r.Index))
		}
		p.artifacts = int64(len(b.Subject.Artifacts))
		return ""
	})
}

// AddLeaf implements tlog.AuditSource.
func (a *auditSrc) AddLeaf(r *auditRow) {
	a.artifacts += r.Proj.artifacts
	if ledger.Kind(r.Kind) == ledger.KindHead {
		a.wantHead++
	}
	if r.Proj.Tok != nil {
		a.tokens.Fold(*r.Proj.Tok)
	}
}

// Finish implements tlog.AuditSource: the projection tables' row counts
// (rows of no leaf), then the tokens table. Content ids need no check of
// their own here: leaves.id is the id index (UNIQUE), and the engine
// checked every id against its leaf's bytes.
func (a *auditSrc) Finish(ctx context.Context, n uint64) (tlog.AuditFinding, error) {
	f := tlog.AuditFinding{Index: -1, FirstDuplicate: -1}
	var err error
	if f.Problem, err = sqlstore.AuditCounts(ctx, a.tx, a.wantHead, a.artifacts); err != nil || f.Problem != "" {
		return f, err
	}
	idx, problem, err := sqlstore.AuditTokens(ctx, a.tx, &a.tokens)
	f.Index, f.Problem = idx, problem
	return f, err
}

// KeyRotations implements tlog.KeyRotationSource: the snapshot's
// key-rotation leaves in index order, read before the leaf stream.
func (a *auditSrc) KeyRotations(ctx context.Context) ([]tlog.AuditLeaf, error) {
	return dialect.AuditKeyRotations(ctx, a.tx)
}
