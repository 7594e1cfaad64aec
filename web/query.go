package web

import (
	"net/http"
	"net/url"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/evidence-ledger/ledger/ledger"
)

// repeatableParams are the query parameters an API route takes more than
// once, by method: POST /api/v1/evidence's ?artifact=NAME=DIGEST list.
var repeatableParams = map[string]map[string]bool{
	http.MethodPost: {"artifact": true},
}

// apiQueryNames is every query parameter name an /api/v1 route reads, the
// union over the routes (web/openapi.yaml documents each at its route;
// TestAPIQueryNamesMatchOpenAPI holds the two together). A name outside it
// is a typo or a parameter of another API, and is refused rather than
// ignored: an ignored filter answers the unfiltered list.
var apiQueryNames = map[string]bool{
	"a": true, "artifact": true, "as_of": true, "b": true, "backend": true, "commit": true, "cursor": true,
	"format": true, "from": true, "index": true, "key": true, "kind": true, "lane": true, "limit": true,
	"repository": true, "since": true, "size": true, "state": true, "status": true, "to": true, "tree": true,
	"verdict": true, "wait": true,
}

// apiQueryList is apiQueryNames sorted, for the refusal's message.
var apiQueryList = func() string {
	names := make([]string, 0, len(apiQueryNames))
	for k := range apiQueryNames {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}()

// checkQuery refuses an API request whose query string does not parse, has
// a name or value that is not valid UTF-8 or holds a control or
// bidirectional formatting character, names a parameter no API route
// reads (apiQueryNames), or repeats a parameter its route takes once
// (which would silently keep the first): 400 naming the parameter, before
// any handler runs.
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
			if !apiQueryNames[k] {
				s.writeError(w, r, ledger.FieldError(clipText(k), "unknown query parameter: the API reads only %s (each route its own; see /api/v1/openapi.yaml)", apiQueryList))
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
