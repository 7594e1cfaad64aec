package web

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger/storetest/teststore"
	"github.com/evidence-ledger/ledger/ledger/tlog"

	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
	"github.com/evidence-ledger/ledger/verify"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
)

// Fixtures of the adversarial tests (adversarial_test.go): environments
// with their tokens, releases and keys, and the assertions they share.

const (
	advHead     = "f8eec2476cdb5263fb6e2a19dd71f2c8b7c0a7d3"
	advReviewed = "fab0f39f69140393b454c32d6f4bf7a9b32f9dcc"
	advTree     = "1111111111111111111111111111111111111111"
)

// advRelease binds libmlx.dylib to advBound; the qmv gate does not repeat
// the release's artifacts (the component's artifacts bind it).
var (
	advBound = "sha256:" + strings.Repeat("aa", 32)
	advOther = "sha256:" + strings.Repeat("bb", 32)
)

func advRelease(version string, withTree bool) string {
	y := `version: ` + version + `
approval_role: release-manager
artifacts:
  libmlx.dylib: ` + advBound + `
components:
  - name: mlx
    repository: mlx
    head: ` + advHead + `
    reviewed: ` + advReviewed + `
    pins: ["CMakeLists.txt"]
    artifacts: [libmlx.dylib]
gates:
  - id: qmv
    kind: lane
    lane: qmv-bias-sum/v1
    component: mlx
    backends: [metal]
    cases: 216
`
	if withTree {
		y += `  - id: tree
    kind: tree-equivalence
`
	}
	return y
}

func advEvidence(lane string, arts map[string]string, f func(map[string]any)) map[string]any {
	start := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	subj := map[string]any{"repository": "mlx", "commit": advHead, "tree": advTree}
	if arts != nil {
		subj["artifacts"] = arts
	}
	e := map[string]any{
		"lane": lane, "subject": subj, "backend": "metal", "device": map[string]any{"model": "M3"}, "runner": map[string]any{"version": "ci"},
		"cases_exact": 216, "cases_total": 216, "control": "caught", "status": "passed",
		"started_at": start.Format(time.RFC3339Nano), "finished_at": start.Add(time.Minute).Format(time.RFC3339Nano),
	}
	if f != nil {
		f(e)
	}
	return e
}

func treeClaimEvidence(extra map[string]any) map[string]any {
	return advEvidence("tree-equivalence/v1", nil, func(e map[string]any) {
		e["backend"], e["control"], e["cases_exact"], e["cases_total"] = "external", "none", 1, 1
		d := map[string]any{"reviewed": advReviewed, "equivalent": true, "outside_pins": []string{}, "pins": []string{"CMakeLists.txt"}}
		for k, v := range extra {
			d[k] = v
		}
		e["details"] = d
	})
}

type advReadiness struct {
	Readiness struct {
		Ready    bool `json:"ready"`
		Approved bool `json:"approved"`
		Gates    []struct {
			ID       string `json:"id"`
			State    string `json:"state"`
			Reason   string `json:"reason"`
			Rule     string `json:"rule"`
			Baseline []struct {
				ID     string `json:"id"`
				Reason string `json:"reason"`
			} `json:"baseline"`
			Failing []struct {
				ID string `json:"id"`
			} `json:"failing"`
		} `json:"gates"`
		Approvals []struct {
			ID    string `json:"id"`
			State string `json:"state"`
			Why   string `json:"why"`
		} `json:"approvals"`
	} `json:"readiness"`
}

func (e *apiEnv) readiness(t *testing.T, version string) advReadiness {
	t.Helper()
	code, body := e.do(t, "GET", "/api/v1/releases/"+version+"/readiness", "", nil)
	if code != 200 {
		t.Fatalf("readiness: %d %s", code, body)
	}
	var rd advReadiness
	if err := json.Unmarshal(body, &rd); err != nil {
		t.Fatal(err)
	}
	return rd
}

// gate returns the state of gate id, its baseline reasons by evidence id
// and the ids of its failing records.
func (rd advReadiness) gate(t *testing.T, id string) (state string, baseline map[string]string, failing []string) {
	t.Helper()
	for _, g := range rd.Readiness.Gates {
		if g.ID == id {
			baseline = map[string]string{}
			for _, b := range g.Baseline {
				baseline[b.ID] = b.Reason
			}
			for _, f := range g.Failing {
				failing = append(failing, f.ID)
			}
			if g.Rule == "" {
				t.Errorf("gate %s carries no counting rule", id)
			}
			return g.State, baseline, failing
		}
	}
	t.Fatalf("no gate %s", id)
	return "", nil, nil
}

func (e *apiEnv) postOne(t *testing.T, token string, body any) string {
	t.Helper()
	code, out := e.do(t, "POST", "/api/v1/evidence", token, body)
	if code != 201 {
		t.Fatalf("post evidence: %d %s", code, out)
	}
	var r struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(out, &r); err != nil || r.ID == "" {
		t.Fatalf("post evidence answer %s: %v", out, err)
	}
	return r.ID
}

// wantRefused checks a 4xx answer naming field and that the log did not
// grow.
func (e *apiEnv) wantRefused(t *testing.T, what string, code int, body []byte, status int, field string, before uint64) {
	t.Helper()
	var apiErr APIError
	_ = json.Unmarshal(body, &apiErr)
	if code != status || (field != "" && apiErr.Field != field) {
		t.Fatalf("%s: %d %s; want %d naming %q", what, code, body, status, field)
	}
	if after := e.size(t); after != before {
		t.Fatalf("%s: the log grew from %d to %d", what, before, after)
	}
}

// advEnv is the API of TestAdversarialGatesOverHTTP with its admin
// tokens: admin holds release-manager, plainAdmin holds no role.
type advEnv struct {
	*apiEnv
	admin, plainAdmin string
}

// advSetup registers the policy trusting alice, defines release 1.0 bound
// to it, whose head is mallory's commit, and returns the environment.
func advSetup(t *testing.T) (*uploadEnv, *uploadFixture) {
	t.Helper()
	f := newUploadFixture(t)
	e := newUploadEnv(t, Config{})
	e.applyPolicy(t, "core-signers", f.policyYAML, map[string][]byte{"signers": f.signers})
	e.defineRelease(t, f.releaseYAML("1.0", f.evil, "core-signers"))
	return e, f
}

func (e *uploadEnv) requireNotReady(t *testing.T, version string) {
	t.Helper()
	code, body := e.do(t, "GET", "/api/v1/releases/"+version+"/readiness", "", nil)
	var sv struct {
		Readiness struct {
			Ready bool `json:"ready"`
			Gates []struct {
				ID    string `json:"id"`
				State string `json:"state"`
			} `json:"gates"`
		} `json:"readiness"`
	}
	json.Unmarshal(body, &sv)
	if code != 200 || sv.Readiness.Ready {
		t.Fatalf("release %s: %d ready=%v %s", version, code, sv.Readiness.Ready, body)
	}
	for _, g := range sv.Readiness.Gates {
		if g.State == "passed" && (g.ID == "heads" || g.ID == "tree") {
			t.Errorf("gate %s passed", g.ID)
		}
	}
}

func (e *uploadEnv) refused(t *testing.T, what, path, token string, body any, status int, field string) []byte {
	t.Helper()
	before := e.size(t)
	code, ans := e.do(t, "POST", path, token, body)
	if ae := apiErr(ans); code != status || ae.Field != field {
		t.Errorf("%s: %d %s; want %d naming %q", what, code, ans, status, field)
	}
	if e.size(t) != before {
		t.Errorf("%s: something was appended", what)
	}
	return ans
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// runnerEnv is an API on a temporary database with an admin token, a
// registered runner ci-mac (and other-runner), and release 9.9.9 whose one
// lane gate counts only evidence signed by ci-mac.
type runnerEnv struct {
	*apiEnv
	admin      string
	mac, other ed25519.PrivateKey
}

func newRunnerEnv(t *testing.T) *runnerEnv {
	t.Helper()
	e := &runnerEnv{apiEnv: newAPIEnv(t, Config{})}
	admin, _, err := e.store.CreateToken(context.Background(), "admin", ledger.ScopeAdmin, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.admin = admin
	e.mac, e.other = newKey(t), newKey(t)
	e.addRunner(t, "ci-mac", e.mac)
	e.addRunner(t, "other-runner", e.other)
	commit := fmt.Sprintf("%040x", 2) // testEvidence(1)'s
	rel := fmt.Sprintf(`version: 9.9.9
components:
  - {name: core, repository: github.com/ml-explore/mlx, reviewed: %s, head: %s}
gates:
  - {id: qmv, kind: lane, lane: qmv-bias-sum/v1, component: core, backends: [cpu], cases: 216, signed_by: [ci-mac]}
`, commit, commit)
	if code, body := e.do(t, http.MethodPut, "/api/v1/releases/9.9.9", e.admin, rel, "Content-Type", "application/yaml"); code != http.StatusCreated && code != http.StatusOK {
		t.Fatalf("define release: %d %s", code, body)
	}
	return e
}

func newKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return priv
}

func (e *runnerEnv) addRunner(t *testing.T, name string, priv ed25519.PrivateKey) {
	t.Helper()
	pub := verify.AuthorizedKey(priv.Public().(ed25519.PublicKey)) + " " + name + "@host"
	if code, body := e.do(t, http.MethodPost, "/api/v1/runners", e.admin, map[string]string{"name": name, "public_key": pub}); code != http.StatusCreated {
		t.Fatalf("add runner %s: %d %s", name, code, body)
	}
}

func sign(t *testing.T, priv ed25519.PrivateKey, ev map[string]any) []byte {
	t.Helper()
	body, _ := json.Marshal(ev)
	env, err := verify.SignEvidence(context.Background(), priv, body)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// gate returns release 9.9.9's qmv gate and whether the release is ready.
func (e *runnerEnv) gate(t *testing.T) (gates.GateResult, bool) {
	t.Helper()
	code, body := e.do(t, http.MethodGet, "/api/v1/releases/9.9.9/readiness", "", nil)
	if code != http.StatusOK {
		t.Fatalf("readiness: %d %s", code, body)
	}
	var sv gates.SignedVerdict
	if err := json.Unmarshal(body, &sv); err != nil || sv.Readiness == nil || len(sv.Readiness.Gates) != 1 {
		t.Fatalf("readiness: %v %s", err, body)
	}
	return sv.Readiness.Gates[0], sv.Readiness.Ready
}

func baselineHas(g gates.GateResult, reason string) bool {
	for _, b := range g.Baseline {
		if strings.Contains(b.Reason, reason) {
			return true
		}
	}
	return false
}

// dsseEnvelope signs payload under payloadType with priv through the DSSE
// library, so a test can build envelopes the ledger's own signer refuses
// to make.
func dsseEnvelope(t *testing.T, priv ed25519.PrivateKey, payloadType string, payload []byte) []byte {
	t.Helper()
	pae := dsse.PAE(payloadType, payload)
	env := ledger.Envelope{PayloadType: payloadType, Payload: base64.StdEncoding.EncodeToString(payload),
		Signatures: []ledger.EnvelopeSignature{{KeyID: verify.RunnerKeyID(priv.Public().(ed25519.PublicKey)), Sig: base64.StdEncoding.EncodeToString(ed25519.Sign(priv, pae))}}}
	b, _ := json.Marshal(env)
	return b
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

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

	counted *countingStore // the sqlite store, counting its Entries reads
	logBuf  *syncBuffer    // what the VerifiedStore logged
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
	// Served as `ledger serve` serves it: through the verified reads,
	// whose Authenticate checks each tokens row against its leaves.
	e.counted, e.logBuf = &countingStore{Store: st}, &syncBuffer{}
	cfg.Store = tlog.NewVerifiedStore(e.counted, st.Log, slog.New(slog.NewTextHandler(e.logBuf, nil)))
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
	e.apiEnv = &apiEnv{srv: hs, store: &teststore.Store{DriverStore: st, Log: st.Log, Lite: st}} // SQLite: the tests below copy and edit its file
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

// routeScope is the scope each route of routes.go declares: "public"
// (no token ever), read, record, admin, or "form" (the release page's
// forms, which take the token from the form and a CSRF token; refused
// without them). A route missing here fails the walk: a new route must
// say what it needs.
var routeScope = map[string]string{
	"GET /api/v1/originals/{id}":                 "read",
	"GET /originals/{id}":                        "read",
	"GET /api/v1/log/keys":                       "read",
	"GET /healthz":                               "public",
	"GET /metrics":                               "read", // --read-auth covers /metrics
	"GET /api/v1/openapi.yaml":                   "public",
	"POST /api/v1/evidence":                      "record",
	"GET /api/v1/evidence":                       "read",
	"GET /api/v1/evidence/{id}":                  "read",
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
	"POST /api/v1/runs":                          "run",
	"GET /api/v1/runs":                           "read",
	"GET /api/v1/runs/{id}":                      "read",
	"POST /api/v1/runs/{id}/cancel":              "run",
	"GET /api/v1/agents":                         "read",
	"POST /api/v1/agents/{name}/approve":         "admin",
	"POST /api/v1/agents/{name}/remove":          "admin",
	"POST /api/v1/agent/register":                "record", // and a request signature (agent_test.go)
	"POST /api/v1/agent/poll":                    "record",
	"POST /api/v1/agent/runs/{id}/heartbeat":     "record",
	"POST /api/v1/agent/runs/{id}/evidence":      "record",
	"POST /api/v1/agent/runs/{id}/finish":        "record",
	"GET /api/v1/overview":                       "read",
	"GET /api/v1/lanes/*":                        "read",
	"GET /api/v1/trajectories/*":                 "read",
	"GET /":                                      "read",
	"GET /evidence":                              "read",
	"GET /evidence/{id}":                         "read",
	"GET /entries/{id}":                          "read",
	"GET /heads":                                 "read",
	"GET /checkpoint":                            "read", // tlog-tiles (tiles.go)
	"GET /tile/*":                                "read",
	"GET /runs":                                  "read",
	"GET /agents":                                "read",
	"GET /lanes/*":                               "read",
	"GET /trajectories/*":                        "read",
	"GET /releases":                              "read",
	"GET /releases/{version}":                    "read",
	"POST /releases/{version}/waivers":           "form",
	"POST /releases/{version}/signoffs":          "form",
	"POST /releases/{version}/approvals":         "form",
	"POST /releases/{version}/supersedes":        "form",
	"POST /releases/{version}/runs":              "form",
	"GET /static/*":                              "public",
}

// countingStore is a sqlite store that counts its Entries and EntriesAt
// reads (the reads the token guard folds the token leaves with: by kind,
// or through the query index by leaf index).
type countingStore struct {
	*sqlite.Store
	entries atomic.Int64
	auths   atomic.Int64 // AuthenticateRow calls
}

func (c *countingStore) AuthenticateRow(ctx context.Context, secret string) (ledger.TokenRow, error) {
	c.auths.Add(1)
	return c.Store.AuthenticateRow(ctx, secret)
}

func (c *countingStore) Entries(ctx context.Context, f ledger.EntryFilter) ([]ledger.Entry, string, error) {
	c.entries.Add(1)
	return c.Store.Entries(ctx, f)
}

func (c *countingStore) EntriesAt(ctx context.Context, idx []uint64) ([]ledger.Entry, error) {
	c.entries.Add(1)
	return c.Store.EntriesAt(ctx, idx)
}

// attackerSecret is a token secret the attacker knows; its hash is what a
// raw-SQL edit puts into the tokens table.
const attackerSecret = "lgr_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

// jsonNames collects the JSON member names of the types, recursively
// through structs, slices, maps and pointers.
func jsonNames(into map[string]bool, types ...reflect.Type) {
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map || t.Kind() == reflect.Array {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			into[name] = true
			walk(f.Type)
		}
	}
	for _, t := range types {
		walk(t)
	}
}

// defineLaneRelease defines release version with one cpu lane gate on
// ev's lane, repository and commit (its reviewed and head commit): the
// release that ev, recorded, makes ready. The tokens env's log size is
// counted from after it.
func (e *tokenEnv) defineLaneRelease(t *testing.T, version string, ev map[string]any) {
	t.Helper()
	subj := ev["subject"].(map[string]any)
	yml := "version: " + version + "\ncomponents:\n  - {name: mlx, repository: " + subj["repository"].(string) + ", reviewed: " + subj["commit"].(string) + ", head: " + subj["commit"].(string) + "}\n" +
		"gates:\n  - {id: qmv, kind: lane, lane: " + ev["lane"].(string) + ", component: mlx, backends: [" + ev["backend"].(string) + "], cases: 216}\n"
	rel, err := gates.ParseRelease([]byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gates.Apply(context.Background(), e.store, rel); err != nil {
		t.Fatal(err)
	}
	e.base = 0
	e.base = e.size(t)
}

// putRelease applies a release definition through PUT /api/v1/releases
// with the admin token, failing the test unless it is accepted.
func (e *uploadEnv) putRelease(t *testing.T, version, yml string) {
	t.Helper()
	if code, body := e.do(t, "PUT", "/api/v1/releases/"+version, e.admin, yml, "Content-Type", "application/yaml"); code != 200 && code != 201 {
		t.Fatalf("put release %s: %d %s", version, code, body)
	}
}

// treeRelease is a release of the upload fixture's component core whose
// head is head, with the given pins, bound to policy core-signers, whose
// one gate is tree-equivalence gate tree.
func (f *uploadFixture) treeRelease(version, head, pins string) string {
	return "version: " + version + "\npolicy: core-signers\ncomponents:\n  - name: core\n    repository: " + upRepo +
		"\n    reviewed: " + f.reviewed + "\n    head: " + head + "\n    pins: " + pins + "\ngates:\n  - id: tree\n    kind: tree-equivalence\n"
}

// headsRelease is a release of component core whose head is head, with
// the given policy line (empty: none), whose one gate is signed-heads
// gate heads.
func (f *uploadFixture) headsRelease(version, head, policyLine string) string {
	return "version: " + version + "\n" + policyLine + "components:\n  - name: core\n    repository: " + upRepo +
		"\n    reviewed: " + f.reviewed + "\n    head: " + head + "\n    pins: [go.sum]\ngates:\n  - id: heads\n    kind: signed-heads\n"
}
