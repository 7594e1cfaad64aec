package web

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
)

// TestVerifyHeadAPI: POST /heads/verify verifies uploaded objects under
// the release's registered policy (or a registered policy by name),
// records the verification, and GET /heads lists it; an admin may verify a
// repository under a --repo-root; bad requests are 4xx naming the field
// and record nothing.
func TestVerifyHeadAPI(t *testing.T) {
	f := newUploadFixture(t)
	root := filepath.Dir(f.dir)
	e := newUploadEnv(t, Config{RepoRoots: []string{root}})
	digest := e.applyPolicy(t, "core-signers", f.policyYAML, map[string][]byte{"signers": f.signers})
	e.defineRelease(t, f.releaseYAML("1.0", f.head, "core-signers"))
	start := e.size(t)
	objs := headObjects(t, f.dir, "main")
	for _, bad := range []struct {
		body   any
		status int
		field  string
	}{
		{map[string]any{}, 400, "release"},
		{map[string]any{"release": "1.0"}, 400, "objects"},
		{map[string]any{"release": "9.9", "objects": objs}, 404, ""},
		{map[string]any{"policy": "nope", "objects": objs}, 404, ""},
		{map[string]any{"release": "1.0", "component": "other", "objects": objs}, 400, "component"},
		{map[string]any{"release": "1.0", "component": "core", "repository": "github.com/evil/core", "objects": objs}, 400, "repository"},
		{map[string]any{"release": "1.0", "objects": objs, "object_format": "md5"}, 400, "object_format"},
		{map[string]any{"release": "1.0", "objects": []map[string]any{{"type": "blob", "id": objs[0].ID, "data": objs[0].Data}}}, 400, "objects[0].type"},
		{map[string]any{"release": "1.0", "unknown": 1}, 400, "unknown"},
	} {
		code, body := e.do(t, "POST", "/api/v1/heads/verify", e.record, bad.body)
		if ae := apiErr(body); code != bad.status || ae.Field != bad.field {
			t.Errorf("%v: %d %s, want %d naming %q", bad.body, code, body, bad.status, bad.field)
		}
	}
	if e.size(t) != start {
		t.Fatal("a bad request recorded something")
	}
	code, body := e.do(t, "POST", "/api/v1/heads/verify", e.record, map[string]any{"release": "1.0", "component": "core", "ref": "refs/heads/main", "objects": objs})
	if code != 201 {
		t.Fatalf("verify: %d %s", code, body)
	}
	var res struct {
		Head ledger.HeadVerification `json:"head"`
		ID   string                  `json:"id"`
	}
	json.Unmarshal(body, &res)
	h := res.Head
	if h.Verdict != ledger.VerdictGood || h.Decision != ledger.DecisionTrusted || h.Repository != upRepo || h.Commit != f.head || h.Policy != digest || h.Signer != "release-bot" || res.ID == "" {
		t.Fatalf("verification: %s", body)
	}
	code, body = e.do(t, "GET", "/api/v1/heads?repository="+upRepo, "", nil)
	if code != 200 || !strings.Contains(string(body), res.ID) {
		t.Fatalf("list: %d %s", code, body)
	}
	// Outside a release: a registered policy by name or digest.
	for _, ref := range []string{"core-signers", digest} {
		code, body = e.do(t, "POST", "/api/v1/heads/verify", e.record, map[string]any{"policy": ref, "repository": upRepo, "ref": "refs/heads/evil", "objects": headObjects(t, f.dir, "evil")})
		json.Unmarshal(body, &res)
		if code/100 != 2 || res.Head.Decision != ledger.DecisionUntrusted || res.Head.Policy != digest {
			t.Fatalf("policy %s: %d %s", ref, code, body)
		}
	}
	// An admin may read a repository under a configured root; a record
	// token may not.
	if code, body := e.do(t, "POST", "/api/v1/heads/verify", e.record, map[string]any{"release": "1.0", "repo_path": "core"}); code != 403 {
		t.Fatalf("record token with repo_path: %d %s", code, body)
	}
	code, body = e.do(t, "POST", "/api/v1/heads/verify", e.admin, map[string]any{"release": "1.0", "repository": upRepo, "ref": "main", "repo_path": "core"})
	json.Unmarshal(body, &res)
	if code/100 != 2 || res.Head.Decision != ledger.DecisionTrusted || res.Head.Commit != f.head {
		t.Fatalf("admin repo_path: %d %s", code, body)
	}
	if code, _ := e.do(t, "POST", "/api/v1/heads/verify", e.read, map[string]any{"release": "1.0", "objects": objs}); code != 403 {
		t.Fatalf("read token may not record: %d", code)
	}
}

// TestServerPathConfinement: repo_path resolves only under a configured
// root: traversal, absolute paths, symlinks leaving the root, gitfiles
// and object alternates are refused, and no refusal quotes a file.
func TestServerPathConfinement(t *testing.T) {
	f := newUploadFixture(t)
	root := t.TempDir()
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	os.WriteFile(secret, []byte("TOP-SECRET-LINE\n"), 0o600)
	os.Symlink(f.dir, filepath.Join(root, "escape"))   // a repository outside the root
	os.Symlink(outside, filepath.Join(root, "up"))     // a directory outside the root
	os.MkdirAll(filepath.Join(root, "gitfile"), 0o755) // .git is a file pointing elsewhere
	os.WriteFile(filepath.Join(root, "gitfile", ".git"), []byte("gitdir: "+filepath.Join(f.dir, ".git")+"\n"), 0o644)
	var opened []string
	e := newUploadEnv(t, Config{RepoRoots: []string{root}, FileAccess: func(p string) { opened = append(opened, p) }})
	e.applyPolicy(t, "core-signers", f.policyYAML, map[string][]byte{"signers": f.signers})
	start := e.size(t)
	for _, p := range []string{"../" + filepath.Base(outside) + "/secret", secret, "escape", "up/secret", "gitfile", "core/../../etc", "nope", "a\\..\\b"} {
		code, body := e.do(t, "POST", "/api/v1/heads/verify", e.admin, map[string]any{"policy": "core-signers", "repository": upRepo, "repo_path": p})
		if ae := apiErr(body); code != 400 || ae.Field != "repo_path" || strings.Contains(string(body), "TOP-SECRET") {
			t.Errorf("repo_path %q: %d %s", p, code, body)
		}
	}
	for _, p := range opened {
		if rel, err := filepath.Rel(root, p); err != nil || strings.HasPrefix(rel, "..") {
			t.Errorf("opened %s outside the root", p)
		}
	}
	if e.size(t) != start {
		t.Error("a refused repo_path recorded something")
	}
}

// TestPolicyRebindAndAudit: re-registering a policy under the same name
// takes effect on the next verification (the lookup cache sees the new
// leaf), a release binding a name and a digest that disagree is 409, and
// the log with policy leaves audits clean.
func TestPolicyRebindAndAudit(t *testing.T) {
	f := newUploadFixture(t)
	e := newUploadEnv(t, Config{})
	d1 := e.applyPolicy(t, "core-signers", f.policyYAML, map[string][]byte{"signers": f.signers})
	e.defineRelease(t, f.releaseYAML("1.0", f.head, "core-signers"))
	verifyMain := func() ledger.HeadVerification {
		t.Helper()
		code, body := e.do(t, "POST", "/api/v1/heads/verify", e.record, map[string]any{"release": "1.0", "objects": headObjects(t, f.dir, "main")})
		var res struct {
			Head ledger.HeadVerification `json:"head"`
		}
		json.Unmarshal(body, &res)
		if code/100 != 2 {
			t.Fatalf("verify: %d %s", code, body)
		}
		return res.Head
	}
	if h := verifyMain(); h.Decision != ledger.DecisionTrusted || h.Policy != d1 {
		t.Fatalf("under the first policy: %+v", h)
	}
	d2 := e.applyPolicy(t, "core-signers", f.malloryYAML, f.malloryFiles)
	if d2 == d1 {
		t.Fatal("two policies with other keys share a digest")
	}
	if h := verifyMain(); h.Decision != ledger.DecisionUntrusted || h.Policy != d2 {
		t.Fatalf("after re-registering the name: %+v", h)
	}
	// Bound by digest, the first policy still applies.
	e.defineRelease(t, strings.Replace(f.releaseYAML("1.0", f.head, "core-signers"), "policy: core-signers\n", "policy_digest: "+d1+"\n", 1))
	if h := verifyMain(); h.Decision != ledger.DecisionTrusted || h.Policy != d1 {
		t.Fatalf("bound by digest: %+v", h)
	}
	// Name and digest that disagree: refused, nothing appended.
	e.defineRelease(t, strings.Replace(f.releaseYAML("1.0", f.head, "core-signers"), "policy: core-signers\n", "policy: core-signers\npolicy_digest: "+d1+"\n", 1))
	before := e.size(t)
	if code, body := e.do(t, "POST", "/api/v1/heads/verify", e.record, map[string]any{"release": "1.0", "objects": headObjects(t, f.dir, "main")}); code != 409 {
		t.Fatalf("name and digest disagree: %d %s", code, body)
	}
	if e.size(t) != before {
		t.Error("a refused verification appended")
	}
	// A release binding no policy: 409.
	e.defineRelease(t, strings.Replace(f.releaseYAML("4.0", f.head, "x"), "policy: x\n", "", 1))
	if code, body := e.do(t, "POST", "/api/v1/heads/verify", e.record, map[string]any{"release": "4.0", "objects": headObjects(t, f.dir, "main")}); code != 409 {
		t.Fatalf("a release without a policy: %d %s", code, body)
	}
	code, body := e.do(t, "GET", "/api/v1/policies/core-signers", "", nil)
	if code != 200 || !strings.Contains(string(body), d2) {
		t.Fatalf("GET policy: %d %s", code, body)
	}
	code, body = e.do(t, "GET", "/api/v1/policies", "", nil)
	if code != 200 || !strings.Contains(string(body), d1) || !strings.Contains(string(body), d2) {
		t.Fatalf("list policies: %d %s", code, body)
	}
	rep, err := e.store.Audit(context.Background())
	if err != nil || !rep.OK {
		t.Fatalf("audit: %+v %v", rep, err)
	}
}
