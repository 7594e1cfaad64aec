package web

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"net/http"
)

//go:embed templates/*.html
var templateFS embed.FS

// pages holds the dashboard templates, parsed once at start-up.
type pages struct {
	t *template.Template
}

func (s *Server) initPages() error {
	t, err := template.New("").Funcs(templateFuncs).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return fmt.Errorf("parse dashboard templates: %w", err)
	}
	s.pages = &pages{t: t}
	return nil
}

var templateFuncs = template.FuncMap{}

// render executes the named template into a buffer, then writes it.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, data any) {
	var buf bytes.Buffer
	if err := s.pages.t.ExecuteTemplate(&buf, name, data); err != nil {
		s.log.Error("render page", "template", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	buf.WriteTo(w)
}
