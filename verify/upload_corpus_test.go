package verify

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

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
)

// corpusObject is one raw object of the shared corpus: its type, id (the
// file name), bytes and the repository name the differential tests give it
// ("corpus/" + the directory above commits/ or objects/).
type corpusObject struct {
	typ, id, repository string
	raw                 []byte
}

// corpusObjects returns every <id>.commit and <id>.tag file under the
// corpus, sorted by path.
func corpusObjects(t testing.TB, c string) []corpusObject {
	t.Helper()
	var out []corpusObject
	err := filepath.WalkDir(c, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		typ := strings.TrimPrefix(filepath.Ext(p), ".")
		if typ != "commit" && typ != "tag" {
			return nil
		}
		rel, _ := filepath.Rel(c, filepath.Dir(filepath.Dir(p)))
		raw, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out = append(out, corpusObject{typ: typ, id: strings.TrimSuffix(d.Name(), "."+typ), repository: "corpus/" + filepath.ToSlash(rel), raw: raw})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 400 {
		t.Fatalf("corpus holds %d commits and tags; want the whole corpus (over 400)", len(out))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].repository+out[i].id < out[j].repository+out[j].id })
	return out
}

// corpusPolicyFile writes a policy trusting the corpus's own material:
// each SSH repository's allowed signers for its commits and tags, and for
// every other repository GitHub's web-flow OpenPGP keys, the Arch Linux
// keyring subset, the first allowed-signers file and Sigstore's public-good
// root for gitsign identities issued by Google or GitHub.
func corpusPolicyFile(t testing.TB, c string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("version: 1\nrules:\n")
	rule := func(repos []string, signers string) {
		fmt.Fprintf(&b, "  - repositories: [%s]\n    refs: [\"*\"]\n    schemes: [openpgp, ssh, x509]\n", strings.Join(repos, ", "))
		fmt.Fprintf(&b, "    openpgp:\n      keyrings: [%q, %q]\n", filepath.Join(c, "gpg/keys/web-flow.gpg"), filepath.Join(c, "wot/keys/archlinux-keyring-subset.gpg"))
		fmt.Fprintf(&b, "    ssh:\n      allowed_signers: %q\n", signers)
		fmt.Fprintf(&b, "    x509:\n      trusted_root: %q\n      identities:\n        - {san: \"*\", issuer: \"https://accounts.google.com\"}\n        - {san: \"*\", issuer: \"https://github.com/login/oauth\"}\n", filepath.Join(c, "x509/trusted-roots/root-signing/trusted_root.json"))
	}
	for _, r := range []string{"radicle-dev__heartwood", "cloudhead__nakamoto"} {
		rule([]string{`"corpus/ssh/` + r + `"`, `"corpus/tags/` + r + `"`}, filepath.Join(c, "ssh", r, ".gitsigners"))
	}
	rule([]string{`"corpus/ssh-fido/Jookia__gitsshkey"`}, filepath.Join(c, "ssh-fido/Jookia__gitsshkey/allowed_signers"))
	rule([]string{`"*"`}, filepath.Join(c, "ssh/radicle-dev__heartwood/.gitsigners"))
	p := filepath.Join(t.TempDir(), "corpus-policy.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCorpusUploadMatchesLocal is the differential test of acceptance 3:
// every commit and tag of the corpus, verified from uploaded bytes under a
// registered (bundled) policy, gets the verdict the local commands give —
// `ledger verify head` on a repository holding the commit, `ledger verify
// tag` on the tag's bytes (the corpus holds no tagged commits) — and a
// flipped byte anywhere in any object is refused as an id mismatch.
func TestCorpusUploadMatchesLocal(t *testing.T) {
	c := corpusDir(t)
	objs := corpusObjects(t, c)
	polFile := corpusPolicyFile(t, c)
	filePol, err := LoadPolicy(polFile)
	if err != nil {
		t.Fatal(err)
	}
	yml, files, err := ReadPolicyBundle(polFile)
	if err != nil {
		t.Fatal(err)
	}
	pol, err := PolicyFromBundle(yml, files)
	if err != nil {
		t.Fatal(err)
	}
	repoDir := filepath.Join(t.TempDir(), "corpus")
	repo, err := git.PlainInit(repoDir, false)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, o := range objs {
		if o.typ == "commit" {
			if h := storeRaw(t, repo.Storer, plumbing.CommitObject, o.raw); h.String() != o.id {
				t.Fatalf("%s/%s stored as %s", o.repository, o.id, h)
			}
		}
	}
	for _, o := range objs {
		up := HeadUpload{Repository: o.repository, Ref: "refs/heads/main", Objects: []RawObject{{Type: o.typ, ID: o.id, Data: o.raw}}, Policy: pol, Now: corpusNow}
		got, err := VerifyUploadedHead(up)
		if err != nil {
			t.Errorf("%s %s %s: upload refused: %v", o.repository, o.typ, o.id, err)
			continue
		}
		counts[o.typ+"/"+got.GitLetter]++
		if o.typ == "commit" {
			want, err := VerifyHead(context.Background(), VerifyHeadOptions{RepoPath: repoDir, Repository: o.repository, Ref: o.id, Policy: filePol, Now: corpusNow})
			if err != nil {
				t.Fatalf("%s: local verify head: %v", o.id, err)
			}
			want.Ref, want.Policy, got.Policy, got.Ref = "", "", "", ""
			// The local command names the ref it was given: here the id.
			want.Reason = strings.ReplaceAll(want.Reason, "ref "+o.id, "ref refs/heads/main")
			if fmt.Sprint(want) != fmt.Sprint(got) {
				t.Errorf("%s %s:\n upload %+v\n local  %+v", o.repository, o.id, got, want)
			}
		} else {
			rule := filePol.Match(o.repository, "refs/heads/main")
			opts := *rule.Options()
			opts.Now, opts.ExpectedID = corpusNow, o.id
			r, _ := VerifyObject(o.raw, "tag", &opts)
			dec, _ := rule.Decide(r)
			if r.Letter != got.GitLetter || r.Verdict != got.Verdict || r.Key != got.Key || r.Signer != got.Signer || dec != got.Decision || r.Commit != got.Commit {
				t.Errorf("%s tag %s: upload %s/%s/%s key %s signer %q commit %s; verify tag %s/%s/%s key %s signer %q commit %s",
					o.repository, o.id, got.GitLetter, got.Verdict, got.Decision, got.Key, got.Signer, got.Commit, r.Letter, r.Verdict, dec, r.Key, r.Signer, r.Commit)
			}
		}
		for _, bad := range flipEach(up.Objects) {
			u := up
			u.Objects = bad
			_, err := VerifyUploadedHead(u)
			if !errors.Is(err, ErrObjectID) {
				t.Errorf("%s %s with a flipped byte: %v, want an id mismatch", o.typ, o.id, err)
			}
		}
	}
	t.Logf("%d corpus objects verified from uploads, letters %v", len(objs), counts)
}
