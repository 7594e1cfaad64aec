package web

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// The exploits of issue 14 that gates decide, done through the real HTTP
// API on a temporary database with a record-scope token (TRUST.md: a CI
// job must never make a gate pass with a claim the server did not check,
// nor keep an approval alive after its verdict changed). Each is refused
// (4xx naming the field, nothing appended) or recorded as baseline with
// its reason, and the release stays not ready.

const (
	advHead     = "f8eec2476cdb5263fb6e2a19dd71f2c8b7c0a7d3"
	advReviewed = "fab0f39f69140393b454c32d6f4bf7a9b32f9dcc"
	advTree     = "1111111111111111111111111111111111111111"
)

// advRelease binds libmlx.dylib to advBound; the qmv gate does not repeat
// the release's artifacts (the component's artifacts bind it).
var (
	advBound = "sha256:" + strings.Repeat("aa", 32)
	advOther = "sha256:" + strings.Repeat("bb", 32)
)

func advRelease(version string, withTree bool) string {
	y := `version: ` + version + `
approval_role: release-manager
artifacts:
  libmlx.dylib: ` + advBound + `
components:
  - name: mlx
    repository: mlx
    head: ` + advHead + `
    reviewed: ` + advReviewed + `
    pins: ["CMakeLists.txt"]
    artifacts: [libmlx.dylib]
gates:
  - id: qmv
    kind: lane
    lane: qmv-bias-sum/v1
    component: mlx
    backends: [metal]
    cases: 216
`
	if withTree {
		y += `  - id: tree
    kind: tree-equivalence
`
	}
	return y
}

func advEvidence(lane string, arts map[string]string, f func(map[string]any)) map[string]any {
	start := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	subj := map[string]any{"repository": "mlx", "commit": advHead, "tree": advTree}
	if arts != nil {
		subj["artifacts"] = arts
	}
	e := map[string]any{
		"lane": lane, "subject": subj, "backend": "metal", "device": map[string]any{"model": "M3"}, "runner": map[string]any{"version": "ci"},
		"cases_exact": 216, "cases_total": 216, "control": "caught", "status": "passed",
		"started_at": start.Format(time.RFC3339Nano), "finished_at": start.Add(time.Minute).Format(time.RFC3339Nano),
	}
	if f != nil {
		f(e)
	}
	return e
}

func treeClaimEvidence(extra map[string]any) map[string]any {
	return advEvidence("tree-equivalence/v1", nil, func(e map[string]any) {
		e["backend"], e["control"], e["cases_exact"], e["cases_total"] = "external", "none", 1, 1
		d := map[string]any{"reviewed": advReviewed, "equivalent": true, "outside_pins": []string{}, "pins": []string{"CMakeLists.txt"}}
		for k, v := range extra {
			d[k] = v
		}
		e["details"] = d
	})
}

type advReadiness struct {
	Readiness struct {
		Ready    bool `json:"ready"`
		Approved bool `json:"approved"`
		Gates    []struct {
			ID       string `json:"id"`
			State    string `json:"state"`
			Reason   string `json:"reason"`
			Rule     string `json:"rule"`
			Baseline []struct {
				ID     string `json:"id"`
				Reason string `json:"reason"`
			} `json:"baseline"`
			Failing []struct {
				ID string `json:"id"`
			} `json:"failing"`
		} `json:"gates"`
		Approvals []struct {
			ID    string `json:"id"`
			State string `json:"state"`
			Why   string `json:"why"`
		} `json:"approvals"`
	} `json:"readiness"`
}

func (e *apiEnv) readiness(t *testing.T, version string) advReadiness {
	t.Helper()
	code, body := e.do(t, "GET", "/api/v1/releases/"+version+"/readiness", "", nil)
	if code != 200 {
		t.Fatalf("readiness: %d %s", code, body)
	}
	var rd advReadiness
	if err := json.Unmarshal(body, &rd); err != nil {
		t.Fatal(err)
	}
	return rd
}

// gate returns the state of gate id, its baseline reasons by evidence id
// and the ids of its failing records.
func (rd advReadiness) gate(t *testing.T, id string) (state string, baseline map[string]string, failing []string) {
	t.Helper()
	for _, g := range rd.Readiness.Gates {
		if g.ID == id {
			baseline = map[string]string{}
			for _, b := range g.Baseline {
				baseline[b.ID] = b.Reason
			}
			for _, f := range g.Failing {
				failing = append(failing, f.ID)
			}
			if g.Rule == "" {
				t.Errorf("gate %s carries no counting rule", id)
			}
			return g.State, baseline, failing
		}
	}
	t.Fatalf("no gate %s", id)
	return "", nil, nil
}

func (e *apiEnv) postOne(t *testing.T, token string, body any) string {
	t.Helper()
	code, out := e.do(t, "POST", "/api/v1/evidence", token, body)
	if code != 201 {
		t.Fatalf("post evidence: %d %s", code, out)
	}
	var r struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(out, &r); err != nil || r.ID == "" {
		t.Fatalf("post evidence answer %s: %v", out, err)
	}
	return r.ID
}

// wantRefused checks a 4xx answer naming field and that the log did not
// grow.
func (e *apiEnv) wantRefused(t *testing.T, what string, code int, body []byte, status int, field string, before uint64) {
	t.Helper()
	var apiErr APIError
	_ = json.Unmarshal(body, &apiErr)
	if code != status || (field != "" && apiErr.Field != field) {
		t.Fatalf("%s: %d %s; want %d naming %q", what, code, body, status, field)
	}
	if after := e.size(t); after != before {
		t.Fatalf("%s: the log grew from %d to %d", what, before, after)
	}
}

func TestAdversarialGatesOverHTTP(t *testing.T) {
	a := &advEnv{apiEnv: newAPIEnv(t, Config{})}
	e := a.apiEnv
	ctx := context.Background()
	var err error
	a.admin, _, err = e.store.CreateToken(ctx, "rm", ledger.ScopeAdmin, []string{"release-manager"})
	if err != nil {
		t.Fatal(err)
	}
	a.plainAdmin, _, err = e.store.CreateToken(ctx, "ops", ledger.ScopeAdmin, nil)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := e.do(t, "PUT", "/api/v1/releases/0.9.0", a.admin, advRelease("0.9.0", true)); code != 201 {
		t.Fatalf("put release: %d %s", code, body)
	}
	t.Run("unbound artifact digest", a.advUnboundArtifactDigest)
	t.Run("evidence lacking the bound artifact", a.advMissingBoundArtifact)
	t.Run("posted tree-equivalence claim", a.advPostedTreeEquivalenceClaim)
	t.Run("claim carrying the server's computed marker", a.advForgedComputedMarker)
	t.Run("supersede needs admin scope and the approval role", a.advSupersedeScopeAndRole)
	t.Run("approval going stale", a.advApprovalGoingStale)
}

// advEnv is the API of TestAdversarialGatesOverHTTP with its admin
// tokens: admin holds release-manager, plainAdmin holds no role.
type advEnv struct {
	*apiEnv
	admin, plainAdmin string
}

func (a *advEnv) advUnboundArtifactDigest(t *testing.T) {
	id := a.postOne(t, a.record, advEvidence("qmv-bias-sum/v1", map[string]string{"libmlx.dylib": advOther}, nil))
	rd := a.readiness(t, "0.9.0")
	state, bl, _ := rd.gate(t, "qmv")
	if rd.Readiness.Ready || state != "open" || !strings.Contains(bl[id], "other artifact libmlx.dylib sha256:bbbbbbbbbbbb") {
		t.Fatalf("ready %v, qmv %s, baseline %v: want open with the other digest as the reason", rd.Readiness.Ready, state, bl)
	}
}

func (a *advEnv) advMissingBoundArtifact(t *testing.T) {
	id := a.postOne(t, a.record, advEvidence("qmv-bias-sum/v1", nil, nil))
	rd := a.readiness(t, "0.9.0")
	state, bl, _ := rd.gate(t, "qmv")
	if rd.Readiness.Ready || state != "open" || !strings.Contains(bl[id], "does not carry bound artifact libmlx.dylib") {
		t.Fatalf("ready %v, qmv %s, baseline %v", rd.Readiness.Ready, state, bl)
	}
}

func (a *advEnv) advPostedTreeEquivalenceClaim(t *testing.T) {
	id := a.postOne(t, a.record, treeClaimEvidence(nil))
	rd := a.readiness(t, "0.9.0")
	state, bl, _ := rd.gate(t, "tree")
	if rd.Readiness.Ready || state != "open" || !strings.Contains(bl[id], "claimed, not computed") {
		t.Fatalf("ready %v, tree %s, baseline %v: want open with the claim as baseline", rd.Readiness.Ready, state, bl)
	}
	// The release page does not show the claim as the comparison.
	_, page := a.do(t, "GET", "/releases/0.9.0", "", nil)
	if strings.Contains(string(page), "eq-equivalent") || !strings.Contains(string(page), "claimed, not computed") {
		t.Fatal("the release page shows a posted claim as tree equivalence, or hides why it does not count")
	}
}

func (a *advEnv) advForgedComputedMarker(t *testing.T) {
	for _, c := range []struct {
		what  string
		body  any
		field string
	}{
		{"single", treeClaimEvidence(map[string]any{"computed_by": "server"}), "details.computed_by"},
		{"other case", treeClaimEvidence(map[string]any{"Computed_By": "server"}), "details.computed_by"},
		{"batch", []any{advEvidence("qmv-bias-sum/v1", map[string]string{"libmlx.dylib": advBound}, nil), treeClaimEvidence(map[string]any{"computed_by": "server"})}, "[1].details.computed_by"},
		{"escaped name", `{"lane":"tree-equivalence/v1","details":{"\u0063omputed_by":"server"}}`, "details.computed_by"},
	} {
		before := a.size(t)
		code, body := a.do(t, "POST", "/api/v1/evidence", a.record, c.body)
		a.wantRefused(t, c.what, code, body, 400, c.field, before)
	}
	if rd := a.readiness(t, "0.9.0"); rd.Readiness.Ready {
		t.Fatal("ready")
	}
}

func (a *advEnv) advSupersedeScopeAndRole(t *testing.T) {
	id := a.postOne(t, a.record, advEvidence("qmv-bias-sum/v1", map[string]string{"libmlx.dylib": advBound}, func(m map[string]any) {
		m["cases_exact"], m["status"] = 156, "failed"
	}))
	req := map[string]string{"entry": id, "reason": "rerun on a healthy host"}
	for _, c := range []struct {
		token  string
		status int
	}{{a.record, 403}, {a.plainAdmin, 403}, {"", 401}} {
		before := a.size(t)
		code, body := a.do(t, "POST", "/api/v1/releases/0.9.0/supersedes", c.token, req)
		a.wantRefused(t, "supersede", code, body, c.status, "", before)
	}
	before := a.size(t)
	code, body := a.do(t, "POST", "/api/v1/releases/0.9.0/supersedes", a.admin, map[string]string{"entry": "0123456789abcdef0123456789abcdef", "reason": "x"})
	a.wantRefused(t, "supersede of no entry", code, body, 400, "entry", before)
	code, body = a.do(t, "POST", "/api/v1/releases/0.9.0/supersedes", a.admin, map[string]string{"entry": id})
	a.wantRefused(t, "supersede without a reason", code, body, 400, "reason", before)
	state, _, failing := a.readiness(t, "0.9.0").gate(t, "qmv")
	if state != "failed" || len(failing) != 1 || failing[0] != id {
		t.Fatalf("qmv %s failing %v: want failed by %s", state, failing, id)
	}
	if code, body := a.do(t, "POST", "/api/v1/releases/0.9.0/supersedes", a.admin, req); code != 201 {
		t.Fatalf("supersede: %d %s", code, body)
	}
	state, bl, _ := a.readiness(t, "0.9.0").gate(t, "qmv")
	if state != "open" || !strings.Contains(bl[id], "superseded by") || !strings.Contains(bl[id], "rm") {
		t.Fatalf("after supersede: qmv %s baseline %v", state, bl)
	}
}

func (a *advEnv) advApprovalGoingStale(t *testing.T) {
	if code, body := a.do(t, "PUT", "/api/v1/releases/0.9.1", a.admin, advRelease("0.9.1", false)); code != 201 {
		t.Fatalf("put release: %d %s", code, body)
	}
	// A supersede is recorded for one release's pins: 0.9.1 does not
	// see 0.9.0's, so the failing run above keeps 0.9.1 failed until
	// its own release manager supersedes it.
	rd := a.readiness(t, "0.9.1")
	if state, _, _ := rd.gate(t, "qmv"); state != "failed" {
		t.Fatalf("0.9.1 qmv %s: a supersede of another release applied", state)
	}
	_, _, failing := rd.gate(t, "qmv")
	if code, body := a.do(t, "POST", "/api/v1/releases/0.9.1/supersedes", a.admin, map[string]string{"entry": failing[0], "reason": "host fault"}); code != 201 {
		t.Fatalf("supersede: %d %s", code, body)
	}
	a.postOne(t, a.record, advEvidence("qmv-bias-sum/v1", map[string]string{"libmlx.dylib": advBound}, nil))
	if rd := a.readiness(t, "0.9.1"); !rd.Readiness.Ready {
		t.Fatalf("not ready: %+v", rd.Readiness.Gates)
	}
	code, body := a.do(t, "POST", "/api/v1/releases/0.9.1/approvals", a.admin, map[string]string{"note": "ship"})
	if code != 201 {
		t.Fatalf("approve: %d %s", code, body)
	}
	var ap struct {
		ID       string `json:"id"`
		Approval struct {
			DecisionDigest string `json:"decision_digest"`
			Checkpoint     struct {
				Size uint64 `json:"size"`
			} `json:"checkpoint"`
		} `json:"approval"`
	}
	if err := json.Unmarshal(body, &ap); err != nil || ap.Approval.DecisionDigest == "" || ap.Approval.Checkpoint.Size == 0 {
		t.Fatalf("approval %s does not name its verdict: %v", body, err)
	}
	rd = a.readiness(t, "0.9.1")
	if !rd.Readiness.Approved || len(rd.Readiness.Approvals) != 1 || rd.Readiness.Approvals[0].State != "current" || rd.Readiness.Approvals[0].ID != ap.ID {
		t.Fatalf("after approval: %+v", rd.Readiness)
	}
	// The CI token records a failing run at the pins.
	a.postOne(t, a.record, advEvidence("qmv-bias-sum/v1", map[string]string{"libmlx.dylib": advBound}, func(m map[string]any) {
		m["cases_exact"], m["status"] = 150, "failed"
	}))
	rd = a.readiness(t, "0.9.1")
	if rd.Readiness.Ready || rd.Readiness.Approved || len(rd.Readiness.Approvals) != 1 {
		t.Fatalf("after a failing run: ready %v approved %v", rd.Readiness.Ready, rd.Readiness.Approved)
	}
	if a := rd.Readiness.Approvals[0]; a.State != "stale" || !strings.Contains(a.Why, "gate qmv was passed, now failed") {
		t.Fatalf("approval %+v: want stale naming the gate", a)
	}
	_, page := a.do(t, "GET", "/releases/0.9.1", "", nil)
	if !strings.Contains(string(page), `data-state="stale"`) || !strings.Contains(string(page), "stale: no longer counts") || strings.Contains(string(page), "<strong>Approved</strong>") {
		t.Fatal("the release page does not show the approval as stale")
	}
	before := a.size(t)
	code, body = a.do(t, "POST", "/api/v1/releases/0.9.1/approvals", a.admin, map[string]string{})
	a.wantRefused(t, "approval of the release that is no longer ready", code, body, 409, "", before)
}
