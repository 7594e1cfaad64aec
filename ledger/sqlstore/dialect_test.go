package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
)

func TestSQLSpellsPlaceholders(t *testing.T) {
	q := "SELECT a FROM t WHERE b = ? AND c >= ? LIMIT ?"
	if got := (&Dialect{}).SQL(q); got != q {
		t.Fatalf("unnumbered dialect changed the statement: %q", got)
	}
	pg := &Dialect{Numbered: true}
	for range 2 { // the second answer comes from the cache
		if got, want := pg.SQL(q), "SELECT a FROM t WHERE b = $1 AND c >= $2 LIMIT $3"; got != want {
			t.Fatalf("SQL = %q, want %q", got, want)
		}
	}
}

func TestEvidenceQueryArgsFollowPlaceholders(t *testing.T) {
	for _, d := range []*Dialect{{}, {Numbered: true, Collate: ` COLLATE "C"`}} {
		q, args, lim, err := d.EvidenceQuery(ledger.EvidenceFilter{Lane: "l", Commit: "abcd", ArtifactDigest: "ef01", Limit: 7})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, c := range d.SQL(q) {
			if c == '?' || c == '$' {
				n++
			}
		}
		if n != len(args) || lim != 7 || args[len(args)-1] != 8 {
			t.Fatalf("%q: %d placeholders, args %v, limit %d", q, n, args, lim)
		}
	}
	if _, _, _, err := (&Dialect{}).EvidenceQuery(ledger.EvidenceFilter{Commit: "ABCD"}); ledger.ErrorCode(err) != ledger.CodeInvalid {
		t.Fatalf("uppercase commit prefix: %v", err)
	}
}

func TestErrTranslates(t *testing.T) {
	engine := errors.New("engine's own")
	d := &Dialect{Engine: func(op string, err error) error {
		if errors.Is(err, engine) {
			return ledger.Errorf(ledger.CodeUnavailable, "%s: unavailable", op)
		}
		return nil
	}}
	for _, c := range []struct {
		err  error
		want ledger.Code
	}{
		{sql.ErrNoRows, ledger.CodeNotFound},
		{fmt.Errorf("wrapped: %w", engine), ledger.CodeUnavailable},
		{errors.New("other"), ledger.CodeInternal},
		{ledger.FieldError("f", "bad"), ledger.CodeInvalid},
	} {
		if got := ledger.ErrorCode(d.Err("op", c.err)); got != c.want {
			t.Errorf("Err(%v) has code %v, want %v", c.err, got, c.want)
		}
	}
	if d.Err("op", nil) != nil || !errors.Is(d.Err("op", context.Canceled), context.Canceled) {
		t.Fatal("nil or a cancelled context was translated")
	}
}
