package witness_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"filippo.io/torchwood"
	"golang.org/x/mod/sumdb/note"

	"github.com/evidence-ledger/ledger/witness"
)

const cpText = "example.com/log\n42\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"

// torchwoodCosign signs cpText with torchwood's cosignature/v1 signer, an
// implementation independent of ours, and returns the vkey it names and the
// signed note.
func torchwoodCosign(t *testing.T, name string) (vkey string, signed []byte, pub ed25519.PublicKey) {
	t.Helper()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	s, err := torchwood.NewCosignatureSigner(name, priv)
	if err != nil {
		t.Fatal(err)
	}
	signed, err = note.Sign(&note.Note{Text: cpText}, s)
	if err != nil {
		t.Fatal(err)
	}
	return s.Verifier().String(), signed, pub
}

func TestCosignatureVerifierAgainstTorchwood(t *testing.T) {
	vkey, signed, pub := torchwoodCosign(t, "witness.example/w1")
	mine, err := witness.CosignatureVerifierKey("witness.example/w1", pub)
	if err != nil {
		t.Fatal(err)
	}
	if mine != vkey {
		t.Fatalf("vkey: ours %q, torchwood %q", mine, vkey)
	}
	v, err := witness.NewCosignatureVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	n, err := note.Open(signed, note.VerifierList(v))
	if err != nil {
		t.Fatalf("open torchwood cosignature: %v", err)
	}
	ts, err := witness.CosignatureTime(n.Sigs[0])
	if err != nil || time.Since(ts) > time.Minute || time.Until(ts) > time.Minute {
		t.Fatalf("cosignature time %v, %v: want about now", ts, err)
	}

	// Every corrupted variant must fail.
	sigLine := signed[strings.LastIndex(string(signed), "\n\n")+2:]
	name, b64, _ := strings.Cut(strings.TrimSpace(strings.TrimPrefix(string(sigLine), "— ")), " ")
	raw, _ := base64.StdEncoding.DecodeString(b64)
	variants := map[string][]byte{}
	for _, i := range []int{4, 11, 12, 40, len(raw) - 1} { // timestamp, signature bytes
		r := append([]byte(nil), raw...)
		r[i] ^= 1
		variants[fmt.Sprintf("flip byte %d", i)] = []byte(cpText + "\n— " + name + " " + base64.StdEncoding.EncodeToString(r) + "\n")
	}
	variants["other text"] = []byte(strings.Replace(string(signed), "\n42\n", "\n43\n", 1))
	variants["truncated signature"] = []byte(cpText + "\n— " + name + " " + base64.StdEncoding.EncodeToString(raw[:len(raw)-1]) + "\n")
	for what, b := range variants {
		if _, err := note.Open(b, note.VerifierList(v)); err == nil {
			t.Errorf("%s: verified", what)
		}
	}
	// Another key under the same name does not verify it either.
	otherVKey, _, _ := torchwoodCosign(t, "witness.example/w1")
	ov, _ := witness.NewCosignatureVerifier(otherVKey)
	if _, err := note.Open(signed, note.VerifierList(ov)); err == nil {
		t.Error("another key verified the cosignature")
	}
	// An Ed25519 note signature (type 0x01) is not a cosignature.
	_, ed25519VKey, _ := note.GenerateKey(rand.Reader, "witness.example/w1")
	if _, err := witness.NewCosignatureVerifier(ed25519VKey); err == nil {
		t.Error("a type 0x01 vkey was accepted as a cosignature key")
	}
}

func TestNewCosignatureVerifierRejects(t *testing.T) {
	good, _, _ := torchwoodCosign(t, "w")
	i := len("w+12345678")
	raw, _ := base64.StdEncoding.DecodeString(good[i+1:])
	short := base64.StdEncoding.EncodeToString(raw[:20])
	for _, bad := range []string{
		"", "w", "w+1234", "w+zzzzzzzz+" + good[i+1:], "w+0000000+" + good[i+1:],
		"x" + good, // name changed: key id no longer matches
		good[:i+1] + short,
		good[:i+1] + "!!!",
		"a b" + good[1:],
	} {
		if _, err := witness.NewCosignatureVerifier(bad); err == nil {
			t.Errorf("accepted %q", bad)
		} else if strings.Contains(err.Error(), good[i+1:]) {
			t.Errorf("error echoes the key: %v", err)
		}
	}
}
