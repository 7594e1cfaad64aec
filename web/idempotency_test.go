package web

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
)

// An idempotency key belongs to the token that made it: another token
// sending the same key with another request gets its own answer (a new
// entry), not the first token's answer and not a conflict.
func TestIdempotencyKeyScopedToToken(t *testing.T) {
	e := newAPIEnv(t, Config{})
	other, _, err := e.store.CreateToken(context.Background(), "ci-2", ledger.ScopeRecord, nil)
	if err != nil {
		t.Fatal(err)
	}
	code, first := e.do(t, "POST", "/api/v1/evidence", e.record, testEvidence(1), "Idempotency-Key", "run-42")
	if code != 201 {
		t.Fatalf("%d %s", code, first)
	}
	code, theirs := e.do(t, "POST", "/api/v1/evidence", other, testEvidence(2), "Idempotency-Key", "run-42")
	var a, b AppendedJSON
	json.Unmarshal(first, &a)
	json.Unmarshal(theirs, &b)
	if code != 201 || b.Existing || b.ID == a.ID {
		t.Fatalf("other token reusing the key: %d %s, want its own new entry", code, theirs)
	}
	// Each token still replays its own answer.
	code, again := e.do(t, "POST", "/api/v1/evidence", other, testEvidence(2), "Idempotency-Key", "run-42")
	var c AppendedJSON
	json.Unmarshal(again, &c)
	if code != 200 || c.ID != b.ID {
		t.Fatalf("replay for the second token: %d %s", code, again)
	}
	if code, body := e.do(t, "POST", "/api/v1/evidence", e.record, testEvidence(3), "Idempotency-Key", strings.Repeat("k", 257)); code != 400 {
		t.Fatalf("257-byte key: %d %s", code, body)
	}
}
