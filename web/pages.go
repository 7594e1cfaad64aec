package web

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runs"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// pageTemplates are the page templates every dashboard start-up requires;
// a missing one fails New.
var pageTemplates = []string{
	"overview", "releases", "release", "lane", "evidence", "evidence-list", "heads", "trajectory", "error", "runs", "agents",
}

// pages holds the dashboard templates (parsed once at start-up), the
// embedded static assets under their content-hash paths, and the key of
// the forms' CSRF tokens. It is read-only after initPages.
type pages struct {
	t       *template.Template
	assets  map[string]*asset // logical name ("app.css") -> asset
	byPath  map[string]*asset // served path ("/static/app.3f2a9c1d0b.css") -> asset
	csrfKey []byte
	// csrfSlots mark the CSRF tokens in cached release pages.
	csrfSlots csrfPlaceholders
}

// asset is one embedded static file.
type asset struct {
	path  string // the content-hash path it is served under
	body  []byte
	ctype string
	etag  string
}

func (s *Server) initPages() error {
	p := &pages{assets: map[string]*asset{}, byPath: map[string]*asset{}, csrfKey: make([]byte, 32), csrfSlots: newCSRFPlaceholders()}
	if _, err := rand.Read(p.csrfKey); err != nil {
		return fmt.Errorf("csrf key: %w", err)
	}
	err := fs.WalkDir(staticFS, "static", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := staticFS.ReadFile(name)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		h := hex.EncodeToString(sum[:])[:12]
		logical := strings.TrimPrefix(name, "static/")
		ext := path.Ext(logical)
		ctype := mime.TypeByExtension(ext)
		if ctype == "" {
			ctype = "application/octet-stream"
		}
		if ext == "" { // LICENSE files
			ctype = "text/plain; charset=utf-8"
		}
		a := &asset{path: "/static/" + strings.TrimSuffix(logical, ext) + "." + h + ext, body: body, ctype: ctype, etag: `"` + h + `"`}
		p.assets[logical] = a
		p.byPath[a.path] = a
		return nil
	})
	if err != nil {
		return fmt.Errorf("load dashboard assets: %w", err)
	}
	funcs := template.FuncMap{
		"asset": func(name string) (string, error) {
			a, ok := p.assets[name]
			if !ok {
				return "", fmt.Errorf("no static asset %q", name)
			}
			return a.path, nil
		},
	}
	for k, v := range templateFuncs {
		funcs[k] = v
	}
	t, err := template.New("").Funcs(funcs).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return fmt.Errorf("parse dashboard templates: %w", err)
	}
	for _, name := range pageTemplates {
		if t.Lookup(name) == nil {
			return fmt.Errorf("parse dashboard templates: page template %q is missing", name)
		}
	}
	p.t = t
	s.pages = p
	return nil
}

// handleStatic serves an embedded asset by its content-hash path; such a
// path never changes content, so it is cached for a year.
func (s *Server) handleStatic(w http.ResponseWriter, r *http.Request) {
	a, ok := s.pages.byPath[r.URL.Path]
	if !ok {
		http.Error(w, "no such asset", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", a.ctype)
	w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	w.Header().Set("ETag", a.etag)
	if r.Header.Get("If-None-Match") == a.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Write(a.body)
}

// templateFuncs are the helpers every template may call. None of them
// returns template.HTML: all text stays escaped by html/template.
var templateFuncs = template.FuncMap{
	// visible writes bidirectional, invisible and control characters as
	// escapes (runs.Visible).
	"visible": runs.Visible,
	"short": func(s string, n int) string {
		if len(s) <= n {
			return s
		}
		return s[:n]
	},
	"shortDigest": func(d string) string {
		hexPart := strings.TrimPrefix(d, "sha256:")
		if len(hexPart) > 12 {
			hexPart = hexPart[:12]
		}
		return hexPart
	},
	"when":     fmtTime,
	"datetime": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"dur": func(a, b time.Time) string {
		if a.IsZero() || b.IsZero() {
			return ""
		}
		return b.Sub(a).Round(time.Millisecond).String()
	},
	"lanePath": func(lane string) string { return "/lanes/" + lane },
	"add":      func(a, b int) int { return a + b },
	"sub":      func(a, b int) int { return a - b },
	"sub1":     func(a, b float64) float64 { return a - b },
	"hex":      func(h ledger.Hash) string { return h.String() },
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// pageBase is embedded in every page's data: the title, the active
// navigation entry and the URL of the page's JSON twin in the API.
type pageBase struct {
	Title string
	Nav   string // "overview", "releases", "evidence", "heads", "runs", "agents" or ""
	JSON  string // the API URL serving the same data as JSON
}

// render executes the named template into a buffer, then writes it.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, data any) {
	var buf bytes.Buffer
	if err := s.pages.t.ExecuteTemplate(&buf, name, data); err != nil {
		s.log.Error("render page", "template", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	buf.WriteTo(w)
}

// errorPage is the data of the error page.
type errorPage struct {
	pageBase
	Status  int
	Message string
}

// renderError answers err as an HTML page, with the status of the error
// table in errors.go; internal errors are logged and shown as "internal
// error".
func (s *Server) renderError(w http.ResponseWriter, r *http.Request, err error) {
	st, body := errorBody(err)
	if st >= 500 {
		s.log.Error("page failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	s.render(w, r, st, "error", errorPage{pageBase: pageBase{Title: http.StatusText(st)}, Status: st, Message: body.Message})
}

// pageAuth guards dashboard pages: when the server requires tokens for
// reads (Config.ReadAuth), a page needs an Authorization bearer token with
// read scope, as the API does; otherwise pages are open.
func (s *Server) pageAuth(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.cfg.ReadAuth {
			next(w, r)
			return
		}
		t, ok, err := s.authenticate(w, r)
		if err == nil && !ok {
			err = ledger.Errorf(ledger.CodeUnauthorized, "this dashboard requires a read token (Authorization: Bearer)")
		}
		if err == nil && !t.Scope.Allows(ledger.ScopeRead) {
			err = ledger.Errorf(ledger.CodeForbidden, "token %q may not read", t.Name)
		}
		if err != nil {
			if ledger.ErrorCode(err) == ledger.CodeUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="ledger"`)
			}
			s.renderError(w, r, err)
			return
		}
		next(w, r)
	}
}

// kv is one name/value row of a sorted map.
type kv struct{ K, V string }

func sortedKV(m map[string]string) []kv {
	out := make([]kv, 0, len(m))
	for k, v := range m {
		out = append(out, kv{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].K < out[j].K })
	return out
}
