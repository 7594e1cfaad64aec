package web

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
)

// throughputBody is a throughput record of commit (promoted vs narrow,
// one batch 1 case of 40 paired samples whose ratio baseline/candidate is
// ratio with 1 % noise, from a seeded generator).
func throughputBody(commit string, ratio float64, seed uint64) map[string]any {
	rng := rand.New(rand.NewPCG(seed, 34))
	var cand, base []float64
	for range 40 {
		c := 40e-6 * (1 + 0.01*rng.NormFloat64())
		cand = append(cand, c)
		base = append(base, c*ratio*(1+0.01*rng.NormFloat64()))
	}
	ev := testEvidence(int(seed))
	ev["lane"], ev["backend"] = gates.DefaultThroughputLane, "cuda"
	ev["subject"] = map[string]any{"repository": "github.com/evidence-ledger/ledger", "commit": commit, "tree": strings.Repeat("e", 40)}
	ev["cases_exact"], ev["cases_total"] = 1, 1
	ev["details"] = map[string]any{ledger.ThroughputField: map[string]any{
		"clock": "cuda-events", "candidate": "promoted", "baseline": map[string]any{"name": "narrow"},
		"confidence": 0.95, "target_rel": 0.01,
		"cases": []map[string]any{{"id": "batch1/n8192/k8192/float16/b4/g64", "batch": 1, "n": 8192, "k": 8192, "dtype": "float16", "bits": 4,
			"group_size": 64, "launches_per_sample": 100, "candidate_s": cand, "baseline_s": base, "converged": true,
			"candidate_median": map[string]float64{"estimate": 4e-5, "low": 4e-5, "high": 4e-5}, "output": map[string]any{"rel_l2": 0, "tolerance": 1e-3, "bit_exact": 8192, "values": 8192}}},
	}}
	return ev
}

// TestThroughputGateThroughAPI: a release's throughput gate (signed_by
// ci-mac) through the real API: an unsigned speed-up is baseline naming
// the signer rule; a signed speed-up passes it, the readiness JSON
// carrying the decisive ratio with its interval and the release page's
// row showing it; a signed regression then fails it, naming the case and
// its ratio interval.
func TestThroughputGateThroughAPI(t *testing.T) {
	e := newRunnerEnv(t)
	commit := fmt.Sprintf("%040x", 0x34)
	rel := fmt.Sprintf(`version: 7.0.0
components:
  - {name: ledger-qmv, repository: github.com/evidence-ledger/ledger, reviewed: %[1]s, head: %[1]s}
gates:
  - {id: qmv-throughput, kind: throughput, component: ledger-qmv, backends: [cuda], baseline: narrow, threshold: 0.98, signed_by: [ci-mac]}
`, commit)
	if code, body := e.do(t, http.MethodPut, "/api/v1/releases/7.0.0", e.admin, rel, "Content-Type", "application/yaml"); code != http.StatusCreated && code != http.StatusOK {
		t.Fatalf("define release: %d %s", code, body)
	}
	gate := func() gates.GateResult {
		t.Helper()
		for _, g := range e.readiness7(t) {
			if g.ID == "qmv-throughput" {
				return g
			}
		}
		t.Fatal("no gate qmv-throughput")
		return gates.GateResult{}
	}

	code, body := e.do(t, http.MethodPost, "/api/v1/evidence", e.admin, throughputBody(commit, 1.2, 1))
	if code != http.StatusCreated {
		t.Fatalf("unsigned: %d %s", code, body)
	}
	if g := gate(); g.State != gates.StateOpen || len(g.Baseline) != 1 || !strings.Contains(g.Baseline[0].Reason, "sign") {
		t.Fatalf("unsigned speed-up: %s (%s) baseline %+v; want open, baseline naming the signer rule", g.State, g.Reason, g.Baseline)
	}

	code, body = e.do(t, http.MethodPost, "/api/v1/evidence", e.admin, sign(t, e.mac, throughputBody(commit, 1.2, 2)), "Content-Type", ledger.ContentTypeDSSE)
	if code != http.StatusCreated {
		t.Fatalf("signed: %d %s", code, body)
	}
	g := gate()
	if g.State != gates.StatePassed || g.Throughput == nil || g.Throughput.Verdict != gates.ThroughputMeets || g.Throughput.Ratio.Low < 1.1 || g.Throughput.Pairs != 40 {
		t.Fatalf("signed speed-up: %s (%s) %+v; want passed with the ratio", g.State, g.Reason, g.Throughput)
	}
	code, page := e.do(t, http.MethodGet, "/releases/7.0.0", "", nil)
	if code != http.StatusOK || !strings.Contains(string(page), `class="throughput-ratio" data-verdict="meets"`) ||
		!strings.Contains(string(page), "&gt;= 0.98, worst of 1 cases, promoted vs narrow") {
		t.Fatalf("release page: %d; want the row's speed ratio", code)
	}

	code, body = e.do(t, http.MethodPost, "/api/v1/evidence", e.admin, sign(t, e.mac, throughputBody(commit, 0.9, 3)), "Content-Type", ledger.ContentTypeDSSE)
	if code != http.StatusCreated {
		t.Fatalf("signed regression: %d %s", code, body)
	}
	if g := gate(); g.State != gates.StateFailed || len(g.Failing) != 1 || !strings.Contains(g.Reason, "batch1/n8192/k8192/float16/b4/g64: speed ratio 0.") || !strings.Contains(g.Reason, "< 0.98") {
		t.Fatalf("signed regression: %s (%s); want failed naming the case", g.State, g.Reason)
	}
}

func (e *runnerEnv) readiness7(t *testing.T) []gates.GateResult {
	t.Helper()
	code, body := e.do(t, http.MethodGet, "/api/v1/releases/7.0.0/readiness", "", nil)
	if code != http.StatusOK {
		t.Fatalf("readiness: %d %s", code, body)
	}
	var sv gates.SignedVerdict
	if err := json.Unmarshal(body, &sv); err != nil || sv.Readiness == nil {
		t.Fatalf("readiness: %v %s", err, body)
	}
	return sv.Readiness.Gates
}
