package tlog

import (
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/evidence-ledger/ledger/ledger"
	"slices"
	"time"
)

// TokenChange is one decoded token or token-revocation leaf: exactly one
// of Token and Revocation is set. Index is the leaf's index in the log.
type TokenChange struct {
	Index      uint64
	Token      *ledger.TokenLeaf
	Revocation *ledger.TokenRevocationLeaf
}

// DecodeTokenChange decodes the body of the leaf at idx of kind k. It
// returns ok false for a kind other than ledger.KindToken and
// ledger.KindTokenRevocation, and an error ("token leaf body does not parse",
// "token-revocation leaf body does not parse") for a body that does not
// decode. Safe for concurrent use.
func DecodeTokenChange(idx uint64, k ledger.Kind, body []byte) (c TokenChange, ok bool, err error) {
	c.Index = idx
	switch k {
	case ledger.KindToken:
		c.Token = new(ledger.TokenLeaf)
		if json.Unmarshal(body, c.Token) != nil {
			return c, true, fmt.Errorf("token leaf body does not parse")
		}
	case ledger.KindTokenRevocation:
		c.Revocation = new(ledger.TokenRevocationLeaf)
		if json.Unmarshal(body, c.Revocation) != nil {
			return c, true, fmt.Errorf("token-revocation leaf body does not parse")
		}
	default:
		return c, false, nil
	}
	return c, true, nil
}

// tokenWant is what the token leaves say one tokens row must hold: the
// first token leaf of its id and the first revocation leaf after it.
type tokenWant struct {
	leaf   ledger.TokenLeaf
	idx    uint64
	rev    *time.Time
	revIdx uint64
}

// TokenProjection is the tokens table the token and token-revocation
// leaves imply, folded from them in index order; the audit of every
// store and VerifiedStore.Authenticate compare tokens rows against it.
// The zero value is an empty projection. Not safe for concurrent
// mutation; CheckRow and CheckTable only read.
type TokenProjection struct {
	byID     map[string]*tokenWant
	folded   uint64
	orphan   string // the first revocation of a token no earlier leaf created
	orphanAt int64
}

// Fold adds one change, in index order: the first token leaf of an id
// defines its row, and the first revocation after it sets the row's
// revocation; later duplicates are ignored. A revocation of an id that
// no earlier token leaf created is remembered as CheckTable's problem.
func (p *TokenProjection) Fold(c TokenChange) {
	if p.byID == nil {
		p.byID = map[string]*tokenWant{}
	}
	p.folded++
	switch {
	case c.Token != nil:
		if _, dup := p.byID[c.Token.TokenID]; !dup {
			p.byID[c.Token.TokenID] = &tokenWant{leaf: *c.Token, idx: c.Index}
		}
	case c.Revocation != nil:
		w := p.byID[c.Revocation.TokenID]
		switch {
		case w != nil && w.rev == nil && c.Index > w.idx:
			at := c.Revocation.RevokedAt.UTC()
			w.rev, w.revIdx = &at, c.Index
		case w == nil && p.orphan == "":
			p.orphanAt = int64(c.Index)
			p.orphan = fmt.Sprintf("token-revocation leaf %d revokes token %s, which no earlier token leaf created", c.Index, c.Revocation.TokenID)
		}
	}
}

// Folded returns the number of changes folded.
func (p *TokenProjection) Folded() uint64 { return p.folded }

// CheckRow compares one tokens row with what the leaves imply for its id.
// It returns the index of the token leaf concerned (-1 when none) and the
// problem, naming the token id and name and the first column that
// differs ("" when the row is the projection). It never names the secret.
func (p *TokenProjection) CheckRow(row ledger.TokenRow) (int64, string) {
	w := p.byID[row.ID]
	switch {
	case row.LeafIndex == -1:
		return -1, fmt.Sprintf("tokens table row %s (%q) has no token leaf (leaf_idx -1): a row inserted into the tokens table, or a token made before schema 7 whose adoption did not finish in the open that migrated the database", row.ID, row.Name)
	case w == nil:
		return -1, fmt.Sprintf("tokens table row %s (%q) has no token leaf (a row was inserted)", row.ID, row.Name)
	}
	if col := w.differs(row); col != "" {
		return int64(w.idx), fmt.Sprintf("tokens table row %s (%q) does not match its token leaf %d: %s differs (the row was edited)", row.ID, row.Name, w.idx, col)
	}
	return -1, ""
}

// CheckTable checks a whole tokens table: no revocation of an uncreated
// token, every row the projection of its leaves (CheckRow, in the order
// given), and a row for every token leaf (missing ones reported in id
// order). It returns the first problem as CheckRow does.
func (p *TokenProjection) CheckTable(rows []ledger.TokenRow) (int64, string) {
	if p.orphan != "" {
		return p.orphanAt, p.orphan
	}
	seen := make(map[string]bool, len(rows))
	for _, r := range rows {
		if idx, problem := p.CheckRow(r); problem != "" {
			return idx, problem
		}
		seen[r.ID] = true
	}
	ids := make([]string, 0, len(p.byID))
	for id := range p.byID {
		if !seen[id] {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return -1, ""
	}
	slices.Sort(ids)
	w := p.byID[ids[0]]
	return int64(w.idx), fmt.Sprintf("token leaf %d creates token %s (%q) but the tokens table has no row for it (a row was deleted)", w.idx, ids[0], w.leaf.Name)
}

// NullLeafIndex is ledger.TokenRow.LeafIndex for a row whose leaf_idx is NULL,
// which no store writes: a row inserted behind the log.
const NullLeafIndex = -2

// differs names the first column of row that differs from w ("" when none).
func (w *tokenWant) differs(row ledger.TokenRow) string {
	l := w.leaf
	revIdxOK := row.RevokedIndex == -1
	if w.rev != nil {
		revIdxOK = row.RevokedIndex >= 0 && uint64(row.RevokedIndex) == w.revIdx
	}
	for _, c := range []struct {
		col string
		eq  bool
	}{
		{"name", row.Name == l.Name},
		{"scope", row.Scope == l.Scope},
		{"roles", slices.Equal(emptyNil(row.Roles), emptyNil(l.Roles))},
		{"repositories", slices.Equal(emptyNil(row.Repositories), emptyNil(l.Repositories))},
		{"lanes", slices.Equal(emptyNil(row.Lanes), emptyNil(l.Lanes))},
		{"backends", slices.Equal(emptyNil(row.Backends), emptyNil(l.Backends))},
		{"expires_at", sameInstant(row.ExpiresAt, l.ExpiresAt)},
		{"secret_hash", row.SecretSHA256 == l.SecretSHA256},
		{"created_at", row.CreatedAt.Equal(l.CreatedAt)},
		{"leaf_idx", row.LeafIndex >= 0 && uint64(row.LeafIndex) == w.idx},
		{"revoked_at", sameInstant(row.RevokedAt, w.rev)},
		{"revoked_idx", revIdxOK},
	} {
		if !c.eq {
			return c.col
		}
	}
	return ""
}

func emptyNil[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

func sameInstant(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(*b)
}

// ScannedTokenRow is the ledger.TokenRow of a tokens row as a driver scans it:
// its Token columns, its secret hash bytes, and its nullable leaf_idx
// (NULL: NullLeafIndex) and revoked_idx (NULL: -1).
func ScannedTokenRow(t ledger.Token, hash []byte, leafIdx, revIdx sql.NullInt64) ledger.TokenRow {
	row := ledger.TokenRow{Token: t, SecretSHA256: hex.EncodeToString(hash), LeafIndex: NullLeafIndex, RevokedIndex: -1}
	if leafIdx.Valid {
		row.LeafIndex = leafIdx.Int64
	}
	if revIdx.Valid {
		row.RevokedIndex = revIdx.Int64
	}
	return row
}
