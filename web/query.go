package web

import (
	"net/http"
	"net/url"
	"sort"
	"unicode"
	"unicode/utf8"

	"github.com/evidence-ledger/ledger/ledger"
)

// repeatableParams are the query parameters an API route takes more than
// once, by method: POST /api/v1/evidence's ?artifact=NAME=DIGEST list.
var repeatableParams = map[string]map[string]bool{
	http.MethodPost: {"artifact": true},
}

// checkQuery refuses an API request whose query string does not parse, has
// a name or value that is not valid UTF-8 or holds a control or
// bidirectional formatting character,
// or repeats a parameter its route takes once (which would silently keep
// the first): 400 naming the parameter, before any handler runs.
func (s *Server) checkQuery(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery == "" {
			next.ServeHTTP(w, r)
			return
		}
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			s.writeError(w, r, ledger.FieldError("", "the query string does not parse: %v", clipText(err.Error())))
			return
		}
		names := make([]string, 0, len(q))
		for k := range q {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			if !plainText(k) {
				s.writeError(w, r, ledger.FieldError("query", "a query parameter name must be valid UTF-8 without control or bidirectional formatting characters"))
				return
			}
			field := k
			vs := q[k]
			if len(vs) > 1 && !repeatableParams[r.Method][k] {
				s.writeError(w, r, ledger.FieldError(field, "given %d times; this route takes it once", len(vs)))
				return
			}
			for _, v := range vs {
				if !plainText(v) {
					s.writeError(w, r, ledger.FieldError(field, "must be valid UTF-8 without control or bidirectional formatting characters"))
					return
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// plainText reports whether s is valid UTF-8 free of control characters
// and of bidirectional formatting characters (Bidi_Control).
func plainText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, c := range s {
		if unicode.IsControl(c) || unicode.Is(unicode.Bidi_Control, c) {
			return false
		}
	}
	return true
}
