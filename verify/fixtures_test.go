package verify

import (
	"bytes"
	"encoding/pem"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/hiddeco/sshsig"
)

// fixture is one generated object and the outcome it must have.
type fixture struct {
	name   string
	typ    string
	raw    []byte
	opts   *Options
	letter string
	want   error // nil: must verify (G)
}

// mutators shared by every scheme.

func flipPayload(raw []byte) []byte {
	return bytes.Replace(raw, []byte("fixture message"), []byte("fixture messagf"), 1)
}

// replaceSig rebuilds the object with its signature block transformed.
func replaceSig(t *testing.T, typ string, raw []byte, f func([]byte) []byte) []byte {
	t.Helper()
	o, err := ParseObject(raw, typ, "")
	if err != nil {
		t.Fatal(err)
	}
	ns := f(bytes.Clone(o.Signature))
	if typ == "tag" {
		return append(bytes.Clone(o.Payload), ns...)
	}
	return insertGpgsig(o.Payload, ns)
}

// flipSigByte flips the last byte of the binary signature inside the
// armour, re-armouring it correctly so that only the signature is wrong.
func flipSigByte(t *testing.T, format string) func([]byte) []byte {
	return func(sig []byte) []byte {
		switch format {
		case "openpgp":
			blk, err := armor.Decode(bytes.NewReader(sig))
			if err != nil {
				t.Fatal(err)
			}
			var body bytes.Buffer
			body.ReadFrom(blk.Body)
			b := body.Bytes()
			b[len(b)-1] ^= 0x01
			var out bytes.Buffer
			w, _ := armor.Encode(&out, blk.Type, nil)
			w.Write(b)
			w.Close()
			out.WriteByte('\n')
			return out.Bytes()
		case "ssh":
			s, err := sshsig.Unarmor(bytes.TrimSpace(sig))
			if err != nil {
				t.Fatal(err)
			}
			s.Signature.Blob[len(s.Signature.Blob)-1] ^= 0x01
			return append(sshsig.Armor(s), '\n')
		case "x509":
			blk, _ := pem.Decode(sig)
			blk.Bytes[len(blk.Bytes)-1] ^= 0x01
			return pem.EncodeToMemory(blk)
		}
		t.Fatalf("format %s", format)
		return nil
	}
}

// truncateArmour drops the second half of the armour, END line included.
func truncateArmour(sig []byte) []byte {
	lines := bytes.SplitAfter(sig, []byte("\n"))
	return bytes.Join(lines[:len(lines)/2], nil)
}

func dupTree(raw []byte) []byte {
	i := bytes.IndexByte(raw, '\n')
	return append(append(bytes.Clone(raw[:i+1]), raw[:i+1]...), raw[i+1:]...)
}

// moveGpgsigFirst moves the gpgsig header (with continuation lines) in
// front of the tree header.
func moveGpgsigFirst(t *testing.T, raw []byte) []byte {
	hs, _, err := splitHeaders(raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if h.name == "gpgsig" {
			out := append(bytes.Clone(raw[h.start:h.end]), raw[:h.start]...)
			return append(out, raw[h.end:]...)
		}
	}
	t.Fatal("no gpgsig")
	return nil
}

// extraHeaderAfterSig inserts an unknown header right after the gpgsig block.
func extraHeaderAfterSig(t *testing.T, raw []byte) []byte {
	hs, _, err := splitHeaders(raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if h.name == "gpgsig" {
			out := append(bytes.Clone(raw[:h.end]), "x-extra injected\n"...)
			return append(out, raw[h.end:]...)
		}
	}
	t.Fatal("no gpgsig")
	return nil
}

// commonVariants derives the corrupted variants every scheme shares from a
// good object.
func commonVariants(t *testing.T, scheme, typ string, good []byte, opts *Options) []fixture {
	fs := []fixture{
		{scheme + "/" + typ + "/flipped-payload", typ, flipPayload(good), opts, "B", ErrBadSignature},
		{scheme + "/" + typ + "/flipped-signature", typ, replaceSig(t, typ, good, flipSigByte(t, scheme)), opts, "B", ErrBadSignature},
		{scheme + "/" + typ + "/truncated-armour", typ, replaceSig(t, typ, good, truncateArmour), opts, "E", ErrMalformed},
		{scheme + "/" + typ + "/unsigned", typ, mustParse(t, typ, good).Payload, opts, "N", ErrUnsigned},
	}
	if typ == "commit" {
		fs = append(fs,
			fixture{scheme + "/commit/duplicated-tree", typ, dupTree(good), opts, "E", ErrMalformed},
			fixture{scheme + "/commit/moved-gpgsig", typ, moveGpgsigFirst(t, good), opts, "E", ErrMalformed},
			fixture{scheme + "/commit/extra-header-after-signature", typ, extraHeaderAfterSig(t, good), opts, "B", ErrBadSignature},
		)
	} else {
		fs = append(fs, fixture{scheme + "/tag/duplicated-tag-header", typ,
			bytes.Replace(good, []byte("\ntag "), []byte("\ntag v0\ntag "), 1), opts, "E", ErrMalformed})
	}
	return fs
}

func mustParse(t *testing.T, typ string, raw []byte) *Object {
	t.Helper()
	o, err := ParseObject(raw, typ, "")
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func openpgpFixtures(t *testing.T) []fixture {
	signAt := fixtureT0.Add(time.Hour)
	alice := pgpKey(t, "Alice", fixtureT0, 0)
	mallory := pgpKey(t, "Mallory", fixtureT0, 0)
	shortLived := pgpKey(t, "Shorty", fixtureT0, 24*time.Hour)
	revoked := pgpKey(t, "Revoked", fixtureT0, 0)
	ring := publicRing(t, alice, shortLived)
	trusted := []string{fpr(alice.PrimaryKey.Fingerprint), fpr(shortLived.PrimaryKey.Fingerprint), fpr(revoked.PrimaryKey.Fingerprint)}
	now := fixtureT0.AddDate(0, 1, 0)
	opts := &Options{Now: now, Keyring: ring, TrustedFingerprints: trusted}
	var fs []fixture
	for _, typ := range []string{"commit", "tag"} {
		body := unsignedCommit(signAt, "fixture message")
		if typ == "tag" {
			body = unsignedTag(signAt, "v1.0.0 fixture message")
		}
		good := signObject(typ, body, pgpSigner(t, alice, signAt, 0))
		fs = append(fs, fixture{"openpgp/" + typ + "/good", typ, good, opts, "G", nil})
		fs = append(fs, fixture{"openpgp/" + typ + "/untrusted", typ, good, &Options{Now: now, Keyring: ring}, "U", ErrUntrusted})
		fs = append(fs, commonVariants(t, "openpgp", typ, good, opts)...)
		fs = append(fs, fixture{"openpgp/" + typ + "/wrong-key", typ, signObject(typ, body, pgpSigner(t, mallory, signAt, 0)), opts, "E", ErrUnknownKey})
		fs = append(fs, fixture{"openpgp/" + typ + "/expired-key", typ, signObject(typ, body, pgpSigner(t, shortLived, signAt, 0)), opts, "Y", ErrExpired})
		fs = append(fs, fixture{"openpgp/" + typ + "/expired-signature", typ, signObject(typ, body, pgpSigner(t, alice, signAt, time.Hour)), opts, "X", ErrExpired})
	}
	// Revocation after signing: the signature stays good, the key is revoked now.
	body := unsignedCommit(signAt, "fixture message")
	obj := signObject("commit", body, pgpSigner(t, revoked, signAt, 0))
	if err := revoked.RevokeKey(packet.KeyCompromised, "compromised", &packet.Config{Time: func() time.Time { return signAt.Add(24 * time.Hour) }}); err != nil {
		t.Fatal(err)
	}
	fs = append(fs, fixture{"openpgp/commit/revoked-key", "commit", obj, &Options{Now: now, Keyring: publicRing(t, revoked), TrustedFingerprints: trusted}, "R", ErrRevoked})
	return fs
}

func sshFixtures(t *testing.T) []fixture {
	signAt := fixtureT0.Add(time.Hour)
	alice, bob, mallory := sshKey(t), sshKey(t), sshKey(t)
	as, err := ParseAllowedSigners([]byte(fmt.Sprintf(
		"# fixture signers\n\"Alice Example\" namespaces=\"git,file\" %s alice\nbob valid-before=\"20250301\" %s\n",
		authorizedLine(alice.PublicKey()), authorizedLine(bob.PublicKey()))))
	if err != nil {
		t.Fatal(err)
	}
	opts := &Options{Now: fixtureT0.AddDate(1, 0, 0), AllowedSigners: as}
	var fs []fixture
	for _, typ := range []string{"commit", "tag"} {
		body := unsignedCommit(signAt, "fixture message")
		if typ == "tag" {
			body = unsignedTag(signAt, "v1.0.0 fixture message")
		}
		good := signObject(typ, body, sshSigner(t, alice, "git"))
		fs = append(fs, fixture{"ssh/" + typ + "/good", typ, good, opts, "G", nil})
		fs = append(fs, commonVariants(t, "ssh", typ, good, opts)...)
		fs = append(fs,
			fixture{"ssh/" + typ + "/wrong-key", typ, signObject(typ, body, sshSigner(t, mallory, "git")), opts, "U", ErrUnknownKey},
			fixture{"ssh/" + typ + "/wrong-namespace", typ, signObject(typ, body, sshSigner(t, alice, "file")), opts, "B", ErrBadSignature},
			// bob's line is valid before 2025-03-01 00:00Z; the signer time is 13:00 that day.
			fixture{"ssh/" + typ + "/outside-valid-before", typ, signObject(typ, body, sshSigner(t, bob, "git")), opts, "U", ErrExpired},
		)
	}
	return fs
}

func x509Fixtures(t *testing.T) []fixture {
	now := time.Now()
	signAt := fixtureT0.Add(time.Hour)
	ca, other := newTestCA(t, "Fixture CA"), newTestCA(t, "Other CA")
	leaf, key := ca.leaf(t, "alice@example.com", now.Add(-time.Hour), now.Add(time.Hour))
	oleaf, okey := other.leaf(t, "mallory@example.com", now.Add(-time.Hour), now.Add(time.Hour))
	eleaf, ekey := ca.leaf(t, "old@example.com", now.Add(-48*time.Hour), now.Add(-24*time.Hour))
	opts := &Options{Now: now, CAPool: ca.pool()}
	var fs []fixture
	for _, typ := range []string{"commit", "tag"} {
		body := unsignedCommit(signAt, "fixture message")
		if typ == "tag" {
			body = unsignedTag(signAt, "v1.0.0 fixture message")
		}
		good := signObject(typ, body, cmsSigner(t, leaf, key))
		fs = append(fs, fixture{"x509/" + typ + "/good", typ, good, opts, "G", nil})
		fs = append(fs, fixture{"x509/" + typ + "/no-pool", typ, good, &Options{Now: now}, "U", ErrUnknownCA})
		fs = append(fs, commonVariants(t, "x509", typ, good, opts)...)
		fs = append(fs,
			fixture{"x509/" + typ + "/wrong-ca", typ, signObject(typ, body, cmsSigner(t, oleaf, okey)), opts, "U", ErrUnknownCA},
			fixture{"x509/" + typ + "/expired-certificate", typ, signObject(typ, body, cmsSigner(t, eleaf, ekey)), opts, "Y", ErrExpired},
		)
	}
	return fs
}

// TestGeneratedFixtures signs objects with throwaway keys made here and
// checks that the good ones verify and every corrupted variant fails with
// its sentinel error and git's letter.
func TestGeneratedFixtures(t *testing.T) {
	var all []fixture
	all = append(all, openpgpFixtures(t)...)
	all = append(all, sshFixtures(t)...)
	all = append(all, x509Fixtures(t)...)
	for _, f := range all {
		t.Run(f.name, func(t *testing.T) {
			r, err := VerifyObject(f.raw, f.typ, f.opts)
			if r.Letter != f.letter {
				t.Errorf("letter %s, want %s (err %v)", r.Letter, f.letter, err)
			}
			if f.want == nil {
				if err != nil {
					t.Fatalf("good object failed: %v", err)
				}
				return
			}
			if !errors.Is(err, f.want) {
				t.Fatalf("error %v, want %v", err, f.want)
			}
			var ve *Error
			if !errors.As(err, &ve) || ve.Object == "" || ve.Object != ObjectID(f.typ, f.raw) {
				t.Fatalf("error %#v does not name the object %s", err, ObjectID(f.typ, f.raw))
			}
			// Each failure carries exactly one sentinel.
			n := 0
			for _, s := range []error{ErrUnsigned, ErrUnknownKey, ErrUnknownCA, ErrBadSignature, ErrExpired, ErrRevoked, ErrUntrusted, ErrMalformed} {
				if errors.Is(err, s) {
					n++
				}
			}
			if n != 1 {
				t.Errorf("error %v matches %d sentinels, want 1", err, n)
			}
		})
	}
}
