package web

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
)

// tamperedPassthrough are the path prefixes still served once the full
// verification found tampering: the health check and metrics, the raw
// log (checkpoints, leaves, proofs, keys, tiles), whose every answer a
// client verifies against the signed checkpoint itself, and static files.
var tamperedPassthrough = []string{"/healthz", "/metrics", "/api/v1/log/", "/api/v1/openapi.yaml", "/checkpoint", "/tile/", "/static/"}

// refuseWhenTampered answers every other request 503 (code unavailable,
// naming the leaf) while Config.Integrity reports the tampered state:
// verdicts, lists and pages are computed from the database's projections
// (the columns a query selects rows by), which an editor can change so
// that a record drops out of a query without its leaf failing any
// read-path check; only the full verification compares them, so once it
// has failed no view built on them is shown.
func (s *Server) refuseWhenTampered(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Integrity == nil {
			next.ServeHTTP(w, r)
			return
		}
		ts, bad := s.cfg.Integrity()
		if !bad {
			next.ServeHTTP(w, r)
			return
		}
		for _, p := range tamperedPassthrough {
			if strings.HasPrefix(r.URL.Path, p) {
				next.ServeHTTP(w, r)
				return
			}
		}
		err := &ledger.Error{Code: ledger.CodeUnavailable, Message: fmt.Sprintf("refusing to sign, and to serve verdicts, lists or pages computed from the database: the full verification found leaf %d %s (the database was edited behind the log); run `ledger audit` and repair it (the raw log under /api/v1/log/ is still served)", ts.Index, ts.Problem)}
		if strings.HasPrefix(r.URL.Path, "/api/") {
			s.writeError(w, r, err)
			return
		}
		s.renderError(w, r, err)
	})
}
