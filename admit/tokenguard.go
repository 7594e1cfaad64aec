package admit

import (
	"context"
	"encoding/hex"
	"errors"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/tlog"
)

// tokenCacheMax bounds the tokens a TokenCache holds; past it a token is
// simply not cached (its requests authenticate through the store).
const tokenCacheMax = 1024

// TokenCache is the token cache of the ingest route (POST
// /api/v1/evidence), whose only effect is an append. Its first request
// with a token authenticates through the store (Store.Authenticate: the tokens row,
// checked against its token leaves on `ledger serve`) and carries a
// TokenGuard into the append: in the append's batch, under the store's
// write lock, the tokens row is read again (ledger.TokenRowBatch) and
// must be the token the request was admitted with. A token whose row
// passed is cached with the count of token leaves seen then, and its
// later requests skip the store's read: their guard re-reads the row in
// the batch (one read per token per batch) and holds the append unless
// the row and the count are unchanged. So a revocation or a raw edit of
// the row by another process is seen at the next append, and also
// between the check and the append; a request refused before it
// appends (out of scope, invalid) is judged by the cached token, never by
// an edited row. When the store's batches cannot read a tokens row (no
// TokenRowBatch), nothing is cached. The zero value is an empty cache.
// Safe for concurrent use.
type TokenCache struct {
	off atomic.Bool
	mu  sync.Mutex
	m   map[[32]byte]CachedToken
}

// CachedToken is a token whose tokens row passed, with the count of
// token leaves seen then.
type CachedToken struct {
	Token  ledger.Token
	Leaves uint64
}

// Admits reports whether a request authenticated by the cached token may
// append at now without reading the store: the token is live and allows
// record; its guard still re-reads the row in the batch.
func (c CachedToken) Admits(now time.Time) bool {
	return !c.Token.Expired(now) && c.Token.Scope.Allows(ledger.ScopeRecord)
}

// Get returns the cached token of the secret hash h.
func (c *TokenCache) Get(h [32]byte) (CachedToken, bool) {
	if c.off.Load() {
		return CachedToken{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.m[h]
	return t, ok
}

// Put caches t under h (unless the cache is full).
func (c *TokenCache) Put(h [32]byte, t CachedToken) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[[32]byte]CachedToken{}
	}
	if _, ok := c.m[h]; ok || len(c.m) < tokenCacheMax {
		c.m[h] = t
	}
}

// Drop forgets the token of h.
func (c *TokenCache) Drop(h [32]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, h)
}

// ErrTokenChanged is a TokenGuard's refusal: the tokens row (or the token
// leaf count) read in the batch is not what the request was admitted
// with. The handler then authenticates through the store again.
var ErrTokenChanged = errors.New("the token's row changed since the request was authenticated")

// TokenGuard is the tlog.AppendGuard of an ingest request: the token it
// was admitted with must still be the tokens row of its secret hash in
// the batch; leaves, for a cached token, the count of token leaves it was
// cached at. fill: the token was authenticated through the store, and is
// cached once the batch's row matches.
type TokenGuard struct {
	Cache  *TokenCache
	Hash   [32]byte // SHA-256 of the secret
	Token  ledger.Token
	Leaves uint64
	Fill   bool
}

// Key implements tlog.AppendGuard: one check per secret and expectation
// per batch.
func (g *TokenGuard) Key() string {
	if g.Fill {
		return "token-fill:" + hex.EncodeToString(g.Hash[:])
	}
	return "token:" + hex.EncodeToString(g.Hash[:]) + ":" + strconv.FormatUint(g.Leaves, 10)
}

// Check implements tlog.AppendGuard.
func (g *TokenGuard) Check(ctx context.Context, b tlog.Batch) error {
	tb, ok := b.(ledger.TokenRowBatch)
	if !ok {
		g.Cache.off.Store(true)
		if g.Fill {
			return nil // authenticated through the store, as without the cache
		}
		return ErrTokenChanged
	}
	row, err := tb.TokenRow(ctx, g.Hash[:])
	if err != nil || !reflect.DeepEqual(row.Token, g.Token) || (!g.Fill && row.TokenLeaves != g.Leaves) {
		g.Cache.Drop(g.Hash)
		return ErrTokenChanged
	}
	// Live at the batch's clock: a token that expired since its request
	// was admitted (a slow upload) appends nothing; the re-authentication
	// answers "expired".
	if _, err := row.Live(); err != nil {
		g.Cache.Drop(g.Hash)
		return ErrTokenChanged
	}
	if g.Fill {
		g.Cache.Put(g.Hash, CachedToken{Token: g.Token, Leaves: row.TokenLeaves})
	}
	return nil
}
