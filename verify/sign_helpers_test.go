package verify

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/digitorus/pkcs7"
	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"
)

// fixtureT0 is the fixed clock of generated fixtures.
var fixtureT0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

const fixtureTree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904" // the empty tree

// unsignedCommit returns a commit body with committer time at.
func unsignedCommit(at time.Time, msg string) []byte {
	return fmt.Appendf(nil, "tree %s\nparent %s\nauthor A U Thor <author@example.com> %d +0000\ncommitter C O Mitter <committer@example.com> %d +0100\n\n%s\n",
		fixtureTree, strings.Repeat("1", 40), at.Unix(), at.Unix(), msg)
}

// unsignedTag returns a tag body pointing at a commit, tagger time at.
func unsignedTag(at time.Time, name string) []byte {
	return fmt.Appendf(nil, "object %s\ntype commit\ntag %s\ntagger T A Gger <tagger@example.com> %d +0000\n\nrelease %s\n",
		strings.Repeat("2", 40), name, at.Unix(), name)
}

// insertGpgsig inserts sig as a gpgsig header after the committer line,
// continuation lines prefixed by a space (git's add_header_signature).
func insertGpgsig(commit, sig []byte) []byte {
	i := bytes.Index(commit, []byte("\n\n"))
	var h bytes.Buffer
	h.Write(commit[:i+1])
	h.WriteString("gpgsig")
	for _, l := range bytes.Split(bytes.TrimRight(sig, "\n"), []byte("\n")) {
		h.WriteByte(' ')
		h.Write(l)
		h.WriteByte('\n')
	}
	h.Write(commit[i+1:])
	return h.Bytes()
}

// signObject signs an unsigned commit or tag body with sign.
func signObject(typ string, body []byte, sign func([]byte) []byte) []byte {
	sig := sign(body)
	if typ == "tag" {
		return append(bytes.Clone(body), sig...)
	}
	return insertGpgsig(body, sig)
}

// pgpKey makes a throwaway ed25519 OpenPGP key created at created,
// expiring after life (0: never).
func pgpKey(t testing.TB, name string, created time.Time, life time.Duration) *openpgp.Entity {
	t.Helper()
	cfg := &packet.Config{Algorithm: packet.PubKeyAlgoEdDSA, Time: func() time.Time { return created }, KeyLifetimeSecs: uint32(life / time.Second)}
	e, err := openpgp.NewEntity(name, "", strings.ToLower(name)+"@example.com", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// pgpSigner signs at time at; sigLife > 0 sets a signature expiry.
func pgpSigner(t testing.TB, e *openpgp.Entity, at time.Time, sigLife time.Duration) func([]byte) []byte {
	return func(payload []byte) []byte {
		var b bytes.Buffer
		cfg := &packet.Config{Time: func() time.Time { return at }, SigLifetimeSecs: uint32(sigLife / time.Second)}
		if err := openpgp.ArmoredDetachSign(&b, e, bytes.NewReader(payload), cfg); err != nil {
			t.Fatal(err)
		}
		b.WriteByte('\n')
		return b.Bytes()
	}
}

func publicRing(t testing.TB, es ...*openpgp.Entity) openpgp.EntityList {
	t.Helper()
	var b bytes.Buffer
	for _, e := range es {
		if err := e.Serialize(&b); err != nil {
			t.Fatal(err)
		}
	}
	el, err := ParseKeyring(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return el
}

func sshKey(t testing.TB) ssh.Signer {
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

func sshSigner(t testing.TB, s ssh.Signer, namespace string) func([]byte) []byte {
	return func(payload []byte) []byte {
		sig, err := sshsig.Sign(bytes.NewReader(payload), s, sshsig.HashSHA512, namespace)
		if err != nil {
			t.Fatal(err)
		}
		return append(sshsig.Armor(sig), '\n')
	}
}

func authorizedLine(k ssh.PublicKey) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}

// testCA is a throwaway X.509 CA issuing e-mail protection leaves.
type testCA struct {
	cert *x509.Certificate
	key  crypto.Signer
}

func newTestCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: fixtureT0.AddDate(-1, 0, 0), NotAfter: fixtureT0.AddDate(10, 0, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &testCA{cert: c, key: key}
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// leaf issues a certificate for email valid over [from, to).
func (ca *testCA) leaf(t testing.TB, email string, from, to time.Time) (*x509.Certificate, crypto.Signer) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: email},
		EmailAddresses: []string{email}, NotBefore: from, NotAfter: to,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageEmailProtection}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c, key
}

// cmsSigner makes a detached CMS signature as gitsign/gpgsm do, PEM
// "SIGNED MESSAGE". The CMS signing time is the wall clock (digitorus).
func cmsSigner(t testing.TB, cert *x509.Certificate, key crypto.Signer) func([]byte) []byte {
	return func(payload []byte) []byte {
		sd, err := pkcs7.NewSignedData(payload)
		if err != nil {
			t.Fatal(err)
		}
		sd.SetDigestAlgorithm(pkcs7.OIDDigestAlgorithmSHA256)
		if err := sd.AddSigner(cert, key, pkcs7.SignerInfoConfig{}); err != nil {
			t.Fatal(err)
		}
		sd.Detach()
		der, err := sd.Finish()
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "SIGNED MESSAGE", Bytes: der})
	}
}
