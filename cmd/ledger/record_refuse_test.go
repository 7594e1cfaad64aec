package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/sqlite"
)

// logSize is the size of the local log in db.
func logSize(t *testing.T, db string) uint64 {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Options{Path: db})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cp, err := st.Checkpoint(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return cp.Size
}

// treeGateState runs release check --json on db and returns the state of
// gate id and the exit code.
func treeGateState(t *testing.T, db, version, id string) (string, int) {
	t.Helper()
	out, se, code := runBin(t, "", "--db", db, "--json", "release", "check", version)
	var rd struct {
		Readiness struct {
			Gates []struct {
				ID    string `json:"id"`
				State string `json:"state"`
			} `json:"gates"`
		} `json:"readiness"`
	}
	if err := json.Unmarshal([]byte(out), &rd); err != nil {
		t.Fatalf("release check --json: %v\n%s%s", err, out, se)
	}
	for _, g := range rd.Readiness.Gates {
		if g.ID == id {
			return g.State, code
		}
	}
	t.Fatalf("release check: no gate %q in %s", id, out)
	return "", code
}

// TestRecordLocalRefusesServerMarkers: `ledger record --db` refuses what
// POST /api/v1/evidence refuses (a tree-equivalence verdict carrying the
// server's computed_by marker, in any spelling and inside an array; a
// plain signer; a recorded_by), naming the field as the server does and
// appending nothing, and the release's tree-equivalence gate stays open.
// The same forged record put into the store directly passes the gate,
// which is what the refusal keeps out.
func TestRecordLocalRefusesServerMarkers(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	repo := t.TempDir()
	gitT(t, repo, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(repo, "main.go"), []byte("package main\n"), 0o644)
	os.WriteFile(filepath.Join(repo, "go.sum"), []byte("a v1\n"), 0o644)
	gitT(t, repo, "add", ".")
	gitT(t, repo, "commit", "-q", "-m", "reviewed")
	reviewed := gitT(t, repo, "rev-parse", "HEAD")
	os.WriteFile(filepath.Join(repo, "main.go"), []byte("package main // changed outside the pins\n"), 0o644)
	gitT(t, repo, "commit", "-q", "-am", "sneaky")
	head := gitT(t, repo, "rev-parse", "HEAD")
	tree := gitT(t, repo, "rev-parse", "HEAD^{tree}")

	dir := t.TempDir()
	db := filepath.Join(dir, "ledger.db")
	if _, se, code := runBin(t, "", "--db", db, "migrate"); code != 0 {
		t.Fatalf("migrate: %s", se)
	}
	rel := "version: t1\ncomponents:\n  - name: app\n    repository: example/app\n    reviewed: " + reviewed + "\n    head: " + head + "\n    tree: " + tree + "\n    pins: [go.sum]\ngates:\n  - id: tree\n    kind: tree-equivalence\n"
	relFile := filepath.Join(dir, "rel.yaml")
	os.WriteFile(relFile, []byte(rel), 0o644)
	if _, se, code := runBin(t, "", "--db", db, "release", "apply", relFile); code != 0 {
		t.Fatalf("apply: %s", se)
	}
	if state, code := treeGateState(t, db, "t1", "tree"); state != "open" || code == 0 {
		t.Fatalf("before any record: gate %s, exit %d; want open and not ready", state, code)
	}

	// The forged verdict: the head "equals" the reviewed source, as only
	// the ledger's own tree check may say.
	equivalent := true
	te := ledger.TreeEquivalence{Reviewed: reviewed, Equivalent: &equivalent, OutsidePins: []string{}, Pins: []string{"go.sum"},
		Differences: 1, ComputedBy: ledger.ComputedByServer, Release: "t1", Component: "app"}
	now := time.Now().UTC()
	ev, err := te.Evidence(ledger.Subject{Repository: "example/app", Commit: head, Tree: tree}, ledger.RunnerBuild{Version: "test"}, now, now)
	if err != nil {
		t.Fatal(err)
	}
	forged, err := json.Marshal(&ev)
	if err != nil {
		t.Fatal(err)
	}
	detailsMarker := `"` + ledger.ComputedByField + `":"server"`
	if !strings.Contains(string(forged), detailsMarker) {
		t.Fatalf("the forged record carries no marker: %s", forged)
	}
	claim := strings.Replace(string(forged), ","+detailsMarker, "", 1)
	member := func(name, value string) string { // the claim with one more top-level member
		return strings.Replace(claim, "{", `{"`+name+`":`+value+",", 1)
	}
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct{ what, body, field string }{
		{"marker", string(forged), "details.computed_by"},
		{"marker in another case", strings.Replace(string(forged), detailsMarker, `"Computed_By":"server"`, 1), "details.computed_by"},
		{"marker spelled with an escape", strings.Replace(string(forged), detailsMarker, `"\u0063omputed_by":"server"`, 1), "details.computed_by"},
		{"marker in an array", "[" + claim + "," + string(forged) + "]", "[1].details.computed_by"},
		{"plain signer", member(ledger.SignerField, `{"runner":"ci","key_id":"SHA256:x"}`), "signer"},
		{"recorded_by", member(ledger.RecordedByField, `{"token":{"id":"tok_0123456789ab","name":"ci"}}`), "recorded_by"},
	} {
		before := logSize(t, db)
		out, se, code := runBin(t, "", "--db", db, "record", "--format", "evidence", write("ev.json", c.body))
		if code != 2 || !strings.Contains(se, c.field+":") {
			t.Errorf("%s: exit %d, want 2 naming %s\n%s%s", c.what, code, c.field, out, se)
		}
		if strings.Contains(se, reviewed) || strings.Contains(se, head) {
			t.Errorf("%s: the error quotes the record: %s", c.what, se)
		}
		if after := logSize(t, db); after != before {
			t.Errorf("%s: the log grew from %d to %d", c.what, before, after)
		}
	}
	if state, code := treeGateState(t, db, "t1", "tree"); state != "open" || code == 0 {
		t.Fatalf("after the refused records: gate %s, exit %d; want open and not ready", state, code)
	}

	// The same verdict without the marker is a claim: recorded, and kept
	// as baseline by the gate.
	if out, se, code := runBin(t, "", "--db", db, "record", write("claim.json", claim)); code != 0 || !strings.Contains(out, "recorded") {
		t.Fatalf("record of the claim: %d\n%s%s", code, out, se)
	}
	if state, code := treeGateState(t, db, "t1", "tree"); state != "open" || code == 0 {
		t.Fatalf("after the claim: gate %s, exit %d; want open and not ready", state, code)
	}

	// Appended to the store directly, past every refusal, the forged
	// verdict passes the gate: the refusals above are what keep it open.
	st, err := sqlite.Open(context.Background(), sqlite.Options{Path: db})
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.Append(context.Background(), []ledger.Record{{Kind: ledger.KindEvidence, Body: forged}}, "")
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	if state, _ := treeGateState(t, db, "t1", "tree"); state != "passed" {
		t.Fatalf("the forged verdict in the store: gate %s, want passed (else this test proves nothing)", state)
	}
}

// TestRecordFromGitOutsideACheckout: --from-git outside a git checkout,
// and in one with no commit, says which and what to pass instead.
func TestRecordFromGitOutsideACheckout(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	dir := t.TempDir()
	junit := filepath.Join(dir, "report.xml")
	os.WriteFile(junit, []byte(cliJUnit), 0o644)
	db := filepath.Join(dir, "ledger.db")
	empty := filepath.Join(dir, "empty")
	os.MkdirAll(empty, 0o755)
	gitT(t, empty, "init", "-q")
	plain := filepath.Join(dir, "plain")
	os.MkdirAll(plain, 0o755)
	for _, c := range []struct{ dir, want string }{
		{plain, "is not inside a git checkout"},
		{empty, "has no commit yet"},
	} {
		cmd := exec.Command(ledgerBin, "--db", db, "record", junit, "--lane", "ci-tests/v1", "--backend", "cpu", "--from-git")
		cmd.Dir = c.dir
		// GIT_CEILING_DIRECTORIES stops git's search at the temporary
		// directory, so a checkout around it does not count.
		cmd.Env = append(os.Environ(), "GIT_CEILING_DIRECTORIES="+dir)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) || !strings.Contains(string(out), "--commit") || strings.Contains(string(out), "exit status") {
			t.Errorf("record --from-git in %s: %v\n%s", filepath.Base(c.dir), err, out)
		}
	}
}

// TestRepositoryOfRemote: --from-git records the origin URL's repository
// name (scheme, user, port, .git dropped) and refuses a local path.
func TestRepositoryOfRemote(t *testing.T) {
	for in, want := range map[string]string{
		"https://github.com/acme/app.git":     "github.com/acme/app",
		"git@github.com:acme/app.git":         "github.com/acme/app",
		"ssh://git@gitlab.example.com:22/a/b": "gitlab.example.com/a/b",
		"https://github.com/acme/app/":        "github.com/acme/app",
	} {
		if got, err := repositoryOfRemote(in); err != nil || got != want {
			t.Errorf("repositoryOfRemote(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"/home/dev/app", "../app", "file:///srv/git/app.git", "app", "~/src/app"} {
		if got, err := repositoryOfRemote(in); err == nil || !strings.Contains(err.Error(), "--repository") {
			t.Errorf("repositoryOfRemote(%q) = %q, %v; want a refusal naming --repository", in, got, err)
		}
	}
}
