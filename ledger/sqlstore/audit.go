package sqlstore

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlog"
)

// Projection is what a leaf row of the audit carries of the projection
// tables: the evidence columns of leaves (the lane is the key, which the
// engine compares) and the heads_index row joined to it, and what
// CheckLeaf decoded of a token leaf.
type Projection struct {
	EBackend, EStatus, ERepo, ECommit         sql.NullString // leaves' evidence columns
	HRepo, HRef, HCommit, HVerdict, HDecision sql.NullString // heads_index
	Tok                                       *tlog.TokenChange
}

// Columns are the projection's scan destinations, in the order of
// AuditProjectionCols.
func (p *Projection) Columns() []any {
	return p.AppendColumns(make([]any, 0, 9))
}

// AppendColumns appends Columns to dest and returns the extended slice.
func (p *Projection) AppendColumns(dest []any) []any {
	return append(dest, &p.EBackend, &p.EStatus, &p.ERepo, &p.ECommit, &p.HRepo, &p.HRef, &p.HCommit, &p.HVerdict, &p.HDecision)
}

// AuditProjectionCols are the columns Projection.Columns scans, of leaves
// l LEFT JOIN heads_index h.
const AuditProjectionCols = "l.backend, l.status, l.repository, l.commit_id,\n\th.repository, h.ref, h.commit_id, h.verdict, h.decision"

// hasEvidenceColumns reports whether any evidence projection column of
// the row is set (it must not be, unless the leaf is evidence).
func (p *Projection) hasEvidenceColumns() bool {
	return p.EBackend.Valid || p.EStatus.Valid || p.ERepo.Valid || p.ECommit.Valid
}

// CheckLeaf checks a leaf row's projection against its body b and returns
// the problem ("" when none). An evidence leaf's columns must match the
// body, then evidence (the driver's check of its artifact rows) must pass,
// and it has no heads_index row; a head leaf has its heads_index row and
// no evidence columns; any other leaf has neither, nor artifact rows when
// artRows (the driver read them with the row), and a token or revocation
// leaf must decode (Tok holds it then).
func (p *Projection) CheckLeaf(r *tlog.AuditLeaf, b *tlog.AuditBody, artRows bool, evidence func() string) string {
	switch ledger.Kind(r.Kind) {
	case ledger.KindEvidence:
		if !p.EBackend.Valid || !p.EStatus.Valid || !p.ERepo.Valid || !p.ECommit.Valid ||
			p.EBackend.String != b.Backend || p.EStatus.String != b.Status ||
			p.ERepo.String != b.Subject.Repository || p.ECommit.String != b.Subject.Commit {
			return "evidence projection columns do not match the leaf"
		}
		if problem := evidence(); problem != "" {
			return problem
		}
		if p.HRepo.Valid {
			return "evidence leaf has a head index row"
		}
	case ledger.KindHead:
		if !p.HRepo.Valid || p.HRepo.String != b.Repository || p.HRef.String != b.Ref || p.HCommit.String != b.Commit || p.HVerdict.String != b.Verdict || p.HDecision.String != b.Decision {
			return "head index row does not match the leaf"
		}
		if p.hasEvidenceColumns() || artRows {
			return "head leaf has evidence projection columns"
		}
	default:
		if p.hasEvidenceColumns() || p.HRepo.Valid || artRows {
			return "non-evidence leaf has projection columns or an index row"
		}
		if k := ledger.Kind(r.Kind); k == ledger.KindToken || k == ledger.KindTokenRevocation {
			var l ledger.Leaf
			if err := json.Unmarshal(r.Raw, &l); err != nil {
				return "token leaf does not parse"
			}
			c, _, err := tlog.DecodeTokenChange(r.Index, ledger.Kind(r.Kind), l.Body)
			if err != nil {
				return err.Error()
			}
			p.Tok = &c
		}
	}
	return ""
}

// AuditCheckpoints implements tlog.AuditSource's Checkpoints over q. A
// stored root that is not 32 bytes reads as all ones, which no signed root
// equals.
func (d *Dialect) AuditCheckpoints(ctx context.Context, q Queryer) ([]ledger.Checkpoint, error) {
	rows, err := q.QueryContext(ctx, "SELECT size, root, note FROM checkpoints ORDER BY size")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ledger.Checkpoint
	for rows.Next() {
		var cp ledger.Checkpoint
		var root []byte
		if err := d.scanSize(rows, &cp.Size, &root, &cp.Note); err != nil {
			return nil, err
		}
		if len(root) == len(cp.Root) {
			copy(cp.Root[:], root)
		} else {
			cp.Root = ledger.Hash(bytes.Repeat([]byte{0xff}, len(cp.Root)))
		}
		out = append(out, cp)
	}
	return out, rows.Err()
}

// AuditKeyRotations implements tlog.KeyRotationSource over q: the
// key-rotation leaves in index order (through the partial index
// leaves_kind_key).
func (d *Dialect) AuditKeyRotations(ctx context.Context, q Queryer) ([]tlog.AuditLeaf, error) {
	rows, err := q.QueryContext(ctx, d.SQL("SELECT idx, id, kind, key, recorded_at, leaf, leaf_hash FROM leaves WHERE kind = ? AND kind <> 'evidence' ORDER BY idx"), string(ledger.KindKeyRotation))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []tlog.AuditLeaf
	for rows.Next() {
		var l tlog.AuditLeaf
		if err := rows.Scan(&l.Index, &l.ID, &l.Kind, &l.Key, &l.RecordedAt, &l.Raw, &l.LeafHash); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// AuditCounts checks the projection tables' row counts in q against the
// leaves: wantHead heads_index rows, artifacts evidence_artifacts rows. It
// returns the problem ("" when none): rows of no leaf, or missing ones.
func AuditCounts(ctx context.Context, q Queryer, wantHead, artifacts int64) (string, error) {
	var nHead, nArt int64
	if err := q.QueryRowContext(ctx, "SELECT (SELECT COUNT(*) FROM heads_index), (SELECT COUNT(*) FROM evidence_artifacts)").Scan(&nHead, &nArt); err != nil {
		return "", err
	}
	switch {
	case nHead != wantHead:
		return fmt.Sprintf("heads_index holds %d rows for %d head leaves (rows were added or deleted)", nHead, wantHead), nil
	case nArt != artifacts:
		return fmt.Sprintf("evidence_artifacts holds %d rows for the %d artifacts the evidence leaves name (rows were added or deleted)", nArt, artifacts), nil
	}
	return "", nil
}

// ArtifactsProblem is the audit's problem for artifact rows of leaf idx
// that do not match its body.
func ArtifactsProblem(idx int64) string {
	return fmt.Sprintf("evidence_artifacts rows of leaf %d do not match its body's artifacts (a digest, name or index was edited)", idx)
}

// AuditTokens checks the tokens table in q against the token leaves
// folded into proj (tlog.TokenProjection.CheckTable). It returns the
// leaf index concerned (-1 when none) and the problem ("" when none).
func AuditTokens(ctx context.Context, q Queryer, proj *tlog.TokenProjection) (int64, string, error) {
	rows, err := q.QueryContext(ctx, "SELECT "+TokenCols+", secret_hash, leaf_idx, revoked_idx FROM tokens ORDER BY id")
	if err != nil {
		return -1, "", err
	}
	defer rows.Close()
	var table []ledger.TokenRow
	for rows.Next() {
		var hash []byte
		var leafIdx, revIdx sql.NullInt64
		t, err := ScanToken(MultiScanner{rows, []any{&hash, &leafIdx, &revIdx}})
		if err != nil {
			return -1, "", err
		}
		table = append(table, tlog.ScannedTokenRow(t, hash, leafIdx, revIdx))
	}
	if err := rows.Err(); err != nil {
		return -1, "", err
	}
	idx, problem := proj.CheckTable(table)
	return idx, problem, nil
}

// AuditSource is a driver's tlog.AuditSource over a snapshot it holds
// until Close.
type AuditSource[P any] interface {
	tlog.AuditSource[P]
	Close()
}

// Audit runs the engine's audit (tlog.RunAudit) over the snapshot open
// returns, under the log's verifierKey and origin, and closes it. Errors
// are translated by Err naming "audit"; the report of a snapshot that
// did not open has no bad index and no duplicate.
func Audit[P any, S AuditSource[P]](ctx context.Context, d *Dialect, open func(context.Context) (S, error), verifierKey, origin string) (ledger.AuditReport, error) {
	src, err := open(ctx)
	if err != nil {
		return ledger.AuditReport{FirstBadIndex: -1, FirstDuplicate: -1}, d.Err("audit", err)
	}
	defer src.Close()
	rep, err := tlog.RunAudit[P](ctx, src, verifierKey, origin)
	return rep, d.Err("audit", err)
}
