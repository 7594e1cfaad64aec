package web

import (
	"bufio"
	"net"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/evidence-ledger/ledger/ledger"
)

// The `make run` database, built the way `make run` builds it: the
// ledger binary of this checkout runs scripts/run.sh (CPU lanes, the CUDA
// run kept in testdata/device, the self policy, both releases, the demo
// runner key and the reference release's signed evidence) on a temporary
// database, then `ledger serve` serves it on a random loopback port.

// Page-size budgets of the browser tests, in CSS pixels at 1400 px wide.
const (
	pgShotWidth     = 1400
	pgReleaseBudget = 2800 // a release page fits on two screens
)

// pgRepoRoot is the checkout's root (the web package's parent).
func pgRepoRoot(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(wd)
}

// pgFreeAddr returns a loopback address with a port nobody listens on now.
func pgFreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// pgMakeRun builds the ledger binary, runs scripts/run.sh on a fresh
// database and serves it; it returns the server's base URL. The server
// stops at cleanup.
func pgMakeRun(t *testing.T) string {
	t.Helper()
	root := pgRepoRoot(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "ledger")
	build := exec.Command("go", "build", "-o", bin, "./cmd/ledger")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/ledger: %v\n%s", err, out)
	}
	db := filepath.Join(dir, "var", "ledger.db")
	run := exec.Command("./scripts/run.sh")
	run.Dir = root
	run.Env = append(os.Environ(), "LEDGER_BIN="+bin, "LEDGER_DB="+db, "LEDGER_ADDR="+pgFreeAddr(t), "LEDGER_KEEP_SERVING=")
	run.Stdin = nil // not a terminal: the script stops its server after the summary
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("scripts/run.sh: %v\n%s", err, out)
	}
	srv := exec.Command(bin, "--db", db, "serve", "--addr", "127.0.0.1:0")
	stdout, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	srv.Stderr = nil
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "ledger: serving on "); ok {
				lines <- strings.TrimRight(u, "/")
			}
		}
	}()
	select {
	case u := <-lines:
		return u
	case <-time.After(30 * time.Second):
		t.Fatal("ledger serve did not start on the make run database")
	}
	return ""
}

// pgShotName turns a page path into a screenshot file name.
func pgShotName(p string) string {
	if p == "/" {
		return "overview.png"
	}
	name := regexp.MustCompile(`[^A-Za-z0-9._-]+`).ReplaceAllString(strings.Trim(p, "/"), "_")
	if len(name) > 120 {
		name = name[:120]
	}
	return name + ".png"
}

// pgPageSize is what the browser measured on one page.
type pgPageSize struct {
	Height, ScrollWidth, ClientWidth int
	Links                            []string
	Title                            string
}

// TestBrowserMakeRunPages loads every page reachable from the overview,
// the releases list and the evidence list of the `make run` database (each
// release, lane, evidence record, original, trajectory, the heads, runs
// and agents pages) in Chromium at 1400 px wide, writes a full-page
// screenshot of each to the screenshot folder (pgArtifacts, printed in the
// log), and fails on a page wider than the window (horizontal overflow)
// and on a release page taller than pgReleaseBudget.
func TestBrowserMakeRunPages(t *testing.T) {
	ctx := pgBrowserFor(t, 5*time.Minute)
	if testing.Short() {
		t.Skip("builds the binary and runs scripts/run.sh")
	}
	base := pgMakeRun(t)
	// The folder holds this run's screenshots only: entry ids differ per
	// database, so earlier runs' files would pile up.
	art := filepath.Join(pgArtifacts(t), "make-run")
	if err := os.RemoveAll(art); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(art, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots of the make run database: %s", art)
	pgDo(t, ctx, "viewport", chromedp.EmulateViewport(pgShotWidth, 900))

	const maxPages = 150
	queue := []string{"/", "/releases", "/evidence", "/heads", "/runs", "/agents"}
	seen := map[string]bool{}
	for _, p := range queue {
		seen[p] = true
	}
	heights := map[string]int{}
	for len(queue) > 0 && len(heights) < maxPages {
		p := queue[0]
		queue = queue[1:]
		pgDo(t, ctx, p, chromedp.Navigate(base+p), chromedp.WaitReady(chromedp.CSS(`footer`)))
		sz := pgVal(t, ctx, p+" size", chromedp.Evaluate[pgPageSize](`(() => {
			const d = document.documentElement;
			return {Height: d.scrollHeight, ScrollWidth: d.scrollWidth, ClientWidth: d.clientWidth, Title: document.title,
				Links: Array.from(document.querySelectorAll('main a[href]')).map(a => a.getAttribute('href'))};
		})()`))
		heights[p] = sz.Height
		if p == "/" {
			// The overview opens with what needs attention: here the
			// failed Gemma gate of 0.9.0.
			first := pgVal(t, ctx, "first section", chromedp.Evaluate[string](`document.querySelector('main h2').textContent + ' | ' + document.querySelector('#attention').textContent`))
			if !strings.HasPrefix(first, "Needs attention | ") || !strings.Contains(first, "0.9.0 gate gemma-automatic-vs-ordinary failed") {
				t.Errorf("the overview does not open with what needs attention: %q", first)
			}
		}
		pgSave(t, art, pgShotName(p), pgVal(t, ctx, p+" screenshot", chromedp.FullScreenshot(90)))
		if sz.ScrollWidth > sz.ClientWidth {
			t.Errorf("%s overflows horizontally: scrollWidth %d > clientWidth %d", p, sz.ScrollWidth, sz.ClientWidth)
		}
		if strings.HasPrefix(p, "/releases/") {
			t.Logf("release page %s: %d px tall at %d px wide", p, sz.Height, pgShotWidth)
			if sz.Height > pgReleaseBudget {
				parts := pgVal(t, ctx, p+" sections", chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('main > section, main > h1, main > div, main > p')).map(e => (e.id || e.tagName + ' ' + (e.querySelector('h2') || e).textContent.trim().slice(0, 24)) + ': ' + Math.round(e.getBoundingClientRect().height) + ' px')`))
				t.Logf("%s by part: %s", p, strings.Join(parts, "; "))
				t.Errorf("release page %s is %d px tall at %d px wide; the budget is %d", p, sz.Height, pgShotWidth, pgReleaseBudget)
			}
		}
		for _, h := range sz.Links {
			u, err := url.Parse(h)
			// /entries/{id} redirects to the page of the entry's kind,
			// reached by its own link, or to the entry's JSON.
			if err != nil || u.Host != "" || !strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "/api/") || strings.HasPrefix(u.Path, "/static/") || strings.HasPrefix(u.Path, "/entries/") {
				continue
			}
			// Filtered lists and paging are the same page: one of each.
			next := u.Path
			if strings.HasPrefix(u.Path, "/trajectories/") {
				next = u.RequestURI()
			}
			if !seen[next] {
				seen[next] = true
				queue = append(queue, next)
			}
		}
	}
	var want []string
	for _, p := range []string{"/", "/releases", "/releases/0.9.0", "/evidence", "/heads", "/runs", "/agents"} {
		if _, ok := heights[p]; !ok {
			want = append(want, p)
		}
	}
	if len(want) > 0 {
		t.Errorf("pages not reached: %v", want)
	}
	var kinds []string
	for p := range heights {
		kinds = append(kinds, p)
	}
	sort.Strings(kinds)
	t.Logf("%d pages loaded: %s", len(kinds), strings.Join(kinds, " "))
}

// TestBrowserLongTextWraps: an evidence page whose failed case carries a
// long unbroken failure message and id, and the page of its original
// file with a long line, do not overflow a 1400 px window; the evidence
// page links the original.
func TestBrowserLongTextWraps(t *testing.T) {
	ctx := pgBrowser(t)
	st := pgStore(t)
	long := strings.Repeat("x", 3000)
	content := []byte(`<testsuite name="s" tests="1"><testcase classname="c" name="` + long + `"><failure message="` + long + `"/></testcase></testsuite>`)
	orig := pgAppend(t, st, ledger.KindOriginal, ledger.NewOriginal("junit", "application/junit+xml", content))[0].ID
	ev := pgQMV(false, ledger.BackendCPU, pgDigest, pgT0)
	ev.Details = []byte(`{"format":"junit","original":{"id":"` + orig + `","format":"junit"},"cases":[{"id":"c/` + long + `","outcome":"failed","message":"` + long + `"}]}`)
	id := pgAppend(t, st, ledger.KindEvidence, ev)[0].ID
	srv := httptest.NewServer(pgServer(t, st))
	defer srv.Close()
	art := filepath.Join(pgArtifacts(t), "long-text")
	if err := os.RemoveAll(art); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(art, 0o755); err != nil {
		t.Fatal(err)
	}
	pgDo(t, ctx, "viewport", chromedp.EmulateViewport(pgShotWidth, 900))
	for _, p := range []string{"/evidence/" + id, "/originals/" + orig} {
		pgDo(t, ctx, p, chromedp.Navigate(srv.URL+p), chromedp.WaitReady(chromedp.CSS(`footer`)))
		sz := pgVal(t, ctx, p+" size", chromedp.Evaluate[pgPageSize](`({ScrollWidth: document.documentElement.scrollWidth, ClientWidth: document.documentElement.clientWidth})`))
		pgSave(t, art, pgShotName(p), pgVal(t, ctx, p+" screenshot", chromedp.FullScreenshot(90)))
		if sz.ScrollWidth > sz.ClientWidth {
			t.Errorf("%s overflows horizontally: scrollWidth %d > clientWidth %d", p, sz.ScrollWidth, sz.ClientWidth)
		}
	}
	pgDo(t, ctx, "original link", chromedp.Navigate(srv.URL+"/evidence/"+id), chromedp.WaitVisible(chromedp.CSS(`#original-link[href="/originals/`+orig+`"]`)))
}
