package web

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
)

// TestServerComputedRecordsCarryRecordedBy: the head and tree records the
// server computes (POST /heads/verify, POST /trees/verify) carry the id
// and name of the token that asked, in the leaf itself, and the heads
// page and the evidence page show it; an admin's repository read carries
// the admin token.
func TestServerComputedRecordsCarryRecordedBy(t *testing.T) {
	f := newUploadFixture(t)
	e := newUploadEnv(t, Config{RepoRoots: []string{filepath.Dir(f.dir)}})
	e.applyPolicy(t, "core-signers", f.policyYAML, map[string][]byte{"signers": f.signers})
	e.defineRelease(t, f.releaseYAML("1.0", f.head, "core-signers"))
	ids := map[string]string{}
	toks, err := e.store.Tokens(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range toks {
		ids[tk.Name] = tk.ID
	}
	leafRecorder := func(id string) *ledger.Recorder {
		t.Helper()
		en, err := e.store.Entry(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		var probe struct {
			RecordedBy *ledger.Recorder `json:"recorded_by"`
		}
		if err := json.Unmarshal(en.Body, &probe); err != nil {
			t.Fatal(err)
		}
		return probe.RecordedBy
	}
	want := func(what string, got *ledger.Recorder, name string) {
		t.Helper()
		if got == nil || got.Token == nil || got.Token.Name != name || got.Token.ID != ids[name] || got.Runner != nil {
			t.Fatalf("%s: recorded_by %+v, want token %s (%s)", what, got, name, ids[name])
		}
	}

	code, body := e.do(t, "POST", "/api/v1/heads/verify", e.record, map[string]any{"release": "1.0", "ref": "refs/heads/main", "objects": headObjects(t, f.dir, "main")})
	if code != http.StatusCreated {
		t.Fatalf("verify head: %d %s", code, body)
	}
	var head struct {
		ID   string                  `json:"id"`
		Head ledger.HeadVerification `json:"head"`
	}
	json.Unmarshal(body, &head)
	want("head answer", head.Head.RecordedBy, "ci")
	want("head leaf", leafRecorder(head.ID), "ci")

	code, body = e.do(t, "POST", "/api/v1/heads/verify", e.admin, map[string]any{"release": "1.0", "repository": upRepo, "ref": "main", "repo_path": "core"})
	if code/100 != 2 {
		t.Fatalf("admin verify head: %d %s", code, body)
	}
	var adm struct {
		ID string `json:"id"`
	}
	json.Unmarshal(body, &adm)
	want("admin head leaf", leafRecorder(adm.ID), "admin")

	code, body = e.do(t, "POST", "/api/v1/trees/verify", e.record, map[string]any{"release": "1.0", "objects": treeObjects(t, f.dir, f.head, f.reviewed)})
	if code != http.StatusCreated {
		t.Fatalf("verify tree: %d %s", code, body)
	}
	var tree struct {
		ID       string          `json:"id"`
		Evidence ledger.Evidence `json:"evidence"`
	}
	json.Unmarshal(body, &tree)
	want("tree answer", tree.Evidence.RecordedBy, "ci")
	want("tree leaf", leafRecorder(tree.ID), "ci")

	_, page := e.do(t, "GET", "/heads?repository="+upRepo, "", nil)
	for _, s := range []string{"token <strong>ci</strong> (<code>" + ids["ci"] + "</code>)", "token <strong>admin</strong> (<code>" + ids["admin"] + "</code>)"} {
		if !strings.Contains(string(page), s) {
			t.Errorf("heads page lacks %q", s)
		}
	}
	_, page = e.do(t, "GET", "/evidence/"+tree.ID, "", nil)
	if s := "token <strong>ci</strong> (<code>" + ids["ci"] + "</code>)"; !strings.Contains(string(page), s) {
		t.Errorf("tree evidence page lacks %q", s)
	}
}
