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
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/client"
	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/evidence-ledger/ledger/verify"
)

// runFormEnv is a real HTTP server over a SQLite store with a run store,
// release 3.0.0 (approval role release-manager) and its tokens.
type runFormEnv struct {
	srv    *httptest.Server
	st     *sqlite.Store
	rs     *runs.Store
	tokens map[string]string // manager, admin-role, other-role, record, read, admin
	commit string
}

const runFormRepo = "github.com/ml-explore/mlx"

// runFormRelease has, on core at commit c: two open cuda gates an agent
// serves (one with runner: agent), an open metal gate no agent serves, a
// cpu gate evidence satisfies, a waived cuda gate, and a manual gate.
func runFormRelease(c string) string {
	return fmt.Sprintf(`version: 3.0.0
approval_role: release-manager
components:
  - {name: core, repository: %s, reviewed: %s, head: %s}
gates:
  - {id: qmv-cuda, kind: lane, lane: qmv-bias-sum/v1, component: core, backends: [cuda], runner: agent}
  - {id: alloc-cuda, kind: lane, lane: alloc-footprint/v1, component: core, backends: [cuda]}
  - {id: qmv-metal, kind: lane, lane: qmv-bias-sum/v1, component: core, backends: [metal]}
  - {id: qmv-cpu, kind: lane, lane: qmv-bias-sum/v1, component: core, backends: [cpu]}
  - {id: snap-cuda, kind: lane, lane: alloc-snapshot/v1, component: core, backends: [cuda]}
  - {id: review, kind: manual, role: release-manager}
`, runFormRepo, c, c)
}

func newRunFormEnv(t *testing.T) *runFormEnv {
	t.Helper()
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
	s, err := New(Config{Store: st, Runs: rs, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	e := &runFormEnv{srv: httptest.NewServer(s), st: st, rs: rs, tokens: map[string]string{}, commit: fmt.Sprintf("%040x", 2)}
	t.Cleanup(e.srv.Close)
	for _, tk := range []struct {
		name  string
		scope ledger.Scope
		roles []string
	}{
		{"manager", ledger.ScopeRun, []string{"release-manager"}},
		{"admin-role", ledger.ScopeAdmin, []string{"release-manager"}},
		{"other-role", ledger.ScopeRun, []string{"model-owner"}},
		{"record", ledger.ScopeRecord, []string{"release-manager"}},
		{"read", ledger.ScopeRead, []string{"release-manager"}},
		{"admin", ledger.ScopeAdmin, nil},
	} {
		sec, _, err := st.CreateToken(ctx, tk.name, tk.scope, tk.roles)
		if err != nil {
			t.Fatal(err)
		}
		e.tokens[tk.name] = sec
	}
	pgRelease(t, st, runFormRelease(e.commit))
	// qmv-cpu is satisfied by a passing cpu run at the pins.
	ev := testEvidence(1) // subject commit %040x of 2
	e.api(t, http.MethodPost, "/api/v1/evidence", "record", ev, http.StatusCreated)
	// snap-cuda is waived.
	if _, _, err := gates.RecordWaiver(ctx, st, "3.0.0", "snap-cuda", "CUDA snapshot tracked in #42", time.Now().Add(48*time.Hour), gates.Actor{Name: "admin"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	// An approved, online cuda agent built at the pins, with both lanes in
	// its configuration; an unapproved metal agent.
	e.agent(t, "cuda-a", ledger.BackendCUDA, true)
	e.agent(t, "metal-x", ledger.BackendMetal, false)
	return e
}

// agent registers agent name through POST /api/v1/agent/register (signed
// with a fresh key) and, when approve, approves it through the API.
func (e *runFormEnv) agent(t *testing.T, name string, b ledger.Backend, approve bool) runs.Agent {
	t.Helper()
	priv := newKey(t)
	c, err := client.New(e.srv.URL, client.Options{Token: e.tokens["record"]})
	if err != nil {
		t.Fatal(err)
	}
	a, err := client.NewAgent(c, name, priv).Register(context.Background(), runs.RegisterRequest{
		Name: name, PublicKey: verify.AuthorizedKey(priv.Public().(ed25519.PublicKey)), Backend: b, Labels: map[string]string{"gpu": "h200"},
		Spec:   runs.AgentSpec{Lanes: []string{"qmv-bias-sum/v1", "alloc-footprint/v1", "alloc-snapshot/v1"}, Repository: runFormRepo, Commit: e.commit},
		Health: "ok",
	})
	if err != nil {
		t.Fatalf("register %s: %v", name, err)
	}
	if approve {
		e.api(t, http.MethodPost, "/api/v1/agents/"+name+"/approve", "admin", map[string]any{}, http.StatusCreated)
	}
	return a
}

func (e *runFormEnv) api(t *testing.T, method, path, tok string, body any, want int) {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(mustJSON(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+e.tokens[tok])
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, res.StatusCode, b, want)
	}
}

var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// page GETs the release page with cookie (nil: none) and returns the
// body, the CSRF cookie and the run form's CSRF token.
func (e *runFormEnv) page(t *testing.T, path string, cookie *http.Cookie) (string, *http.Cookie, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+path, nil)
	if cookie != nil {
		req.AddCookie(cookie)
	}
	res, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", path, res.StatusCode)
	}
	set := 0
	for _, c := range res.Cookies() {
		if c.Name == csrfCookie {
			cookie = c
			set++
		}
	}
	if set > 1 {
		t.Fatalf("GET %s set the CSRF cookie %d times: the forms' tokens are bound to different secrets", path, set)
	}
	m := regexp.MustCompile(`<form method="post" action="/releases/3.0.0/runs" id="runs-form"[^>]*>\s*<input type="hidden" name="csrf" value="([^"]+)">`).FindStringSubmatch(string(b))
	if m == nil {
		t.Fatalf("GET %s: no run form with a CSRF token", path)
	}
	return string(b), cookie, m[1]
}

func (e *runFormEnv) press(t *testing.T, cookie *http.Cookie, form url.Values, origin string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/releases/3.0.0/runs", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if cookie != nil {
		req.AddCookie(cookie)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	res, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res.StatusCode, string(b), res.Header.Get("Location")
}

func (e *runFormEnv) active(t *testing.T) []runs.Run {
	t.Helper()
	list, err := e.rs.List(context.Background(), "active", 1000)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// planStates reads the plan rows (gate -> state) from a release page.
func planStates(body string) map[string][]string {
	out := map[string][]string{}
	for _, m := range regexp.MustCompile(`<tr data-gate="([^"]+)" data-plan="([^"]+)">`).FindAllStringSubmatch(body, -1) {
		out[m[1]] = append(out[m[1]], m[2])
	}
	return out
}

// TestReleaseRunForm: before the press the release page shows what the
// run form would queue and what it cannot (no online approved agent for
// metal); every refused press (record, read, other-role tokens, no or a
// wrong CSRF token, a cross-site post) queues nothing; the manager's
// press queues exactly the two open cuda gates' runs, at the pins and
// attributed to the manager, never the satisfied, waived or manual gates;
// a second press, and two at once after a cancel, queue no duplicate.
func TestReleaseRunForm(t *testing.T) {
	e := newRunFormEnv(t)
	body, cookie, csrf := e.page(t, "/releases/3.0.0", nil)
	want := map[string][]string{"qmv-cuda": {"queue"}, "alloc-cuda": {"queue"}, "qmv-metal": {"no-agent"}}
	if got := planStates(body); !mapsEqual(got, want) {
		t.Fatalf("plan before the press: %v, want %v", got, want)
	}
	pgContains(t, "plan", body, "no online approved agent for backend metal", "Queue 2 missing run(s)", "online agent(s) cuda-a serve it",
		"Nothing to run for: qmv-cpu (satisfied), snap-cuda (waived).")
	if strings.Contains(body, "metal-x serve") {
		t.Error("the unapproved metal agent is offered as serving a gate")
	}
	good := url.Values{"csrf": {csrf}, "token": {e.tokens["manager"]}}
	with := func(k, v string) url.Values {
		f := url.Values{"csrf": {csrf}, "token": {e.tokens["manager"]}}
		f.Set(k, v)
		return f
	}
	om := regexp.MustCompile(`action="/releases/3.0.0/approvals"[^>]*>\s*<h3>[^<]*</h3>\s*<input type="hidden" name="csrf" value="([^"]+)">`).FindStringSubmatch(body)
	if om == nil {
		t.Fatal("no approval form")
	}
	otherCSRF := om[1]
	for _, tc := range []struct {
		name   string
		cookie *http.Cookie
		form   url.Values
		origin string
		status int
		want   string
	}{
		{"record token", cookie, with("token", e.tokens["record"]), "", 403, "this form needs &#34;run&#34;"},
		{"read token", cookie, with("token", e.tokens["read"]), "", 403, "this form needs &#34;run&#34;"},
		{"token of another role", cookie, with("token", e.tokens["other-role"]), "", 403, "approval role &#34;release-manager&#34;"},
		{"admin without the role", cookie, with("token", e.tokens["admin"]), "", 403, "approval role &#34;release-manager&#34;"},
		{"no api token", cookie, with("token", ""), "", 401, "enter an API token"},
		{"no csrf token", cookie, url.Values{"token": {e.tokens["manager"]}}, "", 403, "security token does not match"},
		{"csrf token of another form", cookie, with("csrf", otherCSRF), "", 403, "security token does not match"},
		{"no csrf cookie", nil, good, "", 403, "security cookie is missing"},
		{"cross-site post", cookie, good, "https://evil.example", 403, "cross-origin"},
	} {
		st, b, _ := e.press(t, tc.cookie, tc.form, tc.origin)
		if st != tc.status || !strings.Contains(b, tc.want) {
			t.Errorf("%s: %d, want %d with %q", tc.name, st, tc.status, tc.want)
		}
		for _, sec := range e.tokens {
			if strings.Contains(b, sec) {
				t.Errorf("%s: the page echoes a token", tc.name)
			}
		}
		if n := len(e.active(t)); n != 0 {
			t.Fatalf("%s: %d runs queued by a refused press", tc.name, n)
		}
	}

	st, b, loc := e.press(t, cookie, good, e.srv.URL)
	if st != http.StatusSeeOther || !strings.Contains(loc, "queued=2") {
		t.Fatalf("manager's press: %d %s (Location %q)", st, b, loc)
	}
	got := e.active(t)
	if len(got) != 2 {
		t.Fatalf("manager's press queued %d runs, want 2: %+v", len(got), got)
	}
	var lanes []string
	for _, r := range got {
		lanes = append(lanes, r.Lanes...)
		if r.Backend != ledger.BackendCUDA || r.Repository != runFormRepo || r.Commit != e.commit || r.CreatedBy != "manager" || r.State != runs.Queued {
			t.Errorf("queued run %+v: want cuda at %s %s, created by manager", r, runFormRepo, e.commit)
		}
	}
	slices.Sort(lanes)
	if !slices.Equal(lanes, []string{"alloc-footprint/v1", "qmv-bias-sum/v1"}) {
		t.Errorf("queued lanes %v", lanes)
	}
	body, _, csrf2 := e.page(t, loc, cookie)
	pgContains(t, "after the press", body, "2 run(s) queued.", "is already queued or running for it")
	if got := planStates(body); !slices.Equal(got["qmv-cuda"], []string{"active"}) || !slices.Equal(got["alloc-cuda"], []string{"active"}) {
		t.Errorf("plan after the press: %v", got)
	}
	if csrf2 != csrf {
		t.Error("the run form's CSRF token changed for the same browser")
	}

	// A double click: the second press queues nothing new.
	st, _, loc = e.press(t, cookie, good, "")
	if st != http.StatusSeeOther || !strings.Contains(loc, "queued=0") || len(e.active(t)) != 2 {
		t.Fatalf("second press: %d %q, %d active runs; want nothing new", st, loc, len(e.active(t)))
	}

	// Canceled runs are missing again; two presses at once queue them once.
	for _, r := range got {
		if _, _, err := e.rs.Cancel(context.Background(), r.ID); err != nil {
			t.Fatal(err)
		}
	}
	admin := url.Values{"csrf": {csrf}, "token": {e.tokens["admin-role"]}}
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i := range 2 {
		wg.Go(func() { codes[i], _, _ = e.press(t, cookie, admin, "") })
	}
	wg.Wait()
	if codes[0] != http.StatusSeeOther || codes[1] != http.StatusSeeOther {
		t.Fatalf("concurrent presses: %v", codes)
	}
	if n := len(e.active(t)); n != 2 {
		t.Fatalf("two presses at once left %d active runs, want 2", n)
	}
}

// TestReleaseRunFormScope: a manager token whose scope does not cover a
// lane the plan would queue is refused whole: nothing is queued, and the
// message names the gate.
func TestReleaseRunFormScope(t *testing.T) {
	e := newRunFormEnv(t)
	sec, _, err := e.st.CreateScopedToken(context.Background(), ledger.TokenSpec{Name: "narrow", Scope: ledger.ScopeRun, Roles: []string{"release-manager"}, Lanes: []string{"qmv-bias-sum"}})
	if err != nil {
		t.Fatal(err)
	}
	_, cookie, csrf := e.page(t, "/releases/3.0.0", nil)
	st, b, _ := e.press(t, cookie, url.Values{"csrf": {csrf}, "token": {sec}}, "")
	if st != http.StatusForbidden || !strings.Contains(b, "gate alloc-cuda on cuda") || !strings.Contains(b, "nothing was queued") {
		t.Fatalf("narrow token: %d, want 403 naming gate alloc-cuda", st)
	}
	if n := len(e.active(t)); n != 0 {
		t.Fatalf("a press out of scope queued %d runs", n)
	}
}

// TestAgentRegisterAnswerTimes: the register answer is the stored
// registration, with its registration and heartbeat times.
func TestAgentRegisterAnswerTimes(t *testing.T) {
	e := newRunFormEnv(t)
	before := time.Now().Add(-time.Second)
	a := e.agent(t, "cuda-b", ledger.BackendCUDA, false)
	if a.RegisteredAt.Before(before) || a.LastSeen.Before(before) {
		t.Fatalf("register answer: registered_at %v, last_seen %v; want the stored times", a.RegisteredAt, a.LastSeen)
	}
	stored, err := e.rs.GetAgent(context.Background(), "cuda-b")
	if err != nil || !stored.RegisteredAt.Equal(a.RegisteredAt) {
		t.Fatalf("stored %v (%v), answered %v", stored.RegisteredAt, err, a.RegisteredAt)
	}
}

func mapsEqual(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// TestReleaseRunFormWithoutRunStore: a server without a run store says so
// on the release page and refuses a press with 404, queueing nothing; a
// run store that fails leaves the rest of the page served, the plan's
// problem shown.
func TestReleaseRunFormWithoutRunStore(t *testing.T) {
	st := pgStore(t)
	pgRelease(t, st, pgReleaseYAML)
	s := pgServer(t, st)
	code, body := pgGet(t, s, "/releases/0.32.1")
	if code != http.StatusOK || !strings.Contains(body, "This server runs no runs service") || strings.Contains(body, `id="runs-form"`) {
		t.Fatalf("release page without a run store: %d, want the note and no run form", code)
	}
	cookie, _ := pgForm(t, s, "waiver", nil)
	admin, _, err := st.CreateToken(t.Context(), "alice", ledger.ScopeAdmin, nil)
	if err != nil {
		t.Fatal(err)
	}
	csrf := s.csrfToken(cookie.Value, "/releases/0.32.1/runs")
	if rec := pgPost(s, "/releases/0.32.1/runs", cookie, url.Values{"csrf": {csrf}, "token": {admin}}, ""); rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "runs no runs service") {
		t.Errorf("press without a run store: %d, want 404 saying so", rec.Code)
	}

	e := newRunFormEnv(t)
	e.rs.Close()
	body, _, _ = e.page(t, "/releases/3.0.0", nil)
	pgContains(t, "failed run store", body, "the run plan cannot be computed", `id="gate-qmv-cuda"`)
}

// TestReleaseRunFormAgentLabels: release 3.0.0 defined again with two
// agent_labels gates. A gate with agent_labels is offered only
// to online approved agents with those labels, and its run is queued
// requiring them; a gate whose labels no agent has cannot be queued, and
// the reason names the labels.
func TestReleaseRunFormAgentLabels(t *testing.T) {
	e := newRunFormEnv(t)
	pgRelease(t, e.st, fmt.Sprintf(`version: 3.0.0
approval_role: release-manager
components:
  - {name: core, repository: %s, reviewed: %s, head: %s}
gates:
  - {id: qmv-h200, kind: lane, lane: qmv-bias-sum/v1, component: core, backends: [cuda], runner: agent, agent_labels: {gpu: h200}}
  - {id: alloc-a100, kind: lane, lane: alloc-footprint/v1, component: core, backends: [cuda], runner: agent, agent_labels: {gpu: a100}}
`, runFormRepo, e.commit, e.commit))
	body, cookie, csrf := e.page(t, "/releases/3.0.0", nil)
	want := map[string][]string{"qmv-h200": {"queue"}, "alloc-a100": {"no-agent"}}
	if got := planStates(body); !mapsEqual(got, want) {
		t.Fatalf("plan: %v, want %v", got, want)
	}
	pgContains(t, "plan", body, "online agent(s) cuda-a serve it; the run is queued with labels gpu=h200", "with labels gpu=a100")
	if st, b, _ := e.press(t, cookie, url.Values{"csrf": {csrf}, "token": {e.tokens["manager"]}}, ""); st != http.StatusSeeOther && st != http.StatusOK {
		t.Fatalf("press: %d %s", st, b)
	}
	act := e.active(t)
	if len(act) != 1 || act[0].Lanes[0] != "qmv-bias-sum/v1" || act[0].Labels["gpu"] != "h200" || len(act[0].Labels) != 1 {
		t.Fatalf("queued: %+v; want one qmv run requiring gpu=h200", act)
	}
}

// TestReleaseRunFormRepositoryNoRunCanName: a release whose component's
// repository is valid in a release definition but is not a repository
// name a run can name (runs.ValidateRepository: "mlx") still renders its
// page; the open lane gate's plan row says it cannot be queued and why.
func TestReleaseRunFormRepositoryNoRunCanName(t *testing.T) {
	e := newRunFormEnv(t)
	pgRelease(t, e.st, fmt.Sprintf(`version: 3.1.0
components:
  - {name: core, repository: mlx, reviewed: %s, head: %s}
gates:
  - {id: qmv-cuda, kind: lane, lane: qmv-bias-sum/v1, component: core, backends: [cuda]}
`, e.commit, e.commit))
	res, err := http.Get(e.srv.URL + "/releases/3.1.0")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	body := string(b)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("release page: %d", res.StatusCode)
	}
	if got, want := planStates(body), map[string][]string{"qmv-cuda": {"invalid"}}; !mapsEqual(got, want) {
		t.Fatalf("plan: %v, want %v", got, want)
	}
	// "Cannot be queued" in a few words per row, the rule written once and
	// linked.
	pgContains(t, "plan", body, "cannot be queued", "a run cannot name its repository", `href="#run-name-rule"`, `id="run-name-rule"`)
	if n := strings.Count(body, "must be a repository name"); n != 1 {
		t.Errorf("the repository-name rule is written %d times, want once", n)
	}
	// Nothing can be queued: no enabled "Queue 0" button.
	if strings.Contains(body, "Queue 0") || !strings.Contains(body, `<button type="submit" disabled>Queue missing runs</button>`) || !strings.Contains(body, `id="runs-none"`) {
		t.Error("the page offers a button that would queue nothing")
	}
	if strings.Contains(body, "the run plan cannot be computed") {
		t.Error("the plan failed whole instead of naming the row it cannot queue")
	}
}
