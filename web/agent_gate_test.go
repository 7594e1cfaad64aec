package web

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/auth"
	"github.com/evidence-ledger/ledger/verify"
)

// TestRunnerAgentGate: a lane gate with runner: agent counts only
// evidence an approved agent recorded for a run. Evidence signed by a
// registered runner key that is not an agent's, or unsigned, stays
// baseline with the reason; the same evidence signed by an agent's key
// and posted outside a run is refused (403 naming signer, nothing
// appended), and put in the log by another path than the API it stays
// baseline: no run-outcome entry lists it. (A run's evidence passing the
// gate: cmd/ledger TestAgentGateCountsOnlyRunEvidence.)
func TestRunnerAgentGate(t *testing.T) {
	// Three runs of the same subject (testEvidence(1)'s), apart by time.
	run := func(i int) map[string]any {
		ev := testEvidence(1)
		ev["started_at"] = fmt.Sprintf("2026-11-29T11:00:0%dZ", i)
		ev["finished_at"] = fmt.Sprintf("2026-11-29T11:00:1%dZ", i)
		return ev
	}
	e := newRunnerEnv(t)
	commit := fmt.Sprintf("%040x", 2)
	rel := fmt.Sprintf(`version: 9.9.9
components:
  - {name: core, repository: github.com/ml-explore/mlx, reviewed: %s, head: %s}
gates:
  - {id: qmv, kind: lane, lane: qmv-bias-sum/v1, component: core, backends: [cpu], cases: 216, runner: agent}
`, commit, commit)
	if code, body := e.do(t, http.MethodPut, "/api/v1/releases/9.9.9", e.admin, rel, "Content-Type", "application/yaml"); code != http.StatusCreated && code != http.StatusOK {
		t.Fatalf("define release: %d %s", code, body)
	}
	if code, body := e.do(t, http.MethodPost, "/api/v1/evidence", e.record, run(1)); code != http.StatusCreated {
		t.Fatalf("plain evidence: %d %s", code, body)
	}
	if g, ready := e.gate(t); ready || g.State == gates.StatePassed || !baselineHas(g, "runner: agent") {
		t.Fatalf("unsigned evidence: %s ready=%v baseline %+v; want open with a runner: agent reason", g.State, ready, g.Baseline)
	}
	if code, body := e.do(t, http.MethodPost, "/api/v1/evidence", e.record, sign(t, e.mac, run(2)), "Content-Type", ledger.ContentTypeDSSE); code != http.StatusCreated {
		t.Fatalf("signed by ci-mac: %d %s", code, body)
	}
	if g, ready := e.gate(t); ready || g.State == gates.StatePassed || !baselineHas(g, "not an approved agent's") {
		t.Fatalf("signed by a runner key: %s ready=%v baseline %+v; want open, the runner's run as baseline", g.State, ready, g.Baseline)
	}
	agent := newKey(t)
	pub := verify.AuthorizedKey(agent.Public().(ed25519.PublicKey))
	if _, _, err := admit.AddKey(context.Background(), e.store, "h200-a", []byte(pub), "admin", ledger.RunnerKindAgent, "", nil); err != nil {
		t.Fatal(err)
	}
	env := sign(t, agent, run(3))
	before, err := e.store.Checkpoint(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if code, body := e.do(t, http.MethodPost, "/api/v1/evidence", e.record, env, "Content-Type", ledger.ContentTypeDSSE); code != http.StatusForbidden || !strings.Contains(string(body), `"signer"`) || !strings.Contains(string(body), "only through the runs it holds") {
		t.Fatalf("signed by the agent, posted outside a run: %d %s; want 403 naming signer", code, body)
	}
	if after, _ := e.store.Checkpoint(context.Background()); after.Size != before.Size {
		t.Fatalf("the refused post appended: size %d -> %d", before.Size, after.Size)
	}
	// The same record put in the log past the API (as a restored or
	// edited database could hold it): the gate still does not count it.
	reg, err := auth.LoadRunnerKeys(context.Background(), e.store, 0)
	if err != nil {
		t.Fatal(err)
	}
	body, err := verify.VerifyEvidenceEnvelope(context.Background(), env, reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Append(context.Background(), []ledger.Record{{Kind: ledger.KindEvidence, Body: body}}, ""); err != nil {
		t.Fatal(err)
	}
	if g, ready := e.gate(t); ready || g.State == gates.StatePassed || !baselineHas(g, "produced by no run") {
		t.Fatalf("agent-signed evidence no run produced: %s ready=%v baseline %+v; want open, baseline naming the missing run", g.State, ready, g.Baseline)
	}
}
