package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// TestCIRecipeUploads is the README's CI recipe end to end against a real
// server: an admin registers the policy and the release; CI, with a
// record token, has the server verify the signed head and compute tree
// equivalence from uploaded objects, and the release is ready. A policy
// file, caller pins or a record token registering a policy are refused.
func TestCIRecipeUploads(t *testing.T) {
	for _, tool := range []string{"git", "ssh-keygen"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip(tool + " not installed")
		}
	}
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ci", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v %s", err, out)
	}
	pub, _ := os.ReadFile(key + ".pub")
	os.WriteFile(filepath.Join(dir, "signers"), []byte("release-bot "+string(pub)), 0o644)
	os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte("version: 1\nrules:\n  - repositories: [\"example.com/acme/core\"]\n    refs: [\"refs/heads/*\"]\n    schemes: [ssh]\n    ssh:\n      allowed_signers: signers\n"), 0o644)

	repo := filepath.Join(dir, "core")
	os.MkdirAll(filepath.Join(repo, "src"), 0o755)
	gitT(t, repo, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(repo, "src", "main.go"), []byte("package main\n"), 0o644)
	os.WriteFile(filepath.Join(repo, "go.sum"), []byte("a v1\n"), 0o644)
	gitT(t, repo, "add", ".")
	gitT(t, repo, "commit", "-q", "-m", "reviewed")
	reviewed := gitT(t, repo, "rev-parse", "HEAD")
	os.WriteFile(filepath.Join(repo, "go.sum"), []byte("a v2\n"), 0o644)
	gitT(t, repo, "-c", "gpg.format=ssh", "-c", "user.signingkey="+key, "commit", "-q", "-S", "-am", "bump pin")
	head := gitT(t, repo, "rev-parse", "HEAD")

	served := filepath.Join(dir, "served", "ledger.db")
	adm, _, code := runBin(t, "", "--db", served, "token", "create", "--name", "adm", "--scope", "admin")
	ci, _, code2 := runBin(t, "", "--db", served, "token", "create", "--name", "ci", "--scope", "record")
	if code != 0 || code2 != 0 {
		t.Fatal("token create failed")
	}
	adm, ci = strings.TrimSpace(adm), strings.TrimSpace(ci)
	srv, url := startServer(t, served)
	defer func() { srv.Process.Kill(); srv.Wait() }()
	as := func(tok string, args ...string) (string, string, int) {
		return runBin(t, "", append([]string{"--server", url, "--token", tok}, args...)...)
	}
	if _, se, code := as(ci, "policy", "apply", filepath.Join(dir, "policy.yaml"), "--name", "core"); code != 2 || !strings.Contains(se, "admin") {
		t.Fatalf("record token registered a policy: %d %s", code, se)
	}
	out, se, code := as(adm, "policy", "apply", filepath.Join(dir, "policy.yaml"), "--name", "core")
	if code != 0 || !strings.Contains(out, "sha256:") {
		t.Fatalf("policy apply: %d %s %s", code, out, se)
	}
	registered := ""
	for _, w := range strings.Fields(out) {
		if strings.HasPrefix(w, "sha256:") {
			registered = w
		}
	}
	// The local command verifies under the same bundle: same digest.
	lo, se, code := runBin(t, "", "--db", filepath.Join(dir, "local.db"), "--json", "verify", "head", "--repo", repo, "--ref", "main", "--repository", "example.com/acme/core", "--policy", filepath.Join(dir, "policy.yaml"))
	if code != 0 || !strings.Contains(lo, `"policy": "`+registered+`"`) {
		t.Fatalf("local verify head: %d, want policy %s: %s %s", code, registered, lo, se)
	}
	rel := "version: r1\npolicy: core\ncomponents:\n  - name: core\n    repository: example.com/acme/core\n    reviewed: " + reviewed + "\n    head: " + head + "\n    pins: [go.sum]\ngates:\n  - id: heads\n    kind: signed-heads\n  - id: tree\n    kind: tree-equivalence\n"
	relFile := filepath.Join(dir, "rel.yaml")
	os.WriteFile(relFile, []byte(rel), 0o644)
	if _, se, code := as(adm, "release", "apply", relFile); code != 0 {
		t.Fatalf("release apply: %s", se)
	}
	if _, se, code := as(ci, "verify", "head", "--repo", repo, "--ref", "main", "--release", "r1", "--policy", filepath.Join(dir, "policy.yaml")); code != 2 {
		t.Fatalf("a policy file with --server: %d %s", code, se)
	}
	if _, se, code := as(ci, "verify", "tree", "--repo", repo, "--release", "r1", "--pins", "src/*"); code != 2 {
		t.Fatalf("caller pins with --release: %d %s", code, se)
	}
	out, se, code = as(ci, "verify", "head", "--repo", repo, "--ref", "main", "--release", "r1")
	if code != 0 || !strings.Contains(out, "verdict good, policy trusted") {
		t.Fatalf("verify head --server: %d %s %s", code, out, se)
	}
	out, se, code = as(ci, "verify", "tree", "--repo", repo, "--release", "r1")
	if code != 0 || !strings.Contains(out, "computed and recorded by") || !strings.Contains(out, "go.sum") {
		t.Fatalf("verify tree --server --release: %d %s %s", code, out, se)
	}
	if out, se, code := as(ci, "release", "check", "r1"); code != 0 {
		t.Fatalf("release check: want ready, got %d\n%s%s", code, out, se)
	}
}

// TestPolicyApplyLocalAndRepoRoots: `ledger policy apply` on a local
// database needs --as an admin token and records its name; `policy show`
// prints the digest; serve refuses a relative or missing --repo-root.
func TestPolicyApplyLocalAndRepoRoots(t *testing.T) {
	dir := t.TempDir()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "signers"), append([]byte("bot "), ssh.MarshalAuthorizedKey(sp)...), 0o644)
	os.WriteFile(filepath.Join(dir, "p.yaml"), []byte("version: 1\nrules:\n  - repositories: [\"*\"]\n    refs: [\"*\"]\n    schemes: [ssh]\n    ssh:\n      allowed_signers: signers\n"), 0o644)
	db := filepath.Join(dir, "ledger.db")
	runBin(t, "", "--db", db, "token", "create", "--name", "ci", "--scope", "record")
	runBin(t, "", "--db", db, "token", "create", "--name", "adm", "--scope", "admin")
	if _, se, code := runBin(t, "", "--db", db, "policy", "apply", filepath.Join(dir, "p.yaml"), "--as", "ci"); code != 2 || !strings.Contains(se, "admin") {
		t.Fatalf("a record token applied a policy: %d %s", code, se)
	}
	if _, se, code := runBin(t, "", "--db", db, "policy", "apply", filepath.Join(dir, "p.yaml"), "--name", "../x", "--as", "adm"); code != 2 || !strings.Contains(se, "--name") {
		t.Fatalf("a path as a policy name: %d %s", code, se)
	}
	out, se, code := runBin(t, "", "--db", db, "policy", "apply", filepath.Join(dir, "p.yaml"), "--as", "adm")
	if code != 0 || !strings.Contains(out, "policy p registered: sha256:") {
		t.Fatalf("policy apply: %d %s %s", code, out, se)
	}
	digest := strings.Fields(out)[3]
	out, _, code = runBin(t, "", "--db", db, "policy", "show", "p")
	if code != 0 || !strings.Contains(out, digest) || !strings.Contains(out, "file signers") || !strings.Contains(out, "by adm") {
		t.Fatalf("policy show: %d %s", code, out)
	}
	if _, _, code := runBin(t, "", "--db", db, "audit"); code != 0 {
		t.Fatal("a database with a policy leaf does not audit")
	}
	for _, root := range []string{"relative/dir", filepath.Join(dir, "missing")} {
		c := ServeConfig{DB: db, Addr: "127.0.0.1:0", MaxBody: 4 << 20, RepoRoots: []string{root}}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--repo-root") {
			t.Errorf("--repo-root %s: %v", root, err)
		}
	}
}
