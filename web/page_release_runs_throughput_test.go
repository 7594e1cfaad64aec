package web

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"testing"

	"github.com/evidence-ledger/ledger/client"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/evidence-ledger/ledger/verify"
)

// TestReleaseRunFormThroughputGate: the run form plans an open throughput
// gate like a lane gate, and the run it queues carries the gate's select
// globs as its cases; a gate whose globs select none of the lane's cases
// is planned as invalid, naming cases[i], and queues nothing.
func TestReleaseRunFormThroughputGate(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	st, err := sqlite.Open(ctx, sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	db, err := sqlite.OpenAux(path)
	if err != nil {
		t.Fatal(err)
	}
	rs := runs.New(db, nil)
	t.Cleanup(func() { rs.Close() })
	s, err := New(Config{Store: st, Runs: rs, CaseLanes: runner.CaseLanes(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	e := &runFormEnv{srv: httptest.NewServer(s), st: st, rs: rs, tokens: map[string]string{}, commit: fmt.Sprintf("%040x", 2)}
	t.Cleanup(e.srv.Close)
	for _, tk := range []struct {
		name  string
		scope ledger.Scope
		roles []string
	}{{"manager", ledger.ScopeRun, []string{"release-manager"}}, {"record", ledger.ScopeRecord, nil}, {"admin", ledger.ScopeAdmin, nil}} {
		sec, _, err := st.CreateToken(ctx, tk.name, tk.scope, tk.roles)
		if err != nil {
			t.Fatal(err)
		}
		e.tokens[tk.name] = sec
	}
	pgRelease(t, st, fmt.Sprintf(`version: 3.0.0
approval_role: release-manager
components:
  - {name: core, repository: %s, reviewed: %s, head: %s}
gates:
  - {id: speed, kind: throughput, component: core, backends: [cuda], baseline: narrow, threshold: 0.98, select: [batch1/n8192/k8192/f16/b4, batch2/n8192/k8192/f16/b4]}
  - {id: speed-typo, kind: throughput, component: core, backends: [cuda], baseline: narrow, threshold: 0.98, select: [batch1/n8192, batch9]}
`, runFormRepo, e.commit, e.commit))
	priv := newKey(t)
	c, err := client.New(e.srv.URL, client.Options{Token: e.tokens["record"]})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.NewAgent(c, "cuda-t", priv).Register(ctx, runs.RegisterRequest{
		Name: "cuda-t", PublicKey: verify.AuthorizedKey(priv.Public().(ed25519.PublicKey)), Backend: ledger.BackendCUDA,
		Spec: runs.AgentSpec{Lanes: []string{runner.ThroughputLane}, Repository: runFormRepo, Commit: e.commit}, Health: "ok",
	}); err != nil {
		t.Fatal(err)
	}
	e.api(t, http.MethodPost, "/api/v1/agents/cuda-t/approve", "admin", map[string]any{}, http.StatusCreated)

	body, cookie, csrf := e.page(t, "/releases/3.0.0", nil)
	want := map[string][]string{"speed": {"queue"}, "speed-typo": {"invalid"}}
	if got := planStates(body); !mapsEqual(got, want) {
		t.Fatalf("plan: %v, want %v", got, want)
	}
	pgContains(t, "plan", body, "the run selects cases batch1/n8192/k8192/f16/b4, batch2/n8192/k8192/f16/b4 (select)", "cases[1]")
	code, b, _ := e.press(t, cookie, url.Values{"csrf": {csrf}, "token": {e.tokens["manager"]}}, "")
	if code != http.StatusSeeOther {
		t.Fatalf("press: %d %s", code, b)
	}
	act := e.active(t)
	if len(act) != 1 {
		t.Fatalf("the press queued %d runs, want 1", len(act))
	}
	r := act[0]
	if !slices.Equal(r.Lanes, []string{runner.ThroughputLane}) || r.Backend != ledger.BackendCUDA || r.Commit != e.commit ||
		!slices.Equal(r.Cases, []string{"batch1/n8192/k8192/f16/b4", "batch2/n8192/k8192/f16/b4"}) {
		t.Fatalf("queued %+v, want the throughput lane on cuda at the pins with the gate's select as cases", r)
	}
	// The active run covers the gate: a second press queues nothing.
	body, cookie, csrf = e.page(t, "/releases/3.0.0", cookie)
	if got := planStates(body)["speed"]; !slices.Equal(got, []string{"active"}) {
		t.Fatalf("plan after the press: %v", got)
	}
	if code, b, _ := e.press(t, cookie, url.Values{"csrf": {csrf}, "token": {e.tokens["manager"]}}, ""); code != http.StatusSeeOther || len(e.active(t)) != 1 {
		t.Fatalf("second press: %d %s, %d active runs", code, b, len(e.active(t)))
	}
}
