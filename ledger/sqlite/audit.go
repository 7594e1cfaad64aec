package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/transparency-dev/merkle/compact"
	"golang.org/x/mod/sumdb/note"
)

type auditCP struct {
	size uint64
	root ledger.Hash
}

// Audit implements ledger.Store. It recomputes every leaf hash and every
// tree node from the stored leaf bytes, checks them against the stored
// leaf hashes, tree nodes, query projections and every signed checkpoint
// (signature, origin, size and root), and reports the first inconsistency
// with the first bad leaf index. It reads through the read-only pool and
// may run while the service appends (it audits the prefix covered by the
// latest checkpoint it sees at the start).
func (s *Store) Audit(ctx context.Context) (ledger.AuditReport, error) {
	rep := ledger.AuditReport{FirstBadIndex: -1}
	bad := func(idx int64, format string, args ...any) (ledger.AuditReport, error) {
		rep.OK = false
		rep.FirstBadIndex = idx
		rep.Problem = fmt.Sprintf(format, args...)
		return rep, nil
	}
	// Snapshot isolation: one read transaction for everything.
	conn, err := s.r.Conn(ctx)
	if err != nil {
		return rep, dbErr("audit", err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return rep, dbErr("audit", err)
	}
	defer tx.Rollback()

	verifier, err := note.NewVerifier(s.vkey)
	if err != nil {
		return rep, fmt.Errorf("audit: verifier key: %w", err)
	}
	// 1. Checkpoints.
	var cps []auditCP
	rows, err := tx.QueryContext(ctx, "SELECT size, root, note FROM checkpoints ORDER BY size")
	if err != nil {
		return rep, dbErr("audit", err)
	}
	for rows.Next() {
		var size uint64
		var root []byte
		var text string
		if err := rows.Scan(&size, &root, &text); err != nil {
			rows.Close()
			return rep, dbErr("audit", err)
		}
		n, err := note.Open([]byte(text), note.VerifierList(verifier))
		if err != nil {
			rows.Close()
			return bad(int64(size)-1, "checkpoint of size %d: signature does not verify with %s: %v", size, s.vkey, err)
		}
		origin, nsize, nroot, err := parseCheckpointText(n.Text)
		if err != nil || origin != s.origin || nsize != size || !bytes.Equal(nroot[:], root) {
			rows.Close()
			return bad(int64(size)-1, "checkpoint of size %d: signed text does not match its row (origin %q, size %d)", size, origin, nsize)
		}
		cps = append(cps, auditCP{size: size, root: nroot})
	}
	rows.Close()
	rep.Checkpoints = len(cps)
	var latest uint64
	if len(cps) > 0 {
		latest = cps[len(cps)-1].size
	}

	// 2. Leaves, streamed with their projections, against tree nodes.
	leafRows, err := tx.QueryContext(ctx, `SELECT l.idx, l.id, l.kind, l.key, l.recorded_at, l.leaf, l.leaf_hash,
		e.lane, e.backend, e.status, e.control, e.repository, e.commit_id, e.tree_id, e.dirty, e.recorded_at,
		h.repository, h.ref, h.commit_id, h.verdict, h.decision
		FROM leaves l LEFT JOIN evidence_index e ON e.idx = l.idx LEFT JOIN heads_index h ON h.idx = l.idx
		ORDER BY l.idx`)
	if err != nil {
		return rep, dbErr("audit", err)
	}
	defer leafRows.Close()
	conn2, err := s.r.Conn(ctx)
	if err != nil {
		return rep, dbErr("audit", err)
	}
	defer conn2.Close()
	nodeRows, err := conn2.QueryContext(ctx, "SELECT ord, hash FROM tree_nodes ORDER BY ord")
	if err != nil {
		return rep, dbErr("audit", err)
	}
	defer nodeRows.Close()

	rng := rangeFactory.NewEmptyRange(0)
	cpi := 0
	var expect uint64
	var artifacts int64
	var nodeProblem string
	var nodeBad int64 = -1
	var verified uint64
	visit := func(id compact.NodeID, h []byte) {
		if nodeProblem != "" || id.Level == 0 {
			return
		}
		// Leaves below the last checkpoint whose root matched are proven
		// good, so the culprit lies at or after max(first, verified).
		first := max(int64(id.Index<<id.Level), int64(verified))
		if !nodeRows.Next() {
			nodeProblem, nodeBad = fmt.Sprintf("tree node (level %d, index %d) is missing", id.Level, id.Index), first
			return
		}
		var ord int64
		var stored []byte
		if err := nodeRows.Scan(&ord, &stored); err != nil {
			nodeProblem, nodeBad = err.Error(), first
			return
		}
		if ord != nodeOrd(id) {
			nodeProblem, nodeBad = fmt.Sprintf("tree node order broken at (level %d, index %d): stored nodes were inserted, deleted or reordered", id.Level, id.Index), first
			return
		}
		if !bytes.Equal(stored, h) {
			nodeProblem, nodeBad = fmt.Sprintf("tree node (level %d, index %d) does not match the hash recomputed from the leaves", id.Level, id.Index), first
		}
	}
	for leafRows.Next() {
		var (
			idx                                               uint64
			id, kind, key                                     string
			rec                                               int64
			raw, lh                                           []byte
			eLane, eBackend, eStatus, eControl, eRepo, eC, eT sql.NullString
			eDirty, eRec                                      sql.NullInt64
			hRepo, hRef, hCommit, hVerdict, hDecision         sql.NullString
		)
		if err := leafRows.Scan(&idx, &id, &kind, &key, &rec, &raw, &lh, &eLane, &eBackend, &eStatus, &eControl, &eRepo, &eC, &eT, &eDirty, &eRec, &hRepo, &hRef, &hCommit, &hVerdict, &hDecision); err != nil {
			return rep, dbErr("audit", err)
		}
		if idx != expect {
			if idx > expect {
				return bad(int64(expect), "leaf %d is missing (next stored leaf is %d)", expect, idx)
			}
			return bad(int64(idx), "leaf index %d repeats", idx)
		}
		if latest == 0 || idx >= latest {
			return bad(int64(idx), "leaf %d is not covered by any signed checkpoint (latest size %d): inserted behind the service's back", idx, latest)
		}
		h := ledger.LeafHash(raw)
		if !bytes.Equal(h[:], lh) {
			return bad(int64(idx), "leaf %d: stored bytes do not hash to the stored leaf hash (edited)", idx)
		}
		l, err := ledger.DecodeLeaf(raw)
		if err != nil {
			return bad(int64(idx), "leaf %d: %v", idx, err)
		}
		if l.Index != idx {
			return bad(int64(idx), "leaf %d: the stored bytes say index %d (rows were reordered or copied)", idx, l.Index)
		}
		if l.ID != id || string(l.Kind) != kind || l.RecordedAt.UnixNano() != rec || ledger.EntryID(l.Kind, l.Body) != id || ledger.EntryKey(l.Kind, l.Body) != key {
			return bad(int64(idx), "leaf %d: id, kind, key or time columns do not match the leaf bytes", idx)
		}
		if msg := checkProjection(l, rec, eLane, eBackend, eStatus, eControl, eRepo, eC, eT, eDirty, eRec, hRepo, hRef, hCommit, hVerdict, hDecision, &artifacts); msg != "" {
			return bad(int64(idx), "leaf %d: %s", idx, msg)
		}
		if err := rng.Append(h[:], visit); err != nil {
			return rep, err
		}
		if nodeProblem != "" {
			return bad(nodeBad, "%s", nodeProblem)
		}
		expect++
		for cpi < len(cps) && cps[cpi].size == expect {
			root, err := rng.GetRootHash(nil)
			if err != nil {
				return rep, err
			}
			if !bytes.Equal(root, cps[cpi].root[:]) {
				from := uint64(0)
				if cpi > 0 {
					from = cps[cpi-1].size
				}
				return bad(int64(from), "root over leaves [0, %d) does not match the signed checkpoint: a leaf in [%d, %d) was changed", expect, from, expect)
			}
			verified = expect
			cpi++
		}
	}
	if err := leafRows.Err(); err != nil {
		return rep, dbErr("audit", err)
	}
	if expect < latest {
		return bad(int64(expect), "the log has %d leaves but a signed checkpoint covers %d: leaves from %d on were deleted", expect, latest, expect)
	}
	if nodeRows.Next() {
		return bad(int64(expect), "tree_nodes holds nodes beyond the last leaf")
	}
	var nEv, nHead, nArt int64
	if err := tx.QueryRowContext(ctx, "SELECT (SELECT COUNT(*) FROM evidence_index), (SELECT COUNT(*) FROM heads_index), (SELECT COUNT(*) FROM evidence_artifacts)").Scan(&nEv, &nHead, &nArt); err != nil {
		return rep, dbErr("audit", err)
	}
	var wantEv, wantHead int64
	if err := tx.QueryRowContext(ctx, "SELECT (SELECT COUNT(*) FROM leaves WHERE kind='evidence'), (SELECT COUNT(*) FROM leaves WHERE kind='head')").Scan(&wantEv, &wantHead); err != nil {
		return rep, dbErr("audit", err)
	}
	if nEv != wantEv || nHead != wantHead || nArt != artifacts {
		return bad(-1, "query projections hold rows that no leaf accounts for (evidence %d/%d, heads %d/%d, artifacts %d/%d)", nEv, wantEv, nHead, wantHead, nArt, artifacts)
	}
	rep.OK = true
	rep.Leaves = expect
	if expect > 0 {
		r, _ := rng.GetRootHash(nil)
		copy(rep.Root[:], r)
	}
	return rep, nil
}

func checkProjection(l ledger.Leaf, rec int64, eLane, eBackend, eStatus, eControl, eRepo, eC, eT sql.NullString, eDirty, eRec sql.NullInt64, hRepo, hRef, hCommit, hVerdict, hDecision sql.NullString, artifacts *int64) string {
	switch l.Kind {
	case ledger.KindEvidence:
		var e ledger.Evidence
		if err := json.Unmarshal(l.Body, &e); err != nil {
			return "evidence body does not parse"
		}
		if !eLane.Valid || eLane.String != e.Lane || eBackend.String != string(e.Backend) || eStatus.String != string(e.Status) ||
			eControl.String != string(e.Control) || eRepo.String != e.Subject.Repository || eC.String != e.Subject.Commit ||
			eT.String != e.Subject.Tree || (eDirty.Int64 != 0) != e.Subject.Dirty || eRec.Int64 != rec {
			return "evidence index row does not match the leaf"
		}
		*artifacts += int64(len(e.Subject.Artifacts))
		if hRepo.Valid {
			return "evidence leaf has a head index row"
		}
	case ledger.KindHead:
		var h ledger.HeadVerification
		if err := json.Unmarshal(l.Body, &h); err != nil {
			return "head body does not parse"
		}
		if !hRepo.Valid || hRepo.String != h.Repository || hRef.String != h.Ref || hCommit.String != h.Commit || hVerdict.String != string(h.Verdict) || hDecision.String != string(h.Decision) {
			return "head index row does not match the leaf"
		}
		if eLane.Valid {
			return "head leaf has an evidence index row"
		}
	default:
		if eLane.Valid || hRepo.Valid {
			return "non-evidence leaf has an index row"
		}
	}
	return ""
}
