package sqlite

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"slices"
)

// dupLeaves counts leaves that repeat an earlier leaf's content id.
type dupLeaves struct {
	count uint64
	first int64
}

// idPair is a leaf's content id (16 bytes, decoded) and index.
type idPair struct {
	id  [16]byte
	idx uint64
}

// idAudit collects the id tables' mismatches and keeps the one with the
// smallest leaf index.
type idAudit struct {
	leaves  []idPair // leaves[i] is leaf i's
	badIdx  int64
	problem string
}

func (a *idAudit) report(idx int64, format string, args ...any) {
	if a.badIdx < 0 || idx < a.badIdx {
		a.badIdx, a.problem = idx, fmt.Sprintf(format, args...)+" (the id index was edited, or a ledger older than schema 5 appended)"
	}
}

// auditIDTables checks the id tables (ids.go) against the leaves' ids
// (leaves[i] is leaf i's): recent_ids must hold exactly leaves [w, n) in
// order, entry_ids exactly leaves [0, w), each with its own index. It
// returns the leaf index a problem concerns and the problem ("" when none).
// Memory: 24 bytes per leaf (the ids sorted for a merge with entry_ids,
// which is read in id order).
func auditIDTables(ctx context.Context, tx *sql.Tx, leaves []idPair) (int64, string, dupLeaves, error) {
	a := &idAudit{leaves: leaves, badIdx: -1}
	// The leaves are sorted by id while recent_ids is read.
	sorted := make(chan []idPair, 1)
	go func() { sorted <- sortByID(leaves) }()
	w, err := a.recentIDs(ctx, tx)
	byID := <-sorted
	if err != nil {
		return 0, "", dupLeaves{first: -1}, err
	}
	older, dups := firstLeavesBelow(byID, w)
	if err := a.entryIDs(ctx, tx, older, w); err != nil {
		return 0, "", dups, err
	}
	return a.badIdx, a.problem, dups, nil
}

// recentIDs checks recent_ids (leaves [w, n) in order) and returns w.
func (a *idAudit) recentIDs(ctx context.Context, tx *sql.Tx) (int64, error) {
	n := uint64(len(a.leaves))
	rows, err := tx.QueryContext(ctx, "SELECT idx, id FROM recent_ids ORDER BY idx")
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	w := int64(-1)
	next := uint64(0)
	for rows.Next() {
		var idx int64
		var id string
		if err := rows.Scan(&idx, &id); err != nil {
			return 0, err
		}
		if w < 0 {
			w, next = idx, uint64(idx)
		}
		switch {
		case idx < 0 || uint64(idx) >= n:
			a.report(int64(next), "recent_ids holds leaf %d, beyond the log's %d leaves", idx, n)
		case uint64(idx) != next:
			a.report(int64(next), "recent_ids lacks leaf %d", next)
		case hex.EncodeToString(a.leaves[idx].id[:]) != id:
			a.report(idx, "recent_ids names id %s for leaf %d, which holds %x", id, idx, a.leaves[idx].id)
		}
		if idx >= 0 {
			next = uint64(idx) + 1
		}
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if w < 0 {
		w = int64(n)
	} else if next < n {
		a.report(int64(next), "recent_ids stops at leaf %d of %d", next, n)
	}
	return min(w, int64(n)), nil
}

// idPairCmp orders id pairs by id, then index.
func idPairCmp(a, b idPair) int {
	if c := bytes.Compare(a.id[:], b.id[:]); c != 0 {
		return c
	}
	return cmp.Compare(a.idx, b.idx)
}

// sortByID returns a copy of leaves sorted by idPairCmp: the two halves
// are sorted on two goroutines, then merged.
func sortByID(leaves []idPair) []idPair {
	halves := slices.Clone(leaves)
	mid := len(halves) / 2
	done := make(chan struct{})
	go func() {
		slices.SortFunc(halves[:mid], idPairCmp)
		close(done)
	}()
	slices.SortFunc(halves[mid:], idPairCmp)
	<-done
	out := make([]idPair, 0, len(halves))
	l, r := halves[:mid], halves[mid:]
	for len(l) > 0 && len(r) > 0 {
		if idPairCmp(l[0], r[0]) <= 0 {
			out, l = append(out, l[0]), l[1:]
		} else {
			out, r = append(out, r[0]), r[1:]
		}
	}
	return append(append(out, l...), r...)
}

// firstLeavesBelow returns, from byID (the leaves sorted by sortByID),
// the first leaf of every id whose first leaf is before w: the rows
// entry_ids must hold, in id order. Later leaves with the same id
// (appended by a ledger older than schema 5) have no row; they are
// counted, not failed.
func firstLeavesBelow(byID []idPair, w int64) ([]idPair, dupLeaves) {
	dups := dupLeaves{first: -1}
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
	return older, dups
}

// entryIDs merges entry_ids (read in id order) with older, the rows it
// must hold.
func (a *idAudit) entryIDs(ctx context.Context, tx *sql.Tx, older []idPair, w int64) error {
	n := uint64(len(a.leaves))
	rows, err := tx.QueryContext(ctx, "SELECT id, idx FROM entry_ids ORDER BY id")
	if err != nil {
		return err
	}
	defer rows.Close()
	i := 0
	var cur [32]byte // older[i].id in hex, once the loop below stops
	for rows.Next() {
		var id string
		var idx int64
		if err := rows.Scan(&id, &idx); err != nil {
			return err
		}
		// Leaves whose ids sort before this row's have no row.
		for ; i < len(older); i++ {
			hex.Encode(cur[:], older[i].id[:])
			if string(cur[:]) >= id {
				break
			}
			a.report(int64(older[i].idx), "entry_ids lacks the id of leaf %d", older[i].idx)
		}
		if i < len(older) && string(cur[:]) == id {
			if uint64(idx) != older[i].idx {
				a.report(int64(older[i].idx), "entry_ids names leaf %d for the id of leaf %d", idx, older[i].idx)
			}
			i++
			continue
		}
		at := idx // the leaf the stray row names, when there is one
		if at < 0 || uint64(at) >= n {
			at = w
		}
		a.report(at, "entry_ids holds id %s for leaf %d, which no leaf before %d accounts for", id, idx, w)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for ; i < len(older); i++ {
		a.report(int64(older[i].idx), "entry_ids lacks the id of leaf %d", older[i].idx)
	}
	return nil
}
