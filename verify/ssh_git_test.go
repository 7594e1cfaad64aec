package verify

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"fmt"
	"math/big"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"
)

// sshLab adds ssh-keygen keys, a CA and certificates to a gitLab.
type sshLab struct {
	*gitLab
	letters map[string]int // git's letters over the checked cases
}

func newSSHLab(t *testing.T) *sshLab {
	needTools(t, "git", "ssh-keygen")
	return &sshLab{gitLab: newGitLab(t), letters: map[string]int{}}
}

// requireLetters fails unless git gave each letter at least once, so that
// agreement is not agreement on one answer only.
func (l *sshLab) requireLetters(letters ...string) {
	l.t.Helper()
	for _, x := range letters {
		if l.letters[x] == 0 {
			l.t.Errorf("git never answered %s (answers %v): the cases do not cover it", x, l.letters)
		}
	}
}

// key makes an ed25519 key with ssh-keygen and returns its path.
func (l *sshLab) key(name string) string {
	p := l.path(name)
	l.run(nil, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", p)
	return p
}

func (l *sshLab) pub(keyPath string) string {
	b, err := os.ReadFile(keyPath + ".pub")
	if err != nil {
		l.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// cert has ssh-keygen's CA sign key's public half for principals over
// validity (ssh-keygen -V) and returns the certificate path.
func (l *sshLab) cert(ca, key, principals, validity string) string {
	l.run(nil, "ssh-keygen", "-q", "-s", ca, "-I", "id-"+principals, "-n", principals, "-V", validity, key+".pub")
	return key + "-cert.pub"
}

// sign returns an armoured SSHSIG of data by ssh-keygen -Y sign with
// signer (a private key, or a certificate beside its private key).
func (l *sshLab) sign(signer string, data []byte) []byte {
	msg := l.write("msg", data)
	os.Remove(msg + ".sig")
	l.run(nil, "ssh-keygen", "-q", "-Y", "sign", "-f", signer, "-n", "git", msg)
	sig, err := os.ReadFile(msg + ".sig")
	if err != nil {
		l.t.Fatal(err)
	}
	return sig
}

func (l *sshLab) signer(path string) func([]byte) []byte {
	return func(b []byte) []byte { return l.sign(path, b) }
}

// sshCase is one object: git's verdict on it is compared with ours.
type sshCase struct {
	name    string
	raw     []byte
	signers string // allowed-signers file content
	policy  []string
	// trusted is what the policy must decide; the letter and signer
	// come from git.
	trusted bool
}

func (l *sshLab) check(c sshCase) Result {
	l.t.Helper()
	id := l.store("commit", c.raw)
	sp := l.write("allowed_signers", []byte(c.signers))
	letter, signer := l.gitVerdict(id, sp)
	l.letters[letter]++
	as, err := ParseAllowedSigners([]byte(c.signers))
	if err != nil {
		l.t.Fatalf("%s: %v", c.name, err)
	}
	r, err := VerifyObject(c.raw, "commit", &Options{AllowedSigners: as, ExpectedID: id})
	if r.Letter != letter || (letter == "G" && r.Signer != signer) {
		l.t.Errorf("%s: ours %s %q (%v), git %s %q", c.name, r.Letter, r.Signer, err, letter, signer)
	}
	if (err == nil) != (letter == "G") {
		l.t.Errorf("%s: letter %s with error %v", c.name, r.Letter, err)
	}
	rule := &PolicyRule{Schemes: []string{"ssh"}, SSH: &SSHTrust{AllowedSigners: "f", Principals: c.policy, NoTouchRequired: true}}
	d, derr := rule.Decide(r)
	if (d == ledger.DecisionTrusted) != c.trusted {
		l.t.Errorf("%s: policy %v decided %s (%v), want trusted=%v (git %s %q)", c.name, c.policy, d, derr, c.trusted, letter, signer)
	}
	return r
}

// TestSSHAgainstGit builds SSH-signed commits with ssh-keygen (plain keys,
// a CA and its certificates) and compares letter, signer and policy
// decision with git log's %G? and %GS on the same objects.
func TestSSHAgainstGit(t *testing.T) {
	l := newSSHLab(t)
	now := time.Now()
	alice, bob, mallory := l.key("alice"), l.key("bob"), l.key("mallory")
	ca, devBob, relBot, old := l.key("ca"), l.key("dev-bob"), l.key("release-bot"), l.key("old")
	devCert := l.cert(ca, devBob, "dev-bob", "always:forever")
	relCert := l.cert(ca, relBot, "release-bot", "always:forever")
	oldCert := l.cert(ca, old, "release-old", "20200101:20210101")
	body := l.commit(ident(now.Add(-time.Hour)), "ssh case")
	signed := func(signer string, b []byte) []byte { return signObject("commit", b, l.signer(signer)) }
	caLine := func(pats string) string { return pats + " cert-authority " + l.pub(ca) + "\n" }
	cases := []sshCase{
		{name: "plain key", raw: signed(alice, body), signers: "alice " + l.pub(alice) + "\n", trusted: true},
		{name: "principal list reports the first", raw: signed(alice, body), signers: "bob,alice " + l.pub(alice) + "\n", policy: []string{"bob"}, trusted: true},
		{name: "policy matches any verified principal", raw: signed(alice, body), signers: "bob,alice " + l.pub(alice) + "\n", policy: []string{"alice"}, trusted: true},
		{name: "namespaces=file gives B", raw: signed(alice, body), signers: "alice namespaces=\"file\" " + l.pub(alice) + "\n"},
		{name: "namespaces=file then a git line", raw: signed(alice, body), signers: "alice namespaces=\"file\" " + l.pub(alice) + "\nalice " + l.pub(alice) + "\n", trusted: true},
		{name: "unknown key", raw: signed(mallory, body), signers: "alice " + l.pub(alice) + "\n"},
		{name: "no-touch-required line is skipped", raw: signed(alice, body), signers: "alice no-touch-required " + l.pub(alice) + "\n"},
		{name: "verify-required line skipped, next line used", raw: signed(bob, body), signers: "bob verify-required " + l.pub(bob) + "\nbob2 " + l.pub(bob) + "\n", trusted: true},
		{name: "CA line: certificate principal, not the line's patterns", raw: signed(devCert, body), signers: caLine("release-*,dev-*"), policy: []string{"release-*"}},
		{name: "CA line: certificate principal allowed", raw: signed(devCert, body), signers: caLine("release-*,dev-*"), policy: []string{"dev-*"}, trusted: true},
		{name: "CA line *: release-bot certificate", raw: signed(relCert, body), signers: caLine("*"), policy: []string{"release-*"}, trusted: true},
		{name: "CA line not matching the certificate", raw: signed(devCert, body), signers: caLine("release-*")},
		{name: "CA line negation", raw: signed(devCert, body), signers: caLine("*,!dev-bob")},
		{name: "expired certificate", raw: signed(oldCert, body), signers: caLine("*")},
		{name: "certificate on a plain line", raw: signed(devCert, body), signers: "dev-bob " + l.pub(devBob) + "\n"},
		{name: "window: retired key at commit time", raw: signed(alice, l.commit(ident(now.Add(-time.Hour)), "w")), signers: "alice valid-before=\"20200101\" " + l.pub(alice) + "\n"},
	}
	// Unusable signer dates: git passes no verify time, ssh-keygen judges
	// at the current time.
	for _, c := range []string{
		"C O Mitter <committer@example.com> 0 +0000",
		"C O Mitter <committer@example.com> notadate +0000",
		"C O Mitter <committer@example.com>",
	} {
		b := l.commit(c, "dates")
		cases = append(cases,
			sshCase{name: "date " + c + ": retired key", raw: signed(alice, b), signers: "alice valid-before=\"20200101\" " + l.pub(alice) + "\n"},
			sshCase{name: "date " + c + ": current key", raw: signed(alice, b), signers: "alice valid-after=\"20200101\" " + l.pub(alice) + "\n", trusted: true},
			sshCase{name: "date " + c + ": expired certificate", raw: signed(oldCert, b), signers: caLine("*")},
		)
	}
	// An old commit by the old certificate is G at its own date.
	oldBody := l.commit(ident(time.Date(2020, 6, 1, 0, 0, 0, 0, time.UTC)), "old")
	cases = append(cases, sshCase{name: "certificate valid at commit time", raw: signed(oldCert, oldBody), signers: caLine("release-*"), trusted: true})
	for _, c := range cases {
		l.check(c)
	}
	l.requireLetters("G", "U", "B")
}

// TestSSHGpgsigHeadersAgainstGit: a commit header starting with "gpgsig"
// other than gpgsig is left out of the payload as git leaves it out.
func TestSSHGpgsigHeadersAgainstGit(t *testing.T) {
	l := newSSHLab(t)
	alice := l.key("alice")
	signers := "alice " + l.pub(alice) + "\n"
	body := l.commit(ident(time.Now()), "headers")
	for _, h := range []string{"gpgsig-sha256 x\n y\n", "gpgsigx z\n", "gpgsig-other a\n"} {
		i := bytes.Index(body, []byte("\n\n"))
		with := append(append(bytes.Clone(body[:i+1]), h...), body[i+1:]...)
		// Signed without the header: git drops it, so G.
		l.check(sshCase{name: "signed without " + h, raw: insertGpgsig(with, l.sign(alice, body)), signers: signers, trusted: true})
		// Signed with it: the payload lacks it, so B.
		l.check(sshCase{name: "signed with " + h, raw: insertGpgsig(with, l.sign(alice, with)), signers: signers})
	}
	l.requireLetters("G", "B")
}

// skSign makes an SSHSIG over data with an sk key in software: the FIDO
// flags and counter are chosen by the test (no hardware key here), the
// signature computed as an authenticator computes it (PROTOCOL.u2f).
func skSign(t *testing.T, pub ssh.PublicKey, app string, priv any, flags byte, counter uint32, data []byte) []byte {
	t.Helper()
	h := sha512.Sum512(data)
	signed := append([]byte("SSHSIG"), ssh.Marshal(struct {
		Namespace, Reserved, Hash, Digest string
	}{"git", "", "sha512", string(h[:])})...)
	appHash := sha256.Sum256([]byte(app))
	dataHash := sha256.Sum256(signed)
	msg := append(append([]byte{}, appHash[:]...), flags)
	msg = binary.BigEndian.AppendUint32(msg, counter)
	msg = append(msg, dataHash[:]...)
	var blob []byte
	switch k := priv.(type) {
	case ed25519.PrivateKey:
		blob = ed25519.Sign(k, msg)
	case *ecdsa.PrivateKey:
		d := sha256.Sum256(msg)
		r, s, err := ecdsa.Sign(rand.Reader, k, d[:])
		if err != nil {
			t.Fatal(err)
		}
		blob = ssh.Marshal(struct{ R, S *big.Int }{r, s})
	}
	rest := binary.BigEndian.AppendUint32([]byte{flags}, counter)
	format := pub.Type()
	if c, ok := pub.(*ssh.Certificate); ok {
		format = c.Key.Type()
	}
	sig := &sshsig.Signature{Version: 1, PublicKey: pub, Namespace: "git", HashAlgorithm: sshsig.HashSHA512,
		Signature: &ssh.Signature{Format: format, Blob: blob, Rest: rest}}
	return sshsig.Armor(sig)
}

// skKeys makes an sk-ssh-ed25519 and an sk-ecdsa-sha2-nistp256 key in
// software, returning public keys and private halves.
func skKeys(t *testing.T) (edPub ssh.PublicKey, edPriv ed25519.PrivateKey, ecPub ssh.PublicKey, ecPriv *ecdsa.PrivateKey) {
	t.Helper()
	epk, esk, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	edPub, err = ssh.ParsePublicKey(ssh.Marshal(struct {
		Name string
		Key  []byte
		App  string
	}{ssh.KeyAlgoSKED25519, epk, "ssh:"}))
	if err != nil {
		t.Fatal(err)
	}
	ecPriv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	q, err := ecPriv.PublicKey.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	ecPub, err = ssh.ParsePublicKey(ssh.Marshal(struct {
		Name, Curve string
		Q           []byte
		App         string
	}{ssh.KeyAlgoSKECDSA256, "nistp256", q, "ssh:"}))
	if err != nil {
		t.Fatal(err)
	}
	return edPub, esk, ecPub, ecPriv
}

// TestFIDOAgainstGit signs commits with sk keys under every flag variant
// (no flags, UP, UV, UP+UV) and compares with git and ssh-keygen: all
// verify, flags and counter are reported, and the policy's FIDO options
// (no_touch_required, verify_required) decide.
func TestFIDOAgainstGit(t *testing.T) {
	l := newSSHLab(t)
	edPub, edPriv, ecPub, ecPriv := skKeys(t)
	signers := "dev " + authorizedLine(edPub) + "\ndev " + authorizedLine(ecPub) + "\n"
	body := l.commit(ident(time.Now()), "fido")
	for _, k := range []struct {
		pub  ssh.PublicKey
		priv any
	}{{edPub, edPriv}, {ecPub, ecPriv}} {
		for _, flags := range []byte{0x00, 0x01, 0x04, 0x05} {
			counter := uint32(1000 + int(flags))
			sig := skSign(t, k.pub, "ssh:", k.priv, flags, counter, body)
			raw := insertGpgsig(body, sig)
			name := fmt.Sprintf("%s flags %#02x", k.pub.Type(), flags)
			// ssh-keygen itself accepts every variant.
			sp := l.write("allowed_signers", []byte(signers))
			sf := l.write("sk.sig", sig)
			if out, errOut, err := l.try(body, "ssh-keygen", "-Y", "verify", "-f", sp, "-I", "dev", "-n", "git", "-s", sf); err != nil {
				t.Errorf("%s: ssh-keygen -Y verify: %v %s%s", name, err, out, errOut)
			}
			r := l.check(sshCase{name: name, raw: raw, signers: signers, trusted: true})
			if r.SK == nil || r.SK.Flags != flags || r.SK.Counter != counter || r.SK.Application != "ssh:" ||
				r.SK.UserPresent != (flags&1 != 0) || r.SK.UserVerification != (flags&4 != 0) {
				t.Errorf("%s: sk fields %+v", name, r.SK)
			}
			as, _ := ParseAllowedSigners([]byte(signers))
			for _, p := range []struct {
				noTouch, verifyReq bool
				want               bool
			}{
				{false, false, flags&1 != 0},
				{true, false, true},
				{true, true, flags&4 != 0},
				{false, true, flags&5 == 5},
			} {
				rule := &PolicyRule{Schemes: []string{"ssh"}, SSH: &SSHTrust{AllowedSigners: "f", NoTouchRequired: p.noTouch, VerifyRequired: p.verifyReq}}
				d, err := rule.Decide(r)
				if (d == ledger.DecisionTrusted) != p.want {
					t.Errorf("%s: no_touch_required=%v verify_required=%v: %s (%v), want trusted=%v", name, p.noTouch, p.verifyReq, d, err, p.want)
				}
			}
			_ = as
			// A flipped flag bit breaks the signature: B for git and us.
			bad := skSign(t, k.pub, "ssh:", k.priv, flags, counter, body)
			bad = flipSKFlags(t, bad)
			l.check(sshCase{name: name + " flags altered", raw: insertGpgsig(body, bad), signers: signers})
		}
	}
	// A CA certificate of the sk key (ssh-keygen certifies the public half),
	// signing without user presence: git accepts it on a cert-authority line.
	ca := l.key("ca")
	l.write("sk.pub", []byte(authorizedLine(edPub)+"\n"))
	l.run(nil, "ssh-keygen", "-q", "-s", ca, "-I", "sk-dev", "-n", "dev-sk", "-V", "always:forever", l.path("sk.pub"))
	cb, err := os.ReadFile(l.path("sk-cert.pub"))
	if err != nil {
		t.Fatal(err)
	}
	certPub, _, _, _, err := ssh.ParseAuthorizedKey(cb)
	if err != nil {
		t.Fatal(err)
	}
	r := l.check(sshCase{name: "sk certificate, no UP", raw: insertGpgsig(body, skSign(t, certPub, "ssh:", edPriv, 0x00, 7, body)),
		signers: "dev-* cert-authority " + l.pub(ca) + "\n", policy: []string{"dev-sk"}, trusted: true})
	if r.Signer != "dev-sk" || r.SK == nil || r.SK.Counter != 7 {
		t.Errorf("sk certificate: signer %q sk %+v", r.Signer, r.SK)
	}
	l.requireLetters("G", "B")
}

// flipSKFlags returns the armoured signature with its FIDO flags byte
// changed (bit 0x10), leaving the signature bytes as they were.
func flipSKFlags(t *testing.T, armoured []byte) []byte {
	t.Helper()
	sig, err := sshsig.Unarmor(armoured)
	if err != nil {
		t.Fatal(err)
	}
	sig.Signature.Rest = append([]byte{sig.Signature.Rest[0] ^ 0x10}, sig.Signature.Rest[1:]...)
	return sshsig.Armor(sig)
}

// TestSSHTagsAgainstGit signs annotated tags with ssh-keygen (a plain key
// and a CA certificate) and compares the ledger's letter with git
// verify-tag's exit status (0 exactly when the letter is G).
func TestSSHTagsAgainstGit(t *testing.T) {
	l := newSSHLab(t)
	alice, ca, dev := l.key("alice"), l.key("ca"), l.key("dev")
	cert := l.cert(ca, dev, "dev-bob", "always:forever")
	tag := func(tagger string) []byte {
		return fmt.Appendf(nil, "object %s\ntype tree\ntag v1\ntagger %s\n\nrelease v1\n", l.tree, tagger)
	}
	now := ident(time.Now())
	outcomes := map[bool]int{}
	defer func() {
		if outcomes[true] != 2 || outcomes[false] != 3 {
			t.Errorf("git verify-tag outcomes %v, want 2 good and 3 not", outcomes)
		}
	}()
	for _, c := range []struct {
		name, signers string
		raw           []byte
	}{
		{"plain key", "alice " + l.pub(alice) + "\n", signObject("tag", tag(now), l.signer(alice))},
		{"namespaces=file", "alice namespaces=\"file\" " + l.pub(alice) + "\n", signObject("tag", tag(now), l.signer(alice))},
		{"certificate", "dev-* cert-authority " + l.pub(ca) + "\n", signObject("tag", tag(now), l.signer(cert))},
		{"certificate, other principal", "release-* cert-authority " + l.pub(ca) + "\n", signObject("tag", tag(now), l.signer(cert))},
		{"retired key, no tagger date", "alice valid-before=\"20200101\" " + l.pub(alice) + "\n", signObject("tag", tag("T <t@example.com>"), l.signer(alice))},
	} {
		id := l.store("tag", c.raw)
		sp := l.write("allowed_signers", []byte(c.signers))
		gitOK := l.gitVerifyTag(id, sp)
		outcomes[gitOK]++
		as, _ := ParseAllowedSigners([]byte(c.signers))
		r, err := VerifyObject(c.raw, "tag", &Options{AllowedSigners: as, ExpectedID: id})
		if (r.Letter == "G") != gitOK {
			t.Errorf("%s: ours %s (%v), git verify-tag ok=%v", c.name, r.Letter, err, gitOK)
		}
	}
}
