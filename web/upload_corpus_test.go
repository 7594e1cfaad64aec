package web

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/client"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/verify"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
)

// corpusRoot returns ../shared/corpus from the repository root, skipping
// the test when it is absent (failing in CI).
func corpusRoot(t testing.TB) string {
	t.Helper()
	dir, _ := os.Getwd()
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		if filepath.Dir(dir) == dir {
			t.Fatal("no go.mod above the test")
		}
		dir = filepath.Dir(dir)
	}
	c := filepath.Join(dir, "..", "shared", "corpus")
	if _, err := os.Stat(filepath.Join(c, "README.md")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("corpus %s is absent in CI", c)
		}
		t.Skipf("shared corpus not found at %s (../shared/corpus from the repository root); skipping", c)
	}
	return c
}

// writeCorpusPolicy writes the policy of verify's differential test: each
// SSH repository's allowed signers, and for the rest GitHub's web-flow
// keys, the Arch Linux keyring subset and Sigstore's public-good root.
func writeCorpusPolicy(t testing.TB, c string) string {
	var b strings.Builder
	b.WriteString("version: 1\nrules:\n")
	rule := func(repos, signers string) {
		fmt.Fprintf(&b, "  - repositories: [%s]\n    refs: [\"*\"]\n    schemes: [openpgp, ssh, x509]\n    openpgp:\n      keyrings: [%q, %q]\n    ssh:\n      allowed_signers: %q\n", repos, filepath.Join(c, "gpg/keys/web-flow.gpg"), filepath.Join(c, "wot/keys/archlinux-keyring-subset.gpg"), signers)
		fmt.Fprintf(&b, "    x509:\n      trusted_root: %q\n      identities:\n        - {san: \"*\", issuer: \"https://accounts.google.com\"}\n        - {san: \"*\", issuer: \"https://github.com/login/oauth\"}\n", filepath.Join(c, "x509/trusted-roots/root-signing/trusted_root.json"))
	}
	for _, r := range []string{"radicle-dev__heartwood", "cloudhead__nakamoto"} {
		rule(`"corpus/ssh/`+r+`", "corpus/tags/`+r+`"`, filepath.Join(c, "ssh", r, ".gitsigners"))
	}
	rule(`"corpus/ssh-fido/Jookia__gitsshkey"`, filepath.Join(c, "ssh-fido/Jookia__gitsshkey/allowed_signers"))
	rule(`"*"`, filepath.Join(c, "ssh/radicle-dev__heartwood/.gitsigners"))
	p := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCorpusThroughAPI is acceptance 3 through the real API: every commit
// and tag of the corpus, uploaded with the client to POST /heads/verify
// under a policy registered with POST /policies, is recorded with the
// verdict the local commands give (`ledger verify head` on a repository
// holding the commit; `ledger verify tag` on a tag's bytes: the corpus
// holds no tagged commit), and a flipped byte in any object is refused as
// an id mismatch with nothing appended.
func TestCorpusThroughAPI(t *testing.T) {
	c := corpusRoot(t)
	corpusNow := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	e := newUploadEnv(t, Config{Now: func() time.Time { return corpusNow }})
	polFile := writeCorpusPolicy(t, c)
	yml, files, err := verify.ReadPolicyBundle(polFile)
	if err != nil {
		t.Fatal(err)
	}
	adm, _ := client.New(e.srv.URL, client.Options{Token: e.admin})
	ci, _ := client.New(e.srv.URL, client.Options{Token: e.record})
	ctx := context.Background()
	sum, _, err := adm.ApplyPolicy(ctx, "corpus", yml, files)
	if err != nil {
		t.Fatal(err)
	}
	filePol, err := verify.LoadPolicy(polFile)
	if err != nil {
		t.Fatal(err)
	}
	repoDir := filepath.Join(t.TempDir(), "corpus")
	repo, err := git.PlainInit(repoDir, false)
	if err != nil {
		t.Fatal(err)
	}
	type obj struct{ typ, id, repo string }
	var objs []obj
	raw := map[string][]byte{}
	filepath.WalkDir(c, func(p string, d fs.DirEntry, err error) error {
		typ := strings.TrimPrefix(filepath.Ext(p), ".")
		if err != nil || d.IsDir() || (typ != "commit" && typ != "tag") {
			return err
		}
		rel, _ := filepath.Rel(c, filepath.Dir(filepath.Dir(p)))
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		o := obj{typ, strings.TrimSuffix(d.Name(), "."+typ), "corpus/" + filepath.ToSlash(rel)}
		objs, raw[o.id] = append(objs, o), b
		if typ == "commit" {
			storeRawT(t, repo.Storer, plumbing.CommitObject, b)
		}
		return nil
	})
	if len(objs) < 400 {
		t.Fatalf("corpus: %d objects", len(objs))
	}
	sort.Slice(objs, func(i, j int) bool { return objs[i].repo+objs[i].id < objs[j].repo+objs[j].id })
	letters := map[string]int{}
	for _, o := range objs {
		up := client.HeadUpload{Policy: "corpus", Repository: o.repo, Ref: "refs/heads/main", Objects: []client.Object{{Type: o.typ, ID: o.id, Data: raw[o.id]}}}
		got, _, err := ci.VerifyHead(ctx, up)
		if err != nil {
			t.Errorf("%s %s: %v", o.typ, o.id, err)
			continue
		}
		letters[o.typ+"/"+got.GitLetter]++
		if got.Policy != sum.Digest {
			t.Errorf("%s: policy %s, want the registered %s", o.id, got.Policy, sum.Digest)
		}
		if o.typ == "commit" {
			want, err := verify.VerifyHead(ctx, verify.VerifyHeadOptions{RepoPath: repoDir, Repository: o.repo, Ref: o.id, Policy: filePol, Now: corpusNow})
			if err != nil {
				t.Fatal(err)
			}
			if want.GitLetter != got.GitLetter || want.Verdict != got.Verdict || want.Decision != got.Decision || want.Key != got.Key || want.Signer != got.Signer ||
				want.Scheme != got.Scheme || want.Commit != got.Commit || want.Tree != got.Tree || !want.SignedAt.Equal(got.SignedAt) {
				t.Errorf("%s %s: API %+v\nlocal %+v", o.repo, o.id, got, want)
			}
		} else {
			rule := filePol.Match(o.repo, "refs/heads/main")
			opts := *rule.Options()
			opts.Now, opts.ExpectedID = corpusNow, o.id
			r, _ := verify.VerifyObject(raw[o.id], "tag", &opts)
			dec, _ := rule.Decide(r)
			if r.Letter != got.GitLetter || r.Verdict != got.Verdict || dec != got.Decision || r.Key != got.Key || r.Signer != got.Signer || r.Commit != got.Commit {
				t.Errorf("%s tag %s: API %s/%s/%s, verify tag %s/%s/%s", o.repo, o.id, got.GitLetter, got.Verdict, got.Decision, r.Letter, r.Verdict, dec)
			}
		}
		before := e.size(t)
		flipped := append([]byte{}, raw[o.id]...)
		flipped[len(flipped)/2] ^= 1
		up.Objects[0].Data = flipped
		_, _, err = ci.VerifyHead(ctx, up)
		var le *ledger.Error
		if !errors.As(err, &le) || le.Code != ledger.CodeInvalid || le.Field != "objects[0].data" || !strings.Contains(le.Message, "object id mismatch") || e.size(t) != before {
			t.Errorf("%s with a flipped byte: %v", o.id, err)
		}
	}
	t.Logf("%d corpus objects through the API: %v", len(objs), letters)
}

// TestTreeThroughAPIMatchesLocal: POST /trees/verify gives the verdict
// and differences `ledger verify tree` gives locally at the release's
// pins, for a head equal apart from its pin and one that differs outside.
func TestTreeThroughAPIMatchesLocal(t *testing.T) {
	f := newUploadFixture(t)
	e := newUploadEnv(t, Config{})
	e.applyPolicy(t, "p", f.policyYAML, map[string][]byte{"signers": f.signers})
	ci, _ := client.New(e.srv.URL, client.Options{Token: e.record})
	for i, head := range []string{f.head, f.outside, f.reviewed} {
		v := fmt.Sprintf("3.%d", i)
		e.defineRelease(t, f.releaseYAML(v, head, "p"))
		want, err := verify.TreeEquivalence(f.dir, head, f.reviewed, []string{"go.sum"})
		if err != nil {
			t.Fatal(err)
		}
		u, err := verify.CollectTree(f.dir, head, f.reviewed)
		if err != nil {
			t.Fatal(err)
		}
		var objs []client.Object
		for _, o := range u.Objects {
			objs = append(objs, client.Object{Type: o.Type, ID: o.ID, Data: o.Data})
		}
		got, ev, _, err := ci.VerifyTree(context.Background(), client.TreeUpload{Release: v, Objects: objs})
		if err != nil {
			t.Fatal(err)
		}
		if got.Equivalent != want.Equivalent || got.OutsidePins != want.OutsidePins || len(got.Differences) != len(want.Differences) || got.HeadTree != want.HeadTree {
			t.Errorf("%s: API %+v, local %+v", v, got, want)
		}
		for j := range want.Differences {
			if w, g := want.Differences[j], got.Differences[j]; w.Path != g.Path || w.Kind != g.Kind || w.InPins != g.InPins || w.NewID != g.NewID {
				t.Errorf("%s difference %d: API %+v, local %+v", v, j, g, w)
			}
		}
		te, err := ledger.DecodeTreeEquivalence(ev.Details)
		if err != nil || !te.ServerComputed() || te.Holds() != want.Equivalent || ev.Subject.Tree != want.HeadTree {
			t.Errorf("%s: evidence %+v %v", v, te, err)
		}
	}
}
