package web

import (
	"html/template"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
)

// pgGateStates reads the gate board's states: gate id -> state word.
func pgGateStates(body string) map[string]string {
	out := map[string]string{}
	for _, m := range regexp.MustCompile(`<details class="gate gate-[a-z]+" id="gate-[^"]+" data-gate="([^"]+)" data-state="([^"]+)">`).FindAllStringSubmatch(body, -1) {
		out[m[1]] = m[2]
	}
	return out
}

func TestReleasePage(t *testing.T) {
	st := pgStore(t)
	ids := pgSeed(t, st)
	pgRelease(t, st, pgReleaseYAML)
	s := pgServer(t, st)
	code, body := pgGet(t, s, "/releases/0.32.1")
	if code != 200 {
		t.Fatalf("release page: %d\n%s", code, body)
	}
	states := pgGateStates(body)
	want := map[string]string{"qmv-cpu": "passed", "snapshot": "open", "footprint": "open", "heads": "failed", "tree": "open", "platform": "open"}
	for g, w := range want {
		if states[g] != w {
			t.Errorf("gate %s: state %q, want %q (all: %v)", g, states[g], w, states)
		}
	}
	pgContains(t, "release page", body,
		"Not ready", `<span class="badge state-passed">passed</span>`, `<span class="badge state-open">open</span>`,
		`href="/evidence/`+ids["promoted"]+`"`, // satisfying evidence
		`href="/evidence/`+ids["narrow"]+`"`,   // baseline: other artifact digest
		// Baseline evidence and its reason are one click away, folded; the
		// counting rule is written once and linked from each gate.
		"does not count:", `<details class="baseline"><summary>Baseline evidence (`, `id="counting-rule"`, `href="#counting-rule"`,
		`href="#rule-lane"`, `id="rule-lane"`, `href="#rule-manual"`, `id="rule-manual"`,
		pgDigest, "libmlx.so", "someone@example.org", `<span class="badge v-unknown_key">unknown_key</span>`, "verdict unknown_key, decision untrusted", "not verified", "no evidence",
		"Package.resolved", `name="csrf"`, `type="password"`, "/releases/0.32.1/waivers", "Sign off a manual gate",
	)
	if strings.Contains(body, `<details class="baseline" open`) {
		t.Error("baseline evidence is open by default; it is folded")
	}
	// The counting rule and each kind's rule are written once, not per gate.
	if n := strings.Count(body, "Only records at the release"); n != 1 {
		t.Errorf("the counting rule is written %d times, want once", n)
	}
	for _, k := range []string{"lane", "manual", "signed-heads", "tree-equivalence"} {
		frag := gates.KindRule(k)[:40]
		if n := strings.Count(body, template.HTMLEscapeString(frag)); n != 1 {
			t.Errorf("the %s rule is written %d times, want once", k, n)
		}
	}
	// Each gate is one row: state, one-line reason and the record that
	// decides it, its details folded; passed qmv-cpu is decided by the
	// promoted run.
	row := regexp.MustCompile(`(?s)<details class="gate gate-passed" id="gate-qmv-cpu"[^>]*>\s*<summary class="gate-row">(.*?)</summary>`).FindStringSubmatch(body)
	if row == nil || !strings.Contains(row[1], `href="/evidence/`+ids["promoted"]+`"`) || !strings.Contains(row[1], `class="gate-reason"`) {
		t.Errorf("qmv-cpu's row does not name the record that decides it: %v", row)
	}
	if strings.Contains(body, `<details class="gate`+" open") {
		t.Error("a gate's details are open by default")
	}
	// The approval state is in the header; the approve button of a
	// release that is not ready is disabled.
	pgContains(t, "release page header", body, `<div id="approvals" class="approval-head">`, "not approved yet", `<button type="submit" disabled>Approve</button>`)
	// Failed and open gates come first: the board lists states in the
	// order failed, open, waived, passed.
	rank := map[string]int{"failed": 0, "open": 1, "waived": 2, "passed": 3}
	last := -1
	for _, m := range regexp.MustCompile(`<details class="gate gate-[a-z]+" id="gate-[^"]+" data-gate="[^"]+" data-state="([^"]+)">`).FindAllStringSubmatch(body, -1) {
		if rank[m[1]] < last {
			t.Fatalf("gate board not ordered failed, open, waived, passed: a %s gate after a state of rank %d", m[1], last)
		}
		last = rank[m[1]]
	}
	// The overview summarises the same release.
	_, ov := pgGet(t, s, "/")
	pgContains(t, "overview", ov, `href="/releases/0.32.1"`, "not ready", "qmv bias-sum promotion")
	if code, _ := pgGet(t, s, "/releases/9.9.9"); code != 404 {
		t.Errorf("unknown release: %d, want 404", code)
	}
	// /entries/{id} sends a head entry to the heads page.
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/entries/"+ids["head"], nil))
	if rec.Code != http.StatusSeeOther || !strings.HasPrefix(rec.Header().Get("Location"), "/heads?") {
		t.Errorf("/entries/head: %d %q", rec.Code, rec.Header().Get("Location"))
	}
}

// pgForm fetches the release page (collecting the CSRF cookie and the
// waiver form's token) and returns them.
func pgForm(t *testing.T, h http.Handler, field string, cookie *http.Cookie) (*http.Cookie, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/releases/0.32.1", nil)
	if cookie != nil {
		req.AddCookie(cookie)
	}
	h.ServeHTTP(rec, req)
	for _, c := range rec.Result().Cookies() {
		if c.Name == csrfCookie {
			cookie = c
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("CSRF cookie %+v", cookie)
	}
	m := regexp.MustCompile(`<form method="post" action="/releases/0.32.1/` + field + `s"[^>]*>\s*<h3>[^<]*</h3>\s*<input type="hidden" name="csrf" value="([^"]+)">`).FindStringSubmatch(rec.Body.String())
	if m == nil {
		t.Fatalf("no csrf field in the %s form", field)
	}
	return cookie, m[1]
}

func pgPost(h http.Handler, path string, cookie *http.Cookie, form url.Values, origin string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if cookie != nil {
		req.AddCookie(cookie)
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestWaiverForm walks the waiver form through every refusal (no CSRF
// cookie, wrong token for the action, forged token, cross-origin, no API
// token, weak scope, bad input) and one success, and checks that only the
// success appended to the log.
func TestWaiverForm(t *testing.T) {
	st := pgStore(t)
	pgSeed(t, st)
	pgRelease(t, st, pgReleaseYAML)
	s := pgServer(t, st)
	admin, _, err := st.CreateToken(t.Context(), "alice", ledger.ScopeAdmin, nil)
	if err != nil {
		t.Fatal(err)
	}
	recorder, _, err := st.CreateToken(t.Context(), "ci", ledger.ScopeRecord, nil)
	if err != nil {
		t.Fatal(err)
	}
	cookie, csrf := pgForm(t, s, "waiver", nil)
	_, approvalCSRF := pgForm(t, s, "approval", cookie)
	before, _ := st.Checkpoint(t.Context())
	expiry := time.Now().UTC().AddDate(0, 0, 30).Format(time.DateOnly)
	good := url.Values{"csrf": {csrf}, "gate": {"snapshot"}, "reason": {`counters race fix lands in 0.32.2 "<b>"`}, "expires": {expiry}, "token": {admin}}
	with := func(k, v string) url.Values {
		f := url.Values{}
		for kk, vv := range good {
			f[kk] = vv
		}
		f.Set(k, v)
		return f
	}
	const path = "/releases/0.32.1/waivers"
	other := &http.Cookie{Name: csrfCookie, Value: strings.Repeat("x", 43)}
	for _, tc := range []struct {
		name   string
		cookie *http.Cookie
		form   url.Values
		origin string
		status int
		want   string
	}{
		{"no cookie", nil, good, "", 403, "security cookie is missing"},
		{"other cookie", other, good, "", 403, "security token does not match"},
		{"token of another form", cookie, with("csrf", approvalCSRF), "", 403, "security token does not match"},
		{"forged token", cookie, with("csrf", "AAAA"), "", 403, "security token does not match"},
		{"cross origin", cookie, good, "https://evil.example", 403, "cross-origin"},
		{"no api token", cookie, with("token", ""), "", 401, "enter an API token"},
		{"bad api token", cookie, with("token", "nope"), "", 401, ""},
		{"record scope", cookie, with("token", recorder), "", 403, "needs &#34;admin&#34;"},
		{"unknown gate", cookie, with("gate", "nope"), "", 400, "no gate"},
		{"no reason", cookie, with("reason", " "), "", 400, "reason"},
		{"past expiry", cookie, with("expires", "2001-01-01"), "", 400, "must be in the future"},
		{"bad expiry", cookie, with("expires", "soon"), "", 400, "YYYY-MM-DD"},
	} {
		rec := pgPost(s, path, tc.cookie, tc.form, tc.origin)
		if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("%s: %d, want %d with %q", tc.name, rec.Code, tc.status, tc.want)
		}
		if strings.Contains(rec.Body.String(), admin) {
			t.Errorf("%s: the page echoes the API token", tc.name)
		}
	}
	if cp, _ := st.Checkpoint(t.Context()); cp.Size != before.Size {
		t.Fatalf("refused posts appended %d entries", cp.Size-before.Size)
	}
	rec := pgPost(s, path, cookie, good, "http://example.com")
	if rec.Code != http.StatusSeeOther {
		t.Fatalf("good waiver: %d %s", rec.Code, rec.Body.String())
	}
	loc, _, _ := strings.Cut(rec.Header().Get("Location"), "#")
	_, body := pgGet(t, s, loc)
	if st := pgGateStates(body)["snapshot"]; st != "waived" {
		t.Errorf("snapshot after the waiver: %q, want waived", st)
	}
	pgContains(t, "after waiver", body, "Waiver recorded.", "alice", "counters race fix lands in 0.32.2 &#34;&lt;b&gt;&#34;", expiry+" 23:59:59 UTC", "applies")
	// Approval is refused while gates are open, and says why.
	rec = pgPost(s, "/releases/0.32.1/approvals", cookie, url.Values{"csrf": {approvalCSRF}, "token": {admin}}, "")
	if rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), "is not ready") {
		t.Errorf("approval of an unready release: %d", rec.Code)
	}
}

// TestReleasePageDivergentPair: a failed trajectory gate links straight to
// the divergent pair, both preselected, lists the divergent run as failing
// and lists no run as satisfying evidence.
func TestReleasePageDivergentPair(t *testing.T) {
	st := pgStore(t)
	same := make([]int, 40)
	diff := make([]int, 40)
	for i := range same {
		same[i], diff[i] = 100+i, 100+i
		if i >= 30 {
			diff[i] = 9000 + i
		}
	}
	es := pgAppend(t, st, ledger.KindEvidence, pgTrajectory("ordinary", same, pgT0), pgTrajectory("automatic", diff, pgT0.Add(time.Minute)))
	base, divergent := es[0].ID, es[1].ID
	pgRelease(t, st, `version: 0.32.1
components:
  - name: core
    repository: `+pgRepo+`
    reviewed: `+pgCommit+`
    head: `+pgCommit+`
gates:
  - id: qwen
    kind: trajectory
    component: core
    trajectories: [qwen3-0.6b/greedy-64]
    modes: [ordinary, automatic]
    backends: [cuda]
`)
	s := pgServer(t, st)
	_, body := pgGet(t, s, "/releases/0.32.1")
	if pgGateStates(body)["qwen"] != "failed" {
		t.Fatalf("states %v", pgGateStates(body))
	}
	link := "/trajectories/qwen3-0.6b/greedy-64?a=" + base + "&amp;b=" + divergent
	pgContains(t, "release page", body, `class="divergent-pair" href="`+link+`"`, `<ul class="gate-failing">`, "index 30", "compare the divergent pair")
	if strings.Contains(body, `<ul class="gate-satisfying">`) {
		t.Error("a failed trajectory gate lists satisfying evidence")
	}
	code, page := pgGet(t, s, strings.ReplaceAll(link, "&amp;", "&"))
	if code != 200 {
		t.Fatalf("divergent pair page: %d", code)
	}
	// Both runs are preselected in the comparison.
	pgContains(t, "trajectory page", page, `value="`+base+`" selected`, `value="`+divergent+`" selected`)
}

// TestSupersedeForm: the release page offers the records that keep a gate
// failed; a record-scope token cannot supersede one, an admin token can,
// and the gate stops failing by it while the record shows as baseline.
func TestSupersedeForm(t *testing.T) {
	st := pgStore(t)
	ids := pgSeed(t, st)
	pgRelease(t, st, pgReleaseYAML)
	s := pgServer(t, st)
	admin, _, err := st.CreateToken(t.Context(), "alice", ledger.ScopeAdmin, nil)
	if err != nil {
		t.Fatal(err)
	}
	recorder, _, err := st.CreateToken(t.Context(), "ci", ledger.ScopeRecord, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, body := pgGet(t, s, "/releases/0.32.1")
	pgContains(t, "release page", body, `id="supersede-form"`, `<option value="`+ids["head2"]+`"`)
	cookie, csrf := pgForm(t, s, "supersede", nil)
	const path = "/releases/0.32.1/supersedes"
	form := url.Values{"csrf": {csrf}, "entry": {ids["head2"]}, "reason": {"verified on a host without the keyring"}, "token": {recorder}}
	before, _ := st.Checkpoint(t.Context())
	if rec := pgPost(s, path, cookie, form, ""); rec.Code != 403 {
		t.Fatalf("record-scope supersede: %d", rec.Code)
	}
	form.Set("token", admin)
	form.Set("reason", "")
	if rec := pgPost(s, path, cookie, form, ""); rec.Code != 400 || !strings.Contains(rec.Body.String(), "reason") {
		t.Fatalf("supersede without a reason: %d", rec.Code)
	}
	if cp, _ := st.Checkpoint(t.Context()); cp.Size != before.Size {
		t.Fatalf("refused posts appended %d entries", cp.Size-before.Size)
	}
	form.Set("reason", "verified on a host without the keyring")
	rec := pgPost(s, path, cookie, form, "")
	if rec.Code != http.StatusSeeOther || !strings.Contains(rec.Header().Get("Location"), "done=supersede") {
		t.Fatalf("supersede: %d %q", rec.Code, rec.Header().Get("Location"))
	}
	_, body = pgGet(t, s, "/releases/0.32.1?done=supersede")
	if st := pgGateStates(body)["heads"]; st != "open" {
		t.Fatalf("heads %s after the supersede; want open (app not verified)", st)
	}
	pgContains(t, "release page after supersede", body, "Supersede recorded", "superseded by", "alice", "verified on a host without the keyring")
}

// The release page is rendered once per shared page value, with each
// request's own CSRF tokens put in: two browsers (two cookies) get
// different tokens, each accepted only with its own cookie, and the
// placeholders of the cached rendering never reach a page.
func TestReleasePageCachedRenderKeepsCSRFPerBrowser(t *testing.T) {
	st := pgStore(t)
	pgSeed(t, st)
	pgRelease(t, st, pgReleaseYAML)
	s := pgServer(t, st)
	c1, tok1 := pgForm(t, s, "waiver", nil)
	c2, tok2 := pgForm(t, s, "waiver", nil)
	if c1.Value == c2.Value || tok1 == tok2 {
		t.Fatalf("two browsers share a CSRF secret or token: %q %q", tok1, tok2)
	}
	if _, again := pgForm(t, s, "waiver", c1); again != tok1 {
		t.Fatalf("the same browser got token %q, then %q", tok1, again)
	}
	code, body := pgGet(t, s, "/releases/0.32.1")
	if code != 200 || strings.Contains(body, "csrfslot") {
		t.Fatalf("release page %d leaks a CSRF placeholder or fails: %.200s", code, body)
	}
	admin, _, err := st.CreateToken(t.Context(), "alice", ledger.ScopeAdmin, nil)
	if err != nil {
		t.Fatal(err)
	}
	expiry := time.Now().UTC().AddDate(0, 0, 10).Format(time.DateOnly)
	form := func(csrf string) url.Values {
		return url.Values{"csrf": {csrf}, "gate": {"snapshot"}, "reason": {"cached page token"}, "expires": {expiry}, "token": {admin}}
	}
	if rec := pgPost(s, "/releases/0.32.1/waivers", c2, form(tok1), ""); rec.Code != 403 {
		t.Fatalf("browser 1's token with browser 2's cookie: %d, want 403", rec.Code)
	}
	if rec := pgPost(s, "/releases/0.32.1/waivers", c2, form(tok2), ""); rec.Code != 303 {
		t.Fatalf("browser 2's own token: %d %s, want 303", rec.Code, rec.Body)
	}
	// The waiver just recorded is on the next page, cached rendering or not.
	if code, body := pgGet(t, s, "/releases/0.32.1"); code != 200 || !strings.Contains(body, "cached page token") {
		t.Fatalf("the page after a waiver does not show it (%d)", code)
	}
}
