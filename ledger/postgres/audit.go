package postgres

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/transparency-dev/merkle/compact"
)

// Audit implements ledger.Auditor through the engine's audit
// (ledger.RunAudit) over one REPEATABLE READ snapshot of the database,
// shared by two connections (pg_export_snapshot): one streams the leaves
// with their projections, the other the tree nodes. The driver's checks
// cover the evidence projection columns, heads_index, evidence_artifacts
// (each leaf's rows, and the table's row count) and tokens. It may run
// while servers append: it audits the snapshot it sees at the start.
func (s *Store) Audit(ctx context.Context) (ledger.AuditReport, error) {
	src, err := s.d.openAudit(ctx)
	if err != nil {
		return ledger.AuditReport{FirstBadIndex: -1, FirstDuplicate: -1}, dbErr("audit", err)
	}
	defer src.close()
	rep, err := ledger.RunAudit[auditProj](ctx, src, s.VerifierKey(), s.Origin())
	return rep, dbErr("audit", err)
}

// auditProj is the projection a leaf row carries: the evidence columns of
// leaves, the heads_index row, the evidence_artifacts rows of the leaf
// (name, digest pairs sorted, newline-separated, and their count), and
// what CheckLeaf decoded of a token leaf.
type auditProj struct {
	eBackend, eStatus, eRepo, eC              sql.NullString
	hRepo, hRef, hCommit, hVerdict, hDecision sql.NullString
	arts                                      sql.NullString
	nArts                                     sql.NullInt64

	artifacts int64
	tok       *ledger.TokenChange
}

type auditRow = ledger.AuditRow[auditProj]

// auditSrc is the PostgreSQL ledger.AuditSource.
type auditSrc struct {
	conn, conn2 *sql.Conn
	tx, tx2     *sql.Tx
	leafRows    *sql.Rows
	nodeRows    *sql.Rows

	artifacts, wantHead int64
	tokens              ledger.TokenProjection
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
		a.close()
		return nil, err
	}
	var snap string
	if err := a.tx.QueryRowContext(ctx, "SELECT pg_export_snapshot()").Scan(&snap); err != nil {
		a.close()
		return nil, err
	}
	if !snapshotID.MatchString(snap) {
		a.close()
		return nil, fmt.Errorf("unexpected snapshot id %q", snap)
	}
	if a.conn2, err = d.db.Conn(ctx); err != nil {
		a.close()
		return nil, err
	}
	if a.tx2, err = a.conn2.BeginTx(ctx, ro); err != nil {
		a.close()
		return nil, err
	}
	if _, err := a.tx2.ExecContext(ctx, "SET TRANSACTION SNAPSHOT '"+snap+"'"); err != nil {
		a.close()
		return nil, err
	}
	return a, nil
}

func (a *auditSrc) close() {
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

// Checkpoints implements ledger.AuditSource. A stored root that is not 32
// bytes reads as all ones, which no signed root equals.
func (a *auditSrc) Checkpoints(ctx context.Context) ([]ledger.Checkpoint, error) {
	rows, err := a.tx.QueryContext(ctx, "SELECT size, root, note FROM checkpoints ORDER BY size")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ledger.Checkpoint
	for rows.Next() {
		var cp ledger.Checkpoint
		var root []byte
		var size int64
		if err := rows.Scan(&size, &root, &cp.Note); err != nil {
			return nil, err
		}
		cp.Size = uint64(size)
		if len(root) == len(cp.Root) {
			copy(cp.Root[:], root)
		} else {
			cp.Root = ledger.Hash(bytes.Repeat([]byte{0xff}, len(cp.Root)))
		}
		out = append(out, cp)
	}
	return out, rows.Err()
}

// auditLeavesQuery streams every leaf with its projections in index
// order; the artifact rows are grouped per leaf once (hash aggregate),
// not looked up per leaf.
const auditLeavesQuery = `SELECT l.idx, l.id, l.kind, l.key, l.recorded_at, l.leaf, l.leaf_hash,
	l.backend, l.status, l.repository, l.commit_id,
	h.repository, h.ref, h.commit_id, h.verdict, h.decision, a.arts, a.n
	FROM leaves l LEFT JOIN heads_index h ON h.idx = l.idx
	LEFT JOIN (SELECT idx, string_agg(name || E'\n' || digest, E'\n' ORDER BY name COLLATE "C") AS arts, COUNT(*) AS n
		FROM evidence_artifacts GROUP BY idx) a ON a.idx = l.idx
	ORDER BY l.idx`

// ReadLeaves implements ledger.AuditSource.
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
		if err := a.leafRows.Scan(&idx, &r.ID, &r.Kind, &r.Key, &r.RecordedAt, &r.Raw, &r.LeafHash, &p.eBackend, &p.eStatus, &p.eRepo, &p.eC,
			&p.hRepo, &p.hRef, &p.hCommit, &p.hVerdict, &p.hDecision, &p.arts, &p.nArts); err != nil {
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

// NextNode implements ledger.AuditSource over tree_nodes in ord order.
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
	return ordNode(ord), h, true, nil
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

// CheckLeaf implements ledger.AuditSource: the leaf's projection columns,
// heads_index row and artifact rows against its body.
func (a *auditSrc) CheckLeaf(r *auditRow, b *ledger.AuditBody) string {
	p := &r.Proj
	switch ledger.Kind(r.Kind) {
	case ledger.KindEvidence:
		return checkEvidenceRow(r, b)
	case ledger.KindHead:
		if !p.hRepo.Valid || p.hRepo.String != b.Repository || p.hRef.String != b.Ref || p.hCommit.String != b.Commit || p.hVerdict.String != b.Verdict || p.hDecision.String != b.Decision {
			return "head index row does not match the leaf"
		}
		if p.hasEvidenceColumns() || p.nArts.Valid {
			return "head leaf has evidence projection columns"
		}
	default:
		if p.hasEvidenceColumns() || p.hRepo.Valid || p.nArts.Valid {
			return "non-evidence leaf has projection columns or an index row"
		}
		if k := ledger.Kind(r.Kind); k == ledger.KindToken || k == ledger.KindTokenRevocation {
			return tokenLeafOf(r)
		}
	}
	return ""
}

// checkEvidenceRow checks an evidence leaf's projection columns (the lane,
// its key, was compared by the engine) and artifact rows.
func checkEvidenceRow(r *auditRow, b *ledger.AuditBody) string {
	p := &r.Proj
	if !p.eBackend.Valid || !p.eStatus.Valid || !p.eRepo.Valid || !p.eC.Valid ||
		p.eBackend.String != b.Backend || p.eStatus.String != b.Status ||
		p.eRepo.String != b.Subject.Repository || p.eC.String != b.Subject.Commit {
		return "evidence projection columns do not match the leaf"
	}
	if len(b.Subject.Artifacts) != int(p.nArts.Int64) || (len(b.Subject.Artifacts) > 0 && p.arts.String != wantArts(b.Subject.Artifacts)) {
		return fmt.Sprintf("evidence_artifacts rows of leaf %d do not match its body's artifacts (a digest, name or index was edited)", r.Index)
	}
	p.artifacts = int64(len(b.Subject.Artifacts))
	if p.hRepo.Valid {
		return "evidence leaf has a head index row"
	}
	return ""
}

func (p *auditProj) hasEvidenceColumns() bool {
	return p.eBackend.Valid || p.eStatus.Valid || p.eRepo.Valid || p.eC.Valid
}

// AddLeaf implements ledger.AuditSource.
func (a *auditSrc) AddLeaf(r *auditRow) {
	a.artifacts += r.Proj.artifacts
	if ledger.Kind(r.Kind) == ledger.KindHead {
		a.wantHead++
	}
	if r.Proj.tok != nil {
		a.tokens.Fold(*r.Proj.tok)
	}
}

// Finish implements ledger.AuditSource: the projection tables' row counts
// (rows of no leaf), then the tokens table. Content ids need no check of
// their own here: leaves.id is the id index (UNIQUE), and the engine
// checked every id against its leaf's bytes.
func (a *auditSrc) Finish(ctx context.Context, n uint64) (ledger.AuditFinding, error) {
	f := ledger.AuditFinding{Index: -1, FirstDuplicate: -1}
	var nHead, nArt int64
	if err := a.tx.QueryRowContext(ctx, "SELECT (SELECT COUNT(*) FROM heads_index), (SELECT COUNT(*) FROM evidence_artifacts)").Scan(&nHead, &nArt); err != nil {
		return f, err
	}
	switch {
	case nHead != a.wantHead:
		f.Problem = fmt.Sprintf("heads_index holds %d rows for %d head leaves (rows were added or deleted)", nHead, a.wantHead)
		return f, nil
	case nArt != a.artifacts:
		f.Problem = fmt.Sprintf("evidence_artifacts holds %d rows for the %d artifacts the evidence leaves name (rows were added or deleted)", nArt, a.artifacts)
		return f, nil
	}
	idx, problem, err := a.auditTokens(ctx)
	f.Index, f.Problem = idx, problem
	return f, err
}

// tokenLeafOf decodes the body of a token or token-revocation leaf row.
func tokenLeafOf(r *auditRow) string {
	var l ledger.Leaf
	if err := json.Unmarshal(r.Raw, &l); err != nil {
		return "token leaf does not parse"
	}
	c, _, err := ledger.DecodeTokenChange(r.Index, ledger.Kind(r.Kind), l.Body)
	if err != nil {
		return err.Error()
	}
	r.Proj.tok = &c
	return ""
}

// auditTokens checks the tokens table against the token leaves
// (ledger.TokenProjection.CheckTable).
func (a *auditSrc) auditTokens(ctx context.Context) (int64, string, error) {
	rows, err := a.tx.QueryContext(ctx, "SELECT "+tokenCols+", secret_hash, leaf_idx, revoked_idx FROM tokens ORDER BY id")
	if err != nil {
		return -1, "", err
	}
	defer rows.Close()
	var table []ledger.TokenRow
	for rows.Next() {
		var hash []byte
		var leafIdx, revIdx sql.NullInt64
		t, err := scanToken(rows, &hash, &leafIdx, &revIdx)
		if err != nil {
			return -1, "", err
		}
		table = append(table, ledger.ScannedTokenRow(t, hash, leafIdx, revIdx))
	}
	if err := rows.Err(); err != nil {
		return -1, "", err
	}
	idx, problem := a.tokens.CheckTable(table)
	return idx, problem, nil
}

// KeyRotations implements ledger.KeyRotationSource: the snapshot's
// key-rotation leaves in index order, read before the leaf stream.
func (a *auditSrc) KeyRotations(ctx context.Context) ([]ledger.AuditLeaf, error) {
	rows, err := a.tx.QueryContext(ctx, "SELECT idx, id, kind, key, recorded_at, leaf, leaf_hash FROM leaves WHERE kind = $1 ORDER BY idx", string(ledger.KindKeyRotation))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ledger.AuditLeaf
	for rows.Next() {
		var l ledger.AuditLeaf
		if err := rows.Scan(&l.Index, &l.ID, &l.Kind, &l.Key, &l.RecordedAt, &l.Raw, &l.LeafHash); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}
