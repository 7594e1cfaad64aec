package sqlite

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"math/bits"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlog"
)

// artSum is a multiset hash of artifact rows: the sum, modulo 2^256, of
// SHA-256(index, name, digest) over the rows. Sums are order-independent,
// so the rows the leaves imply (added while the audit streams the leaves)
// and the rows evidence_artifacts holds (added in its own key order) can
// be compared without sorting either side; a changed, moved, added or
// removed row changes the sum (forging a collision means finding rows
// whose SHA-256 values sum to a given 256-bit value).
type artSum [4]uint64

func (s *artSum) add(o artSum) {
	var c uint64
	for i := range s {
		s[i], c = bits.Add64(s[i], o[i], c)
	}
}

// addRow adds the row (idx, name, digest).
func (s *artSum) addRow(idx uint64, name, digest string) {
	var buf [192]byte
	b := binary.BigEndian.AppendUint64(buf[:0], idx)
	b = append(b, name...)
	b = append(b, 0)
	b = append(b, digest...)
	d := sha256.Sum256(b)
	s.add(artSum{binary.BigEndian.Uint64(d[0:]), binary.BigEndian.Uint64(d[8:]), binary.BigEndian.Uint64(d[16:]), binary.BigEndian.Uint64(d[24:])})
}

// tableArtifacts sums the rows of evidence_artifacts for leaves below
// index below and, when byIdx is not nil, also per leaf index.
func tableArtifacts(ctx context.Context, q queryer, below uint64, byIdx map[uint64]*artSum) (sum artSum, err error) {
	rows, err := q.QueryContext(ctx, "SELECT idx, name, digest FROM evidence_artifacts WHERE idx < ?", int64(below))
	if err != nil {
		return sum, err
	}
	defer rows.Close()
	for rows.Next() {
		var idx int64
		var name, digest string
		if err := rows.Scan(&idx, &name, &digest); err != nil {
			return sum, err
		}
		sum.addRow(uint64(idx), name, digest)
		if byIdx != nil {
			s := byIdx[uint64(idx)]
			if s == nil {
				s = new(artSum)
				byIdx[uint64(idx)] = s
			}
			s.addRow(uint64(idx), name, digest)
		}
	}
	return sum, rows.Err()
}

// firstArtifactMismatch names the smallest leaf index whose artifact rows
// differ from its body's, after the sums said some do: a second pass over
// the table (sums per index) and the evidence leaves. Memory: one entry
// per leaf with artifacts.
func firstArtifactMismatch(ctx context.Context, q queryer) (int64, error) {
	byIdx := map[uint64]*artSum{}
	if _, err := tableArtifacts(ctx, q, 1<<62, byIdx); err != nil {
		return -1, err
	}
	rows, err := q.QueryContext(ctx, "SELECT idx, leaf FROM leaves WHERE kind = 'evidence' ORDER BY idx")
	if err != nil {
		return -1, err
	}
	defer rows.Close()
	first := int64(-1)
	for rows.Next() {
		var idx uint64
		var raw []byte
		if err := rows.Scan(&idx, &raw); err != nil {
			return -1, err
		}
		l, err := ledger.DecodeLeaf(raw)
		if err != nil {
			return int64(idx), nil // the main pass verified it; be safe
		}
		var b tlog.AuditBody
		tlog.DecodeAuditBody(l.Kind, l.Body, &b)
		var want artSum
		for name, d := range b.Subject.Artifacts {
			want.addRow(idx, name, d)
		}
		got := byIdx[idx]
		delete(byIdx, idx)
		if got == nil {
			got = new(artSum)
		}
		if *got != want {
			first = int64(idx)
			break
		}
	}
	if err := rows.Err(); err != nil {
		return -1, err
	}
	for idx := range byIdx { // rows naming a leaf that is not evidence
		if first < 0 || int64(idx) < first {
			first = int64(idx)
		}
	}
	return first, nil
}
