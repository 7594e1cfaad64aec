package web

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"html/template"
	"net/http"
	"strings"
	"sync"
)

// renderCache keeps the rendered HTML of one shared page value (a cached
// *Overview or *releasePage, see freshCache) by a key of what else the
// page shows, so that readers of the same data do not each execute the
// template. It holds few keys: one per distinct key string a page builds
// (form defaults that change once a day, the "done" banner). Safe for
// concurrent use.
type renderCache struct {
	mu sync.Mutex
	m  map[string][]byte
}

// get returns the page rendered for key, rendering it with render on a
// miss (an error is not cached).
func (c *renderCache) get(key string, render func() ([]byte, error)) ([]byte, error) {
	c.mu.Lock()
	b, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return b, nil
	}
	b, err := render()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string][]byte{}
	}
	if len(c.m) < 16 {
		c.m[key] = b
	}
	c.mu.Unlock()
	return b, nil
}

// execute renders template name with data into bytes.
func (s *Server) execute(name string, data any) ([]byte, error) {
	var buf bytes.Buffer
	if err := s.pages.t.ExecuteTemplate(&buf, name, data); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writePage writes a rendered page as render does.
func (s *Server) writePage(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(b)
}

// csrfPlaceholders stand in for the four CSRF tokens of the release page's
// forms in its cached rendering; each request's own tokens replace them.
// They are random per process, in the tokens' alphabet (base64url, which
// html/template writes into an attribute unchanged), so no page content
// can spell one.
type csrfPlaceholders struct {
	waiver, signoff, approval, supersede string
	// runs stands in for the run form's section (releasePage.RunsHTML),
	// rendered per request.
	runs string
}

func newCSRFPlaceholders() csrfPlaceholders {
	one := func() string {
		b := make([]byte, 24)
		rand.Read(b)
		return "csrfslot" + base64.RawURLEncoding.EncodeToString(b)
	}
	return csrfPlaceholders{one(), one(), one(), one(), one()}
}

// renderRelease writes the release page p (its Forms holding this
// request's CSRF tokens): from p.renders when p is a shared page value and
// its forms carry no posted values, else rendered for this request alone.
func (s *Server) renderRelease(w http.ResponseWriter, r *http.Request, status int, p *releasePage) {
	if p.renders == nil || p.Forms.V != (formValues{Expires: p.Forms.V.Expires}) || p.Forms.Problem != "" {
		s.render(w, r, status, "release", p)
		return
	}
	ph := s.pages.csrfSlots
	q := *p
	q.Forms.CSRFWaiver, q.Forms.CSRFSignoff, q.Forms.CSRFApproval, q.Forms.CSRFSupersede = ph.waiver, ph.signoff, ph.approval, ph.supersede
	q.RunsHTML = template.HTML(ph.runs)
	key := strings.Join([]string{p.Done, p.Forms.MinExpiry, p.Forms.MaxExpiry, p.Forms.V.Expires}, "|")
	b, err := p.renders.get(key, func() ([]byte, error) { return s.execute("release", &q) })
	if err != nil {
		s.log.Error("render page", "template", "release", "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	f := p.Forms
	out := strings.NewReplacer(ph.waiver, f.CSRFWaiver, ph.signoff, f.CSRFSignoff, ph.approval, f.CSRFApproval, ph.supersede, f.CSRFSupersede, ph.runs, string(p.RunsHTML)).Replace(string(b))
	s.writePage(w, status, []byte(out))
}
