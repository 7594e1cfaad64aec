package web

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// The exploits of issue 14 on heads, policies and trees, done with a
// record token through the real HTTP API on a temporary database. Each is
// refused (4xx naming the field, nothing appended) or recorded as what
// the server computed, and the release stays not ready.

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

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

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
	if code, body := e.do(t, "POST", "/api/v1/heads/verify", mine, map[string]any{"release": "1.0", "ref": "refs/heads/main", "objects": objs}); code != 201 {
		t.Fatalf("head of the token's own repository: %d %s", code, body)
	}
}
