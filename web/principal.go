package web

import (
	"net/http"

	"github.com/evidence-ledger/ledger/admit"
)

// principalOf is the admit.Principal of a request: the token that
// authenticated it, or the anonymous.
func principalOf(r *http.Request) admit.Principal {
	t, ok := TokenFrom(r.Context())
	if !ok {
		return admit.Anon()
	}
	return admit.ByToken(t)
}
