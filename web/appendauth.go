package web

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"reflect"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlog"
)

// guardCtxKey carries a request's *admit.TokenGuard to appendGuarded.
type guardCtxKey struct{}

// requireAppend is require(ScopeRecord) for the ingest route, through
// the token cache (admit.TokenCache): a cached token that admits the
// request (admit.CachedToken.Admits) is admitted with its guard; any other request authenticates as
// require does and carries a filling guard.
func (s *Server) requireAppend(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var g *admit.TokenGuard
		if secret, ok := bearerSecret(r.Header.Get("Authorization")); ok {
			h := sha256.Sum256([]byte(secret))
			ct, hit := s.appendAuth.Get(h)
			switch {
			case hit && ct.Admits(s.cfg.Now()):
				if err := s.authBlocked(r); err != nil {
					s.writeError(w, r, err)
					return
				}
				noteToken(r, ct.Token)
				g = &admit.TokenGuard{Cache: &s.appendAuth, Hash: h, Token: ct.Token, Leaves: ct.Leaves}
			case hit:
				s.appendAuth.Drop(h)
			}
			if g == nil {
				g = &admit.TokenGuard{Cache: &s.appendAuth, Hash: h, Fill: true}
			}
		}
		if g == nil || g.Fill {
			t, ok := s.admitToken(w, r, ledger.ScopeRecord)
			if !ok {
				return
			}
			if g == nil {
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenKey, t)))
				return
			}
			g.Token = t
		}
		ctx := context.WithValue(context.WithValue(r.Context(), tokenKey, g.Token), guardCtxKey{}, g)
		next.ServeHTTP(w, r.WithContext(tlog.WithAppendGuard(ctx, g)))
	})
}

// appendGuarded appends recs for an ingest request admitted by
// requireAppend. When its guard finds the token's row changed, the
// request authenticates through the store again (whose refusal, revoked
// or edited behind the log, is the answer) and, if the token is the same,
// appends once more under a filling guard.
func (s *Server) appendGuarded(w http.ResponseWriter, r *http.Request, recs []ledger.Record, idem string) (*ledger.AppendResult, error) {
	ctx := r.Context()
	g, _ := ctx.Value(guardCtxKey{}).(*admit.TokenGuard)
	if g == nil {
		return s.store.Append(ctx, recs, idem)
	}
	res, err := s.store.Append(ctx, recs, idem)
	if !errors.Is(err, admit.ErrTokenChanged) {
		return res, err
	}
	secret, _ := bearerSecret(r.Header.Get("Authorization"))
	tok, err := s.authCheck(w, r, secret)
	if err != nil {
		return nil, err
	}
	if !reflect.DeepEqual(tok, g.Token) && !g.Fill {
		return nil, ledger.Errorf(ledger.CodeUnauthorized, "token %q changed while the request ran: send it again", tok.Name)
	}
	res, err = s.store.Append(tlog.WithAppendGuard(ctx, &admit.TokenGuard{Cache: &s.appendAuth, Hash: g.Hash, Token: tok, Fill: true}), recs, idem)
	if errors.Is(err, admit.ErrTokenChanged) {
		return nil, ledger.Errorf(ledger.CodeUnauthorized, "token %q changed while the request ran: send it again", tok.Name)
	}
	return res, err
}
