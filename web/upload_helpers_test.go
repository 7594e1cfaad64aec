package web

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/verify"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/storage"
	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"
)

// upT0 is the fixed clock of the upload fixtures.
var upT0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

const upRepo = "github.com/example/core"

// uploadFixture is a repository with a reviewed commit, a head signed by
// a trusted key (alice) that differs from it only in its pin go.sum, a
// head signed by an untrusted key (mallory) and an unsigned head that
// changes src/main.go outside the pins; plus the registered policy that
// trusts alice and a release binding it.
type uploadFixture struct {
	dir                           string
	reviewed, head, evil, outside string
	policyYAML                    string
	signers                       []byte
	malloryYAML                   string
	malloryFiles                  map[string][]byte
	alice, mallory                ssh.Signer
}

func sshSignerT(t testing.TB) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func storeRawT(t testing.TB, s storage.Storer, typ plumbing.ObjectType, raw []byte) plumbing.Hash {
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

// storeFiles writes blobs and nested trees for files (path -> content,
// all mode 100644) and returns the root tree id.
func storeFiles(t testing.TB, s storage.Storer, files map[string]string) plumbing.Hash {
	t.Helper()
	sub := map[string]map[string]string{}
	var names []string
	blobs := map[string]plumbing.Hash{}
	for p, c := range files {
		if d, rest, ok := strings.Cut(p, "/"); ok {
			if sub[d] == nil {
				sub[d] = map[string]string{}
				names = append(names, d+"/")
			}
			sub[d][rest] = c
			continue
		}
		blobs[p] = storeRawT(t, s, plumbing.BlobObject, []byte(c))
		names = append(names, p)
	}
	sort.Strings(names) // git orders a directory as its name with a trailing slash
	var b bytes.Buffer
	for _, n := range names {
		mode, name, h := "100644", n, blobs[n]
		if strings.HasSuffix(n, "/") {
			mode, name = "40000", strings.TrimSuffix(n, "/")
			h = storeFiles(t, s, sub[name])
		}
		fmt.Fprintf(&b, "%s %s\x00", mode, name)
		b.Write(h[:])
	}
	return storeRawT(t, s, plumbing.TreeObject, b.Bytes())
}

func commitBody(tree plumbing.Hash, msg string) []byte {
	return []byte(fmt.Sprintf("tree %s\nauthor A <a@example.com> %d +0000\ncommitter A <a@example.com> %d +0000\n\n%s\n", tree, upT0.Unix(), upT0.Unix(), msg))
}

// sshSign returns body with a gpgsig header holding signer's SSH
// signature over it (namespace git), as git commit -S writes it.
func sshSign(t testing.TB, signer ssh.Signer, body []byte) []byte {
	t.Helper()
	sig, err := sshsig.Sign(bytes.NewReader(body), signer, sshsig.HashSHA512, "git")
	if err != nil {
		t.Fatal(err)
	}
	arm := bytes.TrimRight(sshsig.Armor(sig), "\n")
	i := bytes.Index(body, []byte("\n\n"))
	var out bytes.Buffer
	out.Write(body[:i+1])
	out.WriteString("gpgsig")
	for _, l := range bytes.Split(arm, []byte("\n")) {
		out.WriteByte(' ')
		out.Write(l)
		out.WriteByte('\n')
	}
	out.Write(body[i+1:])
	return out.Bytes()
}

func signersLine(principal string, k ssh.PublicKey) []byte {
	return []byte(principal + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))) + "\n")
}

func newUploadFixture(t testing.TB) *uploadFixture {
	t.Helper()
	f := &uploadFixture{dir: filepath.Join(t.TempDir(), "core"), alice: sshSignerT(t), mallory: sshSignerT(t)}
	repo, err := git.PlainInit(f.dir, false)
	if err != nil {
		t.Fatal(err)
	}
	s := repo.Storer
	base := map[string]string{"README.md": "readme\n", "go.sum": "sums v1\n", "src/main.go": "package main\n", "src/util/util.go": "package util\n"}
	pinned := map[string]string{"README.md": "readme\n", "go.sum": "sums v2\n", "src/main.go": "package main\n", "src/util/util.go": "package util\n"}
	backdoor := map[string]string{"README.md": "readme\n", "go.sum": "sums v2\n", "src/main.go": "package main // backdoor\n", "src/util/util.go": "package util\n"}
	f.reviewed = storeRawT(t, s, plumbing.CommitObject, commitBody(storeFiles(t, s, base), "reviewed")).String()
	f.head = storeRawT(t, s, plumbing.CommitObject, sshSign(t, f.alice, commitBody(storeFiles(t, s, pinned), "release"))).String()
	f.evil = storeRawT(t, s, plumbing.CommitObject, sshSign(t, f.mallory, commitBody(storeFiles(t, s, pinned), "release"))).String()
	f.outside = storeRawT(t, s, plumbing.CommitObject, commitBody(storeFiles(t, s, backdoor), "release")).String()
	for ref, h := range map[string]string{"refs/heads/main": f.head, "refs/heads/evil": f.evil, "refs/heads/outside": f.outside} {
		if err := s.SetReference(plumbing.NewHashReference(plumbing.ReferenceName(ref), plumbing.NewHash(h))); err != nil {
			t.Fatal(err)
		}
	}
	f.signers = signersLine("release-bot", f.alice.PublicKey())
	f.policyYAML = "version: 1\nrules:\n  - repositories: [\"" + upRepo + "\"]\n    refs: [\"refs/heads/*\"]\n    schemes: [ssh]\n    ssh:\n      allowed_signers: signers\n"
	f.malloryYAML = f.policyYAML
	f.malloryFiles = map[string][]byte{"signers": signersLine("release-bot", f.mallory.PublicKey())}
	return f
}

// releaseYAML is a release of one component whose head is head, bound to
// the policy named policy, with signed-heads and tree-equivalence gates.
func (f *uploadFixture) releaseYAML(version, head, policy string) string {
	return "version: " + version + "\npolicy: " + policy + "\ncomponents:\n  - name: core\n    repository: " + upRepo +
		"\n    reviewed: " + f.reviewed + "\n    head: " + head + "\n    pins: [go.sum]\ngates:\n  - id: heads\n    kind: signed-heads\n  - id: tree\n    kind: tree-equivalence\n"
}

// uploadEnv is an API environment with an admin token.
type uploadEnv struct {
	*apiEnv
	admin string
}

func newUploadEnv(t testing.TB, cfg Config) *uploadEnv {
	t.Helper()
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return upT0 }
	}
	e := newAPIEnv(t, cfg)
	adm, _, err := e.store.CreateToken(context.Background(), "admin", ledger.ScopeAdmin, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &uploadEnv{apiEnv: e, admin: adm}
}

// applyPolicy registers a policy and returns its digest.
func (e *uploadEnv) applyPolicy(t testing.TB, name, yml string, files map[string][]byte) string {
	t.Helper()
	code, body := e.do(t, "POST", "/api/v1/policies", e.admin, map[string]any{"name": name, "policy": yml, "files": files})
	if code != 201 {
		t.Fatalf("apply policy %s: %d %s", name, code, body)
	}
	var ans struct {
		Policy PolicySummaryJSON `json:"policy"`
	}
	json.Unmarshal(body, &ans)
	return ans.Policy.Digest
}

func (e *uploadEnv) defineRelease(t testing.TB, yml string) {
	t.Helper()
	rel, err := gates.ParseRelease([]byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gates.Apply(context.Background(), e.store, rel); err != nil {
		t.Fatal(err)
	}
}

func headObjects(t testing.TB, dir, ref string) []verify.RawObject {
	t.Helper()
	src, err := verify.CollectHead(dir, upRepo, ref)
	if err != nil {
		t.Fatal(err)
	}
	return src.Objects
}

func treeObjects(t testing.TB, dir, head, reviewed string) []verify.RawObject {
	t.Helper()
	u, err := verify.CollectTree(dir, head, reviewed)
	if err != nil {
		t.Fatal(err)
	}
	return u.Objects
}

// apiErr decodes an API error answer.
func apiErr(body []byte) APIError {
	var ae APIError
	json.Unmarshal(body, &ae)
	return ae
}
