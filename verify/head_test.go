package verify

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage"
)

// storeRaw writes raw object bytes into the repository's object store.
func storeRaw(t testing.TB, s storage.Storer, typ plumbing.ObjectType, raw []byte) plumbing.Hash {
	t.Helper()
	o := s.NewEncodedObject()
	o.SetType(typ)
	w, _ := o.Writer()
	w.Write(raw)
	w.Close()
	h, err := s.SetEncodedObject(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestVerifyHead(t *testing.T) {
	dir := t.TempDir()
	repo, err := git.PlainInit(filepath.Join(dir, "repo"), false)
	if err != nil {
		t.Fatal(err)
	}
	s := repo.Storer
	signAt := fixtureT0
	alice, mallory := sshKey(t), sshKey(t)
	tree := storeRaw(t, s, plumbing.TreeObject, nil) // the empty tree
	body := []byte(strings.Replace(string(unsignedCommit(signAt, "release")), "parent "+strings.Repeat("1", 40)+"\n", "", 1))
	body = []byte(strings.Replace(string(body), fixtureTree, tree.String(), 1))
	good := storeRaw(t, s, plumbing.CommitObject, signObject("commit", body, sshSigner(t, alice, "git")))
	bad := storeRaw(t, s, plumbing.CommitObject, signObject("commit", body, sshSigner(t, mallory, "git")))
	tagBody := []byte(strings.Replace(string(unsignedTag(signAt, "v1.0.0")), strings.Repeat("2", 40), good.String(), 1))
	tag := storeRaw(t, s, plumbing.TagObject, signObject("tag", tagBody, sshSigner(t, alice, "git")))
	for ref, h := range map[string]plumbing.Hash{"refs/heads/main": good, "refs/heads/evil": bad, "refs/tags/v1.0.0": tag} {
		if err := s.SetReference(plumbing.NewHashReference(plumbing.ReferenceName(ref), h)); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "signers"), []byte("release-bot "+authorizedLine(alice.PublicKey())+"\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(`version: 1
rules:
  - repositories: ["example.com/acme/*"]
    refs: ["refs/heads/main", "refs/heads/evil", "refs/tags/v*"]
    schemes: [ssh]
    ssh:
      allowed_signers: signers
      principals: ["release-*"]
`), 0o644)
	pol, err := LoadPolicy(filepath.Join(dir, "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		repo, ref       string
		objType, object string
		letter          string
		decision        ledger.Decision
	}{
		{"example.com/acme/app", "main", "commit", good.String(), "G", ledger.DecisionTrusted},
		{"example.com/acme/app", "refs/heads/evil", "commit", bad.String(), "U", ledger.DecisionUntrusted},
		{"example.com/acme/app", "v1.0.0", "tag", tag.String(), "G", ledger.DecisionTrusted},
		{"example.com/other/app", "main", "commit", good.String(), "U", ledger.DecisionNoPolicy},
	}
	for _, tc := range cases {
		hv, err := VerifyHead(context.Background(), VerifyHeadOptions{RepoPath: filepath.Join(dir, "repo"), Repository: tc.repo, Ref: tc.ref, Policy: pol, Now: fixtureT0})
		if err != nil {
			t.Fatalf("%s %s: %v", tc.repo, tc.ref, err)
		}
		if err := hv.Validate(); err != nil {
			t.Errorf("%s: record invalid: %v", tc.ref, err)
		}
		if hv.ObjectType != tc.objType || hv.Object != tc.object || hv.Commit != good.String() && hv.Commit != bad.String() || hv.Tree != tree.String() {
			t.Errorf("%s: object %s %s commit %s tree %s", tc.ref, hv.ObjectType, hv.Object, hv.Commit, hv.Tree)
		}
		if hv.GitLetter != tc.letter || hv.Decision != tc.decision {
			t.Errorf("%s %s: letter %s decision %s (%s); want %s %s", tc.repo, tc.ref, hv.GitLetter, hv.Decision, hv.Reason, tc.letter, tc.decision)
		}
		if hv.Policy != pol.Digest || !strings.HasPrefix(hv.Policy, "sha256:") || hv.Scheme != "ssh" || !strings.HasPrefix(hv.Ref, "refs/") {
			t.Errorf("%s: policy %q scheme %q ref %q", tc.ref, hv.Policy, hv.Scheme, hv.Ref)
		}
	}
	if _, err := VerifyHead(context.Background(), VerifyHeadOptions{RepoPath: filepath.Join(dir, "repo"), Ref: "refs/heads/none"}); ledger.ErrorCode(err) != ledger.CodeNotFound {
		t.Errorf("missing ref: %v", err)
	}
}

func TestVerifyHeadSHA256Repository(t *testing.T) {
	dir := t.TempDir()
	if _, err := git.PlainInit(dir, false); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, ".git", "config")
	b, _ := os.ReadFile(cfg)
	b = []byte(strings.Replace(string(b), "repositoryformatversion = 0", "repositoryformatversion = 1", 1))
	b = append(b, "[extensions]\n\tobjectformat = sha256\n"...)
	os.WriteFile(cfg, b, 0o644)
	_, err := VerifyHead(context.Background(), VerifyHeadOptions{RepoPath: dir, Ref: "HEAD"})
	if !errors.Is(err, ErrUnsupportedObjectFormat) {
		t.Fatalf("sha256 repository: %v, want ErrUnsupportedObjectFormat", err)
	}
	if _, err := TreeEquivalence(dir, "HEAD", "HEAD", nil); !errors.Is(err, ErrUnsupportedObjectFormat) {
		t.Fatalf("tree on sha256 repository: %v", err)
	}
}
