package web

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/evidence-ledger/ledger/ledger"
)

// appendAuthMax bounds the tokens appendAuth holds; past it a token is
// simply not cached (its requests authenticate through the store).
const appendAuthMax = 1024

// appendAuth is the authentication of POST /api/v1/evidence, the ingest
// route, whose only effect is an append. Its first request with a token
// authenticates through the store (Store.Authenticate: the tokens row,
// checked against its token leaves on `ledger serve`) and carries a
// tokenGuard into the append: in the append's batch, under the store's
// write lock, the tokens row is read again (ledger.TokenRowBatch) and
// must be the token the request was admitted with. A token whose row
// passed is cached with the count of token leaves seen then, and its
// later requests skip the store's read: their guard re-reads the row in
// the batch (one read per token per batch) and holds the append unless
// the row and the count are unchanged. So a revocation or a raw edit of
// the row by another process is seen at the next append, as before, and
// now also between the check and the append; a request refused before it
// appends (out of scope, invalid) is judged by the cached token, never by
// an edited row. When the store's batches cannot read a tokens row (no
// TokenRowBatch), nothing is cached. Safe for concurrent use.
type appendAuth struct {
	off atomic.Bool
	mu  sync.Mutex
	m   map[[32]byte]cachedToken
}

type cachedToken struct {
	tok    ledger.Token
	leaves uint64
}

func (c *appendAuth) get(h [32]byte) (cachedToken, bool) {
	if c.off.Load() {
		return cachedToken{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.m[h]
	return t, ok
}

func (c *appendAuth) put(h [32]byte, t cachedToken) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[[32]byte]cachedToken{}
	}
	if _, ok := c.m[h]; ok || len(c.m) < appendAuthMax {
		c.m[h] = t
	}
}

func (c *appendAuth) drop(h [32]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, h)
}

// errTokenChanged is a tokenGuard's refusal: the tokens row (or the token
// leaf count) read in the batch is not what the request was admitted
// with. The handler then authenticates through the store again.
var errTokenChanged = errors.New("the token's row changed since the request was authenticated")

// tokenGuard is the ledger.AppendGuard of an ingest request: the token it
// was admitted with must still be the tokens row of its secret hash in
// the batch; leaves, for a cached token, the count of token leaves it was
// cached at. fill: the token was authenticated through the store, and is
// cached once the batch's row matches.
type tokenGuard struct {
	c      *appendAuth
	hash   [32]byte
	tok    ledger.Token
	leaves uint64
	fill   bool
}

// Key implements ledger.AppendGuard: one check per secret and expectation
// per batch.
func (g *tokenGuard) Key() string {
	if g.fill {
		return "token-fill:" + hex.EncodeToString(g.hash[:])
	}
	return "token:" + hex.EncodeToString(g.hash[:]) + ":" + strconv.FormatUint(g.leaves, 10)
}

// Check implements ledger.AppendGuard.
func (g *tokenGuard) Check(ctx context.Context, b ledger.Batch) error {
	tb, ok := b.(ledger.TokenRowBatch)
	if !ok {
		g.c.off.Store(true)
		if g.fill {
			return nil // authenticated through the store, as without the cache
		}
		return errTokenChanged
	}
	row, err := tb.TokenRow(ctx, g.hash[:])
	if err != nil || !reflect.DeepEqual(row.Token, g.tok) || (!g.fill && row.TokenLeaves != g.leaves) {
		g.c.drop(g.hash)
		return errTokenChanged
	}
	// Live at the batch's clock: a token that expired since its request
	// was admitted (a slow upload) appends nothing; the re-authentication
	// answers "expired".
	if _, err := row.Live(); err != nil {
		g.c.drop(g.hash)
		return errTokenChanged
	}
	if g.fill {
		g.c.put(g.hash, cachedToken{tok: g.tok, leaves: row.TokenLeaves})
	}
	return nil
}

// guardCtxKey carries a request's *tokenGuard to appendGuarded.
type guardCtxKey struct{}

// requireAppend is require(ScopeRecord) for the ingest route, through
// appendAuth: a cached token that is live at this request and allows
// record is admitted with its guard; any other request authenticates as
// require does and carries a filling guard.
func (s *Server) requireAppend(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var g *tokenGuard
		if secret, ok := bearerSecret(r.Header.Get("Authorization")); ok {
			h := sha256.Sum256([]byte(secret))
			ct, hit := s.appendAuth.get(h)
			switch {
			case hit && !ct.tok.Expired(s.cfg.Now()) && ct.tok.Scope.Allows(ledger.ScopeRecord):
				if err := s.authBlocked(r); err != nil {
					s.writeError(w, r, err)
					return
				}
				noteToken(r, ct.tok)
				g = &tokenGuard{c: &s.appendAuth, hash: h, tok: ct.tok, leaves: ct.leaves}
			case hit:
				s.appendAuth.drop(h)
			}
			if g == nil {
				g = &tokenGuard{c: &s.appendAuth, hash: h, fill: true}
			}
		}
		if g == nil || g.fill {
			t, ok := s.admitToken(w, r, ledger.ScopeRecord)
			if !ok {
				return
			}
			if g == nil {
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenKey, t)))
				return
			}
			g.tok = t
		}
		ctx := context.WithValue(context.WithValue(r.Context(), tokenKey, g.tok), guardCtxKey{}, g)
		next.ServeHTTP(w, r.WithContext(ledger.WithAppendGuard(ctx, g)))
	})
}

// appendGuarded appends recs for an ingest request admitted by
// requireAppend. When its guard finds the token's row changed, the
// request authenticates through the store again (whose refusal, revoked
// or edited behind the log, is the answer) and, if the token is the same,
// appends once more under a filling guard.
func (s *Server) appendGuarded(w http.ResponseWriter, r *http.Request, recs []ledger.Record, idem string) (*ledger.AppendResult, error) {
	ctx := r.Context()
	g, _ := ctx.Value(guardCtxKey{}).(*tokenGuard)
	if g == nil {
		return s.store.Append(ctx, recs, idem)
	}
	res, err := s.store.Append(ctx, recs, idem)
	if !errors.Is(err, errTokenChanged) {
		return res, err
	}
	secret, _ := bearerSecret(r.Header.Get("Authorization"))
	tok, err := s.authCheck(w, r, secret)
	if err != nil {
		return nil, err
	}
	if !reflect.DeepEqual(tok, g.tok) && !g.fill {
		return nil, ledger.Errorf(ledger.CodeUnauthorized, "token %q changed while the request ran: send it again", tok.Name)
	}
	res, err = s.store.Append(ledger.WithAppendGuard(ctx, &tokenGuard{c: &s.appendAuth, hash: g.hash, tok: tok, fill: true}), recs, idem)
	if errors.Is(err, errTokenChanged) {
		return nil, ledger.Errorf(ledger.CodeUnauthorized, "token %q changed while the request ran: send it again", tok.Name)
	}
	return res, err
}
