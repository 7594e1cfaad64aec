package web

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/evidence-ledger/ledger/ledger"
)

// Browser tests: headless Chromium driven through chromedp against a real
// HTTP server on a random loopback port over a seeded temporary database.
// They skip when no Chromium binary is found, unless LEDGER_REQUIRE_BROWSER=1
// (CI), where that is a failure. LEDGER_CHROMIUM names the binary
// explicitly. Screenshots go to LEDGER_TEST_ARTIFACTS (default var/screenshots/).

func pgChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LEDGER_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no Chromium binary found (install Debian's chromium package, or set LEDGER_CHROMIUM)"
	if os.Getenv("LEDGER_REQUIRE_BROWSER") == "1" {
		t.Fatal(msg + "; LEDGER_REQUIRE_BROWSER=1 makes this a failure")
	}
	t.Skip("skipping browser test: " + msg)
	return ""
}

// pgArtifacts is the folder screenshots are written to:
// LEDGER_TEST_ARTIFACTS, else var/screenshots/ in the checkout (ignored by
// git), where a reviewer of a change opens them.
func pgArtifacts(t *testing.T) string {
	dir := os.Getenv("LEDGER_TEST_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(pgRepoRoot(t), "var", "screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// pgBrowser starts a fresh headless Chromium (its own user-data-dir) and
// returns a tab context that ends with the test, or after 90 s.
func pgBrowser(t *testing.T) context.Context {
	t.Helper()
	return pgBrowserFor(t, 90*time.Second)
}

// pgBrowserFor is pgBrowser with a time limit of d.
func pgBrowserFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	bin := pgChromium(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelC := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, d)
	t.Cleanup(func() { cancelT(); cancelC(); cancelA() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium %s: %v", bin, err)
	}
	return ctx
}

// pgDo runs steps, failing t on error.
func pgDo(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// pgVal runs an action that answers a value, failing t on error.
func pgVal[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// pgAwait evaluates expr until it answers a non-empty string (across page
// loads: errors while the page navigates are retried), for up to 20 s.
func pgAwait(t *testing.T, ctx context.Context, expr string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr)); err == nil && v != "" {
			return v
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", expr)
	return ""
}

func pgSave(t *testing.T, dir, name string, b []byte) {
	t.Helper()
	if len(b) == 0 {
		t.Fatalf("screenshot %s is empty", name)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
}

type pgGateView struct {
	Gate, State, Word, Colour string
}

// TestBrowserDashboard follows overview -> release -> evidence, checks the
// gate board (state as colour and word), verifies an inclusion proof in the
// browser, records a waiver through the form, checks the lane chart's
// 156/216 -> 216/216 story, the trajectory view, heads, filters, a phone
// width and reading without JavaScript, and takes the screenshots.
func TestBrowserDashboard(t *testing.T) {
	ctx := pgBrowser(t)
	st := pgStore(t)
	ids := pgSeed(t, st)
	pgRelease(t, st, pgReleaseYAML)
	admin, _, err := st.CreateToken(context.Background(), "alice", ledger.ScopeAdmin, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(pgServer(t, st))
	defer srv.Close()
	art := pgArtifacts(t)

	// Overview -> release.
	pgDo(t, ctx, "overview", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`a[href="/releases/0.32.1"]`)),
		chromedp.Click(chromedp.CSS(`a[href="/releases/0.32.1"]`)), chromedp.WaitVisible(chromedp.CSS(`#gate-board`)))
	gatesSeen := pgVal(t, ctx, "read gate board", chromedp.Evaluate[[]pgGateView](`Array.from(document.querySelectorAll('details.gate')).map(b => {
		const badge = b.querySelector('.gate-state .badge');
		return {Gate: b.dataset.gate, State: b.dataset.state, Word: badge.textContent.trim(), Colour: getComputedStyle(badge).backgroundColor};
	})`))
	want := map[string]string{"qmv-cpu": "passed", "snapshot": "open", "footprint": "open", "heads": "failed", "tree": "open", "platform": "open"}
	colours := map[string]string{}
	for _, g := range gatesSeen {
		if want[g.Gate] != g.State || g.Word != g.State {
			t.Errorf("gate %s shows %q (%q), want %q", g.Gate, g.Word, g.State, want[g.Gate])
		}
		if c, ok := colours[g.State]; ok && c != g.Colour {
			t.Errorf("state %s drawn in two colours: %s and %s", g.State, c, g.Colour)
		}
		colours[g.State] = g.Colour
	}
	if len(gatesSeen) != len(want) {
		t.Errorf("gate board shows %d gates, want %d", len(gatesSeen), len(want))
	}
	if colours["passed"] == colours["failed"] || colours["passed"] == colours["open"] || colours["failed"] == colours["open"] {
		t.Errorf("states are not told apart by colour: %v", colours)
	}
	pgSave(t, art, "release.png", pgVal(t, ctx, "release screenshot", chromedp.FullScreenshot(100)))

	// Release -> satisfying evidence of qmv-cpu -> verify its proof.
	pgDo(t, ctx, "follow evidence link",
		chromedp.Click(chromedp.CSS(`#gate-qmv-cpu a[href="/evidence/`+ids["promoted"]+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#verify-btn`)))
	h1 := pgVal(t, ctx, "h1", chromedp.Text(chromedp.CSS(`h1`)))
	if !strings.Contains(h1, ids["promoted"][:12]) {
		t.Errorf("evidence page h1 = %q", h1)
	}
	pgDo(t, ctx, "verify in browser",
		chromedp.Click(chromedp.CSS(`#verify-btn`)),
		chromedp.WaitVisible(chromedp.CSS(`#verify-box[data-verified]`)))
	verdict := pgVal(t, ctx, "verdict", chromedp.Text(chromedp.CSS(`#verify-result`)))
	if !strings.HasPrefix(verdict, "Verified: leaf") || !strings.Contains(verdict, "checkpoint signature by") || !strings.Contains(verdict, "is valid") {
		t.Errorf("browser verification said %q", verdict)
	}
	// A tampered leaf must not verify.
	pgDo(t, ctx, "verify tampered",
		chromedp.Evaluate[chromedp.Void](`(() => { const el = document.getElementById('leaf-bytes'); el.textContent = el.textContent.replace('"cases_exact":216', '"cases_exact":215'); delete document.getElementById('verify-box').dataset.verified; })()`),
		chromedp.Click(chromedp.CSS(`#verify-btn`)),
		chromedp.WaitVisible(chromedp.CSS(`#verify-box[data-verified]`)))
	verdict = pgVal(t, ctx, "tampered verdict", chromedp.Text(chromedp.CSS(`#verify-result`)))
	if !strings.Contains(verdict, "Not verified") {
		t.Errorf("tampered leaf: browser said %q", verdict)
	}

	// Record a waiver through the form (CSRF cookie, token field, confirm).
	pgDo(t, ctx, "waiver form",
		chromedp.Navigate(srv.URL+"/releases/0.32.1"),
		// The forms are folded; a click opens the waiver form.
		chromedp.Click(chromedp.CSS(`#act-waiver > summary`)),
		chromedp.WaitVisible(chromedp.CSS(`#waiver-form`)),
		// Accept the form's confirm() question.
		chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`),
		chromedp.SetValue(chromedp.CSS(`#w-gate`), "snapshot"),
		chromedp.SendKeys(chromedp.CSS(`#w-reason`), "the snapshot fix ships in 0.32.2"),
		chromedp.SendKeys(chromedp.CSS(`#w-token`), admin),
		chromedp.Click(chromedp.CSS(`#waiver-form button[type=submit]`)))
	landed := pgAwait(t, ctx, `(location.search.includes('done=') || document.getElementById('form-problem')) ? location.href + ' ' + (document.getElementById('form-problem') || {textContent: ''}).textContent : ''`)
	if !strings.Contains(landed, "done=waiver") {
		t.Fatalf("waiver form landed on %q", landed)
	}
	waived := pgVal(t, ctx, "waived state", chromedp.AttributeValue(chromedp.CSS(`#gate-snapshot`), "data-state")).Value
	if waived != "waived" {
		t.Errorf("snapshot gate after the waiver form: %q", waived)
	}

	// The lane chart: uPlot draws the story from the runs table.
	pgDo(t, ctx, "lane chart",
		chromedp.Navigate(srv.URL+"/lanes/qmv-bias-sum/v1"),
		chromedp.WaitVisible(chromedp.CSS(`#lane-chart[data-chart="uplot"] canvas`)))
	plotted := pgVal(t, ctx, "plotted", chromedp.AttributeValue(chromedp.CSS(`#lane-chart`), "data-plotted")).Value
	canvases := pgVal(t, ctx, "canvases", chromedp.Evaluate[int](`document.querySelectorAll('#lane-chart canvas').length`))
	if !strings.Contains(plotted, "cpu: 156/216 -> 216/216") || !strings.Contains(plotted, "cuda: 216/216") || canvases == 0 {
		t.Errorf("lane chart plotted %q on %d canvases", plotted, canvases)
	}
	pgSave(t, art, "lane-chart.png", pgVal(t, ctx, "lane screenshot", chromedp.Screenshot(chromedp.CSS(`#lane-chart`))))

	// Trajectory view: the first divergence is highlighted.
	pgDo(t, ctx, "trajectory",
		chromedp.Navigate(srv.URL+"/trajectories/qwen3-0.6b/greedy-64?a="+ids["trajA"]+"&b="+ids["trajB"]),
		chromedp.WaitVisible(chromedp.CSS(`#first-divergence`)))
	div := pgVal(t, ctx, "divergence row", chromedp.Text(chromedp.CSS(`#first-divergence`)))
	if !strings.Contains(div, "374") || !strings.Contains(div, "525") || !strings.Contains(div, "first divergence") {
		t.Errorf("first divergence row = %q", div)
	}

	// Heads and the evidence filters.
	pgDo(t, ctx, "heads", chromedp.Navigate(srv.URL+"/heads"))
	heads := pgVal(t, ctx, "heads text", chromedp.Text(chromedp.CSS(`main`)))
	for _, w := range []string{"release@example.org", "unknown_key", "untrusted"} {
		if !strings.Contains(heads, w) {
			t.Errorf("heads page lacks %q", w)
		}
	}
	pgDo(t, ctx, "filter evidence",
		chromedp.Navigate(srv.URL+"/evidence"),
		chromedp.SetValue(chromedp.CSS(`#f-backend`), "cuda"),
		chromedp.Click(chromedp.CSS(`form.filters button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`.actions a[href="/evidence"]`))) // the "Clear" link of a filtered list
	rows := pgVal(t, ctx, "rows", chromedp.Evaluate[int](`document.querySelectorAll('table.list tbody tr').length`))
	if rows != 1 {
		t.Errorf("backend=cuda shows %d rows, want 1", rows)
	}

	// Phone width: the page itself must not scroll sideways.
	pgDo(t, ctx, "phone width",
		chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile),
		chromedp.Navigate(srv.URL+"/releases/0.32.1"),
		chromedp.WaitVisible(chromedp.CSS(`#gate-board`)))
	overflow := pgVal(t, ctx, "overflow", chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth + 1`))
	pgSave(t, art, "release-phone.png", pgVal(t, ctx, "phone screenshot", chromedp.FullScreenshot(100)))
	if overflow {
		t.Error("the release page overflows a 390 px wide screen")
	}
	pgDo(t, ctx, "desktop again", chromedp.ResetViewport())

	// Without JavaScript the lane page still shows the SVG chart and table.
	if _, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
		t.Fatal(err)
	}
	pgDo(t, ctx, "no js", chromedp.Navigate(srv.URL+"/lanes/qmv-bias-sum/v1"), chromedp.WaitVisible(chromedp.CSS(`svg.svg-chart`)))
	// Evaluate from DevTools still runs while page scripts are disabled.
	svgVisible := pgVal(t, ctx, "svg", chromedp.Evaluate[bool](`document.querySelectorAll('svg.svg-chart circle').length === 3 && document.querySelectorAll('#lane-runs tbody tr').length === 3 && !document.querySelector('#lane-chart canvas')`))
	if _, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: false}); err != nil {
		t.Fatal(err)
	}
	if !svgVisible {
		t.Error("without JavaScript the lane page lacks its SVG chart or table")
	}
}

// TestBrowserXSS opens pages whose evidence text fields carry script
// payloads and checks that none ran.
func TestBrowserXSS(t *testing.T) {
	ctx := pgBrowser(t)
	st := pgStore(t)
	const evil = `"'><script>window.__xss=1</script><img src=x onerror="window.__xss=2"><svg onload="window.__xss=3">`
	e := pgQMV(true, ledger.BackendCPU, pgDigest, pgT0)
	e.Subject.Repository = "repo" + evil
	e.Device.Model = evil
	e.Runner.Version = evil
	e.FailingCases[0] = "case" + evil
	e.Details = []byte(fmt.Sprintf(`{"cases":[{"id":%q,"result":"mismatch","expected":%q,"got":%q}],"control":{"summary":%q},"trajectory":"t","mode":%q,"tokens":[1]}`, evil, evil, evil, evil, evil))
	id := pgAppend(t, st, ledger.KindEvidence, e)[0].ID
	h := pgHead(ledger.VerdictGood, ledger.DecisionTrusted, pgT0)
	h.Signer, h.Reason = evil, evil
	pgAppend(t, st, ledger.KindHead, h)
	srv := httptest.NewServer(pgServer(t, st))
	defer srv.Close()
	for _, p := range []string{"/", "/evidence/" + id, "/evidence", "/heads", "/lanes/" + pgQMVLane, "/trajectories/t?a=" + id + "&b=" + id} {
		pgDo(t, ctx, p, chromedp.Navigate(srv.URL+p), chromedp.WaitReady(chromedp.CSS(`footer`)), chromedp.Sleep(100*time.Millisecond))
		ran := pgVal(t, ctx, p+" xss", chromedp.Evaluate[bool](`window.__xss !== undefined`))
		text := pgVal(t, ctx, p+" text", chromedp.TextContent(chromedp.CSS(`main`)))
		if ran {
			t.Errorf("%s: injected script ran", p)
		}
		if p != "/" && p != "/evidence" && !strings.Contains(text, "<script>window.__xss=1</script>") {
			t.Errorf("%s: the payload is not shown as text", p)
		}
	}
}

// TestBrowserRunForm presses the release page's "run the missing lanes"
// button in a real browser (CSRF cookie, token field, confirm) and checks
// that the page it lands on reports the two runs queued and that the
// store holds exactly those two.
func TestBrowserRunForm(t *testing.T) {
	ctx := pgBrowser(t)
	e := newRunFormEnv(t)
	pgDo(t, ctx, "run form",
		chromedp.Navigate(e.srv.URL+"/releases/3.0.0"),
		chromedp.WaitVisible(chromedp.CSS(`#runs-form`)),
		chromedp.Evaluate[chromedp.Void](`window.confirm = () => true`),
		chromedp.SendKeys(chromedp.CSS(`#r-token`), e.tokens["manager"]),
		chromedp.Click(chromedp.CSS(`#runs-form button[type=submit]`)))
	landed := pgAwait(t, ctx, `(document.getElementById('runs-queued') || document.getElementById('runs-problem') || {textContent: ''}).textContent`)
	if !strings.Contains(landed, "2 run(s) queued.") {
		t.Fatalf("run form landed on %q", landed)
	}
	if n := len(e.active(t)); n != 2 {
		t.Fatalf("the browser's press queued %d runs, want 2", n)
	}
}
