package verify

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// gpgHome is a GNUPGHOME under a gitLab.
type gpgHome struct {
	l    *gitLab
	home string
}

func (l *gitLab) gpgHome(name string) *gpgHome {
	l.t.Helper()
	h := &gpgHome{l: l, home: filepath.Join(l.dir, name)}
	if err := os.MkdirAll(h.home, 0o700); err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(func() { exec.Command("gpgconf", "--homedir", h.home, "--kill", "gpg-agent").Run() })
	return h
}

func (h *gpgHome) gpg(stdin []byte, args ...string) []byte {
	h.l.t.Helper()
	all := append([]string{"--homedir", h.home, "--batch", "--yes", "--pinentry-mode", "loopback", "--passphrase", ""}, args...)
	return h.l.run(stdin, "gpg", all...)
}

// genKey makes a key with no passphrase and returns its fingerprint;
// extra arguments go before the command (--faked-system-time).
func (h *gpgHome) genKey(uid, algo, usage string, extra ...string) string {
	h.gpg(nil, append(extra, "--quick-gen-key", uid, algo, usage, "never")...)
	out := h.gpg(nil, "--list-keys", "--with-colons", uid)
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Split(l, ":"); len(f) > 9 && f[0] == "fpr" {
			return f[9]
		}
	}
	h.l.t.Fatalf("no fingerprint for %s", uid)
	return ""
}

// commitAs makes a signed empty commit in the lab repository with git
// commit -S and the key fpr, returning its id and raw bytes.
func (h *gpgHome) commitAs(fpr, msg string) (string, []byte) {
	l := h.l
	l.t.Helper()
	cmd := exec.Command("git", "-C", l.repo, "-c", "user.name=Dev", "-c", "user.email=dev@example.com", "-c", "user.signingkey="+fpr,
		"-c", "gpg.format=openpgp", "commit", "-q", "--allow-empty", "-S", "-m", msg)
	cmd.Env = append(l.env(), "GNUPGHOME="+h.home)
	if out, err := cmd.CombinedOutput(); err != nil {
		l.t.Fatalf("git commit -S: %v\n%s", err, out)
	}
	id := strings.TrimSpace(string(l.run(nil, "git", "-C", l.repo, "rev-parse", "HEAD")))
	return id, l.run(nil, "git", "-C", l.repo, "cat-file", "commit", id)
}

// gitLetter is git log's %G? and %GS for a commit with GNUPGHOME=h.
func (h *gpgHome) gitLetter(id string) (string, string) {
	l := h.l
	l.t.Helper()
	cmd := exec.Command("git", "-C", l.repo, "log", "-1", "--no-walk", "--format=%G?%x00%GS", id)
	cmd.Env = append(l.env(), "GNUPGHOME="+h.home)
	out, err := cmd.Output()
	if err != nil {
		l.t.Fatalf("git log: %v", err)
	}
	a, b, _ := strings.Cut(strings.TrimRight(string(out), "\n"), "\x00")
	return a, b
}

// TestWebOfTrustAgainstGit builds a project's web of trust with gpg: a
// master key that certifies developer keys (SHA-256 and SHA-1
// certifications, one expired, one revoked), a developer certified only
// by another developer, and an uncertified one. Each developer signs a
// commit with git commit -S. git's %G? with the master key ultimately
// trusted (--import-ownertrust) is compared with the ledger's letter and
// signer (TrustedFingerprints), and with the policy's certified_by
// decision; with the certified developers given full ownertrust as well,
// git's answer is compared with certified_by at depth 2.
func TestWebOfTrustAgainstGit(t *testing.T) {
	needTools(t, "git", "gpg", "gpgconf")
	l := newGitLab(t)
	s := l.gpgHome("signer")
	// Keys from 2017, so that a 2018 SHA-1 certification can be made: gpg
	// 2.2 accepts SHA-1 certifications made before 2019-01-19 only.
	old := "--faked-system-time=20170101T000000"
	master := s.genKey("Project Master <master@example.com>", "rsa2048", "cert", old)
	names := []string{"sha256", "sha1-2018", "sha1-now", "expired", "revoked", "uncertified", "second-hand"}
	devs := map[string]string{}
	for _, n := range names {
		devs[n] = s.genKey("Dev "+n+" <"+n+"@example.com>", "rsa2048", "sign", old)
	}
	s.gpg(nil, "-u", master, "--cert-digest-algo", "SHA256", "--quick-sign-key", devs["sha256"])
	s.gpg(nil, "-u", master, "--faked-system-time=20180601T000000", "--allow-weak-key-signatures", "--cert-digest-algo", "SHA1", "--quick-sign-key", devs["sha1-2018"])
	past := strconv.FormatInt(time.Now().Add(-10*24*time.Hour).Unix(), 10)
	s.gpg(nil, "-u", master, "--faked-system-time", past, "--default-cert-expire", "2d", "--quick-sign-key", devs["expired"])
	s.gpg(nil, "-u", master, "--faked-system-time=20180601T000000", "--quick-sign-key", devs["revoked"])
	s.gpg(nil, "-u", master, "--quick-revoke-sig", devs["revoked"], master)
	s.gpg(nil, "-u", devs["sha256"], "--quick-sign-key", devs["second-hand"])
	// A SHA-1 certification made now: gpg makes it only when told to, and
	// rejects it when verifying.
	s.gpg(nil, "-u", master, "--allow-weak-key-signatures", "--cert-digest-algo", "SHA1", "--quick-sign-key", devs["sha1-now"])
	pub := s.gpg(nil, "--export")
	ring, warns, err := ParseKeyringWarn(pub)
	if err != nil || len(ring) != 8 {
		t.Fatalf("keyring: %d keys, %v, warnings %v", len(ring), err, warns)
	}
	// Verifier homes: public keys only, ownertrust from --import-ownertrust.
	v1 := l.gpgHome("verify-master")
	v1.gpg(pub, "--import")
	v1.gpg([]byte(master+":6:\n"), "--import-ownertrust")
	v2 := l.gpgHome("verify-depth2")
	v2.gpg(pub, "--import")
	trust := master + ":6:\n"
	for _, n := range names {
		trust += devs[n] + ":5:\n"
	}
	v2.gpg([]byte(trust), "--import-ownertrust")

	rule := func(depth int) *PolicyRule {
		r := &PolicyRule{Schemes: []string{"openpgp"}, OpenPGP: &OpenPGPTrust{Keyrings: []string{"k"}, CertifiedBy: []string{master}, Depth: depth}, keyring: ring}
		return r
	}
	letters := map[string]string{}
	for _, n := range names {
		id, raw := s.commitAs(devs[n], "by "+n)
		for _, v := range []struct {
			home  *gpgHome
			opts  Options
			depth int
		}{
			{v1, Options{Keyring: ring, TrustedFingerprints: []string{master}}, 1},
			{v2, Options{Keyring: ring, Introducers: []Introducer{{Fingerprint: master, Depth: 2}}}, 2},
		} {
			letter, signer := v.home.gitLetter(id)
			opts := v.opts
			opts.ExpectedID = id
			r, err := VerifyObject(raw, "commit", &opts)
			if r.Letter != letter || r.Signer != signer {
				t.Errorf("%s (depth %d): ours %s %q (%v), git %s %q", n, v.depth, r.Letter, r.Signer, err, letter, signer)
			}
			if letter == "G" {
				p := r.CertificationPath
				if len(p) == 0 || p[0].Certifier != master || p[len(p)-1].Certified != devs[n] {
					t.Errorf("%s (depth %d): certification path %+v, want from %s to %s", n, v.depth, p, master, devs[n])
				}
			}
			// The policy: certified_by the master key, at the same depth.
			po := rule(v.depth).Options()
			po.ExpectedID = id
			pr, _ := VerifyObject(raw, "commit", po)
			d, derr := rule(v.depth).Decide(pr)
			if (d == ledger.DecisionTrusted) != (letter == "G") {
				t.Errorf("%s (depth %d): policy certified_by decided %s (%v), git %s", n, v.depth, d, derr, letter)
			}
			if v.depth == 1 {
				letters[n] = letter
			}
		}
	}
	// The test must see both outcomes, or it proves nothing.
	if letters["sha256"] != "G" || letters["sha1-2018"] != "G" || letters["sha1-now"] != "U" || letters["uncertified"] != "U" || letters["expired"] != "U" || letters["revoked"] != "U" || letters["second-hand"] != "U" {
		t.Errorf("git's letters %v: the generated web of trust is not what this test means to build", letters)
	}
}

// TestKeyringImportAgainstGPG writes an armoured keyring as projects
// publish it: a key, then a lone revocation certificate for a key not in
// the file, then a signature block and a second key. gpg --import imports
// both keys; so does ParseKeyringWarn, warning about the two other blocks
// by number. An unreadable file fails.
func TestKeyringImportAgainstGPG(t *testing.T) {
	needTools(t, "gpg", "gpgconf")
	l := &gitLab{t: t, dir: t.TempDir()}
	s := l.gpgHome("signer")
	a := s.genKey("Alice <alice@example.com>", "ed25519", "sign")
	b := s.genKey("Bob <bob@example.com>", "ed25519", "sign")
	c := s.genKey("Carol <carol@example.com>", "ed25519", "sign")
	revFile, err := os.ReadFile(filepath.Join(s.home, "openpgp-revocs.d", c+".rev"))
	if err != nil {
		t.Fatal(err)
	}
	// The stored certificate is escaped with ":" before the armour line.
	revArm := bytes.ReplaceAll(revFile, []byte(":-----BEGIN"), []byte("-----BEGIN"))
	revArm = revArm[bytes.Index(revArm, []byte("-----BEGIN")):]
	sig := s.gpg([]byte("hello"), "-u", a, "--armor", "--detach-sign")
	var file bytes.Buffer
	file.Write(s.gpg(nil, "--armor", "--export", a))
	file.Write(revArm)
	file.Write(sig)
	file.Write(s.gpg(nil, "--armor", "--export", b))
	path := l.write("project-keys.asc", file.Bytes())

	v := l.gpgHome("import")
	out, errOut, err := l.try(nil, "gpg", "--homedir", v.home, "--batch", "--import", path)
	_ = out
	gpgKeys := strings.Count(string(v.gpg(nil, "--list-keys", "--with-colons")), "\npub:") + boolInt(strings.HasPrefix(string(v.gpg(nil, "--list-keys", "--with-colons")), "pub:"))
	ring, warns, perr := LoadKeyringWarn(path)
	if perr != nil {
		t.Fatalf("ParseKeyringWarn: %v (gpg: %v %s)", perr, err, errOut)
	}
	if len(ring) != gpgKeys || gpgKeys != 2 {
		t.Errorf("keys: ours %d, gpg --import %d, want 2", len(ring), gpgKeys)
	}
	if len(warns) != 2 || !strings.Contains(warns[0], "block 2") || !strings.Contains(warns[0], "revocation") || !strings.Contains(warns[1], "block 3 (PGP SIGNATURE)") {
		t.Errorf("warnings %q: want block 2 (a lone revocation) and block 3 (a signature) named", warns)
	}
	if _, err := LoadKeyring(filepath.Join(l.dir, "missing.asc")); err == nil || !os.IsNotExist(unwrapAll(err)) {
		t.Errorf("missing file: %v, want a not-exist error", err)
	}
	if _, err := ParseKeyring([]byte("-----BEGIN PGP SIGNATURE-----\n\nAAAA\n-----END PGP SIGNATURE-----\n")); err == nil {
		t.Error("a file with no key block parsed without error")
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}
