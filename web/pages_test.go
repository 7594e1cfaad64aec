package web

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"golang.org/x/net/html"
)

// pgSeed records the lane story (a narrow qmv run, then a promoted one on
// the new artifact), an inconclusive snapshot run, two trajectories and two
// heads, and returns the entry ids by name.
func pgSeed(t testing.TB, st ledger.Store) map[string]string {
	ids := map[string]string{}
	ids["narrow"] = pgAppend(t, st, ledger.KindEvidence, pgQMV(true, ledger.BackendCPU, pgDigestB, pgT0))[0].ID
	ids["promoted"] = pgAppend(t, st, ledger.KindEvidence, pgQMV(false, ledger.BackendCPU, pgDigest, pgT0.Add(24*time.Hour)))[0].ID
	ids["cuda"] = pgAppend(t, st, ledger.KindEvidence, pgQMV(false, ledger.BackendCUDA, pgDigest, pgT0.Add(25*time.Hour)))[0].ID
	ids["snapshot"] = pgAppend(t, st, ledger.KindEvidence, pgSnapshot(pgT0.Add(26*time.Hour)))[0].ID
	ids["trajA"] = pgAppend(t, st, ledger.KindEvidence, pgTrajectory("eager", []int{151644, 872, 198, 3838, 374, 220}, pgT0.Add(27*time.Hour)))[0].ID
	ids["trajB"] = pgAppend(t, st, ledger.KindEvidence, pgTrajectory("compiled", []int{151644, 872, 198, 3838, 525, 220, 17}, pgT0.Add(28*time.Hour)))[0].ID
	ids["head"] = pgAppend(t, st, ledger.KindHead, pgHead(ledger.VerdictGood, ledger.DecisionTrusted, pgT0.Add(29*time.Hour)))[0].ID
	h2 := pgHead(ledger.VerdictUnknownKey, ledger.DecisionUntrusted, pgT0.Add(30*time.Hour))
	h2.Ref, h2.Signer = "refs/tags/v0.32.1", "someone@example.org"
	ids["head2"] = pgAppend(t, st, ledger.KindHead, h2)[0].ID
	return ids
}

func TestPages(t *testing.T) {
	st := pgStore(t)
	ids := pgSeed(t, st)
	s := pgServer(t, st)
	tests := []struct {
		name, path string
		status     int
		wants      []string
		unwanted   []string
	}{
		{"overview", "/", 200, []string{"<h1>Overview</h1>", `href="/lanes/qmv-bias-sum/v1"`, "216/216", "20000/20000", "not caught", "Checkpoint size", "8 leaves", `href="/evidence/` + ids["trajB"] + `"`}, nil},
		{"evidence list", "/evidence", 200, []string{"156/216", "216/216", `href="/evidence/` + ids["narrow"] + `"`, "inconclusive"}, nil},
		{"evidence filter backend", "/evidence?backend=cuda", 200, []string{`href="/evidence/` + ids["cuda"] + `"`, "<option selected>cuda</option>"}, []string{`href="/evidence/` + ids["narrow"] + `"`}},
		{"evidence filter status", "/evidence?status=failed", 200, []string{`href="/evidence/` + ids["narrow"] + `"`}, []string{`href="/evidence/` + ids["promoted"] + `"`}},
		{"evidence filter commit prefix", "/evidence?commit=0A1B2C", 200, []string{`href="/evidence/` + ids["narrow"] + `"`, `value="0a1b2c"`}, nil},
		{"evidence filter artifact prefix", "/evidence?artifact=sha256:60303ae2", 200, []string{`href="/evidence/` + ids["narrow"] + `"`}, []string{`href="/evidence/` + ids["promoted"] + `"`}},
		{"evidence filter lane none", "/evidence?lane=nope/v1", 200, []string{"No evidence matches these filters"}, nil},
		{"evidence filter bad prefix", "/evidence?commit=ab", 400, []string{"prefix must have at least 4 characters", `role="alert"`}, nil},
		{"evidence filter bad status", "/evidence?status=great", 400, []string{"must be passed, failed, inconclusive or error"}, nil},
		{"evidence narrow", "/evidence/" + ids["narrow"], 200, []string{
			"156/216", pgCommit, pgTree, pgDigestB, "AMD EPYC 9654", "v0.4.0", "failing cases first (60 failing of 216 listed)",
			"narrow: 156/216 exact", `id="proof-data"`, `id="leaf-bytes"`, "/api/v1/evidence/" + ids["narrow"] + "/proof?size=8", "os: linux"}, nil},
		{"evidence trajectory", "/evidence/" + ids["trajA"], 200, []string{"trajectory evidence for <strong>qwen3-0.6b/greedy-64</strong>", "This evidence carries no per-case table"}, nil},
		{"evidence missing", "/evidence/00000000000000000000000000000000", 404, []string{"404"}, nil},
		{"evidence is a head", "/evidence/" + ids["head"], 404, []string{"not evidence"}, nil},
		{"lane", "/lanes/qmv-bias-sum/v1", 200, []string{`data-exact="156"`, `data-exact="216"`, "cpu: 156/216 → 216/216", "cuda: 216/216", "lane-chart", `role="img"`}, nil},
		{"lane encoded", "/lanes/qmv-bias-sum%2Fv1", 200, []string{"cpu: 156/216 → 216/216"}, nil},
		{"lane backend filter", "/lanes/qmv-bias-sum/v1?backend=cuda", 200, []string{"cuda: 216/216"}, []string{`data-backend="cpu"`}},
		{"lane control not caught", "/lanes/alloc-snapshot/v1", 200, []string{`<rect class="miss"`, "control not caught"}, nil},
		{"lane empty", "/lanes/alloc-footprint/v1", 200, []string{"No runs of <code>alloc-footprint/v1</code>", "ledger run --backend cpu"}, nil},
		{"lane invalid", "/lanes/NOT%20A%20LANE", 400, []string{"name/vN"}, nil},
		{"heads", "/heads", 200, []string{"release@example.org", "unknown_key", "untrusted", "trusted", "refs/tags/v0.32.1", "ssh"}, nil},
		{"heads filter verdict", "/heads?verdict=good", 200, []string{"release@example.org"}, []string{"someone@example.org"}},
		{"heads bad verdict", "/heads?verdict=great", 400, []string{"unknown verdict"}, nil},
		{"trajectory", "/trajectories/qwen3-0.6b/greedy-64?a=" + ids["trajA"] + "&b=" + ids["trajB"], 200, []string{
			"First divergence at position <a href=\"#first-divergence\">4</a>", `id="first-divergence" class="divergence"`, "<code>374</code>", "<code>525</code>", "ended"}, nil},
		{"trajectory picker", "/trajectories/qwen3-0.6b/greedy-64", 200, []string{"Run A", "compiled"}, nil},
		{"trajectory wrong name", "/trajectories/other?a=" + ids["trajA"] + "&b=" + ids["trajB"], 400, []string{"not &#34;other&#34;"}, nil},
		{"trajectory not evidence of one", "/trajectories/qwen3-0.6b/greedy-64?a=" + ids["narrow"] + "&b=" + ids["trajB"], 400, []string{"carries no trajectory"}, nil},
		{"no such page", "/nowhere", 404, []string{"no page at /nowhere"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := pgGet(t, s, tc.path)
			if code != tc.status {
				t.Fatalf("GET %s: status %d, want %d\n%s", tc.path, code, tc.status, body)
			}
			pgContains(t, tc.path, body, tc.wants...)
			for _, u := range tc.unwanted {
				if strings.Contains(body, u) {
					t.Errorf("GET %s: unexpectedly contains %q", tc.path, u)
				}
			}
			if !strings.HasPrefix(body, "<!doctype html>") {
				t.Errorf("GET %s: not a full HTML page", tc.path)
			}
		})
	}
}

// TestEvidenceCaseOrder checks that failing cases come first in the case
// table, in their recorded order, followed by the exact ones.
func TestEvidenceCaseOrder(t *testing.T) {
	st := pgStore(t)
	id := pgAppend(t, st, ledger.KindEvidence, pgQMV(true, ledger.BackendCPU, pgDigest, pgT0))[0].ID
	_, body := pgGet(t, pgServer(t, st), "/evidence/"+id)
	rows := regexp.MustCompile(`<span class="badge res-(\w+)">`).FindAllStringSubmatch(body, -1)
	if len(rows) != 216 {
		t.Fatalf("case rows: %d, want 216", len(rows))
	}
	for i, r := range rows {
		want := "mismatch"
		if i >= 60 {
			want = "exact"
		}
		if r[1] != want {
			t.Fatalf("case row %d is %s, want %s (failing cases first)", i, r[1], want)
		}
	}
	first := regexp.MustCompile(`<tr class="failing"><th scope="row"><code>([^<]+)</code>`).FindStringSubmatch(body)
	if first == nil || first[1] != "f16/b2/g32/three-way" {
		t.Errorf("first failing case = %v, want f16/b2/g32/three-way", first)
	}
}

// TestEmptyStates checks that an empty ledger's pages say what to do next.
func TestEmptyStates(t *testing.T) {
	s := pgServer(t, pgStore(t))
	for path, wants := range map[string][]string{
		"/":                      {"No release is defined yet", "ledger run --backend cpu", "ledger record FILE", "0 leaves"},
		"/evidence":              {"No evidence has been recorded yet", "ledger run --backend cpu", "ledger record FILE"},
		"/heads":                 {"No head has been verified yet", "ledger verify"},
		"/lanes/qmv-bias-sum/v1": {"No runs of", "ledger run --backend cpu"},
		"/trajectories/x":        {"No evidence carries trajectory", "ledger record FILE"},
	} {
		code, body := pgGet(t, s, path)
		if code != 200 {
			t.Errorf("GET %s: %d", path, code)
		}
		pgContains(t, path, body, wants...)
	}
}

// TestPagination walks the evidence list page by page with the "Older"
// link and sees every record exactly once, filters kept.
func TestPagination(t *testing.T) {
	st := pgStore(t)
	var evs []any
	for i := 0; i < 120; i++ {
		evs = append(evs, pgSnapshot(pgT0.Add(time.Duration(i)*time.Minute)))
	}
	pgAppend(t, st, ledger.KindEvidence, evs...)
	pgAppend(t, st, ledger.KindEvidence, pgQMV(false, ledger.BackendCPU, pgDigest, pgT0))
	s := pgServer(t, st)
	next := "/evidence?lane=alloc-snapshot%2Fv1"
	seen := map[string]bool{}
	linkRe := regexp.MustCompile(`href="/evidence/([0-9a-f]{32})"`)
	nextRe := regexp.MustCompile(`<a rel="next" href="([^"]+)">`)
	for pages := 0; next != ""; pages++ {
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		code, body := pgGet(t, s, strings.ReplaceAll(next, "&amp;", "&"))
		if code != 200 {
			t.Fatalf("GET %s: %d", next, code)
		}
		for _, m := range linkRe.FindAllStringSubmatch(body, -1) {
			if seen[m[1]] {
				t.Fatalf("evidence %s shown twice", m[1])
			}
			seen[m[1]] = true
		}
		next = ""
		if m := nextRe.FindStringSubmatch(body); m != nil {
			next = m[1]
			if !strings.Contains(next, "lane=alloc-snapshot") {
				t.Fatalf("next link %q lost the lane filter", next)
			}
		}
	}
	if len(seen) != 120 {
		t.Errorf("saw %d records over all pages, want 120", len(seen))
	}
}

// TestXSS records evidence and a head whose every text field carries markup
// and attribute-breaking quotes, and checks that no page renders them as
// markup.
func TestXSS(t *testing.T) {
	st := pgStore(t)
	const evil = `"><script>alert(1)</script><img src=x onerror=alert(2)>'`
	e := pgQMV(true, ledger.BackendCPU, pgDigest, pgT0)
	e.Subject.Repository = "repo" + evil
	e.Device = ledger.Device{Model: "gpu" + evil, Driver: evil, Attrs: map[string]string{"k" + evil: "v" + evil}}
	e.Runner.Version = evil
	e.FailingCases[0] = "case" + evil
	d, _ := json.Marshal(map[string]any{
		"cases":      []map[string]string{{"id": "case" + evil, "result": "mismatch" + evil, "expected": evil, "got": evil, "note": evil}},
		"control":    map[string]any{"summary": evil},
		"trajectory": "t" + evil, "tokens": []string{evil, "b"}, "mode": evil,
	})
	e.Details = d
	id := pgAppend(t, st, ledger.KindEvidence, e)[0].ID
	h := pgHead(ledger.VerdictGood, ledger.DecisionTrusted, pgT0)
	h.Repository, h.Ref, h.Signer, h.Issuer, h.Key, h.Reason = "r"+evil, "ref"+evil, evil, evil, evil, evil
	pgAppend(t, st, ledger.KindHead, h)
	s := pgServer(t, st)
	for _, path := range []string{"/", "/evidence", "/evidence/" + id, "/lanes/" + pgQMVLane, "/heads", "/evidence?lane=" + evil, "/heads?repository=" + evil} {
		code, body := pgGet(t, s, strings.ReplaceAll(path, " ", "%20"))
		if code >= 500 {
			t.Fatalf("GET %s: %d", path, code)
		}
		pgInert(t, path, body)
		for _, bad := range []string{"<script>alert", "<img src=x"} {
			if strings.Contains(body, bad) {
				i := strings.Index(body, bad)
				t.Errorf("GET %s: unescaped %q in %q", path, bad, body[max(0, i-80):min(len(body), i+80)])
			}
		}
		if strings.Contains(path, "/evidence/") && !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("GET %s: the escaped text is not shown", path)
		}
	}
}

// pgInert parses body as HTML and fails t for any element or attribute that
// could run script: a <script> without src or with content, an <img>, an
// on* event attribute, a javascript: URL.
func pgInert(t *testing.T, what, body string) {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(body))
	if err != nil {
		t.Fatalf("%s: parse: %v", what, err)
	}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			switch n.Data {
			case "script":
				src := ""
				for _, a := range n.Attr {
					if a.Key == "src" {
						src = a.Val
					}
				}
				if !strings.HasPrefix(src, "/static/") || n.FirstChild != nil {
					t.Errorf("%s: live script element (src %q)", what, src)
				}
			case "img", "iframe", "object", "embed":
				t.Errorf("%s: injected <%s>", what, n.Data)
			}
			for _, a := range n.Attr {
				if strings.HasPrefix(a.Key, "on") || strings.HasPrefix(strings.TrimSpace(strings.ToLower(a.Val)), "javascript:") || a.Key == "style" {
					t.Errorf("%s: dangerous attribute %s=%q on <%s>", what, a.Key, a.Val, n.Data)
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
}

// TestStaticAssets checks content-hash paths, types and caching, and the
// security headers on pages.
func TestStaticAssets(t *testing.T) {
	s := pgServer(t, pgStore(t))
	_, body := pgGet(t, s, "/")
	m := regexp.MustCompile(`href="(/static/app\.[0-9a-f]{12}\.css)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no content-hash stylesheet link on the overview")
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", m[1], nil))
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/css") || !strings.Contains(rec.Header().Get("Cache-Control"), "immutable") {
		t.Errorf("GET %s: %d %q %q", m[1], rec.Code, rec.Header().Get("Content-Type"), rec.Header().Get("Cache-Control"))
	}
	if code, _ := pgGet(t, s, "/static/app.css"); code != 404 {
		t.Errorf("unhashed asset path: %d, want 404", code)
	}
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("CSP %q", csp)
	}
	if strings.Contains(rec.Body.String(), "style=") || regexp.MustCompile(`<script>|<script [^>]*>[^<]`).MatchString(rec.Body.String()) {
		t.Error("inline style or script on the overview (the CSP forbids them)")
	}
}

// TestJSONTwins checks the API routes this package adds.
func TestJSONTwins(t *testing.T) {
	st := pgStore(t)
	ids := pgSeed(t, st)
	s := pgServer(t, st)
	var lane struct {
		Lane string    `json:"lane"`
		Runs []LaneRun `json:"runs"`
	}
	code, body := pgGet(t, s, "/api/v1/lanes/qmv-bias-sum/v1?backend=cpu")
	if code != 200 || json.Unmarshal([]byte(body), &lane) != nil {
		t.Fatalf("lane API: %d %s", code, body)
	}
	if len(lane.Runs) != 2 || lane.Runs[0].CasesExact != 216 || lane.Runs[1].CasesExact != 156 {
		t.Errorf("lane API runs = %+v, want promoted then narrow", lane.Runs)
	}
	if code, _ := pgGet(t, s, "/api/v1/lanes/BAD"); code != 400 {
		t.Errorf("bad lane: %d", code)
	}
	var tr TrajectoryComparison
	code, body = pgGet(t, s, "/api/v1/trajectories/qwen3-0.6b/greedy-64?a="+ids["trajA"]+"&b="+ids["trajB"])
	if code != 200 || json.Unmarshal([]byte(body), &tr) != nil {
		t.Fatalf("trajectory API: %d %s", code, body)
	}
	if tr.FirstDivergence != 4 || tr.TokenA == nil || *tr.TokenA != "374" || *tr.TokenB != "525" {
		t.Errorf("trajectory API = %+v", tr)
	}
	var ov Overview
	code, body = pgGet(t, s, "/api/v1/overview")
	if code != 200 || json.Unmarshal([]byte(body), &ov) != nil {
		t.Fatalf("overview API: %d %s", code, body)
	}
	if ov.Checkpoint.Size != 8 || len(ov.Latest) != 6 || len(ov.Lanes) != 4 {
		t.Errorf("overview API: size %d, %d latest, %d lanes", ov.Checkpoint.Size, len(ov.Latest), len(ov.Lanes))
	}
}

func TestAlignTrajectories(t *testing.T) {
	for _, tc := range []struct {
		a, b  []int64
		first int
	}{
		{[]int64{1, 2}, []int64{1, 2}, -1},
		{[]int64{1, 2}, []int64{1, 3}, 1},
		{[]int64{1}, []int64{1, 2}, 1},
		{nil, []int64{1}, 0},
		{nil, nil, -1},
	} {
		al := alignTrajectories(tc.a, tc.b)
		if al.First != tc.first {
			t.Errorf("align(%v, %v) first = %d, want %d", tc.a, tc.b, al.First, tc.first)
		}
		if len(al.Rows) != max(len(tc.a), len(tc.b)) {
			t.Errorf("align(%v, %v): %d rows", tc.a, tc.b, len(al.Rows))
		}
	}
}

// TestReadAuthPages checks that with read auth on, pages need a token.
func TestReadAuthPages(t *testing.T) {
	st := pgStore(t)
	s, err := New(Config{Store: st, ReadAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := pgGet(t, s, "/"); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", code)
	}
	secret, _, err := st.CreateToken(t.Context(), "reader", ledger.ScopeRead, nil)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Errorf("with token: %d", rec.Code)
	}
}

// TestPageRedirects: /releases is the releases list (it redirected to
// the overview before it had a page), and /evidence/{id} of an original
// leads to the original's page.
func TestPageRedirects(t *testing.T) {
	e := newAPIEnv(t, Config{})
	resp, err := noRedirect.Get(e.srv.URL + "/releases")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "<h1>Releases</h1>") || !strings.Contains(string(b), `aria-current="page">Releases`) {
		t.Errorf("GET /releases: %d, want the releases list page", resp.StatusCode)
	}
	body := "<testsuite name=\"s\" tests=\"1\"><testcase classname=\"c\" name=\"a\"/></testsuite>"
	req, _ := http.NewRequest("POST", e.srv.URL+"/api/v1/evidence?lane=junit-suite/v1&backend=external&repository=github.com/x/y&commit="+strings.Repeat("1", 40)+"&tree="+strings.Repeat("2", 40), strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.record)
	req.Header.Set("Content-Type", "application/junit+xml")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("JUnit post: %d", resp.StatusCode)
	}
	origs, _, err := e.store.Entries(context.Background(), ledger.EntryFilter{Kind: ledger.KindOriginal, Limit: 1})
	if err != nil || len(origs) == 0 {
		t.Fatalf("original leaf: %v", err)
	}
	// The evidence decoded from it links it.
	evs, _, err := e.store.Evidence(context.Background(), ledger.EvidenceFilter{Lane: "junit-suite/v1", Limit: 1})
	if err != nil || len(evs) != 1 {
		t.Fatalf("decoded evidence: %v", err)
	}
	resp, err = http.Get(e.srv.URL + "/evidence/" + evs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), `href="/originals/`+origs[0].ID+`" id="original-link"`) {
		t.Error("the evidence page does not link the original it was decoded from")
	}
	resp, err = noRedirect.Get(e.srv.URL + "/evidence/" + origs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/originals/"+origs[0].ID {
		t.Errorf("GET /evidence/<original>: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// TestEvidencePageEscapesHiddenText: bidirectional and invisible
// characters a record carries (details keys and values, the case table,
// the control summary, device, runner build, failing cases) are shown as
// escapes on the evidence and lane pages, never raw.
func TestEvidencePageEscapesHiddenText(t *testing.T) {
	st := pgStore(t)
	ev := pgQMV(true, ledger.BackendCPU, pgDigest, pgT0)
	var d map[string]any
	if err := json.Unmarshal(ev.Details, &d); err != nil {
		t.Fatal(err)
	}
	d["note"] = "PASSED \u202edeliaf\u202c ok"
	d["k\u2066"] = map[string]any{"z\u200b": 1}
	d["control"] = map[string]any{"summary": "caught \u202ekcolb"}
	cases := d["cases"].([]any)
	cases[0].(map[string]any)["note"] = "n\u2067ote"
	ev.Details, _ = json.Marshal(d)
	ev.Device.Model, ev.Device.Driver = "H\u200b200", "550\u2060"
	ev.Device.Attrs = map[string]string{"mem\ufeff": "141\u00adGB"}
	ev.Runner.Version = "v1\u200d"
	ev.FailingCases[0] = "f16/b4\u200b/g64"
	id := pgAppend(t, st, ledger.KindEvidence, ev)[0].ID
	srv := pgServer(t, st)
	hidden := "\u202e\u202c\u2066\u2067\u200b\u2060\ufeff\u00ad\u200d"
	_, body := pgGet(t, srv, "/evidence/"+id)
	if i := strings.IndexAny(body, hidden); i >= 0 {
		t.Fatalf("the evidence page shows a bidirectional or invisible character raw: ...%s...", body[max(0, i-40):i])
	}
	pgContains(t, "evidence", body, `PASSED \u202edeliaf\u202c ok`, `caught \u202ekcolb`, `H\u200b200`, `f16/b4\u200b/g64`)
	_, body = pgGet(t, srv, "/lanes/"+ev.Lane)
	if strings.ContainsAny(body, hidden) {
		t.Fatal("the lane page shows an invisible character raw")
	}
	pgContains(t, "lane", body, `H\u200b200`)
}

// TestEvidencePageIngestedCases: the case table of a record an ingest
// format made (cases with an outcome, not a result) shows each outcome,
// counts failed ones as failing and passed and skipped ones not, and the
// details stay indented JSON.
func TestEvidencePageIngestedCases(t *testing.T) {
	st := pgStore(t)
	ev := pgQMV(false, ledger.BackendCPU, pgDigest, pgT0)
	ev.Details = json.RawMessage(`{"cases":[{"id":"t/a","outcome":"passed"},{"id":"t/b","outcome":"failed"},{"id":"t/c","outcome":"skipped"}]}`)
	id := pgAppend(t, st, ledger.KindEvidence, ev)[0].ID
	_, body := pgGet(t, pgServer(t, st), "/evidence/"+id)
	pgContains(t, "evidence", body, "1 failing of 3 listed", `res-failed">failed<`, `res-passed">passed<`, `res-skipped">skipped<`, "{\n  &#34;cases&#34;: [")
}

// TestEvidencePageCountsFor: an evidence page says, for each release that
// binds its repository, the gate it counts for or why it does not (the
// release verdict's reasons: another artifact digest, another backend),
// and when no gate reads its lane.
func TestEvidencePageCountsFor(t *testing.T) {
	st := pgStore(t)
	ids := pgSeed(t, st)
	pgRelease(t, st, pgReleaseYAML)
	s := pgServer(t, st)
	for _, tc := range []struct {
		id    string
		wants []string
	}{
		{ids["promoted"], []string{`data-release="0.32.1" data-gate="qmv-cpu" data-count="counts"`, `href="/releases/0.32.1#gate-qmv-cpu">release 0.32.1 gate qmv-cpu</a>: counts`}},
		{ids["narrow"], []string{`data-gate="qmv-cpu" data-count="baseline"`, "does not count (baseline): other artifact libmlx.so"}},
		{ids["cuda"], []string{`data-gate="qmv-cpu" data-count="baseline"`, "other backend cuda"}},
		{ids["trajA"], []string{`data-count="out-of-scope"`, "no gate of this release reads lane trajectory/v1"}},
	} {
		code, body := pgGet(t, s, "/evidence/"+tc.id)
		if code != 200 {
			t.Fatalf("evidence %s: %d", tc.id, code)
		}
		pgContains(t, "evidence "+tc.id, body, tc.wants...)
	}
}

// TestEvidencePageFailureMessages: failed cases of an ingested record show
// their failure message when details carry one, and nothing when absent;
// the page links the original file the record was decoded from.
func TestEvidencePageFailureMessages(t *testing.T) {
	st := pgStore(t)
	ev := pgQMV(false, ledger.BackendCPU, pgDigest, pgT0)
	orig := strings.Repeat("ab", 16)
	ev.Details = json.RawMessage(`{"format":"junit","original":{"id":"` + orig + `","format":"junit"},"cases":[{"id":"t/a","outcome":"passed"},{"id":"t/b","outcome":"failed","message":"expected 3, got 4 <b>"},{"id":"t/c","outcome":"error"}]}`)
	id := pgAppend(t, st, ledger.KindEvidence, ev)[0].ID
	_, body := pgGet(t, pgServer(t, st), "/evidence/"+id)
	pgContains(t, "evidence", body, `<pre class="case-msg">expected 3, got 4 &lt;b&gt;</pre>`, `href="/originals/`+orig+`" id="original-link"`)
	if n := strings.Count(body, `class="case-msg"`); n != 1 {
		t.Errorf("%d failure messages shown, want 1 (only the case that carries one)", n)
	}
}
