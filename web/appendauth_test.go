package web

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
	"github.com/evidence-ledger/ledger/ledger/storetest/teststore"
	"github.com/evidence-ledger/ledger/ledger/tlog"
)

// TestAppendAuthCachesGuardedTokens: the ingest route authenticates a
// token through the store once; its later appends skip that read (their
// batch re-reads the row instead), while other routes still read it on
// every request.
func TestAppendAuthCachesGuardedTokens(t *testing.T) {
	e := newTokenEnv(t, Config{})
	for i := range 10 {
		if code, b := e.do(t, "POST", "/api/v1/evidence", e.record, testEvidence(i)); code != http.StatusCreated {
			t.Fatalf("POST %d: %d %s", i, code, b)
		}
	}
	if n := e.counted.auths.Load(); n != 1 {
		t.Fatalf("10 appends with one token read its row through the store %d times, want 1", n)
	}
	for range 3 {
		if code, b := e.do(t, "GET", "/api/v1/evidence?limit=1", e.record, nil); code != http.StatusOK {
			t.Fatalf("GET: %d %s", code, b)
		}
	}
	if n := e.counted.auths.Load(); n != 4 {
		t.Fatalf("3 reads after the appends: %d row reads in all, want 4", n)
	}
}

// TestAppendAuthEditedRowRefused: a tokens row edited by raw SQL under
// the running server after its token was cached is refused at the next
// append, as tampering naming the column (the store's check, run again
// when the batch finds the row changed), and nothing is appended.
func TestAppendAuthEditedRowRefused(t *testing.T) {
	e := newTokenEnv(t, Config{})
	if code, b := e.do(t, "POST", "/api/v1/evidence", e.record, testEvidence(0)); code != http.StatusCreated {
		t.Fatalf("first POST: %d %s", code, b)
	}
	h, err := sql.Open("sqlite", "file:"+e.path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Exec(`UPDATE tokens SET scope = 'admin' WHERE name = 'ci'`); err != nil {
		t.Fatal(err)
	}
	h.Close()
	size := e.size(t)
	code, b := e.do(t, "POST", "/api/v1/evidence", e.record, testEvidence(1))
	if ae := apiError(t, b); code != http.StatusUnauthorized || !strings.Contains(ae.Message, "does not match its token leaf") || !strings.Contains(ae.Message, "scope") {
		t.Fatalf("append after the row's scope was edited: %d %s", code, b)
	}
	if got := e.size(t); got != size {
		t.Fatalf("log grew from %d to %d on a refused append", size, got)
	}
}

// TestAppendAuthExpiry: a cached token is not used past its expiry.
func TestAppendAuthExpiry(t *testing.T) {
	e := newTokenEnv(t, Config{})
	if code, b := e.do(t, "POST", "/api/v1/evidence", e.expires, testEvidence(0)); code != http.StatusCreated {
		t.Fatalf("first POST: %d %s", code, b)
	}
	e.advance(2 * time.Hour)
	code, b := e.do(t, "POST", "/api/v1/evidence", e.expires, testEvidence(1))
	if ae := apiError(t, b); code != http.StatusUnauthorized || !strings.Contains(ae.Message, "expired") {
		t.Fatalf("append with the expired token: %d %s", code, b)
	}
}

// hookedAuth runs after, once, when an authentication through the store
// has succeeded: a change made between a request's check and its append.
type hookedAuth struct {
	ledger.Store
	after func()
	once  sync.Once
}

func (h *hookedAuth) Authenticate(ctx context.Context, secret string) (ledger.Token, error) {
	t, err := h.Store.Authenticate(ctx, secret)
	if err == nil {
		h.once.Do(h.after)
	}
	return t, err
}

// TestAppendAuthRevokedBeforeAppend: a token revoked by another process
// after the request's authentication and before its append (the window
// between the check and the use) is refused: the append's batch reads the
// row under the write lock, finds it revoked, and nothing is appended.
func TestAppendAuthRevokedBeforeAppend(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	st, err := sqlite.Open(ctx, sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	secret, _, err := st.CreateToken(ctx, "ci", ledger.ScopeRecord, nil)
	if err != nil {
		t.Fatal(err)
	}
	hooked := &hookedAuth{Store: tlog.NewVerifiedStore(st, st.Log, nil), after: func() {
		other, err := sqlite.Open(ctx, sqlite.Options{Path: path})
		if err != nil {
			t.Error(err)
			return
		}
		if err := other.RevokeToken(ctx, "ci"); err != nil {
			t.Error(err)
		}
		other.Close()
	}}
	s, err := New(Config{Store: hooked})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	defer hs.Close()
	e := &apiEnv{srv: hs, store: &teststore.Store{DriverStore: st, Log: st.Log, Lite: st}}
	size := e.size(t)
	code, b := e.do(t, "POST", "/api/v1/evidence", secret, testEvidence(0))
	if ae := apiError(t, b); code != http.StatusUnauthorized || !strings.Contains(ae.Message, "revoked") {
		t.Fatalf("append by a token revoked between its check and its append: %d %s", code, b)
	}
	// The revocation is one leaf; the evidence is not appended.
	if got := e.size(t); got != size+1 {
		t.Fatalf("log size %d, want %d (the revocation leaf only)", got, size+1)
	}
}

// advancingBody is a request body that moves the test clock forward when
// the handler first reads it: what a slow upload does to the time
// between a request's admission and its append.
type advancingBody struct {
	r       io.Reader
	advance func()
	once    sync.Once
}

func (b *advancingBody) Read(p []byte) (int, error) {
	b.once.Do(b.advance)
	return b.r.Read(p)
}

// TestAppendAuthExpiredDuringUpload: a token live when its request was
// admitted but expired by the time the append's batch runs (a body sent
// slowly) appends nothing, for a token authenticated through the store
// and for a cached one alike: the batch judges the row at its own clock.
func TestAppendAuthExpiredDuringUpload(t *testing.T) {
	for _, cached := range []bool{false, true} {
		t.Run(map[bool]string{false: "first request", true: "cached token"}[cached], func(t *testing.T) {
			e := newTokenEnv(t, Config{})
			if cached {
				if code, b := e.do(t, "POST", "/api/v1/evidence", e.expires, testEvidence(0)); code != http.StatusCreated {
					t.Fatalf("first POST: %d %s", code, b)
				}
			}
			size := e.size(t)
			// The clock moves when the server's handler reads the body,
			// after the request was admitted.
			inner := e.srv.Config.Handler
			e.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == "POST" {
					r.Body = io.NopCloser(&advancingBody{r: r.Body, advance: func() { e.advance(2 * time.Hour) }})
				}
				inner.ServeHTTP(w, r)
			})
			body, _ := json.Marshal(testEvidence(1))
			req, _ := http.NewRequest("POST", e.srv.URL+"/api/v1/evidence", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+e.expires)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if ae := apiError(t, b); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(ae.Message, "expired") {
				t.Fatalf("append by a token that expired during its upload: %d %s", resp.StatusCode, b)
			}
			if got := e.size(t); got != size {
				t.Fatalf("log grew from %d to %d", size, got)
			}
		})
	}
}
