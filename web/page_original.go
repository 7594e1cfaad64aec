package web

import (
	"net/http"
	"net/url"
	"unicode/utf8"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/go-chi/chi/v5"
)

// maxShownOriginal caps how much of an original the page shows inline, in
// bytes; the whole file is always served by the download link.
const maxShownOriginal = 256 << 10

type originalPage struct {
	pageBase
	Entry     ledger.Entry
	Original  ledger.Original
	Text      string // the content when it is UTF-8 and short enough to show
	Truncated bool
	Binary    bool
}

// pageOriginal shows an original as recorded (GET /originals/{id}): its
// format, media type, digest and size, its bytes as escaped text, and a
// link to the exact bytes.
func (s *Server) pageOriginal(w http.ResponseWriter, r *http.Request) {
	e, o, err := s.originalByID(r, chi.URLParam(r, "id"))
	if err != nil {
		s.renderError(w, r, err)
		return
	}
	p := originalPage{pageBase: pageBase{Title: "Original " + shortID(e.ID), Nav: "evidence", JSON: "/api/v1/originals/" + url.PathEscape(e.ID)},
		Entry: e, Original: o}
	switch c := o.Content; {
	case !utf8.Valid(c):
		p.Binary = true
	case len(c) > maxShownOriginal:
		cut := maxShownOriginal
		for cut > 0 && !utf8.RuneStart(c[cut]) {
			cut--
		}
		p.Text, p.Truncated = string(c[:cut]), true
	default:
		p.Text = string(c)
	}
	s.render(w, r, http.StatusOK, "original", p)
}
