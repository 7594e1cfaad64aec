package sqlite

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	jsonv2 "github.com/go-json-experiment/json"
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
	rep := ledger.AuditReport{FirstBadIndex: -1, FirstDuplicate: -1}
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

	// The artifact rows' multiset hash (auditart.go) is summed on another
	// connection while the leaves stream. That connection's snapshot may be
	// newer; rows are only ever added, for new leaves, so counting only the
	// rows of leaves in this transaction's snapshot makes the two agree.
	var snapSize uint64
	if err := tx.QueryRowContext(ctx, storedSizeQuery).Scan(&snapSize); err != nil {
		return rep, dbErr("audit", err)
	}
	type artResult struct {
		sum artSum
		err error
	}
	artDone := make(chan artResult, 1)
	go func() {
		conn3, err := s.r.Conn(ctx)
		if err != nil {
			artDone <- artResult{err: err}
			return
		}
		defer conn3.Close()
		sum, err := tableArtifacts(ctx, conn3, snapSize, nil)
		artDone <- artResult{sum, err}
	}()
	// Wait for it on every return path (it uses ctx and the read pool).
	waitArt := sync.OnceValue(func() artResult { return <-artDone })
	defer waitArt()

	// 2. Leaves, streamed with their projections, against tree nodes.
	leafRows, err := tx.QueryContext(ctx, `SELECT l.idx, l.id, l.kind, l.key, l.recorded_at, l.leaf, l.leaf_hash,
		l.backend, l.status, l.repository, l.commit_id,
		h.repository, h.ref, h.commit_id, h.verdict, h.decision
		FROM leaves l LEFT JOIN heads_index h ON h.idx = l.idx
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
	var artifacts, wantHead int64 // counted from the leaves
	var wantArt artSum            // the artifact rows the leaves imply
	var nodeProblem string
	var nodeBad int64 = -1
	var verified uint64
	var idPairs []idPair
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
	// Rows are read in order by one goroutine, verified leaf by leaf
	// (hashing, JSON decoding, projection checks: independent per leaf) by
	// GOMAXPROCS workers a batch at a time, and fed into the tree in order.
	batches := make(chan []auditRow, 2)
	readErr := make(chan error, 1)
	stopRead := make(chan struct{})
	defer close(stopRead)
	go func() {
		defer close(batches)
		for {
			batch := make([]auditRow, 0, auditBatch)
			for len(batch) < auditBatch && leafRows.Next() {
				var r auditRow
				if err := leafRows.Scan(&r.idx, &r.id, &r.kind, &r.key, &r.rec, &r.raw, &r.lh, &r.eBackend, &r.eStatus, &r.eRepo, &r.eC, &r.hRepo, &r.hRef, &r.hCommit, &r.hVerdict, &r.hDecision); err != nil {
					readErr <- err
					return
				}
				batch = append(batch, r)
			}
			if len(batch) == 0 {
				readErr <- leafRows.Err()
				return
			}
			select {
			case batches <- batch:
			case <-stopRead:
				readErr <- nil
				return
			}
		}
	}()
	workers := max(1, runtime.GOMAXPROCS(0))
	for batch := range batches {
		var wg sync.WaitGroup
		per := (len(batch) + workers - 1) / workers
		for w := 0; w < workers; w++ {
			lo, hi := w*per, min(len(batch), (w+1)*per)
			if lo >= hi {
				break
			}
			wg.Add(1)
			go func(rows []auditRow) {
				defer wg.Done()
				for i := range rows {
					rows[i].check()
				}
			}(batch[lo:hi])
		}
		wg.Wait()
		for i := range batch {
			r := &batch[i]
			idx := r.idx
			if idx != expect {
				if idx > expect {
					return bad(int64(expect), "leaf %d is missing (next stored leaf is %d)", expect, idx)
				}
				return bad(int64(idx), "leaf index %d repeats", idx)
			}
			if latest == 0 || idx >= latest {
				return bad(int64(idx), "leaf %d is not covered by any signed checkpoint (latest size %d): inserted behind the service's back", idx, latest)
			}
			if r.problem != "" {
				return bad(int64(idx), "leaf %d: %s", idx, r.problem)
			}
			artifacts += r.artifacts
			wantArt.add(r.artSum)
			if ledger.Kind(r.kind) == ledger.KindHead {
				wantHead++
			}
			idPairs = append(idPairs, idPair{id: r.idBytes, idx: idx})
			if err := rng.Append(r.hash[:], visit); err != nil {
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
	}
	if err := <-readErr; err != nil {
		return rep, dbErr("audit", err)
	}
	if expect < latest {
		return bad(int64(expect), "the log has %d leaves but a signed checkpoint covers %d: leaves from %d on were deleted", expect, latest, expect)
	}
	if nodeRows.Next() {
		return bad(int64(expect), "tree_nodes holds nodes beyond the last leaf")
	}
	idx, problem, dups, err := auditIDTables(ctx, tx, idPairs)
	if err != nil {
		return rep, dbErr("audit", err)
	}
	rep.DuplicateLeaves, rep.FirstDuplicate = dups.count, dups.first
	if problem != "" {
		return bad(idx, "%s", problem)
	}
	var nHead, nArt int64
	if err := tx.QueryRowContext(ctx, "SELECT (SELECT COUNT(*) FROM heads_index), (SELECT COUNT(*) FROM evidence_artifacts)").Scan(&nHead, &nArt); err != nil {
		return rep, dbErr("audit", err)
	}
	// Every leaf verified: the report carries the log's size and root
	// whatever the projection counts below say.
	rep.Leaves = expect
	if expect > 0 {
		r, _ := rng.GetRootHash(nil)
		copy(rep.Root[:], r)
	}
	if nHead != wantHead {
		return bad(-1, "heads_index holds %d rows for %d head leaves (rows were added or deleted)", nHead, wantHead)
	}
	if nArt != artifacts {
		return bad(-1, "evidence_artifacts holds %d rows for the %d artifacts the evidence leaves name (rows were added or deleted)", nArt, artifacts)
	}
	if a := waitArt(); a.err != nil {
		return rep, dbErr("audit", a.err)
	} else if a.sum != wantArt {
		idx, err := firstArtifactMismatch(ctx, tx)
		if err != nil {
			return rep, dbErr("audit", err)
		}
		return bad(idx, "evidence_artifacts rows of leaf %d do not match its body's artifacts (a digest, name or index was edited)", idx)
	}
	rep.OK = true
	return rep, nil
}

const auditBatch = 2048

var idRe = regexp.MustCompile(`^[0-9a-f]{32}$`)

// auditRow is one stored leaf with its projection columns, and what
// check found.
type auditRow struct {
	idx                                       uint64
	id, kind, key                             string
	rec                                       int64
	raw, lh                                   []byte
	eBackend, eStatus, eRepo, eC              sql.NullString // evidence projection (leaves columns; the lane is key)
	hRepo, hRef, hCommit, hVerdict, hDecision sql.NullString // heads_index

	hash      ledger.Hash
	idBytes   [16]byte
	problem   string
	artifacts int64
	artSum    artSum
}

// auditBody holds every body field the audit compares, for all kinds, so
// the body is decoded once.
type auditBody struct {
	Name    string `json:"name"` // policies' key (ledger.EntryKey)
	Lane    string `json:"lane"`
	Backend string `json:"backend"`
	Status  string `json:"status"`
	Control string `json:"control"`
	Subject struct {
		Repository string            `json:"repository"`
		Commit     string            `json:"commit"`
		Tree       string            `json:"tree"`
		Dirty      bool              `json:"dirty"`
		Artifacts  map[string]string `json:"artifacts"`
	} `json:"subject"`
	Repository string `json:"repository"`
	Ref        string `json:"ref"`
	Commit     string `json:"commit"`
	Verdict    string `json:"verdict"`
	Decision   string `json:"decision"`
	Version    string `json:"version"`
}

// check verifies one leaf on its own: its hash, canonical envelope, index,
// id, kind, key and time columns, and its query projection row. Safe to
// run concurrently on distinct rows.
func (r *auditRow) check() {
	r.hash = ledger.LeafHash(r.raw)
	if !bytes.Equal(r.hash[:], r.lh) {
		r.problem = "stored bytes do not hash to the stored leaf hash (edited)"
		return
	}
	// The canonical leaf is exactly this envelope around the body (see
	// ledger.EncodeLeaf): building it from the row's columns checks the
	// envelope, the leaf's own index, kind, id and time in one comparison.
	kind := ledger.Kind(r.kind)
	if !ledger.ValidKind(kind) || !idRe.MatchString(r.id) {
		r.problem = "id or kind column is malformed"
		return
	}
	hex.Decode(r.idBytes[:], []byte(r.id))
	prefix := fmt.Sprintf(`{"v":1,"index":%d,"kind":"%s","id":"%s","recorded_at":"%s","body":`, r.idx, r.kind, r.id, time.Unix(0, r.rec).UTC().Format(time.RFC3339Nano))
	if !bytes.HasPrefix(r.raw, []byte(prefix)) || len(r.raw) < len(prefix)+3 || r.raw[len(r.raw)-1] != '}' {
		var l ledger.Leaf
		if err := json.Unmarshal(r.raw, &l); err == nil && l.Index != r.idx {
			r.problem = fmt.Sprintf("the stored bytes say index %d (rows were reordered or copied)", l.Index)
		} else {
			r.problem = "leaf bytes are not the canonical envelope of the row's index, kind, id and time (edited or reordered)"
		}
		return
	}
	body := r.raw[len(prefix) : len(r.raw)-1]
	if ledger.EntryID(kind, body) != r.id {
		r.problem = "the body does not hash to the entry id (edited)"
		return
	}
	var b auditBody
	// encoding/json/v2 (its go-json-experiment mirror): about twice as
	// fast as encoding/json here, where every leaf is decoded once.
	if err := jsonv2.Unmarshal(body, &b); err != nil {
		r.problem = "body does not parse"
		return
	}
	key := b.Version
	switch kind {
	case ledger.KindEvidence:
		key = b.Lane
	case ledger.KindHead:
		key = b.Repository
	case ledger.KindPolicy:
		key = b.Name
	}
	if key != r.key {
		r.problem = "key column does not match the leaf body"
		return
	}
	l := struct{ Kind ledger.Kind }{kind}
	switch l.Kind {
	case ledger.KindEvidence:
		// The key column (the lane) was compared above.
		if !r.eBackend.Valid || !r.eStatus.Valid || !r.eRepo.Valid || !r.eC.Valid ||
			r.eBackend.String != b.Backend || r.eStatus.String != b.Status ||
			r.eRepo.String != b.Subject.Repository || r.eC.String != b.Subject.Commit {
			r.problem = "evidence projection columns do not match the leaf"
			return
		}
		// The rows evidence_artifacts must hold for this leaf, as a count
		// and a multiset hash (auditart.go).
		for name, d := range b.Subject.Artifacts {
			r.artSum.addRow(r.idx, name, d)
		}
		r.artifacts = int64(len(b.Subject.Artifacts))
		if r.hRepo.Valid {
			r.problem = "evidence leaf has a head index row"
		}
	case ledger.KindHead:
		if !r.hRepo.Valid || r.hRepo.String != b.Repository || r.hRef.String != b.Ref || r.hCommit.String != b.Commit || r.hVerdict.String != b.Verdict || r.hDecision.String != b.Decision {
			r.problem = "head index row does not match the leaf"
			return
		}
		if r.hasEvidenceColumns() {
			r.problem = "head leaf has evidence projection columns"
		}
	default:
		if r.hasEvidenceColumns() || r.hRepo.Valid {
			r.problem = "non-evidence leaf has projection columns or an index row"
		}
	}
}

// hasEvidenceColumns reports whether any evidence projection column of
// the row is set (it must not be, unless the leaf is evidence).
func (r *auditRow) hasEvidenceColumns() bool {
	return r.eBackend.Valid || r.eStatus.Valid || r.eRepo.Valid || r.eC.Valid
}

// idPair is a leaf's content id (16 bytes, decoded) and index.
// dupLeaves counts leaves that repeat an earlier leaf's content id.
type dupLeaves struct {
	count uint64
	first int64
}

type idPair struct {
	id  [16]byte
	idx uint64
}

// auditIDTables checks the id tables (ids.go) against the leaves' ids
// (leaves[i] is leaf i's): recent_ids must hold exactly leaves [w, n) in
// order, entry_ids exactly leaves [0, w), each with its own index. It
// returns the leaf index a problem concerns and the problem ("" when none).
// Memory: 24 bytes per leaf (the ids sorted for a merge with entry_ids,
// which is read in id order).
func auditIDTables(ctx context.Context, tx *sql.Tx, leaves []idPair) (int64, string, dupLeaves, error) {
	n := uint64(len(leaves))
	dups := dupLeaves{first: -1}
	// Every mismatch is examined and the smallest leaf index reported.
	badIdx, problem := int64(-1), ""
	report := func(idx int64, format string, args ...any) {
		if badIdx < 0 || idx < badIdx {
			badIdx, problem = idx, fmt.Sprintf(format, args...)+" (the id index was edited, or a ledger older than schema 5 appended)"
		}
	}
	rows, err := tx.QueryContext(ctx, "SELECT idx, id FROM recent_ids ORDER BY idx")
	if err != nil {
		return 0, "", dups, err
	}
	w := int64(-1)
	next := uint64(0)
	for rows.Next() {
		var idx int64
		var id string
		if err := rows.Scan(&idx, &id); err != nil {
			rows.Close()
			return 0, "", dups, err
		}
		if w < 0 {
			w, next = idx, uint64(idx)
		}
		switch {
		case idx < 0 || uint64(idx) >= n:
			report(int64(next), "recent_ids holds leaf %d, beyond the log's %d leaves", idx, n)
		case uint64(idx) != next:
			report(int64(next), "recent_ids lacks leaf %d", next)
		case hex.EncodeToString(leaves[idx].id[:]) != id:
			report(idx, "recent_ids names id %s for leaf %d, which holds %x", id, idx, leaves[idx].id)
		}
		if idx >= 0 {
			next = uint64(idx) + 1
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, "", dups, err
	}
	if w < 0 {
		w = int64(n)
	} else if next < n {
		report(int64(next), "recent_ids stops at leaf %d of %d", next, n)
	}
	w = min(w, int64(n))
	// entry_ids holds, for every id whose first leaf is before w, that
	// first leaf. Later leaves with the same id (appended by a ledger older
	// than schema 5) have no row; they are counted, not failed.
	byID := slices.Clone(leaves)
	slices.SortFunc(byID, func(a, b idPair) int {
		if c := bytes.Compare(a.id[:], b.id[:]); c != 0 {
			return c
		}
		return cmp.Compare(a.idx, b.idx)
	})
	older := byID[:0]
	for i, l := range byID {
		if i > 0 && byID[i-1].id == l.id {
			dups.count++
			if dups.first < 0 || int64(l.idx) < dups.first {
				dups.first = int64(l.idx)
			}
			continue
		}
		if l.idx < uint64(w) {
			older = append(older, l)
		}
	}
	rows, err = tx.QueryContext(ctx, "SELECT id, idx FROM entry_ids ORDER BY id")
	if err != nil {
		return 0, "", dups, err
	}
	defer rows.Close()
	i := 0
	for rows.Next() {
		var id string
		var idx int64
		if err := rows.Scan(&id, &idx); err != nil {
			return 0, "", dups, err
		}
		// Leaves whose ids sort before this row's have no row.
		for ; i < len(older) && hex.EncodeToString(older[i].id[:]) < id; i++ {
			report(int64(older[i].idx), "entry_ids lacks the id of leaf %d", older[i].idx)
		}
		if i < len(older) && hex.EncodeToString(older[i].id[:]) == id {
			if uint64(idx) != older[i].idx {
				report(int64(older[i].idx), "entry_ids names leaf %d for the id of leaf %d", idx, older[i].idx)
			}
			i++
			continue
		}
		at := idx // the leaf the stray row names, when there is one
		if at < 0 || uint64(at) >= n {
			at = w
		}
		report(at, "entry_ids holds id %s for leaf %d, which no leaf before %d accounts for", id, idx, w)
	}
	if err := rows.Err(); err != nil {
		return 0, "", dups, err
	}
	for ; i < len(older); i++ {
		report(int64(older[i].idx), "entry_ids lacks the id of leaf %d", older[i].idx)
	}
	return badIdx, problem, dups, nil
}
