package web

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// twoPersonYAML is release version with two manual gates (role
// reviewer), approval role release-manager and, when rule is set, the
// two-person rule over waivers and sign-offs.
func twoPersonYAML(version string, rule bool) string {
	y := "version: " + version + "\napproval_role: release-manager\n"
	if rule {
		y += "approval:\n  distinct_from: [waiver, signoff]\n"
	}
	return y + "components:\n  - {name: core, repository: example/core, reviewed: " + strings.Repeat("1", 40) + ", head: " + strings.Repeat("2", 40) + "}\n" +
		"gates:\n  - {id: review, kind: manual, role: reviewer}\n  - {id: ci, kind: manual, role: reviewer}\n"
}

// TestTwoPersonRuleAPI drives the two-person rule and the one-fact
// sign-off through the API and the dashboard form: the same sign-off
// again answers 200 with the existing entry and appends nothing; the
// author of a waiver or sign-off is refused as approver (403 naming the
// rule and the person, nothing appended) while the rule is set and not
// without it; another person approves; a waiver by that approver
// afterwards makes the approval stale, with the reason.
func TestTwoPersonRuleAPI(t *testing.T) {
	ctx := t.Context()
	st := pgStore(t)
	s := pgServer(t, st)
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	e := &apiEnv{srv: hs, store: st}
	mk := func(name string, roles ...string) string {
		secret, _, err := st.CreateScopedToken(ctx, ledger.TokenSpec{Name: name, Scope: ledger.ScopeAdmin, Roles: roles})
		if err != nil {
			t.Fatal(err)
		}
		return secret
	}
	ann, bob := mk("ann", "release-manager", "reviewer"), mk("bob", "release-manager")
	pgRelease(t, st, twoPersonYAML("0.32.1", true))
	pgRelease(t, st, twoPersonYAML("0.40.0", false))

	post := func(token, version, what string, body any, want int) map[string]any {
		t.Helper()
		code, out := e.do(t, "POST", "/api/v1/releases/"+version+"/"+what, token, body)
		if code != want {
			t.Fatalf("POST %s %s: %d %s; want %d", version, what, code, out, want)
		}
		var ans map[string]any
		_ = json.Unmarshal(out, &ans)
		return ans
	}
	waiver := func(gate string) map[string]any {
		return map[string]any{"gate": gate, "reason": "the lab is down", "expires": time.Now().Add(72 * time.Hour).UTC().Format(time.RFC3339)}
	}

	// The same sign-off twice is one fact, through the API and the form.
	first := post(ann, "0.32.1", "signoffs", map[string]string{"gate": "review", "note": "read the diff"}, http.StatusCreated)
	size := e.size(t)
	again := post(ann, "0.32.1", "signoffs", map[string]string{"gate": "review", "note": "read it again"}, http.StatusOK)
	if again["id"] != first["id"] || again["existing"] != true || first["existing"] != false {
		t.Fatalf("the same sign-off again: %v; first %v", again, first)
	}
	cookie, csrf := pgForm(t, s, "signoff", nil)
	if rec := pgPost(s, "/releases/0.32.1/signoffs", cookie, url.Values{"csrf": {csrf}, "gate": {"review"}, "token": {ann}}, ""); rec.Code != http.StatusSeeOther {
		t.Fatalf("the same sign-off from the form: %d %s", rec.Code, rec.Body.String())
	}
	if got := e.size(t); got != size {
		t.Fatalf("the same sign-off appended %d leaves", got-size)
	}

	// ann waived and signed off: refused as approver, nothing appended.
	post(ann, "0.32.1", "waivers", waiver("ci"), http.StatusCreated)
	size = e.size(t)
	code, out := e.do(t, "POST", "/api/v1/releases/0.32.1/approvals", ann, map[string]string{"note": "ship"})
	apiErr := apiError(t, out)
	if code != http.StatusForbidden || apiErr.Code != ledger.CodeForbidden || !strings.Contains(apiErr.Message, "two-person rule (approval.distinct_from: [waiver, signoff])") ||
		!strings.Contains(apiErr.Message, "ann may not approve") || !strings.Contains(apiErr.Message, "waived gate ci") {
		t.Fatalf("approval by the waiver's author: %d %s", code, out)
	}
	_, approvalCSRF := pgForm(t, s, "approval", cookie)
	if rec := pgPost(s, "/releases/0.32.1/approvals", cookie, url.Values{"csrf": {approvalCSRF}, "token": {ann}}, ""); rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "two-person rule") {
		t.Fatalf("approval by the waiver's author from the form: %d", rec.Code)
	}
	if got := e.size(t); got != size {
		t.Fatalf("refused approvals appended %d leaves", got-size)
	}

	// Another person approves; her approval is current.
	post(bob, "0.32.1", "approvals", map[string]string{"note": "second pair of eyes"}, http.StatusCreated)
	rd := e.readiness(t, "0.32.1").Readiness
	if !rd.Approved || len(rd.Approvals) != 1 || rd.Approvals[0].State != "current" {
		t.Fatalf("after bob's approval: %+v", rd.Approvals)
	}
	// bob waives afterwards: his approval is stale, with the rule.
	post(bob, "0.32.1", "waivers", waiver("review"), http.StatusCreated)
	rd = e.readiness(t, "0.32.1").Readiness
	if rd.Approved || rd.Approvals[0].State != "stale" || !strings.Contains(rd.Approvals[0].Why, "the approver bob also waived gate review") {
		t.Fatalf("after bob's waiver: approved %v %+v", rd.Approved, rd.Approvals)
	}

	// Without the rule the same person waives, signs off and approves.
	post(ann, "0.40.0", "signoffs", map[string]string{"gate": "review"}, http.StatusCreated)
	post(ann, "0.40.0", "waivers", waiver("ci"), http.StatusCreated)
	post(ann, "0.40.0", "approvals", map[string]string{}, http.StatusCreated)
	if rd := e.readiness(t, "0.40.0").Readiness; !rd.Approved {
		t.Fatalf("release without the rule: %+v", rd.Approvals)
	}
}

// TestReleasePageShowsTwoPersonRule: the release page's header names the
// two-person rule of a release that sets it, and says nothing of it for
// one that does not.
func TestReleasePageShowsTwoPersonRule(t *testing.T) {
	st := pgStore(t)
	hs := httptest.NewServer(pgServer(t, st))
	t.Cleanup(hs.Close)
	pgRelease(t, st, twoPersonYAML("0.32.1", true))
	pgRelease(t, st, twoPersonYAML("0.40.0", false))
	page := func(version string) string {
		resp, err := http.Get(hs.URL + "/releases/" + version)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		if _, err := io.Copy(&b, resp.Body); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /releases/%s: %d %v", version, resp.StatusCode, err)
		}
		return b.String()
	}
	if p := page("0.32.1"); !strings.Contains(p, `id="two-person-rule"`) || !strings.Contains(p, "a waiver or signoff for these pins may not approve") {
		t.Fatal("the release page of a release with the two-person rule does not name it")
	}
	if p := page("0.40.0"); strings.Contains(p, `id="two-person-rule"`) {
		t.Fatal("the release page names a two-person rule the release does not set")
	}
}

// TestWaiverExpiresNamesTheShape: a waiver whose expires is not an RFC
// 3339 time is refused, 400 naming expires and the shape it wants, not
// with the time parser's own words; nothing is appended.
func TestWaiverExpiresNamesTheShape(t *testing.T) {
	ctx := t.Context()
	st := pgStore(t)
	hs := httptest.NewServer(pgServer(t, st))
	t.Cleanup(hs.Close)
	e := &apiEnv{srv: hs, store: st}
	secret, _, err := st.CreateScopedToken(ctx, ledger.TokenSpec{Name: "ann", Scope: ledger.ScopeAdmin, Roles: []string{"release-manager"}})
	if err != nil {
		t.Fatal(err)
	}
	pgRelease(t, st, twoPersonYAML("0.50.0", false))
	before, _ := st.Checkpoint(ctx)
	for _, v := range []any{"14d", "00d", 5, "2027-01-05"} {
		code, out := e.do(t, "POST", "/api/v1/releases/0.50.0/waivers", secret, map[string]any{"gate": "ci", "reason": "r", "expires": v})
		if code != http.StatusBadRequest || !strings.Contains(string(out), `"expires"`) || !strings.Contains(string(out), "RFC3339") && !strings.Contains(string(out), "RFC 3339") || strings.Contains(string(out), "cannot parse") {
			t.Fatalf("expires %v: %d %s", v, code, out)
		}
	}
	if after, _ := st.Checkpoint(ctx); after.Size != before.Size {
		t.Fatalf("refused waivers appended: size %d -> %d", before.Size, after.Size)
	}
}
