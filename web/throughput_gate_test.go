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
		"cases": []map[string]any{{"id": "batch1/n8192/k8192/f16/b4/g64", "batch": 1, "n": 8192, "k": 8192, "dtype": "f16", "bits": 4,
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
	if g := gate(); g.State != gates.StateFailed || len(g.Failing) != 1 || !strings.Contains(g.Reason, "batch1/n8192/k8192/f16/b4/g64: speed ratio 0.") || !strings.Contains(g.Reason, "< 0.98") {
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

// TestThroughputMalformedRefused: throughput details that break the
// vocabulary's rules are refused on admission naming the field (400,
// nothing appended), and samples whose ratio would overflow (1e308 over
// 1e-308: finite, positive, but no finite quotient) cannot brick the
// release's readiness: they are refused too, and readiness answers.
func TestThroughputMalformedRefused(t *testing.T) {
	e := newRunnerEnv(t)
	commit := fmt.Sprintf("%040x", 0x35)
	rel := fmt.Sprintf(`version: 7.0.0
components:
  - {name: ledger-qmv, repository: github.com/evidence-ledger/ledger, reviewed: %[1]s, head: %[1]s}
gates:
  - {id: qmv-throughput, kind: throughput, component: ledger-qmv, backends: [cuda], baseline: narrow, threshold: 0.98}
`, commit)
	if code, body := e.do(t, http.MethodPut, "/api/v1/releases/7.0.0", e.admin, rel, "Content-Type", "application/yaml"); code != http.StatusCreated && code != http.StatusOK {
		t.Fatalf("define release: %d %s", code, body)
	}
	tcase := func(ev map[string]any) map[string]any {
		return ev["details"].(map[string]any)[ledger.ThroughputField].(map[string]any)["cases"].([]map[string]any)[0]
	}
	for i, tc := range []struct {
		name, field string
		edit        func(ev map[string]any)
	}{
		{"huge over tiny", "details.throughput.cases[0].candidate_s[0]", func(ev map[string]any) {
			c := tcase(ev)
			for j := range c["candidate_s"].([]float64) {
				c["candidate_s"].([]float64)[j], c["baseline_s"].([]float64)[j] = 1e-308, 1e308
			}
		}},
		{"negative sample", "details.throughput.cases[0].baseline_s[3]", func(ev map[string]any) { tcase(ev)["baseline_s"].([]float64)[3] = -1 }},
		{"unpaired", "details.throughput.cases[0].baseline_s", func(ev map[string]any) {
			c := tcase(ev)
			c["baseline_s"] = c["baseline_s"].([]float64)[:10]
		}},
		{"confidence", "details.throughput.confidence", func(ev map[string]any) {
			ev["details"].(map[string]any)[ledger.ThroughputField].(map[string]any)["confidence"] = 2
		}},
		{"sample of the wrong type", "details.throughput.cases.candidate_s", func(ev map[string]any) {
			c := tcase(ev)
			c["candidate_s"] = []any{"4e-5"}
		}},
		{"member name in capitals", "details.THROUGHPUT", func(ev map[string]any) {
			d := ev["details"].(map[string]any)
			tp := d[ledger.ThroughputField].(map[string]any)
			tp["cases"].([]map[string]any)[0]["baseline_s"].([]float64)[2] = -1
			delete(d, ledger.ThroughputField)
			d["THROUGHPUT"] = tp
		}},
		{"id not its fields'", "details.throughput.cases[0].id", func(ev map[string]any) { tcase(ev)["id"] = "batch1/n8192/k8192/f16/b4/g64/copy1" }},
		{"duplicate case", "details.throughput.cases[1].id", func(ev map[string]any) {
			tp := ev["details"].(map[string]any)[ledger.ThroughputField].(map[string]any)
			tp["cases"] = append(tp["cases"].([]map[string]any), tp["cases"].([]map[string]any)[0])
		}},
	} {
		ev := throughputBody(commit, 1.2, uint64(10+i))
		tc.edit(ev)
		code, body := e.do(t, http.MethodPost, "/api/v1/evidence", e.admin, ev)
		if code != http.StatusBadRequest || !strings.Contains(string(body), tc.field) {
			t.Errorf("%s: %d %s; want 400 naming %s", tc.name, code, body, tc.field)
		}
	}
	gs := e.readiness7(t)
	if len(gs) != 1 || gs[0].State != gates.StateOpen || len(gs[0].Baseline) != 0 {
		t.Fatalf("after the refusals: %+v; want the gate open with no record", gs)
	}
}
