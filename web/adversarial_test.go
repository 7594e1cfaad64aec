package web

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/auth"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
	"github.com/evidence-ledger/ledger/verify"
	"github.com/go-chi/chi/v5"
	"github.com/transparency-dev/merkle/rfc6962"
)

// The adversarial tests of issue 14 (TRUST.md's "must never" for a CI job
// holding a record token), done through the real HTTP API on a temporary
// database. Each exploit is refused (a 4xx naming the field, nothing
// appended) or recorded as what the server computed / as baseline with its
// reason, and the release it aimed at stays not ready. Shared fixtures are
// in adversarial_helpers_test.go and upload_helpers_test.go.
//
// Acceptance 1 of issue 14, exploit by exploit:
//
//	own policy, inline                  TestExploitOwnPolicyInline
//	own policy, by path                 TestExploitOwnPolicyByPath
//	a server path in any field of any   TestNoRouteOpensCallersPath (every route, every
//	  route                               path parameter, query, JSON member and form
//	                                      field; also acceptance 2), and the repo_path /
//	                                      policy_path cases of TestExploitOwnPolicyByPath
//	a posted equivalence claim          TestAdversarialGatesOverHTTP/posted_tree-equivalence_claim
//	                                      (baseline "claimed, not computed"),
//	                                      TestAdversarialGatesOverHTTP/claim_carrying_the_server's_computed_marker
//	                                      and TestExploitPostedServerMark (the server's mark
//	                                      refused however it is spelled)
//	a tree check with the caller's pins TestExploitTreeWithCallersPins
//	an unbound artifact digest          TestAdversarialGatesOverHTTP/unbound_artifact_digest,
//	                                      TestAdversarialGatesOverHTTP/evidence_lacking_the_bound_artifact
//	evidence outside the token's scope  TestScopedTokenRefusesEvidenceOutOfScope,
//	                                      TestScopedTokenHeadsAndTreesInScope (heads and trees)
//	an expired token                    TestExpiredAndRevokedTokens
//	a DSSE envelope signed by an        TestDSSEEnvelopeExploits ("unregistered key" cases)
//	  unregistered key
//	a tampered envelope                 TestDSSEEnvelopeExploits ("tampered payload", "payload
//	                                      type changed after signing", "flipped signature bit",
//	                                      "tampered second of a batch")
//
// The other exploits of the issue text and of TRUST.md:
//
//	an approval kept alive after a      TestAdversarialGatesOverHTTP/approval_going_stale
//	  later failing record
//	a failing run retracted without     TestAdversarialGatesOverHTTP/supersede_needs_admin_scope_and_the_approval_role
//	  the role
//	recorded_by set by the caller       TestRecordedByIsSetByTheServer
//	a record token making tokens        TestRecordTokenCannotMakeTokens
//	a route below its declared scope    TestEveryRouteHonoursItsScope
//	an edited tokens table              TestAuditCatchesEditedTokensTable (the audit),
//	                                      TestAuthenticationRefusesEditedTokensTable (at once,
//	                                      at authentication, under a running server),
//	                                      TestAuthenticationRefusesEditedTokenLeaf (row and
//	                                      leaf edited together)
//	runner keys registered or revoked   TestDSSEEnvelopeExploits, TestRunnerRegistryRoutes
//	  by a record token
//	a tree check kept after the         TestExploitTreeCheckAtOldPins
//	  release's pins changed
//	the caller's policy for a release   TestExploitHeadPolicyOfNoRelease
//	  that binds none
//	one signed run replayed (read back  TestExploitReplayedSignedRun (each copy a baseline
//	  from GET /evidence/{id}, posted     duplicate naming the first record; unsigned
//	  by other tokens, in envelope        evidence re-posted by a second token too)
//	  variants) into passing runs
//	a future-dated run kept "fresh"     TestExploitFutureDatedRun (refused naming the field),
//	                                      gates.TestFreshnessFromRecordedAt (a stored one is
//	                                      fresh only from its recorded_at)

// TestExploitOwnPolicyInline: a head signed by an untrusted key cannot be
// made trusted by sending a policy that trusts its key, inline in any
// field, with or without the release.
func TestExploitOwnPolicyInline(t *testing.T) {
	e, f := advSetup(t)
	evil := headObjects(t, f.dir, "evil")
	own := strings.Replace(f.malloryYAML, "allowed_signers: signers", "allowed_signers: "+strings.TrimSpace(string(f.malloryFiles["signers"])), 1)
	e.refused(t, "inline policy with release", "/api/v1/heads/verify", e.record, map[string]any{"release": "1.0", "policy": own, "objects": evil}, 400, "policy")
	e.refused(t, "inline policy alone", "/api/v1/heads/verify", e.record, map[string]any{"policy": own, "repository": upRepo, "objects": evil}, 400, "policy")
	e.refused(t, "policy files inline", "/api/v1/heads/verify", e.record, map[string]any{"policy": "core-signers", "files": f.malloryFiles, "objects": evil}, 400, "files")
	// Registering the attacker's own policy needs admin.
	e.refused(t, "policy apply by a record token", "/api/v1/policies", e.record, map[string]any{"name": "core-signers", "policy": f.malloryYAML, "files": f.malloryFiles}, 403, "")
	// What the server records for the head is its own verdict under the
	// release's policy: untrusted.
	code, body := e.do(t, "POST", "/api/v1/heads/verify", e.record, map[string]any{"release": "1.0", "ref": "refs/heads/main", "objects": evil})
	var res struct {
		Head ledger.HeadVerification `json:"head"`
	}
	json.Unmarshal(body, &res)
	if code != 201 || res.Head.Decision != ledger.DecisionUntrusted || res.Head.Commit != f.evil {
		t.Fatalf("evil head: %d %s", code, body)
	}
	e.requireNotReady(t, "1.0")
}

// TestExploitOwnPolicyByPath: no request names a policy file, and no
// refusal echoes a file's content.
func TestExploitOwnPolicyByPath(t *testing.T) {
	e, f := advSetup(t)
	dir := t.TempDir()
	secret := filepath.Join(dir, "passwd")
	os.WriteFile(secret, []byte("root:x:0:0:SENTINEL-FIRST-LINE:/root:/bin/sh\n"), 0o600)
	pol := filepath.Join(dir, "policy.yaml")
	os.WriteFile(pol, []byte(f.malloryYAML), 0o600)
	os.WriteFile(filepath.Join(dir, "signers"), f.malloryFiles["signers"], 0o600)
	evil := headObjects(t, f.dir, "evil")
	for _, p := range []string{secret, pol, "/etc/passwd", "../../../../etc/passwd"} {
		ans := e.refused(t, "policy_path "+p, "/api/v1/heads/verify", e.record, map[string]any{"release": "1.0", "policy_path": p, "objects": evil}, 400, "policy_path")
		if strings.Contains(string(ans), "SENTINEL") || strings.Contains(string(ans), "root:") {
			t.Errorf("policy_path %s: the answer quotes the file: %s", p, ans)
		}
		ans = e.refused(t, "policy as a path "+p, "/api/v1/heads/verify", e.record, map[string]any{"policy": p, "repository": upRepo, "objects": evil}, 400, "policy")
		if strings.Contains(string(ans), "SENTINEL") {
			t.Errorf("policy %s: the answer quotes the file: %s", p, ans)
		}
		e.refused(t, "repo_path "+p, "/api/v1/heads/verify", e.record, map[string]any{"release": "1.0", "repo_path": filepath.Dir(p)}, 403, "repo_path")
	}
	e.requireNotReady(t, "1.0")
}

// TestNoRouteOpensCallersPath walks every route of the router (chi.Walk
// over the one route table) with a record token and with an admin token,
// and sends path strings — the absolute path of a sentinel file outside
// the repository root, traversals to it, a file URL, a real repository
// outside the root — in every path parameter, in every query parameter
// and JSON member any request type of the API knows, and as form fields.
// It fails if the server opens any file in the sentinel's directories
// (inotify on Linux), if Config.FileAccess sees a path outside the
// configured root (or any path at all for the record token), or if an
// answer quotes the sentinel's content.
func TestNoRouteOpensCallersPath(t *testing.T) {
	f := newUploadFixture(t) // a real repository, outside the root
	root := t.TempDir()
	outside := t.TempDir()
	sentinel := filepath.Join(outside, "sentinel")
	const secret = "SENTINEL-CONTENT-7f3a"
	if err := os.WriteFile(sentinel, []byte(secret+":x:0:0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var accessed []string
	e := newUploadEnv(t, Config{RepoRoots: []string{root}, FileAccess: func(p string) {
		mu.Lock()
		accessed = append(accessed, p)
		mu.Unlock()
	}})
	e.applyPolicy(t, "p", f.policyYAML, map[string][]byte{"signers": f.signers})
	e.defineRelease(t, f.releaseYAML("1.0", f.head, "p"))
	srv, err := New(Config{Store: e.store, RepoRoots: []string{root}, FileAccess: func(p string) {
		mu.Lock()
		accessed = append(accessed, p)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	// bases make a request valid enough to reach the handler's later steps.
	bases := map[string][]map[string]any{
		"/api/v1/heads/verify": {{"policy": "p"}, {"release": "1.0"}, {"release": "1.0", "objects": headObjects(t, f.dir, "main")}},
		"/api/v1/trees/verify": {{"release": "1.0"}},
		"/api/v1/policies":     {{"name": "x", "policy": f.policyYAML}},
	}
	events := openWatch(t, outside, f.dir, filepath.Join(f.dir, ".git"), filepath.Join(f.dir, ".git", "objects"))
	relRepo, _ := filepath.Rel(root, f.dir)
	values := []string{
		sentinel,
		strings.Repeat("../", 12) + strings.TrimPrefix(sentinel, "/"),
		"file://" + sentinel,
		filepath.ToSlash(relRepo),
	}
	names := map[string]bool{}
	jsonNames(names, reflect.TypeFor[VerifyHeadRequest](), reflect.TypeFor[VerifyTreeRequest](), reflect.TypeFor[ApplyPolicyRequest](),
		reflect.TypeFor[WaiverRequest](), reflect.TypeFor[SignoffRequest](), reflect.TypeFor[ApprovalRequest](),
		reflect.TypeFor[ledger.Evidence](), reflect.TypeFor[ledger.HeadVerification](), reflect.TypeFor[gates.Release](), reflect.TypeFor[ledger.PolicyRecord]())
	for _, n := range []string{"path", "file", "dir", "root", "url", "config", "keyring", "allowed_signers", "trusted_root", "ca_pool", "policy_file", "repo", "db", "template", "cursor", "since", "as_of", "size", "from", "to", "index", "csrf", "token"} {
		names[n] = true
	}
	var nameList []string
	for n := range names {
		nameList = append(nameList, n)
	}
	sort.Strings(nameList)
	type route struct{ method, pattern string }
	var routes []route
	if err := chi.Walk(srv.Router(), func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routes = append(routes, route{method, pattern})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(routes) < 30 {
		t.Fatalf("chi.Walk found %d routes", len(routes))
	}
	requests := 0
	send := func(tok, method, target, ctype string, body []byte) {
		req := httptest.NewRequest(method, target, bytes.NewReader(body))
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		requests++
		if strings.Contains(w.Body.String(), secret) {
			t.Errorf("%s %s: the answer quotes the sentinel file", method, target)
		}
	}
	for _, tok := range []struct{ name, secret string }{{"record", e.record}, {"admin", e.admin}} {
		mu.Lock()
		accessed = nil
		mu.Unlock()
		for _, rt := range routes {
			for _, v := range values {
				p := rt.pattern
				for _, param := range []string{"{id}", "{version}", "{index}", "{ref}"} {
					p = strings.ReplaceAll(p, param, url.PathEscape(v))
				}
				p = strings.ReplaceAll(p, "*", url.PathEscape(v))
				q := url.Values{}
				for _, n := range nameList {
					q.Set(n, v)
				}
				send(tok.secret, rt.method, p+"?"+q.Encode(), "", nil)
				if rt.method != http.MethodPost && rt.method != http.MethodPut {
					continue
				}
				send(tok.secret, rt.method, p, "application/x-www-form-urlencoded", []byte(q.Encode()))
				for _, m := range []map[string]any{{"objects": []map[string]any{{"type": "commit", "id": v, "data": v}}}, {"files": map[string]string{v: v}}, {"subject": map[string]any{"repository": v}}, {"pins": []string{v}}} {
					b, _ := json.Marshal(m)
					send(tok.secret, rt.method, p, "application/json", b)
				}
				if rt.pattern == "/api/v1/evidence" {
					// Every format package ingest decodes, its path-like
					// members and an XML external entity naming v.
					for ct, body := range ingestPathBodies(v) {
						send(tok.secret, rt.method, p+"?lane=ci/v1&backend=cpu&repository=r&commit="+strings.Repeat("a", 40)+"&tree="+strings.Repeat("b", 40), ct, []byte(body))
					}
				}
				for _, n := range nameList {
					for _, val := range []any{v} {
						for _, base := range append([]map[string]any{{}}, bases[rt.pattern]...) {
							m := map[string]any{}
							for k, bv := range base {
								m[k] = bv
							}
							m[n] = val
							b, _ := json.Marshal(m)
							send(tok.secret, rt.method, p, "application/json", b)
						}
					}
				}
			}
		}
		if n := events(); n != 0 {
			t.Errorf("%s token: %d opens or reads of files outside the repository root", tok.name, n)
		}
		mu.Lock()
		for _, a := range accessed {
			if rel, err := filepath.Rel(root, a); tok.name == "record" || err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("%s token: the server resolved %s", tok.name, a)
			}
		}
		mu.Unlock()
	}
	t.Logf("%d routes, %d requests, %d member names", len(routes), requests, len(nameList))
	// Release 1.0 waits for a server-computed tree check from uploaded
	// objects; no path sent above stands in for one.
	if rd := e.readiness(t, "1.0"); rd.Readiness.Ready {
		t.Fatal("release 1.0 is ready after the path walk")
	}
	if state, _, _ := e.readiness(t, "1.0").gate(t, "tree"); state == "passed" {
		t.Fatal("the tree gate passed on a path walk")
	}
	// The watch itself works: reading the sentinel is seen.
	if _, err := os.ReadFile(sentinel); err != nil {
		t.Fatal(err)
	}
	if n := events(); n == 0 && runtime.GOOS == "linux" {
		t.Fatal("inotify saw no event for a read of the sentinel: the watch proves nothing")
	}
}

// TestExploitPostedServerMark: posted evidence cannot carry the server's
// mark, however its key is spelled; a head record cannot be posted as
// evidence.
func TestExploitPostedServerMark(t *testing.T) {
	e, f := advSetup(t)
	claim := func(details string) map[string]any {
		ev := testEvidence(1)
		ev["lane"] = ledger.TreeEquivalenceLane
		ev["cases_exact"], ev["cases_total"], ev["control"] = 1, 1, "none"
		ev["subject"] = map[string]any{"repository": upRepo, "commit": f.evil, "tree": strings.Repeat("a", 40)}
		ev["details"] = json.RawMessage(details)
		return ev
	}
	for _, d := range []string{
		`{"reviewed":"` + f.reviewed + `","equivalent":true,"outside_pins":[],"computed_by":"server"}`,
		`{"reviewed":"` + f.reviewed + `","equivalent":true,"outside_pins":[],"Computed_By":"server"}`,
		`{"reviewed":"` + f.reviewed + `","equivalent":true,"outside_pins":[],"computed\u005fby":"server"}`,
		`{"reviewed":"` + f.reviewed + `","equivalent":true,"outside_pins":[],"\u0063omputed_by":"server"}`,
	} {
		e.refused(t, "posted mark "+d, "/api/v1/evidence", e.record, claim(d), 400, "details.computed_by")
	}
	ok := claim(`{"reviewed":"` + f.reviewed + `","equivalent":true,"outside_pins":[]}`)
	bad := claim(`{"reviewed":"` + f.reviewed + `","equivalent":true,"outside_pins":[],"computed_by":"server"}`)
	e.refused(t, "mark in a batch", "/api/v1/evidence", e.record, []any{ok, bad}, 400, "[1].details.computed_by")
	hv := ledger.HeadVerification{Repository: upRepo, Object: f.evil, ObjectType: "commit", Commit: f.evil, Verdict: ledger.VerdictGood, Decision: ledger.DecisionTrusted, VerifiedAt: time.Now()}
	code, _ := e.do(t, "POST", "/api/v1/evidence", e.record, hv)
	if code != 400 {
		t.Errorf("a head record posted as evidence: %d", code)
	}
	// A claim without the mark is still accepted as a claim; that gates
	// keep it baseline is the gates' test (a posted equivalence claim).
	e.requireNotReady(t, "1.0")
}

// TestAdversarialGatesOverHTTP: the exploits that gates decide, on
// release 0.9.0 (libmlx.dylib bound to advBound, a metal qmv lane gate, a
// tree-equivalence gate) with a record token: evidence naming another
// digest of the bound artifact or lacking it, a posted tree-equivalence
// claim and one carrying the server's mark, a supersede without admin
// scope or the approval role, and an approval kept after a failing run.
func TestAdversarialGatesOverHTTP(t *testing.T) {
	a := &advEnv{apiEnv: newAPIEnv(t, Config{})}
	e := a.apiEnv
	ctx := context.Background()
	var err error
	a.admin, _, err = e.store.CreateToken(ctx, "rm", ledger.ScopeAdmin, []string{"release-manager"})
	if err != nil {
		t.Fatal(err)
	}
	a.plainAdmin, _, err = e.store.CreateToken(ctx, "ops", ledger.ScopeAdmin, nil)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := e.do(t, "PUT", "/api/v1/releases/0.9.0", a.admin, advRelease("0.9.0", true)); code != 201 {
		t.Fatalf("put release: %d %s", code, body)
	}
	t.Run("unbound artifact digest", a.advUnboundArtifactDigest)
	t.Run("evidence lacking the bound artifact", a.advMissingBoundArtifact)
	t.Run("posted tree-equivalence claim", a.advPostedTreeEquivalenceClaim)
	t.Run("claim carrying the server's computed marker", a.advForgedComputedMarker)
	t.Run("supersede needs admin scope and the approval role", a.advSupersedeScopeAndRole)
	t.Run("approval going stale", a.advApprovalGoingStale)
}

func (a *advEnv) advUnboundArtifactDigest(t *testing.T) {
	id := a.postOne(t, a.record, advEvidence("qmv-bias-sum/v1", map[string]string{"libmlx.dylib": advOther}, nil))
	rd := a.readiness(t, "0.9.0")
	state, bl, _ := rd.gate(t, "qmv")
	if rd.Readiness.Ready || state != "open" || !strings.Contains(bl[id], "other artifact libmlx.dylib sha256:bbbbbbbbbbbb") {
		t.Fatalf("ready %v, qmv %s, baseline %v: want open with the other digest as the reason", rd.Readiness.Ready, state, bl)
	}
}

func (a *advEnv) advMissingBoundArtifact(t *testing.T) {
	id := a.postOne(t, a.record, advEvidence("qmv-bias-sum/v1", nil, nil))
	rd := a.readiness(t, "0.9.0")
	state, bl, _ := rd.gate(t, "qmv")
	if rd.Readiness.Ready || state != "open" || !strings.Contains(bl[id], "does not carry bound artifact libmlx.dylib") {
		t.Fatalf("ready %v, qmv %s, baseline %v", rd.Readiness.Ready, state, bl)
	}
}

func (a *advEnv) advPostedTreeEquivalenceClaim(t *testing.T) {
	id := a.postOne(t, a.record, treeClaimEvidence(nil))
	rd := a.readiness(t, "0.9.0")
	state, bl, _ := rd.gate(t, "tree")
	if rd.Readiness.Ready || state != "open" || !strings.Contains(bl[id], "claimed, not computed") {
		t.Fatalf("ready %v, tree %s, baseline %v: want open with the claim as baseline", rd.Readiness.Ready, state, bl)
	}
	// The release page does not show the claim as the comparison.
	_, page := a.do(t, "GET", "/releases/0.9.0", "", nil)
	if strings.Contains(string(page), "eq-equivalent") || !strings.Contains(string(page), "claimed, not computed") {
		t.Fatal("the release page shows a posted claim as tree equivalence, or hides why it does not count")
	}
}

func (a *advEnv) advForgedComputedMarker(t *testing.T) {
	for _, c := range []struct {
		what  string
		body  any
		field string
	}{
		{"single", treeClaimEvidence(map[string]any{"computed_by": "server"}), "details.computed_by"},
		{"other case", treeClaimEvidence(map[string]any{"Computed_By": "server"}), "details.computed_by"},
		{"batch", []any{advEvidence("qmv-bias-sum/v1", map[string]string{"libmlx.dylib": advBound}, nil), treeClaimEvidence(map[string]any{"computed_by": "server"})}, "[1].details.computed_by"},
		{"escaped name", `{"lane":"tree-equivalence/v1","details":{"\u0063omputed_by":"server"}}`, "details.computed_by"},
	} {
		before := a.size(t)
		code, body := a.do(t, "POST", "/api/v1/evidence", a.record, c.body)
		a.wantRefused(t, c.what, code, body, 400, c.field, before)
	}
	if rd := a.readiness(t, "0.9.0"); rd.Readiness.Ready {
		t.Fatal("ready")
	}
}

func (a *advEnv) advSupersedeScopeAndRole(t *testing.T) {
	id := a.postOne(t, a.record, advEvidence("qmv-bias-sum/v1", map[string]string{"libmlx.dylib": advBound}, func(m map[string]any) {
		m["cases_exact"], m["status"] = 156, "failed"
	}))
	req := map[string]string{"entry": id, "reason": "rerun on a healthy host"}
	for _, c := range []struct {
		token  string
		status int
	}{{a.record, 403}, {a.plainAdmin, 403}, {"", 401}} {
		before := a.size(t)
		code, body := a.do(t, "POST", "/api/v1/releases/0.9.0/supersedes", c.token, req)
		a.wantRefused(t, "supersede", code, body, c.status, "", before)
	}
	before := a.size(t)
	code, body := a.do(t, "POST", "/api/v1/releases/0.9.0/supersedes", a.admin, map[string]string{"entry": "0123456789abcdef0123456789abcdef", "reason": "x"})
	a.wantRefused(t, "supersede of no entry", code, body, 400, "entry", before)
	code, body = a.do(t, "POST", "/api/v1/releases/0.9.0/supersedes", a.admin, map[string]string{"entry": id})
	a.wantRefused(t, "supersede without a reason", code, body, 400, "reason", before)
	state, _, failing := a.readiness(t, "0.9.0").gate(t, "qmv")
	if state != "failed" || len(failing) != 1 || failing[0] != id {
		t.Fatalf("qmv %s failing %v: want failed by %s", state, failing, id)
	}
	if code, body := a.do(t, "POST", "/api/v1/releases/0.9.0/supersedes", a.admin, req); code != 201 {
		t.Fatalf("supersede: %d %s", code, body)
	}
	state, bl, _ := a.readiness(t, "0.9.0").gate(t, "qmv")
	if state != "open" || !strings.Contains(bl[id], "superseded by") || !strings.Contains(bl[id], "rm") {
		t.Fatalf("after supersede: qmv %s baseline %v", state, bl)
	}
}

func (a *advEnv) advApprovalGoingStale(t *testing.T) {
	if code, body := a.do(t, "PUT", "/api/v1/releases/0.9.1", a.admin, advRelease("0.9.1", false)); code != 201 {
		t.Fatalf("put release: %d %s", code, body)
	}
	// A supersede is recorded for one release's pins: 0.9.1 does not
	// see 0.9.0's, so the failing run above keeps 0.9.1 failed until
	// its own release manager supersedes it.
	rd := a.readiness(t, "0.9.1")
	if state, _, _ := rd.gate(t, "qmv"); state != "failed" {
		t.Fatalf("0.9.1 qmv %s: a supersede of another release applied", state)
	}
	_, _, failing := rd.gate(t, "qmv")
	if code, body := a.do(t, "POST", "/api/v1/releases/0.9.1/supersedes", a.admin, map[string]string{"entry": failing[0], "reason": "host fault"}); code != 201 {
		t.Fatalf("supersede: %d %s", code, body)
	}
	a.postOne(t, a.record, advEvidence("qmv-bias-sum/v1", map[string]string{"libmlx.dylib": advBound}, nil))
	if rd := a.readiness(t, "0.9.1"); !rd.Readiness.Ready {
		t.Fatalf("not ready: %+v", rd.Readiness.Gates)
	}
	code, body := a.do(t, "POST", "/api/v1/releases/0.9.1/approvals", a.admin, map[string]string{"note": "ship"})
	if code != 201 {
		t.Fatalf("approve: %d %s", code, body)
	}
	var ap struct {
		ID       string `json:"id"`
		Approval struct {
			DecisionDigest string `json:"decision_digest"`
			Checkpoint     struct {
				Size uint64 `json:"size"`
			} `json:"checkpoint"`
		} `json:"approval"`
	}
	if err := json.Unmarshal(body, &ap); err != nil || ap.Approval.DecisionDigest == "" || ap.Approval.Checkpoint.Size == 0 {
		t.Fatalf("approval %s does not name its verdict: %v", body, err)
	}
	rd = a.readiness(t, "0.9.1")
	if !rd.Readiness.Approved || len(rd.Readiness.Approvals) != 1 || rd.Readiness.Approvals[0].State != "current" || rd.Readiness.Approvals[0].ID != ap.ID {
		t.Fatalf("after approval: %+v", rd.Readiness)
	}
	// The CI token records a failing run at the pins.
	a.postOne(t, a.record, advEvidence("qmv-bias-sum/v1", map[string]string{"libmlx.dylib": advBound}, func(m map[string]any) {
		m["cases_exact"], m["status"] = 150, "failed"
	}))
	rd = a.readiness(t, "0.9.1")
	if rd.Readiness.Ready || rd.Readiness.Approved || len(rd.Readiness.Approvals) != 1 {
		t.Fatalf("after a failing run: ready %v approved %v", rd.Readiness.Ready, rd.Readiness.Approved)
	}
	if a := rd.Readiness.Approvals[0]; a.State != "stale" || !strings.Contains(a.Why, "gate qmv was passed, now failed") {
		t.Fatalf("approval %+v: want stale naming the gate", a)
	}
	_, page := a.do(t, "GET", "/releases/0.9.1", "", nil)
	if !strings.Contains(string(page), `data-state="stale"`) || !strings.Contains(string(page), "stale: no longer counts") || strings.Contains(string(page), "<strong>Approved</strong>") {
		t.Fatal("the release page does not show the approval as stale")
	}
	before := a.size(t)
	code, body = a.do(t, "POST", "/api/v1/releases/0.9.1/approvals", a.admin, map[string]string{})
	a.wantRefused(t, "approval of the release that is no longer ready", code, body, 409, "", before)
}

// TestExploitTreeWithCallersPins: the pins are the release's, never the
// caller's; a head that differs outside them is recorded as not
// equivalent, computed by the server; a flipped byte is refused.
func TestExploitTreeWithCallersPins(t *testing.T) {
	f := newUploadFixture(t)
	e := newUploadEnv(t, Config{})
	e.applyPolicy(t, "core-signers", f.policyYAML, map[string][]byte{"signers": f.signers})
	e.defineRelease(t, f.releaseYAML("2.0", f.outside, "core-signers"))
	objs := treeObjects(t, f.dir, f.outside, f.reviewed)
	e.refused(t, "caller's pins", "/api/v1/trees/verify", e.record, map[string]any{"release": "2.0", "pins": []string{"src/*"}, "objects": objs}, 400, "pins")
	e.refused(t, "caller's head", "/api/v1/trees/verify", e.record, map[string]any{"release": "2.0", "head": f.head, "objects": objs}, 400, "head")
	e.refused(t, "another gate's lane", "/api/v1/trees/verify", e.record, map[string]any{"release": "2.0", "lane": "qmv-bias-sum/v1", "objects": objs}, 400, "lane")
	for i := range objs {
		flipped := make([]map[string]any, len(objs))
		for j, o := range objs {
			d := append([]byte{}, o.Data...)
			if j == i {
				d[len(d)/2] ^= 1
			}
			flipped[j] = map[string]any{"type": o.Type, "id": o.ID, "data": d}
		}
		ans := e.refused(t, "flipped byte", "/api/v1/trees/verify", e.record, map[string]any{"release": "2.0", "objects": flipped}, 400, "objects["+itoa(i)+"].data")
		if !strings.Contains(string(ans), "object id mismatch") {
			t.Errorf("flipped object %d: %s", i, ans)
		}
	}
	// A differing subtree left out is refused, not skipped.
	e.refused(t, "missing subtree", "/api/v1/trees/verify", e.record, map[string]any{"release": "2.0", "objects": objs[:2]}, 400, "objects")
	code, body := e.do(t, "POST", "/api/v1/trees/verify", e.record, map[string]any{"release": "2.0", "objects": objs})
	var res struct {
		Evidence ledger.Evidence `json:"evidence"`
	}
	json.Unmarshal(body, &res)
	te, err := ledger.DecodeTreeEquivalence(res.Evidence.Details)
	if code != 201 || err != nil || te.Holds() || !te.ServerComputed() || res.Evidence.Status != ledger.StatusFailed ||
		strings.Join(te.OutsidePins, ",") != "src/main.go" || strings.Join(te.Pins, ",") != "go.sum" || strings.Join(te.DifferingPaths, ",") != "go.sum,src/main.go" ||
		te.Reviewed != f.reviewed || res.Evidence.Subject.Commit != f.outside || len(te.Objects) != len(objs) {
		t.Fatalf("server-computed tree: %d %s", code, body)
	}
	e.requireNotReady(t, "2.0")
}

// TestScopedTokenRefusesEvidenceOutOfScope: evidence about another
// repository, lane or backend is refused with 403 naming the field, and
// nothing is appended, also when one record of an array is out of scope.
func TestScopedTokenRefusesEvidenceOutOfScope(t *testing.T) {
	e := newTokenEnv(t, Config{})
	// Release 7.0.0 is what the out-of-scope cpu record would make ready.
	e.defineLaneRelease(t, "7.0.0", testEvidence(3))
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
			if rd := e.readiness(t, "7.0.0"); rd.Readiness.Ready {
				t.Fatal("release 7.0.0 is ready after a refusal")
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
	if rd := e.readiness(t, "7.0.0"); rd.Readiness.Ready {
		t.Fatal("release 7.0.0 is ready after evidence about another backend")
	}
	// An unscoped record token records any of them; the cpu record is
	// what the release waited for (the control: the refusals above are
	// what kept it not ready).
	if code, b := e.do(t, "POST", "/api/v1/evidence", e.record, otherBackend); code != http.StatusCreated {
		t.Fatalf("unscoped token: %d %s", code, b)
	}
	if rd := e.readiness(t, "7.0.0"); !rd.Readiness.Ready {
		t.Fatalf("release 7.0.0 not ready with the record it waited for: %+v", rd.Readiness.Gates)
	}
}

// TestScopedTokenHeadsAndTreesInScope: a record token scoped to one
// repository cannot have the server record a head verification or a tree
// check about another repository (403 naming the field, nothing appended),
// and can about its own.
func TestScopedTokenHeadsAndTreesInScope(t *testing.T) {
	e, f := advSetup(t)
	other, _, err := e.store.CreateScopedToken(context.Background(), ledger.TokenSpec{Name: "other-repo-ci", Scope: ledger.ScopeRecord, Repositories: []string{"github.com/someone/else"}})
	if err != nil {
		t.Fatal(err)
	}
	mine, _, err := e.store.CreateScopedToken(context.Background(), ledger.TokenSpec{Name: "own-repo-ci", Scope: ledger.ScopeRecord, Repositories: []string{upRepo}})
	if err != nil {
		t.Fatal(err)
	}
	objs := headObjects(t, f.dir, "evil")
	e.refused(t, "head of another repository", "/api/v1/heads/verify", other, map[string]any{"release": "1.0", "ref": "refs/heads/main", "objects": objs}, 403, "repository")
	e.refused(t, "tree of another repository", "/api/v1/trees/verify", other, map[string]any{"release": "1.0", "objects": []any{}}, 403, "component")
	e.requireNotReady(t, "1.0")
	if code, body := e.do(t, "POST", "/api/v1/heads/verify", mine, map[string]any{"release": "1.0", "ref": "refs/heads/main", "objects": objs}); code != 201 {
		t.Fatalf("head of the token's own repository: %d %s", code, body)
	}
}

// TestExpiredAndRevokedTokens: an expired token is 401 "token expired", a
// revoked one 401; neither message names the secret.
func TestExpiredAndRevokedTokens(t *testing.T) {
	e := newTokenEnv(t, Config{})
	// Release 7.0.1 is what testEvidence(2) would make ready.
	e.defineLaneRelease(t, "7.0.1", testEvidence(2))
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
	if rd := e.readiness(t, "7.0.1"); rd.Readiness.Ready {
		t.Fatal("release 7.0.1 is ready after the refusals")
	}
	// The control: the same record from a live token makes it ready.
	if code, b := e.do(t, "POST", "/api/v1/evidence", e.record, testEvidence(2)); code != http.StatusCreated {
		t.Fatalf("live token: %d %s", code, b)
	}
	if rd := e.readiness(t, "7.0.1"); !rd.Readiness.Ready {
		t.Fatalf("release 7.0.1 not ready with the record it waited for: %+v", rd.Readiness.Gates)
	}
}

// TestDSSEEnvelopeExploits: with a record token over the real HTTP API,
// every forged or misdirected signature is refused with a 4xx naming the
// member and appends nothing, or is recorded as baseline with the reason;
// the release stays not ready until evidence signed by the runner the gate
// names arrives, and a revoked key takes its evidence back to baseline.
func TestDSSEEnvelopeExploits(t *testing.T) {
	e := newRunnerEnv(t)
	ev := testEvidence(1)
	ctx := context.Background()

	// A registered key signed a different payload type: re-signed
	// properly over that type, so only the type is wrong.
	evBody, _ := json.Marshal(ev)
	intoto := dsseEnvelope(t, e.mac, "application/vnd.in-toto+json", evBody)

	// Tampered: a valid envelope by ci-mac whose payload is then changed
	// (another backend), or whose payload type is changed after signing.
	good := sign(t, e.mac, ev)
	var tampered ledger.Envelope
	json.Unmarshal(good, &tampered)
	changed := testEvidence(1)
	changed["subject"].(map[string]any)["commit"] = fmt.Sprintf("%040x", 99)
	cb, _ := json.Marshal(changed)
	tampered.Payload = base64.StdEncoding.EncodeToString(cb)
	tamperedBytes, _ := json.Marshal(tampered)
	var retyped ledger.Envelope
	json.Unmarshal(good, &retyped)
	retyped.PayloadType = "application/json"
	retypedBytes, _ := json.Marshal(retyped)
	var flipped ledger.Envelope
	json.Unmarshal(good, &flipped)
	sig, _ := base64.StdEncoding.DecodeString(flipped.Signatures[0].Sig)
	sig[0] ^= 1
	flipped.Signatures[0].Sig = base64.StdEncoding.EncodeToString(sig)
	flippedBytes, _ := json.Marshal(flipped)

	// A plain record carrying a signer copied from a real one.
	plainSigner := testEvidence(1)
	plainSigner["signer"] = map[string]any{"runner": "ci-mac", "key_id": verify.RunnerKeyID(e.mac.Public().(ed25519.PublicKey)), "key_entry": strings.Repeat("a", 32), "envelope": json.RawMessage(good)}
	// A signed payload that itself claims a signer.
	nested := testEvidence(1)
	nested["signer"] = plainSigner["signer"]
	nb, _ := json.Marshal(nested)
	nestedEnv := dsseEnvelope(t, e.mac, ledger.PayloadTypeEvidence, nb)

	refused := []struct {
		name, field string
		body        any
		ct          string
		status      int
	}{
		{"unregistered key", "signatures", sign(t, newKey(t), ev), ledger.ContentTypeDSSE, 400},
		{"unregistered key, shape detected", "signatures", sign(t, newKey(t), ev), "application/json", 400},
		{"tampered payload", "signatures[0]", tamperedBytes, ledger.ContentTypeDSSE, 400},
		{"payload type changed after signing", "payloadType", retypedBytes, ledger.ContentTypeDSSE, 400},
		{"flipped signature bit", "signatures[0]", flippedBytes, ledger.ContentTypeDSSE, 400},
		{"wrong payload type", "payloadType", intoto, ledger.ContentTypeDSSE, 400},
		{"no signatures", "signatures", `{"payloadType":"` + ledger.PayloadTypeEvidence + `","payload":"` + base64.StdEncoding.EncodeToString(evBody) + `","signatures":[]}`, ledger.ContentTypeDSSE, 400},
		{"payload not evidence", "payload.lane", dsseEnvelope(t, e.mac, ledger.PayloadTypeEvidence, []byte(`{"lane":"x"}`)), ledger.ContentTypeDSSE, 400},
		{"signed payload claims a signer", "payload.signer", nestedEnv, ledger.ContentTypeDSSE, 400},
		{"plain record sets signer", "signer", plainSigner, "application/json", 400},
		{"plain record under the DSSE type", "payloadType", testEvidence(1), ledger.ContentTypeDSSE, 400},
		{"plain record sets signer spelled with an escape", "signer", strings.Replace(mustJSON(plainSigner), `"signer"`, `"sign\u0065r"`, 1), "application/json", 400},
		{"tampered second of a batch", "[1].signatures[0]", "[" + string(good) + "," + string(tamperedBytes) + "]", ledger.ContentTypeDSSE, 400},
	}
	for _, c := range refused {
		before := e.size(t)
		code, body := e.do(t, http.MethodPost, "/api/v1/evidence", e.record, c.body, "Content-Type", c.ct)
		var ae APIError
		json.Unmarshal(body, &ae)
		if code != c.status || ae.Field != c.field {
			t.Errorf("%s: %d field %q (%s); want %d naming %q", c.name, code, ae.Field, body, c.status, c.field)
		}
		if e.size(t) != before {
			t.Errorf("%s: appended something", c.name)
		}
		if strings.Contains(string(body), base64.StdEncoding.EncodeToString(e.mac)) {
			t.Errorf("%s: the answer echoes a key", c.name)
		}
	}
	if g, ready := e.gate(t); ready || g.State != gates.StateOpen {
		t.Fatalf("after the refusals: %s ready=%v", g.State, ready)
	}

	// Only admins register runner keys.
	pub := verify.AuthorizedKey(newKey(t).Public().(ed25519.PublicKey))
	if code, _ := e.do(t, http.MethodPost, "/api/v1/runners", e.record, map[string]string{"name": "sneaky", "public_key": pub}); code != http.StatusForbidden {
		t.Errorf("record token registering a runner key: %d; want 403", code)
	}
	if code, _ := e.do(t, http.MethodPost, "/api/v1/runners/ci-mac/revoke", e.record, map[string]string{"reason": "x"}); code != http.StatusForbidden {
		t.Errorf("record token revoking a runner key: %d; want 403", code)
	}

	// Recorded but not counted: unsigned, and signed by a runner the gate
	// does not name.
	for _, c := range []struct {
		name, reason string
		body         any
	}{
		{"unsigned", "unsigned", testEvidence(1)},
		{"other runner", "signed by runner other-runner, not by ci-mac", sign(t, e.other, testEvidence(1))},
	} {
		if code, body := e.do(t, http.MethodPost, "/api/v1/evidence", e.record, c.body); code != http.StatusCreated {
			t.Fatalf("%s: %d %s", c.name, code, body)
		}
		g, ready := e.gate(t)
		if ready || g.State != gates.StateOpen || !baselineHas(g, c.reason) {
			t.Errorf("%s: %s ready=%v baseline %+v; want open with baseline %q", c.name, g.State, ready, g.Baseline, c.reason)
		}
	}

	// A signer that reached the log without the API's verification (here
	// appended to the store directly: a forged row, a path that skipped the
	// check) names ci-mac's registration correctly, but its envelope was
	// signed by another key: the gate checks the signature and does not
	// count it.
	reg0, err := auth.LoadRunnerKeys(ctx, e.store, 0)
	if err != nil {
		t.Fatal(err)
	}
	mac, _ := reg0.Live("ci-mac")
	forgedEv := testEvidence(1)
	fb, _ := json.Marshal(forgedEv)
	var forgedEnv ledger.Envelope
	json.Unmarshal(dsseEnvelope(t, e.other, ledger.PayloadTypeEvidence, fb), &forgedEnv)
	forgedEnv.Signatures[0].KeyID = mac.KeyID
	feb, _ := json.Marshal(forgedEnv)
	forgedEv["signer"] = map[string]any{"runner": "ci-mac", "key_id": mac.KeyID, "key_entry": mac.Entry, "envelope": json.RawMessage(feb)}
	if _, err := e.store.Append(ctx, []ledger.Record{{Kind: ledger.KindEvidence, Body: []byte(mustJSON(forgedEv))}}, ""); err != nil {
		t.Fatalf("the store refused a well-formed forged signer: %v", err)
	}
	if g, ready := e.gate(t); ready || g.State != gates.StateOpen || !baselineHas(g, "no signature of the envelope verifies") {
		t.Errorf("forged signer in the log: %s ready=%v baseline %+v; want baseline, not counted", g.State, ready, g.Baseline)
	}

	// Signed by ci-mac: counts, and the record carries its signer and the
	// envelope, which the runner audit checks again.
	code, body := e.do(t, http.MethodPost, "/api/v1/evidence", e.record, good, "Content-Type", ledger.ContentTypeDSSE)
	if code != http.StatusCreated {
		t.Fatalf("signed by ci-mac: %d %s", code, body)
	}
	var ans AppendedJSON
	json.Unmarshal(body, &ans)
	if g, ready := e.gate(t); !ready || g.State != gates.StatePassed {
		t.Fatalf("signed by ci-mac: %s (%s) ready=%v", g.State, g.Reason, ready)
	}
	ent, err := e.store.Entry(ctx, ans.ID)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := ledger.ParseEvidence(ent.Body)
	if err != nil || stored.Signer == nil || stored.Signer.Runner != "ci-mac" || stored.Signer.KeyID != verify.RunnerKeyID(e.mac.Public().(ed25519.PublicKey)) {
		t.Fatalf("stored signer: %+v %v", stored.Signer, err)
	}
	if code, page := e.do(t, http.MethodGet, "/evidence/"+ans.ID, "", nil); code != http.StatusOK || !strings.Contains(string(page), "runner <strong>ci-mac</strong>") {
		t.Errorf("evidence page: %d; want it to name the signer", code)
	}
	reg, err := auth.LoadRunnerKeys(ctx, e.store, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := verify.ReverifySigned(ctx, ledger.EvidenceEntry{Entry: ent, Evidence: stored}, reg); err != nil {
		t.Fatalf("reverify: %v", err)
	}

	// Revoked: the key's evidence is baseline again, and new envelopes
	// signed by it are refused naming the revocation.
	if code, body := e.do(t, http.MethodPost, "/api/v1/runners/ci-mac/revoke", e.admin, map[string]string{"reason": "host reimaged"}); code != http.StatusCreated {
		t.Fatalf("revoke: %d %s", code, body)
	}
	if g, ready := e.gate(t); ready || g.State != gates.StateOpen || !baselineHas(g, "revoked at index") {
		t.Errorf("after revocation: %s ready=%v baseline %+v; want open with the revoked key's run as baseline", g.State, ready, g.Baseline)
	}
	before := e.size(t)
	code, body = e.do(t, http.MethodPost, "/api/v1/evidence", e.record, sign(t, e.mac, testEvidence(2)), "Content-Type", ledger.ContentTypeDSSE)
	if code != http.StatusBadRequest || !strings.Contains(string(body), "revoked") || e.size(t) != before {
		t.Errorf("envelope signed by a revoked key: %d %s", code, body)
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

// TestEveryRouteHonoursItsScope walks every route of the router (chi.Walk)
// with no token, a read token, a record token (scoped and not), an
// expired token and an admin token, on a server whose reads need a token,
// and checks each answer against the route's declared scope: refused with
// 401 without a (live) token, 403 with a token below the scope, and never
// 401 or 403 with one that has it.
func TestEveryRouteHonoursItsScope(t *testing.T) {
	e := newTokenEnv(t, Config{ReadAuth: true, AuthFailures: -1}) // the walk fails authentication hundreds of times on purpose
	e.advance(2 * time.Hour)                                      // e.expires has expired
	// run is not above record (a record token cannot queue runs): of these
	// callers only admin holds it; TestRunScope covers run tokens.
	rank := map[string]int{"public": 0, "read": 1, "record": 2, "admin": 3, "run": 3}
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
		if err := e.store.Lite.Backup(ctx, p); err != nil {
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
		{"row inserted posing as made before schema 7", `INSERT INTO tokens(id, name, scope, secret_hash, created_at, leaf_idx) VALUES ('tok_00112233aabb', 'evil', 'admin', randomblob(32), 1, -1)`, "has no token leaf (leaf_idx -1)"},
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

// TestAuthenticationRefusesEditedTokensTable: authentication checks the
// tokens row it authenticates against the token leaves that define it,
// so a raw-SQL edit of the tokens table under a running server (scope,
// lanes, backends or repositories widened, expiry removed or extended,
// revocation removed, a secret hash replaced by one the attacker knows, a
// row with no leaf) is refused at once with 401 naming what differs,
// logged as tampering with the token id, never echoing the secret, and
// nothing is appended. Each edit is one that the store's own
// Authenticate (which trusts the row) would have let through.
func TestAuthenticationRefusesEditedTokensTable(t *testing.T) {
	ah := sha256.Sum256([]byte(attackerSecret))
	for _, c := range []struct {
		name, sql string
		args      []any
		secret    func(e *tokenEnv) string
		after     time.Duration // clock advance before the request
		body      func() any
		want      string
	}{
		{name: "repository scope widened", sql: `UPDATE tokens SET repositories = '[]' WHERE name = 'ci-cuda'`,
			secret: func(e *tokenEnv) string { return e.scoped }, body: func() any {
				ev := cudaEvidence(1)
				ev["subject"].(map[string]any)["repository"] = "github.com/other/repo"
				return ev
			}, want: "repositories differs"},
		{name: "lane scope widened", sql: `UPDATE tokens SET lanes = '["qmv-bias-sum","alloc-snapshot"]' WHERE name = 'ci-cuda'`,
			secret: func(e *tokenEnv) string { return e.scoped }, body: func() any {
				ev := cudaEvidence(1)
				ev["lane"] = "alloc-snapshot/v1"
				return ev
			}, want: "lanes differs"},
		{name: "backend scope removed", sql: `UPDATE tokens SET backends = '[]' WHERE name = 'ci-cuda'`,
			secret: func(e *tokenEnv) string { return e.scoped }, body: func() any { return testEvidence(1) }, want: "backends differs"},
		{name: "scope raised to admin", sql: `UPDATE tokens SET scope = 'admin' WHERE name = 'ci'`,
			secret: func(e *tokenEnv) string { return e.record }, want: "scope differs"},
		{name: "role added", sql: `UPDATE tokens SET roles = '["release-manager"]' WHERE name = 'ci'`,
			secret: func(e *tokenEnv) string { return e.record }, want: "roles differs"},
		{name: "expiry removed", sql: `UPDATE tokens SET expires_at = NULL WHERE name = 'ci-short'`,
			secret: func(e *tokenEnv) string { return e.expires }, after: 2 * time.Hour, want: "expires_at differs"},
		{name: "expiry extended", sql: `UPDATE tokens SET expires_at = expires_at + 86400000000000 WHERE name = 'ci-short'`,
			secret: func(e *tokenEnv) string { return e.expires }, after: 2 * time.Hour, want: "expires_at differs"},
		{name: "revocation removed", sql: `UPDATE tokens SET revoked_at = NULL, revoked_idx = NULL WHERE name = 'ci-old'`,
			secret: func(e *tokenEnv) string { return e.revoked }, want: "revoked_at differs"},
		{name: "revocation removed, index kept", sql: `UPDATE tokens SET revoked_at = NULL WHERE name = 'ci-old'`,
			secret: func(e *tokenEnv) string { return e.revoked }, want: "revoked_at differs"},
		{name: "admin secret hash replaced by the attacker's", sql: `UPDATE tokens SET secret_hash = ? WHERE name = 'ops'`, args: []any{ah[:]},
			secret: func(*tokenEnv) string { return attackerSecret }, want: "secret_hash differs"},
		{name: "row inserted", sql: `INSERT INTO tokens(id, name, scope, secret_hash, created_at) VALUES ('tok_00112233aabb', 'evil', 'admin', ?, 1)`, args: []any{ah[:]},
			secret: func(*tokenEnv) string { return attackerSecret }, want: "has no token leaf (a row was inserted)"},
		{name: "row inserted posing as made before schema 7", sql: `INSERT INTO tokens(id, name, scope, secret_hash, created_at, leaf_idx) VALUES ('tok_00112233aabb', 'evil', 'admin', ?, 1, -1)`, args: []any{ah[:]},
			secret: func(*tokenEnv) string { return attackerSecret }, want: "inserted into the tokens table"},
		{name: "row inserted pointing at another token's leaf", sql: `INSERT INTO tokens(id, name, scope, secret_hash, created_at, leaf_idx) SELECT 'tok_00112233aabb', 'ci-twin', 'record', ?, created_at, leaf_idx FROM tokens WHERE name = 'ci'`, args: []any{ah[:]},
			secret: func(*tokenEnv) string { return attackerSecret }, want: "has no token leaf (a row was inserted)"},
		{name: "row renamed", sql: `UPDATE tokens SET name = 'ci2' WHERE name = 'ci'`,
			secret: func(e *tokenEnv) string { return e.record }, want: "name differs"},
		{name: "leaf index moved", sql: `UPDATE tokens SET leaf_idx = leaf_idx + 1 WHERE name = 'ci'`,
			secret: func(e *tokenEnv) string { return e.record }, want: "leaf_idx differs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newTokenEnv(t, Config{})
			secret := c.secret(e)
			body := testEvidence(1)
			if c.body != nil {
				body = c.body().(map[string]any)
			}
			// The server is running and has authenticated (and cached)
			// before the edit.
			if code, b := e.do(t, "GET", "/api/v1/evidence", e.record, nil); code != http.StatusOK {
				t.Fatalf("before the edit: %d %s", code, b)
			}
			res, err := e.store.Lite.DB().Exec(c.sql, c.args...)
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n != 1 {
				t.Fatalf("%d rows changed", n)
			}
			e.advance(c.after)
			// The store alone trusts the edited row.
			if _, err := e.store.Authenticate(context.Background(), secret); err != nil {
				t.Fatalf("the edit does not get past the store's own check (%v): not a test of the guard", err)
			}
			n := e.size(t)
			code, out := e.do(t, "POST", "/api/v1/evidence", secret, body)
			ae := apiError(t, out)
			if code != http.StatusUnauthorized || !strings.Contains(ae.Message, c.want) || !strings.Contains(ae.Message, "ledger audit") {
				t.Fatalf("POST with the edited row: %d %s, want 401 naming %q", code, out, c.want)
			}
			if strings.Contains(string(out), secret) || strings.Contains(string(out), secret[4:20]) {
				t.Fatal("the answer names the secret")
			}
			if e.size(t) != n {
				t.Fatal("a refused request appended")
			}
			logged := e.logBuf.String()
			if !strings.Contains(logged, "tampering") || !strings.Contains(logged, c.want[:strings.Index(c.want+" ", " ")]) {
				t.Fatalf("not logged as tampering: %s", logged)
			}
			if strings.Contains(logged, secret) || strings.Contains(logged, secret[4:20]) {
				t.Fatal("the log names the secret")
			}
		})
	}
}

// TestRunnerRegistryRoutes: registration refusals name the field or the
// conflict, the list shows live and revoked keys, and adding the live key
// again appends nothing.
func TestRunnerRegistryRoutes(t *testing.T) {
	e := newRunnerEnv(t)
	macPub := verify.AuthorizedKey(e.mac.Public().(ed25519.PublicKey))
	cases := []struct {
		name   string
		body   map[string]string
		status int
		want   string
	}{
		{"bad name", map[string]string{"name": "Bad Name", "public_key": verify.AuthorizedKey(newKey(t).Public().(ed25519.PublicKey))}, 400, `"field": "name"`},
		{"not a key", map[string]string{"name": "x", "public_key": "hello /etc/passwd"}, 400, `"field": "public_key"`},
		{"rsa-like type", map[string]string{"name": "x", "public_key": "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQ=="}, 400, `"field": "public_key"`},
		{"same key, other name", map[string]string{"name": "x", "public_key": macPub}, 409, "already registered"},
		{"second key for a live name", map[string]string{"name": "ci-mac", "public_key": verify.AuthorizedKey(newKey(t).Public().(ed25519.PublicKey))}, 409, "revoke it first"},
	}
	for _, c := range cases {
		before := e.size(t)
		code, body := e.do(t, http.MethodPost, "/api/v1/runners", e.admin, c.body)
		if code != c.status || !strings.Contains(string(body), c.want) || e.size(t) != before {
			t.Errorf("%s: %d %s; want %d with %q and nothing appended", c.name, code, body, c.status, c.want)
		}
		if strings.Contains(string(body), "passwd") {
			t.Errorf("%s: the answer echoes the input", c.name)
		}
	}
	before := e.size(t)
	if code, body := e.do(t, http.MethodPost, "/api/v1/runners", e.admin, map[string]string{"name": "ci-mac", "public_key": macPub}); code != http.StatusOK || e.size(t) != before {
		t.Errorf("adding the live key again: %d %s; want 200 and nothing appended", code, body)
	}
	if code, _ := e.do(t, http.MethodPost, "/api/v1/runners/nobody/revoke", e.admin, map[string]string{"reason": "x"}); code != http.StatusNotFound {
		t.Errorf("revoking an unknown runner: %d; want 404", code)
	}
	if code, body := e.do(t, http.MethodPost, "/api/v1/runners/ci-mac/revoke", e.admin, map[string]string{"reason": ""}); code != http.StatusBadRequest || !strings.Contains(string(body), `"field": "reason"`) {
		t.Errorf("revocation without a reason: %d %s", code, body)
	}
	e.do(t, http.MethodPost, "/api/v1/runners/ci-mac/revoke", e.admin, map[string]string{"reason": "rotated"})
	code, body := e.do(t, http.MethodGet, "/api/v1/runners", "", nil)
	var reg auth.RunnerRegistry
	if code != http.StatusOK || json.Unmarshal(body, &reg) != nil || len(reg.Runners) != 2 || !reg.Runners[0].Revoked || reg.Runners[0].Reason != "rotated" || reg.Runners[1].Revoked {
		t.Fatalf("list: %d %s", code, body)
	}
	// Re-registering a revoked key is refused; a new key for the name is not.
	if code, _ := e.do(t, http.MethodPost, "/api/v1/runners", e.admin, map[string]string{"name": "ci-mac", "public_key": macPub}); code != http.StatusConflict {
		t.Errorf("re-adding a revoked key: %d; want 409", code)
	}
	e.addRunner(t, "ci-mac", newKey(t))
}

// TestAuthenticationRefusesEditedTokenLeaf: the leaves authentication
// compares a row against are read through the verified reads, so an
// editor who widens a token's scope in its row and in its token leaf alike
// (with or without recomputing the leaf hash) gets no further: the leaf
// fails its check against the signed tree, and authentication fails
// closed (500, logged as tampering) with nothing appended.
func TestAuthenticationRefusesEditedTokenLeaf(t *testing.T) {
	for _, rehash := range []bool{false, true} {
		t.Run(map[bool]string{false: "bytes edited", true: "bytes edited and rehashed"}[rehash], func(t *testing.T) {
			e := newTokenEnv(t, Config{})
			db := e.store.Lite.DB()
			var idx int64
			var leaf []byte
			if err := db.QueryRow(`SELECT l.idx, l.leaf FROM leaves l JOIN tokens t ON t.leaf_idx = l.idx WHERE t.name = 'ci'`).Scan(&idx, &leaf); err != nil {
				t.Fatal(err)
			}
			edited := bytes.Replace(leaf, []byte(`"scope":"record"`), []byte(`"scope":"admin"`), 1)
			if bytes.Equal(edited, leaf) {
				t.Fatalf("token leaf has no record scope: %s", leaf)
			}
			if _, err := db.Exec(`UPDATE leaves SET leaf = ? WHERE idx = ?`, edited, idx); err != nil {
				t.Fatal(err)
			}
			if rehash {
				h := rfc6962.DefaultHasher.HashLeaf(edited)
				if _, err := db.Exec(`UPDATE leaves SET leaf_hash = ? WHERE idx = ?`, h, idx); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := db.Exec(`UPDATE tokens SET scope = 'admin' WHERE name = 'ci'`); err != nil {
				t.Fatal(err)
			}
			n := e.size(t)
			code, out := e.do(t, "PUT", "/api/v1/releases/6.6.6", e.record, "version: 6.6.6\ncomponents: []\ngates: []\n", "Content-Type", "application/yaml")
			if code != http.StatusInternalServerError || !strings.Contains(string(out), "integrity check") {
				t.Fatalf("admin request with the edited row and leaf: %d %s, want 500 (the leaf fails its check)", code, out)
			}
			if e.size(t) != n {
				t.Fatal("appended")
			}
			if !strings.Contains(e.logBuf.String(), "tampering") {
				t.Fatalf("not logged as tampering: %s", e.logBuf.String())
			}
		})
	}
}

// ingestPathBodies are inputs of each ingest format that name path v
// where a producer puts a file name: JUnit's file attributes and an
// external entity, test2json's package and output, an in-toto subject's
// name and uri, a DSSE envelope of that Statement, a Sigstore bundle's
// certificate and a --sigstore-policy style member.
func ingestPathBodies(v string) map[string]string {
	q, _ := json.Marshal(v)
	st := `{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":` + string(q) + `,"uri":` + string(q) + `,"digest":{"sha256":"` + strings.Repeat("0", 64) + `"}}],"predicateType":"https://in-toto.io/attestation/test-result/v0.1","predicate":{"result":"PASSED","passedTests":[` + string(q) + `],"warnedTests":[],"failedTests":[],"configuration":[{"uri":` + string(q) + `}]}}`
	x := strings.NewReplacer("&", "&amp;", "<", "&lt;", `"`, "&quot;").Replace(v)
	return map[string]string{
		"application/junit+xml":                         `<?xml version="1.0"?><!DOCTYPE testsuites [<!ENTITY x SYSTEM "` + x + `">]><testsuites><testsuite name="s" file="` + x + `" tests="1"><testcase name="&x;" classname="c" file="` + x + `"/></testsuite></testsuites>`,
		"application/vnd.go.test2json+jsonl":            `{"Action":"run","Package":` + string(q) + `,"Test":"T"}` + "\n" + `{"Action":"output","Package":` + string(q) + `,"Test":"T","Output":` + string(q) + `}` + "\n" + `{"Action":"pass","Package":` + string(q) + `,"Test":"T"}` + "\n",
		"application/vnd.in-toto+json":                  st,
		"application/vnd.dsse.envelope.v1+json":         `{"payloadType":"application/vnd.in-toto+json","payload":"` + base64.StdEncoding.EncodeToString([]byte(st)) + `","signatures":[{"keyid":` + string(q) + `,"sig":"AAAA"}]}`,
		"application/vnd.dev.sigstore.bundle.v0.3+json": `{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json","verificationMaterial":{"certificate":{"rawBytes":"AAAA"},"trusted_root":` + string(q) + `},"dsseEnvelope":{"payloadType":"application/vnd.in-toto+json","payload":"` + base64.StdEncoding.EncodeToString([]byte(st)) + `","signatures":[{"sig":"AAAA"}]}}`,
	}
}

// TestExploitTreeCheckAtOldPins: a tree check counts only at the pins it
// was computed with, for the release and component it was computed for
// (TRUST.md rule 3). A head that changes src/main.go is checked while
// release t-tree pins src/*; re-applying t-tree with narrower pins, or
// another release with other pins or the same ones, leaves the old
// record baseline naming the mismatch, and the release page does not show
// it as the comparison.
func TestExploitTreeCheckAtOldPins(t *testing.T) {
	f := newUploadFixture(t)
	e := newUploadEnv(t, Config{})
	e.applyPolicy(t, "core-signers", f.policyYAML, map[string][]byte{"signers": f.signers})
	e.putRelease(t, "t-tree", f.treeRelease("t-tree", f.outside, `["go.sum", "src/*"]`))
	code, body := e.do(t, "POST", "/api/v1/trees/verify", e.record, map[string]any{"release": "t-tree", "objects": treeObjects(t, f.dir, f.outside, f.reviewed)})
	var ans struct {
		ID       string          `json:"id"`
		Evidence ledger.Evidence `json:"evidence"`
	}
	json.Unmarshal(body, &ans)
	if te, err := ledger.DecodeTreeEquivalence(ans.Evidence.Details); code != 201 || err != nil || !te.Holds() || !te.ServerComputed() {
		t.Fatalf("tree check at pins [go.sum src/*]: %d %s", code, body)
	}
	if state, _, _ := e.readiness(t, "t-tree").gate(t, "tree"); state != "passed" {
		t.Fatalf("at the pins it was computed with: tree %s, want passed", state)
	}
	for _, c := range []struct{ what, version, pins, why string }{
		{"t-tree re-applied without pins", "t-tree", `[]`, "computed at pins [go.sum src/*]; release t-tree pins core at []"},
		{"t-tree re-applied with narrower pins", "t-tree", `["go.sum"]`, "computed at pins [go.sum src/*]; release t-tree pins core at [go.sum]"},
		{"another release with other pins", "t-tree2", `["README.md"]`, "computed at pins [go.sum src/*]; release t-tree2 pins core at [README.md]"},
		{"another release with the same pins", "t-tree3", `["src/*", "go.sum"]`, "computed for release t-tree, not t-tree3"},
	} {
		e.putRelease(t, c.version, f.treeRelease(c.version, f.outside, c.pins))
		rd := e.readiness(t, c.version)
		state, bl, failing := rd.gate(t, "tree")
		if rd.Readiness.Ready || state != "open" || len(failing) != 0 || !strings.Contains(bl[ans.ID], c.why) {
			t.Errorf("%s: ready %v, tree %s, failing %v, baseline %v; want open with %s's record baseline: %q", c.what, rd.Readiness.Ready, state, failing, bl, ans.ID, c.why)
		}
		if _, page := e.do(t, "GET", "/releases/"+c.version, "", nil); strings.Contains(string(page), "eq-equivalent") {
			t.Errorf("%s: the release page shows the check at other pins as the tree comparison", c.what)
		}
	}
	// Back at the pins it was computed with, the record counts again.
	e.putRelease(t, "t-tree", f.treeRelease("t-tree", f.outside, `["src/*", "go.sum"]`))
	if state, _, _ := e.readiness(t, "t-tree").gate(t, "tree"); state != "passed" {
		t.Fatalf("t-tree back at its pins: tree %s, want passed", state)
	}
}

// TestExploitHeadPolicyOfNoRelease: a release that binds no policy does
// not let the caller choose one (TRUST.md rule 2). An admin registers
// strict (trusting alice) and lenient (trusting mallory); release t-none
// names neither; a record token verifies mallory's head under lenient.
// The signed-heads gate stays open naming that the release binds no
// policy, and the verification is baseline with that reason; once the
// release binds lenient itself, the same verification counts.
func TestExploitHeadPolicyOfNoRelease(t *testing.T) {
	f := newUploadFixture(t)
	e := newUploadEnv(t, Config{})
	e.applyPolicy(t, "strict", f.policyYAML, map[string][]byte{"signers": f.signers})
	e.applyPolicy(t, "lenient", f.malloryYAML, f.malloryFiles)
	e.putRelease(t, "t-none", f.headsRelease("t-none", f.evil, ""))
	evil := headObjects(t, f.dir, "evil")
	code, body := e.do(t, "POST", "/api/v1/heads/verify", e.record, map[string]any{"release": "t-none", "objects": evil})
	if ae := apiErr(body); code != 409 || !strings.Contains(ae.Message, "binds no trust policy") {
		t.Errorf("verify head for a release without a policy: %d %s; want 409 naming the missing policy", code, body)
	}
	code, body = e.do(t, "POST", "/api/v1/heads/verify", e.record, map[string]any{"policy": "lenient", "repository": upRepo, "ref": "refs/heads/evil", "objects": evil})
	var ans struct {
		ID   string                  `json:"id"`
		Head ledger.HeadVerification `json:"head"`
	}
	json.Unmarshal(body, &ans)
	if code != 201 || ans.Head.Verdict != ledger.VerdictGood || ans.Head.Decision != ledger.DecisionTrusted {
		t.Fatalf("verify under lenient: %d %s", code, body)
	}
	rd := e.readiness(t, "t-none")
	state, bl, failing := rd.gate(t, "heads")
	var reason string
	for _, g := range rd.Readiness.Gates {
		if g.ID == "heads" {
			reason = g.Reason
		}
	}
	if rd.Readiness.Ready || state != "open" || len(failing) != 0 || !strings.Contains(reason, "release binds no policy") || !strings.Contains(bl[ans.ID], "release binds no policy") {
		t.Fatalf("t-none: ready %v, heads %s (%q), failing %v, baseline %v; want open naming that the release binds no policy", rd.Readiness.Ready, state, reason, failing, bl)
	}
	e.putRelease(t, "t-none", f.headsRelease("t-none", f.evil, "policy: lenient\n"))
	if state, _, _ := e.readiness(t, "t-none").gate(t, "heads"); state != "passed" {
		t.Fatalf("t-none bound to lenient: heads %s, want passed", state)
	}
}

// replayRelease defines release version over testEvidence(1)'s commit
// with one lane gate of min_runs runs, signed_by ci-mac when signed.
func (e *runnerEnv) replayRelease(t *testing.T, version string, minRuns int, signed bool) {
	t.Helper()
	commit := fmt.Sprintf("%040x", 2)
	signedBy := ""
	if signed {
		signedBy = ", signed_by: [ci-mac]"
	}
	rel := fmt.Sprintf(`version: %s
components:
  - {name: core, repository: github.com/ml-explore/mlx, reviewed: %s, head: %s}
gates:
  - {id: qmv, kind: lane, lane: qmv-bias-sum/v1, component: core, backends: [cpu], cases: 216, min_runs: %d%s}
`, version, commit, commit, minRuns, signedBy)
	if code, body := e.do(t, http.MethodPut, "/api/v1/releases/"+version, e.admin, rel, "Content-Type", "application/yaml"); code != http.StatusCreated && code != http.StatusOK {
		t.Fatalf("define release %s: %d %s", version, code, body)
	}
}

// laneGate returns the qmv gate of release version and whether the
// release is ready.
func (e *runnerEnv) laneGate(t *testing.T, version string) (gates.GateResult, bool) {
	t.Helper()
	code, body := e.do(t, http.MethodGet, "/api/v1/releases/"+version+"/readiness", "", nil)
	if code != http.StatusOK {
		t.Fatalf("readiness %s: %d %s", version, code, body)
	}
	var sv gates.SignedVerdict
	if err := json.Unmarshal(body, &sv); err != nil || sv.Readiness == nil || len(sv.Readiness.Gates) != 1 {
		t.Fatalf("readiness %s: %v %s", version, err, body)
	}
	return sv.Readiness.Gates[0], sv.Readiness.Ready
}

// TestExploitReplayedSignedRun: the signed evidence of one run is readable
// by anyone (GET /evidence/{id} shows signer.envelope). Posting that
// envelope again, by other record tokens and in variants whose kept
// envelope differs (an extra bogus signature, an empty keyid, an extra
// valid signature by an unregistered key), does not make a min_runs gate
// count more than the one run: each copy is a baseline duplicate naming
// the first record. The same holds for unsigned evidence re-posted by a
// second token. A second real run counts.
func TestExploitReplayedSignedRun(t *testing.T) {
	e := newRunnerEnv(t)
	ctx := context.Background()
	e.replayRelease(t, "9.9.8", 4, true)
	e.replayRelease(t, "9.9.7", 2, false)
	run := testEvidence(1)
	good := sign(t, e.mac, run)
	post := func(what, token string, body any, ct string) (string, bool) {
		t.Helper()
		before := e.size(t)
		code, out := e.do(t, http.MethodPost, "/api/v1/evidence", token, body, "Content-Type", ct)
		switch {
		case code == http.StatusCreated || code == http.StatusOK:
			var a AppendedJSON
			if err := json.Unmarshal(out, &a); err != nil || a.ID == "" {
				t.Fatalf("%s: answer %s: %v", what, out, err)
			}
			return a.ID, true
		case code >= 400 && code < 500 && e.size(t) == before:
			return "", false // refused whole: fine, nothing to count
		}
		t.Fatalf("%s: %d %s", what, code, out)
		return "", false
	}
	first, _ := post("the real run", e.record, good, ledger.ContentTypeDSSE)

	// What a reader sees of it.
	code, body := e.do(t, http.MethodGet, "/api/v1/evidence/"+first, "", nil)
	if code != http.StatusOK {
		t.Fatalf("get evidence: %d %s", code, body)
	}
	var shown struct {
		Evidence ledger.Evidence `json:"evidence"`
	}
	if err := json.Unmarshal(body, &shown); err != nil || shown.Evidence.Signer == nil || len(shown.Evidence.Signer.Envelope) == 0 {
		t.Fatalf("the evidence page shows no envelope: %v %s", err, body)
	}
	read := []byte(shown.Evidence.Signer.Envelope)

	var env ledger.Envelope
	if err := json.Unmarshal(read, &env); err != nil {
		t.Fatal(err)
	}
	variant := func(f func(*ledger.Envelope)) []byte {
		v := env
		v.Signatures = append([]ledger.EnvelopeSignature(nil), env.Signatures...)
		f(&v)
		b, _ := json.Marshal(v)
		return b
	}
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		t.Fatal(err)
	}
	stranger := newKey(t)
	pae := fmt.Appendf(nil, "DSSEv1 %d %s %d %s", len(env.PayloadType), env.PayloadType, len(payload), payload)
	replays := []struct {
		name string
		body []byte
	}{
		{"the envelope read back", read},
		{"an extra bogus signature", variant(func(v *ledger.Envelope) {
			v.Signatures = append(v.Signatures, ledger.EnvelopeSignature{KeyID: "SHA256:bogus", Sig: base64.StdEncoding.EncodeToString(make([]byte, 64))})
		})},
		{"an empty keyid", variant(func(v *ledger.Envelope) { v.Signatures[0].KeyID = "" })},
		{"an extra valid signature by an unregistered key", variant(func(v *ledger.Envelope) {
			v.Signatures = append(v.Signatures, ledger.EnvelopeSignature{KeyID: verify.RunnerKeyID(stranger.Public().(ed25519.PublicKey)), Sig: base64.StdEncoding.EncodeToString(ed25519.Sign(stranger, pae))})
		})},
		{"the payload in the URL alphabet", variant(func(v *ledger.Envelope) { v.Payload = base64.RawURLEncoding.EncodeToString(payload) })},
	}
	var copies []string
	for i, r := range replays {
		tok, _, err := e.store.CreateToken(ctx, fmt.Sprintf("replayer-%d", i), ledger.ScopeRecord, nil)
		if err != nil {
			t.Fatal(err)
		}
		if id, ok := post(r.name, tok, r.body, ledger.ContentTypeDSSE); ok && id != first {
			copies = append(copies, id)
		}
	}
	if len(copies) == 0 {
		t.Fatal("every replay was refused or answered as the first record: the test exercises no copy")
	}
	g, ready := e.laneGate(t, "9.9.8")
	if ready || g.State != gates.StateOpen || !strings.HasPrefix(g.Reason, "1 of 4 required") {
		t.Fatalf("one signed run replayed %d times: %s (%s) ready=%v; want open, 1 of 4", len(copies), g.State, g.Reason, ready)
	}
	for _, id := range copies {
		if r := baselineReasonOf(g, id); !strings.HasPrefix(r, gates.DuplicatePrefix+first) {
			t.Errorf("copy %s: baseline reason %q; want a duplicate of %s", id, r, first)
		}
	}
	if code, page := e.do(t, http.MethodGet, "/releases/9.9.8", "", nil); code != http.StatusOK || !strings.Contains(string(page), gates.DuplicatePrefix+first) {
		t.Errorf("release page: %d; want it to list the copies as duplicates of %s", code, first)
	}

	// Unsigned: the same body re-posted by a second token is one run.
	later := testEvidence(1)
	later["started_at"], later["finished_at"] = "2026-11-29T11:00:00Z", "2026-11-29T11:00:01Z"
	one, _ := post("unsigned run", e.record, later, "application/json")
	tok, _, err := e.store.CreateToken(ctx, "second-ci", ledger.ScopeRecord, nil)
	if err != nil {
		t.Fatal(err)
	}
	again, ok := post("unsigned run re-posted", tok, later, "application/json")
	if !ok || again == one {
		t.Fatalf("the re-post by another token was not appended as a new record (%q): the exploit's premise changed", again)
	}
	// 9.9.7 counts unsigned runs: the signed run (and its copies), plus
	// the unsigned run once.
	if g, _ := e.laneGate(t, "9.9.7"); g.State != gates.StatePassed || !strings.HasPrefix(g.Reason, "2 passing run(s)") ||
		!strings.HasPrefix(baselineReasonOf(g, again), gates.DuplicatePrefix+one) {
		t.Errorf("unsigned gate: %s (%s), copy's reason %q; want passed with 2 runs and the re-post a duplicate of %s", g.State, g.Reason, baselineReasonOf(g, again), one)
	}

	// Another real signed run counts.
	second := testEvidence(1)
	second["started_at"], second["finished_at"] = "2026-11-29T12:00:00Z", "2026-11-29T12:00:01Z"
	post("a second signed run", e.record, sign(t, e.mac, second), ledger.ContentTypeDSSE)
	if g, _ := e.laneGate(t, "9.9.8"); !strings.HasPrefix(g.Reason, "2 of 4 required") {
		t.Errorf("two signed runs: %s (%s); want 2 of 4", g.State, g.Reason)
	}
}

func baselineReasonOf(g gates.GateResult, id string) string {
	for _, b := range g.Baseline {
		if b.ID == id {
			return b.Reason
		}
	}
	return ""
}

// TestExploitFutureDatedRun: evidence dated in the future (2099) or before
// any run (year 0000) is refused at POST /api/v1/evidence naming the
// field, as plain JSON and as a signed envelope, and nothing is appended:
// a future finished_at would otherwise keep a freshness gate passing for
// ever. (A future-dated record already in a log is fresh only from when it
// was recorded: gates.TestFreshnessFromRecordedAt.)
func TestExploitFutureDatedRun(t *testing.T) {
	e := newRunnerEnv(t)
	soon := time.Now().UTC().Add(ledger.MaxClockSkew + time.Minute).Format(time.RFC3339Nano)
	at := func(started, finished string) map[string]any {
		ev := testEvidence(1)
		ev["started_at"], ev["finished_at"] = started, finished
		return ev
	}
	ok := testEvidence(1)["started_at"].(string)
	for _, c := range []struct {
		name, field string
		body        any
		ct          string
	}{
		{"finished in 2099", "finished_at", at(ok, "2099-01-01T00:00:00Z"), "application/json"},
		{"finished past the clock skew", "finished_at", at(ok, soon), "application/json"},
		{"started and finished in 2099", "started_at", at("2099-01-01T00:00:00Z", "2099-01-01T00:00:01Z"), "application/json"},
		{"started in year 0000", "started_at", at("0000-01-01T00:00:00Z", ok), "application/json"},
		{"started after finished", "finished_at", at("2026-11-29T10:00:05Z", "2026-11-29T10:00:01Z"), "application/json"},
		{"second of a batch finished in 2099", "[1].finished_at", []any{testEvidence(1), at(ok, "2099-01-01T00:00:00Z")}, "application/json"},
		{"signed, finished in 2099", "payload.finished_at", sign2099(t, e), ledger.ContentTypeDSSE},
	} {
		before := e.size(t)
		code, body := e.do(t, http.MethodPost, "/api/v1/evidence", e.record, c.body, "Content-Type", c.ct)
		e.wantRefused(t, c.name, code, body, http.StatusBadRequest, c.field, before)
	}
}

// sign2099 is a ci-mac envelope over evidence that finished in 2099, made
// with the DSSE library since the ledger's own signer validates first.
func sign2099(t *testing.T, e *runnerEnv) []byte {
	t.Helper()
	ev := testEvidence(1)
	ev["finished_at"] = "2099-01-01T00:00:00Z"
	b, _ := json.Marshal(ev)
	return dsseEnvelope(t, e.mac, ledger.PayloadTypeEvidence, b)
}
