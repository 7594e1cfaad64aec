package web

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/verify"
)

// TestRunClaimRefusedOutsideARun: evidence naming a run (evidence.run) is
// taken only from the agent holding that run's lease, in its finish or
// staging. Posted by a record token, as plain JSON in any letter case or
// spelled with an escape, alone or in an array, or inside an envelope
// signed by a registered (plain) runner key, it is refused 400 naming
// run, and nothing is appended; the same record without the member is
// recorded.
func TestRunClaimRefusedOutsideARun(t *testing.T) {
	e := newRunnerEnv(t)
	rec, _, err := e.store.CreateToken(context.Background(), "ci-runclaim", ledger.ScopeRecord, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref := map[string]any{"id": "run_" + strings.Repeat("ab", 16), "attempt": 1}
	plain := func(key string) []byte {
		ev := testEvidence(1)
		ev[key] = ref
		b, _ := json.Marshal(ev)
		return b
	}
	escaped := bytes.Replace(plain("run"), []byte(`"run":`), []byte(`"r\u0075n":`), 1)
	ev := testEvidence(1)
	ev["run"] = ref
	// Signed as they are (SignEvidence would refuse them first).
	signRaw := func(key string, val any) []byte {
		ev := testEvidence(1)
		ev[key] = val
		b, _ := json.Marshal(ev)
		env, err := verify.SignRunnerEnvelope(context.Background(), e.mac, ledger.PayloadTypeEvidence, b)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	nullEv := testEvidence(1)
	nullEv["run"] = nil
	plainNull, _ := json.Marshal(nullEv)
	for _, c := range []struct {
		name, ct, field string
		body            []byte
	}{
		{"plain", "application/json", "run", plain("run")},
		{"upper case", "application/json", "run", plain("RUN")},
		{"escaped", "application/json", "run", escaped},
		{"in an array", "application/json", "[0].run", []byte("[" + string(plain("run")) + "]")},
		{"signed by a plain runner", ledger.ContentTypeDSSE, "run", sign(t, e.mac, ev)},
		{"signed, upper case", ledger.ContentTypeDSSE, "run", signRaw("Run", ref)},
		{"signed, null", ledger.ContentTypeDSSE, "run", signRaw("run", nil)},
		{"plain, null", "application/json", "run", plainNull},
	} {
		before := e.size(t)
		code, body := e.postAs(t, rec, "/api/v1/evidence", c.ct, c.body)
		e.wantRefused(t, c.name, code, body, http.StatusBadRequest, c.field, before)
		if !strings.Contains(string(body), "agent") {
			t.Fatalf("%s: %s; want the message to say who sets run", c.name, body)
		}
	}
	if _, ready := e.gate(t); ready {
		t.Fatal("release ready after refused posts")
	}
	// Without the member: recorded, and the gate (signed_by ci-mac) passes.
	if code, body := e.postAs(t, rec, "/api/v1/evidence", ledger.ContentTypeDSSE, sign(t, e.mac, testEvidence(1))); code != http.StatusCreated {
		t.Fatalf("the envelope without run: %d %s", code, body)
	}
	if g, ready := e.gate(t); !ready {
		t.Fatalf("gate after the signed record: %+v", g)
	}
}
