package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
)

// flipEach returns, for every object of objs and every position class
// (first, middle, last byte), a copy of objs with that byte flipped.
func flipEach(objs []RawObject) [][]RawObject {
	var out [][]RawObject
	for i, o := range objs {
		if len(o.Data) == 0 {
			continue
		}
		for _, at := range []int{0, len(o.Data) / 2, len(o.Data) - 1} {
			c := append([]RawObject{}, objs...)
			d := append([]byte{}, o.Data...)
			d[at] ^= 0x01
			c[i].Data = d
			out = append(out, c)
		}
	}
	return out
}

func requireIDMismatch(t *testing.T, what string, err error) {
	t.Helper()
	var le *ledger.Error
	if !errors.Is(err, ErrObjectID) || !errors.As(err, &le) || !strings.HasSuffix(le.Field, ".data") || ledger.ErrorCode(err) != ledger.CodeInvalid {
		t.Errorf("%s: %v, want an id mismatch naming objects[i].data", what, err)
	}
}

// TestTreeEquivalenceObjectsMatchesRepository compares the server's walk of
// uploaded objects with TreeEquivalence on the repository, for changes at
// every depth, and checks that equal subtrees do not travel and that any
// flipped byte is refused as an id mismatch.
func TestTreeEquivalenceObjectsMatchesRepository(t *testing.T) {
	base := map[string]fileSpec{
		"README.md":             {filemode.Regular, "readme\n"},
		"src/main.go":           {filemode.Regular, "package main\n"},
		"src/util/util.go":      {filemode.Regular, "package util\n"},
		"src/deep/a/b/c.go":     {filemode.Regular, "package c\n"},
		"scripts/build.sh":      {filemode.Executable, "#!/bin/sh\n"},
		"go.sum":                {filemode.Regular, "sums v1\n"},
		"third_party/dep":       {filemode.Submodule, strings.Repeat("a", 40)},
		"third_party/pins.lock": {filemode.Regular, "dep v1\n"},
	}
	with := func(ch map[string]*fileSpec) map[string]fileSpec {
		m := map[string]fileSpec{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range ch {
			if v == nil {
				delete(m, k)
			} else {
				m[k] = *v
			}
		}
		return m
	}
	pins := []string{"go.sum", "third_party/**"}
	cases := map[string]map[string]fileSpec{
		"equal":           base,
		"pins only":       with(map[string]*fileSpec{"go.sum": {filemode.Regular, "sums v2\n"}, "third_party/pins.lock": {filemode.Regular, "dep v2\n"}}),
		"deep change":     with(map[string]*fileSpec{"src/deep/a/b/c.go": {filemode.Regular, "package c // x\n"}}),
		"dir added":       with(map[string]*fileSpec{"extra/x/y.go": {filemode.Regular, "y\n"}, "extra/z.go": {filemode.Regular, "z\n"}}),
		"dir removed":     with(map[string]*fileSpec{"src/deep/a/b/c.go": nil}),
		"dir to file":     with(map[string]*fileSpec{"src/util/util.go": nil, "src/util": {filemode.Regular, "now a file\n"}}),
		"rename across":   with(map[string]*fileSpec{"src/util/util.go": nil, "lib/util.go": {filemode.Regular, "package util\n"}}),
		"mode and 100664": with(map[string]*fileSpec{"README.md": {filemode.Deprecated, "readme\n"}, "scripts/build.sh": {filemode.Regular, "#!/bin/sh\n"}}),
		"submodule":       with(map[string]*fileSpec{"third_party/dep": {filemode.Submodule, strings.Repeat("b", 40)}}),
	}
	for name, head := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			repo, err := git.PlainInit(dir, false)
			if err != nil {
				t.Fatal(err)
			}
			s := repo.Storer
			rev := storeCommit(t, s, storeTree(t, s, base), "reviewed")
			hd := storeCommit(t, s, storeTree(t, s, head), "head")
			local, err := TreeEquivalence(dir, hd.String(), rev.String(), pins)
			if err != nil {
				t.Fatal(err)
			}
			up, err := CollectTree(dir, hd.String(), rev.String())
			if err != nil {
				t.Fatal(err)
			}
			up.Pins = pins
			got, ids, err := TreeEquivalenceObjects(up)
			if err != nil {
				t.Fatal(err)
			}
			lj, _ := json.Marshal(local)
			gj, _ := json.Marshal(got)
			if string(lj) != string(gj) {
				t.Errorf("uploaded objects give\n %s\nthe repository gives\n %s", gj, lj)
			}
			if len(ids) != len(up.Objects) {
				t.Errorf("%d object ids for %d objects", len(ids), len(up.Objects))
			}
			// src/util's tree is the same on both sides unless the case
			// changes it: it must not travel then.
			hc, _ := repo.CommitObject(hd)
			ht, _ := hc.Tree()
			if e, err := ht.FindEntry("src/util"); err == nil && e.Mode == filemode.Dir && name != "dir to file" && name != "rename across" {
				for _, o := range up.Objects {
					if o.ID == e.Hash.String() {
						t.Errorf("the equal subtree src/util was uploaded")
					}
				}
			}
			for _, bad := range flipEach(up.Objects) {
				u := up
				u.Objects = bad
				_, _, err := TreeEquivalenceObjects(u)
				requireIDMismatch(t, name+" flipped", err)
			}
			// A differing subtree left out is named, not skipped.
			if len(up.Objects) > 4 {
				u := up
				u.Objects = up.Objects[:len(up.Objects)-1]
				if _, _, err := TreeEquivalenceObjects(u); ledger.ErrorCode(err) != ledger.CodeInvalid || !strings.Contains(err.Error(), "was not sent") {
					t.Errorf("missing tree: %v", err)
				}
			}
		})
	}
}

// TestVerifyUploadedHeadMatchesRepository verifies the heads of
// TestVerifyHead's repository from uploaded objects and compares every
// field but the policy digest (a bundle's digest covers its keys).
func TestVerifyUploadedHeadMatchesRepository(t *testing.T) {
	dir := t.TempDir()
	repo, err := git.PlainInit(filepath.Join(dir, "repo"), false)
	if err != nil {
		t.Fatal(err)
	}
	s := repo.Storer
	alice, mallory := sshKey(t), sshKey(t)
	tree := storeRaw(t, s, plumbing.TreeObject, nil)
	body := []byte(strings.Replace(string(unsignedCommit(fixtureT0, "release")), "parent "+strings.Repeat("1", 40)+"\n", "", 1))
	body = []byte(strings.Replace(string(body), fixtureTree, tree.String(), 1))
	good := storeRaw(t, s, plumbing.CommitObject, signObject("commit", body, sshSigner(t, alice, "git")))
	bad := storeRaw(t, s, plumbing.CommitObject, signObject("commit", body, sshSigner(t, mallory, "git")))
	tagBody := []byte(strings.Replace(string(unsignedTag(fixtureT0, "v1.0.0")), strings.Repeat("2", 40), good.String(), 1))
	tag := storeRaw(t, s, plumbing.TagObject, signObject("tag", tagBody, sshSigner(t, alice, "git")))
	for ref, h := range map[string]plumbing.Hash{"refs/heads/main": good, "refs/heads/evil": bad, "refs/tags/v1.0.0": tag} {
		if err := s.SetReference(plumbing.NewHashReference(plumbing.ReferenceName(ref), h)); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "signers"), []byte("release-bot "+authorizedLine(alice.PublicKey())+"\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte("version: 1\nrules:\n  - repositories: [\"example.com/acme/*\"]\n    refs: [\"refs/heads/*\", \"refs/tags/*\"]\n    schemes: [ssh]\n    ssh:\n      allowed_signers: signers\n"), 0o644)
	filePol, err := LoadPolicy(filepath.Join(dir, "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	yml, files, err := ReadPolicyBundle(filepath.Join(dir, "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	bundlePol, err := PolicyFromBundle(yml, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"main", "refs/heads/evil", "v1.0.0"} {
		for _, repoName := range []string{"example.com/acme/app", "example.com/other/app"} {
			want, err := VerifyHead(context.Background(), VerifyHeadOptions{RepoPath: filepath.Join(dir, "repo"), Repository: repoName, Ref: ref, Policy: filePol, Now: fixtureT0})
			if err != nil {
				t.Fatal(err)
			}
			src, err := CollectHead(filepath.Join(dir, "repo"), repoName, ref)
			if err != nil {
				t.Fatal(err)
			}
			got, err := VerifyUploadedHead(HeadUpload{Repository: src.Repository, Ref: src.Ref, Format: src.Format, Objects: src.Objects, Policy: bundlePol, Now: fixtureT0})
			if err != nil {
				t.Fatal(err)
			}
			if got.Policy != bundlePol.Digest || got.Policy != ledger.PolicyDigest(string(yml), files) {
				t.Errorf("%s: policy %s, want the bundle digest", ref, got.Policy)
			}
			want.Policy, got.Policy = "", ""
			if fmt.Sprint(want) != fmt.Sprint(got) {
				t.Errorf("%s %s:\n upload %+v\n local  %+v", repoName, ref, got, want)
			}
			for _, objs := range flipEach(src.Objects) {
				_, err := VerifyUploadedHead(HeadUpload{Repository: src.Repository, Ref: src.Ref, Objects: objs, Policy: bundlePol, Now: fixtureT0})
				requireIDMismatch(t, ref, err)
			}
		}
	}
	// The chain must be the tag's: another commit after the tag is refused.
	src, _ := CollectHead(filepath.Join(dir, "repo"), "example.com/acme/app", "v1.0.0")
	badRaw, _ := rawOf(repo, plumbing.CommitObject, bad)
	objs := []RawObject{src.Objects[0], {Type: "commit", ID: bad.String(), Data: badRaw}}
	if _, err := VerifyUploadedHead(HeadUpload{Repository: "example.com/acme/app", Ref: "refs/tags/v1.0.0", Objects: objs, Policy: bundlePol}); ledger.ErrorCode(err) != ledger.CodeInvalid {
		t.Errorf("a commit the tag does not tag: %v", err)
	}
	// A bundle missing a named file, or carrying one it does not name, is refused.
	if _, err := PolicyFromBundle(yml, nil); !errors.Is(err, ErrMalformed) {
		t.Errorf("bundle without its file: %v", err)
	}
	if _, err := PolicyFromBundle(yml, map[string][]byte{"signers": files["signers"], "/etc/passwd": []byte("x")}); !errors.Is(err, ErrMalformed) {
		t.Errorf("bundle with an extra file: %v", err)
	}
}

// sha256Commit builds a commit body naming tree (64 hex).
func sha256Commit(tree, msg string) []byte {
	return []byte(fmt.Sprintf("tree %s\nauthor T <t@example.com> %d +0000\ncommitter T <t@example.com> %d +0000\n\n%s\n", tree, fixtureT0.Unix(), fixtureT0.Unix(), msg))
}

func sha256Tree(entries ...string) []byte {
	var b []byte
	for i := 0; i+2 < len(entries)+1; i += 3 {
		id, _ := hexDecode(entries[i+2])
		b = append(b, entries[i]+" "+entries[i+1]+"\x00"...)
		b = append(b, id...)
	}
	return b
}

func hexDecode(s string) ([]byte, error) {
	out := make([]byte, len(s)/2)
	_, err := fmt.Sscanf(s, "%x", &out)
	return out, err
}

func mustHash(t *testing.T, format, typ string, data []byte) string {
	t.Helper()
	id, err := HashObject(format, typ, data)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestSHA256Objects checks the SHA-256 object format: ids of 64 hex
// digits recomputed with SHA-256, the commit signature in gpgsig-sha256
// (a gpgsig header alone is the SHA-1 compatibility signature: unsigned),
// and trees with 32-byte entry ids.
func TestSHA256Objects(t *testing.T) {
	blobA := mustHash(t, FormatSHA256, "blob", []byte("a\n"))
	blobB := mustHash(t, FormatSHA256, "blob", []byte("b\n"))
	sub := sha256Tree("100644", "x.go", blobA)
	subID := mustHash(t, FormatSHA256, "tree", sub)
	oldRoot := sha256Tree("100644", "go.sum", blobA, "40000", "src", subID)
	newRoot := sha256Tree("100644", "go.sum", blobB, "40000", "src", subID)
	oldID, newID := mustHash(t, FormatSHA256, "tree", oldRoot), mustHash(t, FormatSHA256, "tree", newRoot)
	alice := sshKey(t)
	signed := signObject("commit", sha256Commit(newID, "head"), sshSigner(t, alice, "git"))
	signed256 := []byte(strings.Replace(string(signed), "\ngpgsig ", "\ngpgsig-sha256 ", 1))
	rev := sha256Commit(oldID, "reviewed")
	headID, revID := mustHash(t, FormatSHA256, "commit", signed256), mustHash(t, FormatSHA256, "commit", rev)
	objs := []RawObject{{"commit", headID, signed256}, {"commit", revID, rev}, {"tree", newID, newRoot}, {"tree", oldID, oldRoot}}
	rep, ids, err := TreeEquivalenceObjects(TreeUpload{Format: FormatSHA256, Head: headID, Reviewed: revID, Objects: objs, Pins: []string{"go.sum"}})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Equivalent || len(rep.Differences) != 1 || rep.Differences[0].Path != "go.sum" || rep.Differences[0].NewID != blobB || len(ids) != 4 || rep.HeadTree != newID {
		t.Errorf("sha256 trees: %+v ids %v", rep, ids)
	}
	for _, bad := range flipEach(objs) {
		_, _, err := TreeEquivalenceObjects(TreeUpload{Format: FormatSHA256, Head: headID, Reviewed: revID, Objects: bad})
		requireIDMismatch(t, "sha256 tree upload", err)
	}
	// SHA-1 ids of the same bytes are refused as SHA-256 ids.
	sha1ID := mustHash(t, FormatSHA1, "commit", signed256)
	if _, err := VerifyUploadedHead(HeadUpload{Repository: "r", Ref: "refs/heads/main", Format: FormatSHA256, Objects: []RawObject{{"commit", sha1ID, signed256}}}); ledger.ErrorCode(err) != ledger.CodeInvalid {
		t.Errorf("a sha1 id in a sha256 upload: %v", err)
	}
	as, err := ParseAllowedSigners([]byte("bot " + authorizedLine(alice.PublicKey()) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	pol := &Policy{Version: 1, Rules: []PolicyRule{{Repositories: []string{"*"}, Refs: []string{"*"}, Schemes: []string{"ssh"}, SSH: &SSHTrust{AllowedSigners: "s"}, allowedSigners: as}}}
	hv, err := VerifyUploadedHead(HeadUpload{Repository: "r", Ref: "refs/heads/main", Format: FormatSHA256, Objects: objs[:1], Policy: pol, Now: fixtureT0})
	if err != nil {
		t.Fatal(err)
	}
	if hv.GitLetter != "G" || hv.Decision != ledger.DecisionTrusted || hv.Object != headID || hv.Tree != newID || hv.Validate() != nil {
		t.Errorf("sha256 signed head: %+v", hv)
	}
	compatOnly := sha256Commit(newID, "head")
	compatOnly = signObject("commit", compatOnly, sshSigner(t, alice, "git"))
	hv, err = VerifyUploadedHead(HeadUpload{Repository: "r", Ref: "refs/heads/main", Format: FormatSHA256, Objects: []RawObject{{"commit", mustHash(t, FormatSHA256, "commit", compatOnly), compatOnly}}, Policy: pol, Now: fixtureT0})
	if err != nil || hv.GitLetter != "N" || hv.Decision == ledger.DecisionTrusted {
		t.Errorf("sha256 commit with only a gpgsig header: %+v %v", hv, err)
	}
}
