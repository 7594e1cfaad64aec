package web

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
	"github.com/go-chi/chi/v5"
)

// Adversarial tests of scoped, logged, expiring tokens (TRUST.md: a CI job
// must never be able to record outside its scope; state changes are
// leaves). Every request goes through the real HTTP API on a temporary
// database.

// tokenEnv is a server over a temporary store with a settable clock and
// the tokens the tests use.
type tokenEnv struct {
	*apiEnv
	mu  sync.Mutex
	now time.Time

	scoped  string // record, repository repo, lane "qmv-bias-sum" (any version), backend cuda
	admin   string
	expires string // record, expires in an hour
	revoked string // record, revoked
	path    string // the database file
}

const scopedRepo = "github.com/ml-explore/mlx"

func (e *tokenEnv) clock() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

func (e *tokenEnv) advance(d time.Duration) {
	e.mu.Lock()
	e.now = e.now.Add(d)
	e.mu.Unlock()
}

func newTokenEnv(t *testing.T, cfg Config) *tokenEnv {
	t.Helper()
	ctx := context.Background()
	e := &tokenEnv{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	e.path = filepath.Join(t.TempDir(), "ledger.db")
	st, err := sqlite.Open(ctx, sqlite.Options{Path: e.path, Now: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg.Store = st
	cfg.Now = e.clock
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	mk := func(spec ledger.TokenSpec) string {
		secret, _, err := st.CreateScopedToken(ctx, spec)
		if err != nil {
			t.Fatalf("create %s: %v", spec.Name, err)
		}
		return secret
	}
	e.apiEnv = &apiEnv{srv: hs, store: st}
	e.record = mk(ledger.TokenSpec{Name: "ci", Scope: ledger.ScopeRecord})
	e.read = mk(ledger.TokenSpec{Name: "reader", Scope: ledger.ScopeRead})
	e.admin = mk(ledger.TokenSpec{Name: "ops", Scope: ledger.ScopeAdmin})
	e.scoped = mk(ledger.TokenSpec{Name: "ci-cuda", Scope: ledger.ScopeRecord, Repositories: []string{scopedRepo}, Lanes: []string{"qmv-bias-sum"}, Backends: []ledger.Backend{ledger.BackendCUDA}})
	in := e.now.Add(time.Hour)
	e.expires = mk(ledger.TokenSpec{Name: "ci-short", Scope: ledger.ScopeRecord, ExpiresAt: &in})
	e.revoked = mk(ledger.TokenSpec{Name: "ci-old", Scope: ledger.ScopeRecord})
	if err := st.RevokeToken(ctx, "ci-old"); err != nil {
		t.Fatal(err)
	}
	e.base = 0
	e.base = e.size(t)
	return e
}

// cudaEvidence is testEvidence(n) on the cuda backend: inside the scoped
// token's scope.
func cudaEvidence(n int) map[string]any {
	ev := testEvidence(n)
	ev["backend"] = "cuda"
	return ev
}

func apiError(t *testing.T, body []byte) APIError {
	t.Helper()
	var ae APIError
	if err := json.Unmarshal(body, &ae); err != nil || ae.Code == "" {
		t.Fatalf("not an error body: %s", body)
	}
	return ae
}

// TestScopedTokenRefusesEvidenceOutOfScope: evidence about another
// repository, lane or backend is refused with 403 naming the field, and
// nothing is appended, also when one record of an array is out of scope.
func TestScopedTokenRefusesEvidenceOutOfScope(t *testing.T) {
	e := newTokenEnv(t, Config{})
	otherRepo := cudaEvidence(1)
	otherRepo["subject"].(map[string]any)["repository"] = "github.com/evil/mlx"
	otherLane := cudaEvidence(2)
	otherLane["lane"] = "qmv-bias-prod/v1"
	otherBackend := testEvidence(3) // cpu
	for _, c := range []struct {
		name  string
		body  any
		field string
	}{
		{"other repository", otherRepo, "subject.repository"},
		{"other lane", otherLane, "lane"},
		{"other backend", otherBackend, "backend"},
		{"array with one out of scope", []any{cudaEvidence(4), cudaEvidence(5), otherBackend}, "[2].backend"},
		{"array out of scope first", []any{otherLane, cudaEvidence(6)}, "[0].lane"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, body := e.do(t, "POST", "/api/v1/evidence", e.scoped, c.body)
			if code != http.StatusForbidden {
				t.Fatalf("status %d, want 403: %s", code, body)
			}
			ae := apiError(t, body)
			if ae.Field != c.field || !strings.Contains(ae.Message, "ci-cuda") {
				t.Fatalf("field %q (%s), want %q naming the token", ae.Field, ae.Message, c.field)
			}
			if n := e.size(t); n != 0 {
				t.Fatalf("%d leaves appended", n)
			}
		})
	}
	// In scope: any version of the scoped lane, on cuda, in the repository.
	v2 := cudaEvidence(7)
	v2["lane"] = "qmv-bias-sum/v2"
	for _, body := range []any{cudaEvidence(8), v2} {
		if code, b := e.do(t, "POST", "/api/v1/evidence", e.scoped, body); code != http.StatusCreated {
			t.Fatalf("in scope: %d %s", code, b)
		}
	}
	// An unscoped record token records any of them.
	if code, b := e.do(t, "POST", "/api/v1/evidence", e.record, otherBackend); code != http.StatusCreated {
		t.Fatalf("unscoped token: %d %s", code, b)
	}
}

// TestRecordedByIsSetByTheServer: each record carries the token that
// recorded it, in the leaf (so the audit covers it), in the API answer and
// on its page; a caller that sets recorded_by, however it spells the
// member, is refused whole.
func TestRecordedByIsSetByTheServer(t *testing.T) {
	e := newTokenEnv(t, Config{})
	code, body := e.do(t, "POST", "/api/v1/evidence", e.scoped, cudaEvidence(1))
	if code != http.StatusCreated {
		t.Fatalf("POST: %d %s", code, body)
	}
	var res AppendedJSON
	json.Unmarshal(body, &res)
	toks, _ := e.store.Tokens(context.Background())
	var id string
	for _, tk := range toks {
		if tk.Name == "ci-cuda" {
			id = tk.ID
		}
	}
	code, body = e.do(t, "GET", "/api/v1/evidence/"+res.ID, "", nil)
	var got EvidenceJSON
	json.Unmarshal(body, &got)
	rb := got.Evidence.RecordedBy
	if code != 200 || rb == nil || rb.Token == nil || rb.Token.ID != id || rb.Token.Name != "ci-cuda" || rb.Runner != nil {
		t.Fatalf("recorded_by: %d %+v (%s)", code, rb, body)
	}
	if !strings.Contains(got.Leaf, `"recorded_by":{"token":{"id":"`+id+`","name":"ci-cuda"}}`) {
		t.Fatalf("recorded_by is not in the leaf: %s", got.Leaf)
	}
	code, page := e.do(t, "GET", "/evidence/"+res.ID, "", nil)
	if code != 200 || !strings.Contains(string(page), "token <strong>ci-cuda</strong> (<code>"+id+"</code>)") {
		t.Fatalf("evidence page does not show who recorded it: %d", code)
	}
	// The same record sent by another token is another leaf: who recorded
	// it is part of what was recorded.
	code, body = e.do(t, "POST", "/api/v1/evidence", e.record, cudaEvidence(1))
	var res2 AppendedJSON
	json.Unmarshal(body, &res2)
	if code != http.StatusCreated || res2.ID == res.ID {
		t.Fatalf("same record by another token: %d %s", code, body)
	}

	before := e.size(t)
	withRB := cudaEvidence(2)
	withRB["recorded_by"] = map[string]any{"token": map[string]any{"id": id, "name": "ci-cuda"}}
	nullRB := cudaEvidence(3)
	nullRB["recorded_by"] = nil
	raw, _ := json.Marshal(cudaEvidence(4))
	escaped := `{"recorded\u005fby":{"runner":{"name":"ci-mac","key_id":"SHA256:x"}},` + string(raw[1:])
	for _, c := range []struct {
		name  string
		body  any
		field string
	}{
		{"object", withRB, "recorded_by"},
		{"null", nullRB, "recorded_by"},
		{"escaped member name", escaped, "recorded_by"},
		{"in an array", []any{cudaEvidence(5), withRB}, "[1].recorded_by"},
	} {
		code, body := e.do(t, "POST", "/api/v1/evidence", e.record, c.body)
		if code != http.StatusBadRequest || apiError(t, body).Field != c.field {
			t.Errorf("%s: %d %s, want 400 naming %s", c.name, code, body, c.field)
		}
	}
	if e.size(t) != before {
		t.Fatal("a refused request appended")
	}
}

// TestExpiredAndRevokedTokens: an expired token is 401 "token expired", a
// revoked one 401; neither message names the secret.
func TestExpiredAndRevokedTokens(t *testing.T) {
	e := newTokenEnv(t, Config{})
	if code, b := e.do(t, "POST", "/api/v1/evidence", e.expires, testEvidence(1)); code != http.StatusCreated {
		t.Fatalf("before expiry: %d %s", code, b)
	}
	e.advance(time.Hour)
	n := e.size(t)
	for _, c := range []struct{ name, secret, want string }{
		{"expired", e.expires, "token expired"},
		{"revoked", e.revoked, "revoked"},
	} {
		code, body := e.do(t, "POST", "/api/v1/evidence", c.secret, testEvidence(2))
		ae := apiError(t, body)
		if code != http.StatusUnauthorized || !strings.Contains(ae.Message, c.want) {
			t.Errorf("%s: %d %s, want 401 %q", c.name, code, body, c.want)
		}
		if strings.Contains(string(body), c.secret) || strings.Contains(string(body), c.secret[4:20]) {
			t.Errorf("%s: the answer names the secret", c.name)
		}
		// Reads refuse it too, where reads need a token.
		if code, _ := e.do(t, "GET", "/api/v1/evidence", c.secret, nil); code != http.StatusUnauthorized {
			t.Errorf("%s: GET with it: %d, want 401", c.name, code)
		}
	}
	if e.size(t) != n {
		t.Fatal("an expired or revoked token appended")
	}
}

// TestRecordTokenCannotMakeTokens: no route lets a record token create a
// token or append a token leaf: a token leaf posted as evidence is refused
// as unknown members, and the tokens table does not change.
func TestRecordTokenCannotMakeTokens(t *testing.T) {
	e := newTokenEnv(t, Config{})
	before, _ := e.store.Tokens(context.Background())
	leaf := map[string]any{"token_id": "tok_00112233aabb", "name": "mine", "scope": "admin", "roles": []string{},
		"repositories": []string{}, "lanes": []string{}, "backends": []string{}, "expires_at": nil,
		"secret_sha256": ledger.SecretSHA256("lgr_mine"), "created_at": "2026-12-01T00:00:00Z"}
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/api/v1/evidence", leaf},
		{"POST", "/api/v1/evidence", map[string]any{"kind": "token", "body": leaf}},
		{"POST", "/api/v1/evidence", []any{testEvidence(1), leaf}},
		{"POST", "/api/v1/tokens", map[string]any{"name": "mine", "scope": "admin"}},
		{"PUT", "/api/v1/tokens/mine", map[string]any{"scope": "admin"}},
		{"POST", "/api/v1/policies", map[string]any{"name": "mine"}},
		{"POST", "/api/v1/log/entries", map[string]any{"kind": "token", "body": leaf}},
	} {
		code, body := e.do(t, c.method, c.path, e.record, c.body)
		if code < 400 || code >= 500 {
			t.Errorf("%s %s: %d %s, want a refusal", c.method, c.path, code, body)
		}
	}
	if e.size(t) != 0 {
		t.Fatal("a refused request appended")
	}
	after, _ := e.store.Tokens(context.Background())
	if len(after) != len(before) {
		t.Fatalf("tokens: %d before, %d after", len(before), len(after))
	}
	if code, _ := e.do(t, "GET", "/api/v1/evidence", "lgr_mine", nil); code != http.StatusUnauthorized {
		t.Fatalf("the posted secret authenticates: %d", code)
	}
}

// routeScope is the scope each route of routes.go declares: "public"
// (no token ever), read, record, admin, or "form" (the release page's
// forms, which take the token from the form and a CSRF token; refused
// without them). A route missing here fails the walk: a new route must
// say what it needs.
var routeScope = map[string]string{
	"GET /healthz":                               "public",
	"GET /metrics":                               "read", // --read-auth covers /metrics
	"GET /api/v1/openapi.yaml":                   "public",
	"POST /api/v1/evidence":                      "record",
	"GET /api/v1/evidence":                       "read",
	"GET /api/v1/evidence/{id}":                  "read",
	"GET /api/v1/originals/{id}":                 "read",
	"GET /originals/{id}":                        "read",
	"GET /api/v1/evidence/{id}/proof":            "read",
	"GET /api/v1/log/checkpoint":                 "read",
	"GET /api/v1/log/key":                        "read",
	"GET /api/v1/log/entries":                    "read",
	"GET /api/v1/log/entries/{id}":               "read",
	"GET /api/v1/log/leaves/{index}":             "read",
	"GET /api/v1/log/proof/inclusion":            "read",
	"GET /api/v1/log/proof/consistency":          "read",
	"GET /api/v1/log/witnesses":                  "read",
	"GET /api/v1/log/checkpoints":                "read",
	"GET /api/v1/heads":                          "read",
	"POST /api/v1/heads/verify":                  "record",
	"GET /api/v1/releases":                       "read",
	"PUT /api/v1/releases/{version}":             "admin",
	"GET /api/v1/releases/{version}":             "read",
	"GET /api/v1/releases/{version}/readiness":   "read",
	"POST /api/v1/releases/{version}/waivers":    "admin",
	"POST /api/v1/releases/{version}/signoffs":   "record",
	"POST /api/v1/releases/{version}/approvals":  "admin",
	"POST /api/v1/releases/{version}/supersedes": "admin",
	"POST /api/v1/policies":                      "admin",
	"GET /api/v1/policies":                       "read",
	"GET /api/v1/policies/{ref}":                 "read",
	"GET /api/v1/runners":                        "read",
	"POST /api/v1/runners":                       "admin",
	"POST /api/v1/runners/{name}/revoke":         "admin",
	"POST /api/v1/trees/verify":                  "record",
	"GET /api/v1/overview":                       "read",
	"GET /api/v1/lanes/*":                        "read",
	"GET /api/v1/trajectories/*":                 "read",
	"GET /":                                      "read",
	"GET /evidence":                              "read",
	"GET /evidence/{id}":                         "read",
	"GET /entries/{id}":                          "read",
	"GET /heads":                                 "read",
	"GET /lanes/*":                               "read",
	"GET /trajectories/*":                        "read",
	"GET /releases/{version}":                    "read",
	"POST /releases/{version}/waivers":           "form",
	"POST /releases/{version}/signoffs":          "form",
	"POST /releases/{version}/approvals":         "form",
	"POST /releases/{version}/supersedes":        "form",
	"GET /static/*":                              "public",
}

// TestEveryRouteHonoursItsScope walks every route of the router (chi.Walk)
// with no token, a read token, a record token (scoped and not), an
// expired token and an admin token, on a server whose reads need a token,
// and checks each answer against the route's declared scope: refused with
// 401 without a (live) token, 403 with a token below the scope, and never
// 401 or 403 with one that has it.
func TestEveryRouteHonoursItsScope(t *testing.T) {
	e := newTokenEnv(t, Config{ReadAuth: true, AuthFailures: -1}) // the walk fails authentication hundreds of times on purpose
	e.advance(2 * time.Hour)                                      // e.expires has expired
	rank := map[string]int{"public": 0, "read": 1, "record": 2, "admin": 3}
	callers := []struct {
		name, secret string
		rank         int
		live         bool
	}{
		{"no token", "", 0, false},
		{"expired", e.expires, 0, false},
		{"revoked", e.revoked, 0, false},
		{"read", e.read, 1, true},
		{"record", e.record, 2, true},
		{"scoped record", e.scoped, 2, true},
		{"admin", e.admin, 3, true},
	}
	seen := 0
	err := chi.Walk(e.srv.Config.Handler.(*Server).Router(), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		key := method + " " + strings.TrimSuffix(route, "/")
		if route == "/" {
			key = method + " /"
		}
		scope, ok := routeScope[key]
		if !ok {
			t.Errorf("route %s has no declared scope in routeScope: add it", key)
			return nil
		}
		seen++
		path := strings.NewReplacer("{version}", "0.9.0", "{id}", strings.Repeat("a", 32), "{index}", "0", "*", "x").Replace(route)
		for _, c := range callers {
			var body any
			if method != "GET" {
				body = map[string]any{}
			}
			if scope == "form" {
				body = "csrf=x"
			}
			if key == "POST /api/v1/evidence" {
				body = cudaEvidence(c.rank) // in every record token's scope
			}
			code, out := e.do(t, method, path, c.secret, body)
			switch {
			case scope == "public":
				if code == 401 || code == 403 {
					t.Errorf("%s as %s: %d, but the route is public", key, c.name, code)
				}
			case scope == "form":
				if code < 400 || code >= 500 {
					t.Errorf("%s as %s without a form token: %d %s", key, c.name, code, out)
				}
			case !c.live:
				if code != 401 {
					t.Errorf("%s as %s: %d, want 401 (%s)", key, c.name, code, out)
				}
			case c.rank < rank[scope]:
				if code != 403 {
					t.Errorf("%s as %s: %d, want 403 (%s)", key, c.name, code, out)
				}
			default:
				if code == 401 || code == 403 {
					t.Errorf("%s as %s: %d, but the token has scope %s (%s)", key, c.name, code, scope, out)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < len(routeScope)-2 {
		t.Fatalf("walked %d declared routes of %d", seen, len(routeScope))
	}
}

// TestAuditCatchesEditedTokensTable: the tokens table is a projection of
// the token leaves, so a row edited by raw SQL on a stopped copy (scope
// widened, expiry removed, revocation deleted, a row inserted or deleted,
// a secret hash swapped) fails `ledger audit` naming the token.
func TestAuditCatchesEditedTokensTable(t *testing.T) {
	e := newTokenEnv(t, Config{})
	ctx := context.Background()
	for i := range 3 {
		if code, b := e.do(t, "POST", "/api/v1/evidence", e.scoped, cudaEvidence(i)); code != http.StatusCreated {
			t.Fatalf("POST: %d %s", code, b)
		}
	}
	dir := t.TempDir()
	copyOf := func(name string) string {
		p := filepath.Join(dir, name+".db")
		if err := e.store.Backup(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	audit := func(path string) ledger.AuditReport {
		st, err := sqlite.Open(ctx, sqlite.Options{Path: path, KeyDir: filepath.Dir(e.path), ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		rep, err := st.Audit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := audit(copyOf("clean")); !rep.OK {
		t.Fatalf("untouched copy fails the audit: %s", rep.Problem)
	}
	for _, c := range []struct{ name, sql, want string }{
		{"repository scope widened", `UPDATE tokens SET repositories = '[]' WHERE name = 'ci-cuda'`, "repositories differs"},
		{"lane scope widened", `UPDATE tokens SET lanes = '["qmv-bias-sum","other"]' WHERE name = 'ci-cuda'`, "lanes differs"},
		{"backend scope removed", `UPDATE tokens SET backends = '[]' WHERE name = 'ci-cuda'`, "backends differs"},
		{"scope raised to admin", `UPDATE tokens SET scope = 'admin' WHERE name = 'ci'`, "scope differs"},
		{"role added", `UPDATE tokens SET roles = '["release-manager"]' WHERE name = 'ci'`, "roles differs"},
		{"expiry removed", `UPDATE tokens SET expires_at = NULL WHERE name = 'ci-short'`, "expires_at differs"},
		{"expiry extended", `UPDATE tokens SET expires_at = expires_at + 3600000000000 WHERE name = 'ci-short'`, "expires_at differs"},
		{"revocation deleted", `UPDATE tokens SET revoked_at = NULL, revoked_idx = NULL WHERE name = 'ci-old'`, "revoked_at differs"},
		{"revocation deleted, index kept", `UPDATE tokens SET revoked_at = NULL WHERE name = 'ci-old'`, "revoked_at differs"},
		{"secret hash swapped", `UPDATE tokens SET secret_hash = randomblob(32) WHERE name = 'ci'`, "secret_hash differs"},
		{"row renamed", `UPDATE tokens SET name = 'ci2' WHERE name = 'ci'`, "name differs"},
		{"row inserted", `INSERT INTO tokens(id, name, scope, secret_hash, created_at) VALUES ('tok_00112233aabb', 'evil', 'admin', randomblob(32), 1)`, "has no token leaf (a row was inserted)"},
		{"row inserted posing as made before schema 7", `INSERT INTO tokens(id, name, scope, secret_hash, created_at, leaf_idx) VALUES ('tok_00112233aabb', 'evil', 'admin', randomblob(32), 1, -1)`, "made before schema 7 and is not logged"},
		{"row deleted", `DELETE FROM tokens WHERE name = 'reader'`, "has no row for it (a row was deleted)"},
		{"leaf index moved", `UPDATE tokens SET leaf_idx = leaf_idx + 1 WHERE name = 'ci'`, "leaf_idx differs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := copyOf(strings.ReplaceAll(c.name, " ", "-"))
			db, err := sql.Open("sqlite", "file:"+p)
			if err != nil {
				t.Fatal(err)
			}
			res, err := db.Exec(c.sql)
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				t.Fatalf("%d rows changed", n)
			}
			db.Close()
			rep := audit(p)
			if rep.OK || !strings.Contains(rep.Problem, c.want) {
				t.Fatalf("audit: ok=%v %q, want a problem containing %q", rep.OK, rep.Problem, c.want)
			}
		})
	}
}
