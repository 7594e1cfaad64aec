package web

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/evidence-ledger/ledger/verify"
)

// regRequest is a valid registration of agent name with key priv: a cpu
// agent with label gpu=none, device "Test CPU" with 8 cores and 16 GiB.
func regRequest(name string, priv ed25519.PrivateKey) runs.RegisterRequest {
	return runs.RegisterRequest{
		Name: name, PublicKey: verify.AuthorizedKey(priv.Public().(ed25519.PublicKey)), Backend: ledger.BackendCPU,
		Labels: map[string]string{"gpu": "none"},
		Spec: runs.AgentSpec{Lanes: []string{"qmv-bias-sum/v1"}, Repository: runFormRepo, Commit: fmt.Sprintf("%040x", 2),
			Device: ledger.Device{Model: "Test CPU", Driver: "none", Cores: 8}, DeviceCount: 1, MemoryBytes: 16 << 30,
			Runner: ledger.RunnerBuild{Version: "v1.0.0", Commit: "abc"}, Host: "host1"},
		Health: "ok",
	}
}

// register posts req to POST /api/v1/agent/register with the record
// token, signed with priv as `ledger agent` signs it, and returns the
// status and body.
func (e *runFormEnv) register(t *testing.T, priv ed25519.PrivateKey, req runs.RegisterRequest) (int, []byte) {
	t.Helper()
	return e.registerAs(t, e.tokens["record"], priv, req)
}

// registerAs is register with the token secret tok.
func (e *runFormEnv) registerAs(t *testing.T, tok string, priv ed25519.PrivateKey, req runs.RegisterRequest) (int, []byte) {
	t.Helper()
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	hr, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/api/v1/agent/register", bytes.NewReader(body))
	date, sig := runs.SignRequest(priv, http.MethodPost, "/agent/register", req.Name, time.Now(), body)
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", "Bearer "+tok)
	hr.Header.Set(runs.HeaderAgent, req.Name)
	hr.Header.Set(runs.HeaderAgentDate, date)
	hr.Header.Set(runs.HeaderAgentSig, sig)
	return doReq(t, hr)
}

// call sends body as JSON with token tok and returns the status and body.
func (e *runFormEnv) call(t *testing.T, method, path, tok string, body any) (int, []byte) {
	t.Helper()
	hr, _ := http.NewRequest(method, e.srv.URL+path, strings.NewReader(mustJSON(body)))
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", "Bearer "+e.tokens[tok])
	return doReq(t, hr)
}

func doReq(t *testing.T, hr *http.Request) (int, []byte) {
	t.Helper()
	res, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

func keyID(priv ed25519.PrivateKey) string {
	return verify.RunnerKeyID(priv.Public().(ed25519.PublicKey))
}

// listed returns agent name as GET /api/v1/agents lists it.
func (e *runFormEnv) listed(t *testing.T, name string) (runs.AgentInfo, bool) {
	t.Helper()
	code, b := e.call(t, http.MethodGet, "/api/v1/agents", "read", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /api/v1/agents: %d %s", code, b)
	}
	var out struct {
		Agents []runs.AgentInfo `json:"agents"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	for _, a := range out.Agents {
		if a.Name == name {
			return a, true
		}
	}
	return runs.AgentInfo{}, false
}

// TestAgentPendingRegistrationNotTakenOver: a waiting agent's name cannot
// be re-registered with another key by another record token (409 naming
// `ledger agent remove`, the stored key unchanged), so the admin's
// approval approves the legitimate key; approve with a key_id that is not
// the registered one is refused appending nothing; the agent restarting
// with its own key still registers; after `remove` the name is free.
func TestAgentPendingRegistrationNotTakenOver(t *testing.T) {
	e := newRunFormEnv(t)
	legit, attacker := newKey(t), newKey(t)
	if code, b := e.register(t, legit, regRequest("gpu1", legit)); code != http.StatusOK {
		t.Fatalf("legitimate registration: %d %s", code, b)
	}
	code, b := e.register(t, attacker, regRequest("gpu1", attacker))
	if code != http.StatusConflict || !strings.Contains(string(b), "ledger agent remove gpu1") || !strings.Contains(string(b), keyID(legit)) {
		t.Fatalf("takeover of a waiting registration: %d %s, want 409 naming the stored key and ledger agent remove", code, b)
	}
	if a, _ := e.listed(t, "gpu1"); a.KeyID != keyID(legit) {
		t.Fatalf("after the takeover attempt the listed key is %s, want %s", a.KeyID, keyID(legit))
	}
	before := e.size(t)
	code, b = e.call(t, http.MethodPost, "/api/v1/agents/gpu1/approve", "admin", map[string]any{"key_id": keyID(attacker)})
	if code != http.StatusConflict || apiError(t, b).Field != "key_id" {
		t.Fatalf("approve with another key id: %d %s, want 409 naming key_id", code, b)
	}
	if n := e.size(t); n != before {
		t.Fatalf("a refused approval appended %d leaves", n-before)
	}
	code, b = e.call(t, http.MethodPost, "/api/v1/agents/gpu1/approve", "admin", map[string]any{"key_id": keyID(legit)})
	if code != http.StatusCreated || !strings.Contains(string(b), keyID(legit)) {
		t.Fatalf("approve with the registered key id: %d %s", code, b)
	}
	if a, _ := e.listed(t, "gpu1"); !a.Approved || a.KeyID != keyID(legit) {
		t.Fatalf("listed %+v, want approved with the legitimate key", a.Agent)
	}
	// A restart with the same key keeps the approval.
	if code, b := e.register(t, legit, regRequest("gpu1", legit)); code != http.StatusOK || !registeredApproved(t, b) {
		t.Fatalf("restart with the same key: %d %s", code, b)
	}
	// The approved name is not taken over either.
	if code, b := e.register(t, attacker, regRequest("gpu1", attacker)); code != http.StatusConflict {
		t.Fatalf("takeover of an approved registration: %d %s", code, b)
	}

	// remove: admin only; it revokes the approved key and frees the name.
	if code, _ := e.call(t, http.MethodPost, "/api/v1/agents/gpu1/remove", "record", map[string]any{}); code != http.StatusForbidden {
		t.Fatalf("remove with a record token: %d, want 403", code)
	}
	code, b = e.call(t, http.MethodPost, "/api/v1/agents/gpu1/remove", "admin", map[string]any{})
	var rm struct {
		Registered bool   `json:"registered"`
		Revoked    string `json:"revoked_key_id"`
	}
	if code != http.StatusOK || json.Unmarshal(b, &rm) != nil || rm.Revoked != keyID(legit) || !rm.Registered {
		t.Fatalf("remove: %d %s, want the key revoked and the registration deleted", code, b)
	}
	if _, ok := e.listed(t, "gpu1"); ok {
		t.Fatal("a removed agent is still listed")
	}
	if code, _ := e.call(t, http.MethodPost, "/api/v1/agents/gpu1/remove", "admin", map[string]any{}); code != http.StatusNotFound {
		t.Fatalf("remove of an unknown agent: %d, want 404", code)
	}
	fresh := newKey(t)
	if code, b := e.register(t, fresh, regRequest("gpu1", fresh)); code != http.StatusOK || registeredApproved(t, b) {
		t.Fatalf("registration after remove: %d %s, want 200 waiting for approval", code, b)
	}
}

// size is the log's tree size.
func (e *runFormEnv) size(t *testing.T) uint64 {
	t.Helper()
	cp, err := e.st.Checkpoint(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return cp.Size
}

// TestApprovedAgentCannotChangeHardware: an approved agent's registration
// that changes its backend, labels, device model, cores, memory or count
// is refused (409 naming the field) and the stored registration and its
// approval stay as they were; a restart that changes only the build,
// driver, lanes or health is accepted and stays approved.
func TestApprovedAgentCannotChangeHardware(t *testing.T) {
	e := newRunFormEnv(t)
	priv := newKey(t)
	if code, b := e.register(t, priv, regRequest("cpu1", priv)); code != http.StatusOK {
		t.Fatalf("register: %d %s", code, b)
	}
	e.api(t, http.MethodPost, "/api/v1/agents/cpu1/approve", "admin", map[string]any{}, http.StatusCreated)
	for _, c := range []struct {
		field string
		edit  func(*runs.RegisterRequest)
	}{
		{"backend", func(r *runs.RegisterRequest) { r.Backend = ledger.BackendCUDA }},
		{"labels", func(r *runs.RegisterRequest) { r.Labels = map[string]string{"gpu": "h200"} }},
		{"labels", func(r *runs.RegisterRequest) { r.Labels["extra"] = "1" }},
		{"spec.device.model", func(r *runs.RegisterRequest) { r.Spec.Device.Model = "NVIDIA H200" }},
		{"spec.device.cores", func(r *runs.RegisterRequest) { r.Spec.Device.Cores = 132 }},
		{"spec.device_count", func(r *runs.RegisterRequest) { r.Spec.DeviceCount = 8 }},
		{"spec.memory_bytes", func(r *runs.RegisterRequest) { r.Spec.MemoryBytes = 2 << 40 }},
		{"spec.cpus", func(r *runs.RegisterRequest) { r.Spec.CPUs = 128 }},
		{"spec.repository", func(r *runs.RegisterRequest) { r.Spec.Repository = "github.com/evil/x" }},
		{"spec.device.attrs.memory_bytes", func(r *runs.RegisterRequest) {
			r.Spec.Device.Attrs = map[string]string{"memory_bytes": "150754820096"}
		}},
	} {
		req := regRequest("cpu1", priv)
		c.edit(&req)
		code, b := e.register(t, priv, req)
		if code != http.StatusConflict || apiError(t, b).Field != c.field || !strings.Contains(string(b), "ledger agent remove cpu1") {
			t.Errorf("approved agent changes %s: %d %s, want 409 naming it", c.field, code, b)
		}
		a, _ := e.listed(t, "cpu1")
		if !a.Approved || a.Backend != ledger.BackendCPU || a.Spec.Device.Model != "Test CPU" || a.Labels["gpu"] != "none" || len(a.Labels) != 1 {
			t.Fatalf("after a refused change of %s the agent is listed %+v", c.field, a.Agent)
		}
	}
	req := regRequest("cpu1", priv)
	req.Spec.Runner = ledger.RunnerBuild{Version: "v1.0.1", Commit: "def"}
	req.Spec.Device.Driver = "other"
	req.Spec.Lanes = []string{"qmv-bias-sum/v1", "alloc-footprint/v1"}
	req.Health = "degraded"
	if code, b := e.register(t, priv, req); code != http.StatusOK || !registeredApproved(t, b) {
		t.Fatalf("restart with a new build, driver, lanes and health: %d %s, want 200 approved", code, b)
	}
	// A waiting agent may still change what it declares before approval.
	other := newKey(t)
	if code, _ := e.register(t, other, regRequest("cpu2", other)); code != http.StatusOK {
		t.Fatal("register cpu2")
	}
	req = regRequest("cpu2", other)
	req.Backend = ledger.BackendCUDA
	if code, b := e.register(t, other, req); code != http.StatusOK {
		t.Fatalf("waiting agent changes its backend: %d %s, want 200", code, b)
	}
}

// TestAgentRegistrationTextChecks: registration text fields get the
// evidence text checks (control characters, length caps): each hostile
// variant is refused 400 naming its field and nothing is stored; a
// health verdict is stored without control characters; a row stored
// with control characters (before these checks) is listed by the API and
// the /agents page with them escaped, never raw.
func TestAgentRegistrationTextChecks(t *testing.T) {
	e := newRunFormEnv(t)
	priv := newKey(t)
	long := strings.Repeat("x", 100<<10)
	for _, c := range []struct {
		field string
		edit  func(*runs.RegisterRequest)
	}{
		{"spec.device.model", func(r *runs.RegisterRequest) { r.Spec.Device.Model = "H200\x1b[2J\x1b[31mAPPROVED" }},
		{"spec.device.driver", func(r *runs.RegisterRequest) { r.Spec.Device.Driver = "550\x00" }},
		{"spec.device.driver", func(r *runs.RegisterRequest) { r.Spec.Device.Driver = long }},
		{"spec.runner.version", func(r *runs.RegisterRequest) { r.Spec.Runner.Version = "v1\a" }},
		{"spec.runner.commit", func(r *runs.RegisterRequest) { r.Spec.Runner.Commit = strings.Repeat("a", ledger.MaxShortText+1) }},
		{"spec.host", func(r *runs.RegisterRequest) { r.Spec.Host = "h\r\nX-Injected: 1" }},
		{"spec.repository", func(r *runs.RegisterRequest) { r.Spec.Repository = "github.com/x\x1b]0;t\a" }},
		{"spec.commit", func(r *runs.RegisterRequest) { r.Spec.Commit = "abc\x7f" }},
		{"spec.device.attrs", func(r *runs.RegisterRequest) { r.Spec.Device.Attrs = map[string]string{"k\x1b": "v"} }},
		{"spec.device.attrs.k", func(r *runs.RegisterRequest) { r.Spec.Device.Attrs = map[string]string{"k": "\u0085"} }},
		{"spec.lanes[0]", func(r *runs.RegisterRequest) { r.Spec.Lanes = []string{"qmv\x1b"} }},
		{"labels", func(r *runs.RegisterRequest) { r.Labels = map[string]string{"gpu": "h\x1b"} }},
		{"spec.device.model", func(r *runs.RegisterRequest) { r.Spec.Device.Model = "NVIDIA H200\u200b" }},
		{"spec.host", func(r *runs.RegisterRequest) { r.Spec.Host = "gpu-host\u00a0prod" }},
		{"spec.runner.version", func(r *runs.RegisterRequest) { r.Spec.Runner.Version = "v1.0\u2028x" }},
	} {
		req := regRequest("text1", priv)
		c.edit(&req)
		code, b := e.register(t, priv, req)
		if code != http.StatusBadRequest || apiError(t, b).Field != c.field {
			t.Errorf("%s: %d %s, want 400 naming it", c.field, code, b)
		}
		if bytes.Contains(b, []byte("\x1b")) || bytes.Contains(b, []byte(long[:1024])) {
			t.Errorf("%s: the error echoes the hostile value", c.field)
		}
		if _, ok := e.listed(t, "text1"); ok {
			t.Fatalf("%s: a refused registration was stored", c.field)
		}
	}
	req := regRequest("text1", priv)
	req.Health = "probe failed:\n\x1b[31mred\x1b[0m"
	if code, b := e.register(t, priv, req); code != http.StatusOK {
		t.Fatalf("registration with a multi-line health: %d %s", code, b)
	}
	if a, _ := e.listed(t, "text1"); strings.ContainsFunc(a.Health, isControl) || !strings.Contains(a.Health, "red") {
		t.Fatalf("stored health %q: want it without control characters", a.Health)
	}

	// A row stored before the checks existed.
	hostile := regRequest("old1", priv)
	hostile.Spec.Device.Model = "H200\x1b[2J"
	hostile.Spec.Device.Driver = "drv\x07"
	hostile.Spec.Host = "gpu-host\u00a0prod"
	hostile.Health = "ok\x1b]0;title\x07"
	hostile.Labels = map[string]string{"gpu": "h\x1b"}
	if err := e.rs.Register(context.Background(), runs.Agent{Name: "old1", KeyID: "SHA256:old\x1b", PublicKey: hostile.PublicKey, Backend: hostile.Backend,
		Labels: hostile.Labels, Spec: hostile.Spec, Health: hostile.Health}); err != nil {
		t.Fatal(err)
	}
	code, b := e.call(t, http.MethodGet, "/api/v1/agents", "read", nil)
	if code != http.StatusOK || bytes.Contains(b, []byte(`\u001b`)) || bytes.Contains(b, []byte(`\u0007`)) || !bytes.Contains(b, []byte(`H200\\x1b[2J`)) || !bytes.Contains(b, []byte(`gpu-host\\u00a0prod`)) {
		t.Fatalf("GET /api/v1/agents with a hostile row: %d %s, want its control characters escaped as text", code, b)
	}
	code, pb := e.call(t, http.MethodGet, "/agents", "read", nil)
	page := string(pb)
	if code != http.StatusOK {
		t.Fatalf("GET /agents: %d", code)
	}
	if strings.ContainsFunc(page, func(r rune) bool { return isControl(r) && r != '\n' && r != '\t' && r != '\r' }) || !strings.Contains(page, `H200\x1b[2J`) {
		t.Fatalf("/agents carries raw control characters or hides the escaped model")
	}
}

// registeredApproved is the approved member of a register answer.
func registeredApproved(t *testing.T, b []byte) bool {
	t.Helper()
	var out struct {
		Agent runs.Agent `json:"agent"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("register answer %s: %v", b, err)
	}
	return out.Agent.Approved
}

func isControl(r rune) bool { return r < 0x20 || r >= 0x7f && r < 0xa0 }

// TestAgentRegistrationBounds: a record token scoped to one repository or
// backend cannot register an agent for another (403 naming spec.repository
// or backend, nothing registered), and at most MaxWaitingAgents
// registrations wait for approval: the next new name is refused (409)
// while one already waiting may register again, and a removal frees a
// slot.
func TestAgentRegistrationBounds(t *testing.T) {
	e := newRunFormEnv(t)
	ctx := context.Background()
	scoped, _, err := e.st.CreateScopedToken(ctx, ledger.TokenSpec{Name: "ci-other", Scope: ledger.ScopeRecord, Repositories: []string{"github.com/other/x"}})
	if err != nil {
		t.Fatal(err)
	}
	cpuOnly, _, err := e.st.CreateScopedToken(ctx, ledger.TokenSpec{Name: "ci-cuda", Scope: ledger.ScopeRecord, Backends: []ledger.Backend{ledger.BackendCUDA}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ tok, field string }{{scoped, "spec.repository"}, {cpuOnly, "backend"}} {
		priv := newKey(t)
		code, body := e.registerAs(t, c.tok, priv, regRequest("scoped-"+strings.ReplaceAll(c.field, ".", "-"), priv))
		if ae := apiError(t, body); code != http.StatusForbidden || ae.Field != c.field {
			t.Fatalf("registration out of the token's scope: %d %s; want 403 naming %s", code, body, c.field)
		}
	}
	// A plain runner's key is never approved as an agent's, and a key is
	// one name's: neither waits (nor counts toward the cap).
	runnerKey := newKey(t)
	pub := verify.AuthorizedKey(runnerKey.Public().(ed25519.PublicKey))
	e.api(t, http.MethodPost, "/api/v1/runners", "admin", map[string]string{"name": "ci-runner", "public_key": pub}, http.StatusCreated)
	if code, body := e.register(t, runnerKey, regRequest("ci-runner", runnerKey)); code != http.StatusConflict || !strings.Contains(string(body), "plain runner") {
		t.Fatalf("registering a plain runner's key as an agent: %d %s; want 409", code, body)
	}
	twice := newKey(t)
	if code, body := e.register(t, twice, regRequest("once", twice)); code != http.StatusOK {
		t.Fatalf("registration: %d %s", code, body)
	}
	for _, name := range []string{"twice", "third"} {
		if code, body := e.register(t, twice, regRequest(name, twice)); code != http.StatusConflict || !strings.Contains(string(body), "one name's") {
			t.Fatalf("a key registered as %q again as %q: %d %s; want 409", "once", name, code, body)
		}
	}
	e.api(t, http.MethodPost, "/api/v1/agents/once/remove", "admin", map[string]any{}, http.StatusOK)
	before, err := e.rs.Agents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var first ed25519.PrivateKey
	for i := len(before); i < MaxWaitingAgents+1; i++ { // cuda-a is approved; metal-x waits
		priv := newKey(t)
		if i == len(before) {
			first = priv
		}
		if code, body := e.register(t, priv, regRequest(fmt.Sprintf("flood%d", i), priv)); code != http.StatusOK {
			t.Fatalf("registration %d: %d %s", i, code, body)
		}
	}
	priv := newKey(t)
	code, body := e.register(t, priv, regRequest("one-too-many", priv))
	if code != http.StatusConflict || !strings.Contains(string(body), "waiting for approval") {
		t.Fatalf("registration past the cap: %d %s; want 409", code, body)
	}
	if code, body := e.register(t, first, regRequest(fmt.Sprintf("flood%d", len(before)), first)); code != http.StatusOK {
		t.Fatalf("a waiting agent registering again: %d %s", code, body)
	}
	e.api(t, http.MethodPost, "/api/v1/agents/metal-x/remove", "admin", map[string]any{}, http.StatusOK)
	if code, body := e.register(t, priv, regRequest("one-too-many", priv)); code != http.StatusOK {
		t.Fatalf("registration after a removal: %d %s", code, body)
	}
}
