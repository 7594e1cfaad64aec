package tlog

import (
	"encoding/json"
	"github.com/evidence-ledger/ledger/ledger"
	"strings"
	"testing"
	"time"
)

// TestTokenProjection: the fold both audits and authentication share.
// The first token leaf of an id defines its row and the first revocation
// after it revokes it; a revocation of a token no earlier leaf created,
// a row edited in any column, a row with no leaf and a leaf with no row
// are each reported, naming the token and never its secret hash.
func TestTokenProjection(t *testing.T) {
	created := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	revoked := created.Add(time.Hour)
	leaf := ledger.TokenLeaf{TokenID: "tok_0123456789ab", Name: "ci", Scope: ledger.ScopeRecord, Lanes: []string{"qmv"}, SecretSHA256: strings.Repeat("ab", 32), CreatedAt: created}
	change := func(idx uint64, k ledger.Kind, v any) TokenChange {
		b, _ := json.Marshal(v)
		c, ok, err := DecodeTokenChange(idx, k, b)
		if !ok || err != nil {
			t.Fatalf("decode %s leaf: ok=%v %v", k, ok, err)
		}
		return c
	}
	fold := func(extra ...TokenChange) *TokenProjection {
		p := &TokenProjection{}
		p.Fold(change(3, ledger.KindToken, leaf))
		dup := leaf
		dup.Scope = ledger.ScopeAdmin
		p.Fold(change(4, ledger.KindToken, dup)) // a second leaf of the id does not redefine it
		p.Fold(change(5, ledger.KindTokenRevocation, ledger.TokenRevocationLeaf{TokenID: leaf.TokenID, RevokedAt: revoked}))
		p.Fold(change(6, ledger.KindTokenRevocation, ledger.TokenRevocationLeaf{TokenID: leaf.TokenID, RevokedAt: revoked.Add(time.Hour)}))
		for _, c := range extra {
			p.Fold(c)
		}
		return p
	}
	good := ledger.TokenRow{Token: ledger.Token{ID: leaf.TokenID, Name: "ci", Scope: ledger.ScopeRecord, Lanes: []string{"qmv"}, CreatedAt: created, RevokedAt: &revoked},
		SecretSHA256: leaf.SecretSHA256, LeafIndex: 3, RevokedIndex: 5}
	if idx, p := fold().CheckTable([]ledger.TokenRow{good}); p != "" {
		t.Fatalf("the projection's own row: %d %s", idx, p)
	}
	if n := fold().Folded(); n != 4 {
		t.Fatalf("Folded = %d, want 4", n)
	}
	edit := func(f func(*ledger.TokenRow)) ledger.TokenRow {
		r := good
		f(&r)
		return r
	}
	later := revoked.Add(time.Hour)
	for _, c := range []struct {
		name string
		p    *TokenProjection
		rows []ledger.TokenRow
		want string
	}{
		{"scope raised", fold(), []ledger.TokenRow{edit(func(r *ledger.TokenRow) { r.Scope = ledger.ScopeAdmin })}, "scope differs"},
		{"lane removed", fold(), []ledger.TokenRow{edit(func(r *ledger.TokenRow) { r.Lanes = nil })}, "lanes differs"},
		{"revocation removed", fold(), []ledger.TokenRow{edit(func(r *ledger.TokenRow) { r.RevokedAt, r.RevokedIndex = nil, -1 })}, "revoked_at differs"},
		{"later revocation recorded", fold(), []ledger.TokenRow{edit(func(r *ledger.TokenRow) { r.RevokedAt, r.RevokedIndex = &later, 6 })}, "revoked_at differs"},
		{"secret hash swapped", fold(), []ledger.TokenRow{edit(func(r *ledger.TokenRow) { r.SecretSHA256 = strings.Repeat("cd", 32) })}, "secret_hash differs"},
		{"leaf index moved", fold(), []ledger.TokenRow{edit(func(r *ledger.TokenRow) { r.LeafIndex = 4 })}, "leaf_idx differs"},
		{"row with a NULL leaf index", fold(), []ledger.TokenRow{edit(func(r *ledger.TokenRow) { r.LeafIndex = NullLeafIndex })}, "leaf_idx differs"},
		{"row posing as made before schema 7", fold(), []ledger.TokenRow{edit(func(r *ledger.TokenRow) { r.LeafIndex = -1 })}, "has no token leaf (leaf_idx -1)"},
		{"row inserted", fold(), []ledger.TokenRow{good, edit(func(r *ledger.TokenRow) { r.ID = "tok_ffffffffffff" })}, "tok_ffffffffffff (\"ci\") has no token leaf (a row was inserted)"},
		{"row deleted", fold(), nil, "token leaf 3 creates token tok_0123456789ab (\"ci\") but the tokens table has no row for it"},
		{"revocation of an uncreated token", fold(change(7, ledger.KindTokenRevocation, ledger.TokenRevocationLeaf{TokenID: "tok_999999999999", RevokedAt: revoked})),
			[]ledger.TokenRow{good}, "token-revocation leaf 7 revokes token tok_999999999999, which no earlier token leaf created"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, p := c.p.CheckTable(c.rows)
			if !strings.Contains(p, c.want) {
				t.Fatalf("problem %q, want one containing %q", p, c.want)
			}
			if strings.Contains(p, leaf.SecretSHA256) || strings.Contains(p, strings.Repeat("cd", 32)) {
				t.Fatalf("the problem names a secret hash: %s", p)
			}
		})
	}
	if _, _, err := DecodeTokenChange(1, ledger.KindToken, []byte(`{"token_id":`)); err == nil || err.Error() != "token leaf body does not parse" {
		t.Fatalf("a truncated token leaf: %v", err)
	}
	if _, ok, _ := DecodeTokenChange(1, ledger.KindEvidence, []byte(`{}`)); ok {
		t.Fatal("an evidence leaf decoded as a token change")
	}
}
