package web

import (
	"context"
	"net"
	"net/http"
	"strings"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/go-chi/httprate"
)

// noteToken records the authenticated token's id for the access log.
func noteToken(r *http.Request, t ledger.Token) {
	if info, ok := r.Context().Value(accessKey).(*accessInfo); ok {
		info.tokenID = t.ID
	}
}

// clientKey is the rate-limit key of r's client: its address from
// RemoteAddr (the IPv6 /64 prefix), not a forwarded header a client can
// set.
func clientKey(r *http.Request) string {
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		ip = r.RemoteAddr
	}
	return httprate.CanonicalizeIP(ip)
}

// authBlocked returns a CodeRateLimited error when r's client address has
// used up its failed authentications of the window.
func (s *Server) authBlocked(r *http.Request) error {
	if s.authFails == nil {
		return nil
	}
	if _, rate, err := s.authFails.Status(clientKey(r)); err == nil && rate >= float64(s.cfg.AuthFailures) {
		return ledger.Errorf(ledger.CodeRateLimited, "too many failed authentications from this address: wait a minute and retry with a valid token")
	}
	return nil
}

// authFailed counts one failed authentication of r's client address.
func (s *Server) authFailed(w http.ResponseWriter, r *http.Request) {
	if s.authFails != nil {
		s.authFails.OnLimit(w, r, clientKey(r))
	}
}

// authCheck authenticates secret for r, counting failures against the
// client address and refusing (429) once the address is over its cap.
func (s *Server) authCheck(w http.ResponseWriter, r *http.Request, secret string) (ledger.Token, error) {
	if err := s.authBlocked(r); err != nil {
		return ledger.Token{}, err
	}
	t, err := s.store.Authenticate(r.Context(), secret)
	if err != nil {
		if c := ledger.ErrorCode(err); c == ledger.CodeUnauthorized || c == ledger.CodeForbidden {
			s.authFailed(w, r)
		}
		return t, err
	}
	noteToken(r, t)
	return t, nil
}

// bearerSecret returns the token of an Authorization header value of the
// Bearer scheme. The scheme name is case-insensitive (RFC 9110 section
// 11.1, RFC 6750 section 2.1); one or more spaces separate it from the
// token.
func bearerSecret(h string) (string, bool) {
	scheme, rest, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	secret := strings.TrimSpace(rest)
	return secret, secret != ""
}

type ctxKey int

const tokenKey ctxKey = 1

// TokenFrom returns the authenticated token of the request, if any.
func TokenFrom(ctx context.Context) (ledger.Token, bool) {
	t, ok := ctx.Value(tokenKey).(ledger.Token)
	return t, ok
}

// authenticate resolves the bearer token of r (ok=false when none given).
// Failures count against the client address (see Config.AuthFailures).
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (ledger.Token, bool, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return ledger.Token{}, false, nil
	}
	secret, ok := bearerSecret(h)
	if !ok {
		if err := s.authBlocked(r); err != nil {
			return ledger.Token{}, false, err
		}
		s.authFailed(w, r)
		return ledger.Token{}, false, ledger.Errorf(ledger.CodeUnauthorized, "Authorization header must be \"Bearer <token>\"")
	}
	t, err := s.authCheck(w, r, secret)
	if err != nil {
		return t, false, err
	}
	return t, true, nil
}

// require is middleware demanding a token whose scope allows need. Reads
// (need == read) pass without a token unless ReadAuth is set.
func (s *Server) require(need ledger.Scope) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if need == ledger.ScopeRead && !s.cfg.ReadAuth && r.Header.Get("Authorization") == "" {
				next.ServeHTTP(w, r)
				return
			}
			t, ok := s.admitToken(w, r, need)
			if !ok {
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenKey, t)))
		})
	}
}

// admitToken authenticates r's bearer token and checks that its scope allows
// need, answering r itself (401, 403, 429) when not.
func (s *Server) admitToken(w http.ResponseWriter, r *http.Request, need ledger.Scope) (ledger.Token, bool) {
	t, ok, err := s.authenticate(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return t, false
	}
	p := admit.Anon()
	if ok {
		p = admit.ByToken(t)
	}
	if err := admit.Require(p, need); err != nil {
		s.writeError(w, r, err)
		return t, false
	}
	return t, true
}
