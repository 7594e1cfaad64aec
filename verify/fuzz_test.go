package verify

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// FuzzParseObject checks the header parser never panics and that what it
// accepts is self-consistent: the payload is the object minus the
// signature, re-parsing the payload finds no signature, and the id is the
// hash of the bytes.
func FuzzParseObject(f *testing.F) {
	f.Add(unsignedCommit(fixtureT0, "hello"), false)
	f.Add(insertGpgsig(unsignedCommit(fixtureT0, "hello"), []byte("-----BEGIN SSH SIGNATURE-----\nAAAA\n-----END SSH SIGNATURE-----\n")), false)
	f.Add(append(unsignedTag(fixtureT0, "v1"), "-----BEGIN PGP SIGNATURE-----\nxx\n-----END PGP SIGNATURE-----\n"...), true)
	f.Add(bytes.Replace(insertGpgsig(unsignedCommit(fixtureT0, "hello"), []byte("-----BEGIN SSH SIGNATURE-----\nAAAA\n-----END SSH SIGNATURE-----\n")), []byte("\ngpgsig "), []byte("\ngpgsig-sha256 "), 1), false)
	f.Add([]byte("tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\ntree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n\n"), false)
	f.Fuzz(func(t *testing.T, raw []byte, isTag bool) {
		typ := "commit"
		if isTag {
			typ = "tag"
		}
		o, err := ParseObject(raw, typ, "")
		if err != nil {
			return
		}
		if o.ID != ObjectID(typ, raw) || !bytes.Equal(o.Raw, raw) {
			t.Fatal("id or raw bytes differ")
		}
		if len(o.Payload) > len(raw) {
			t.Fatal("payload longer than the object")
		}
		if o.Signature == nil {
			if !bytes.Equal(o.Payload, raw) {
				t.Fatal("unsigned object with a payload different from its bytes")
			}
			return
		}
		if o.Format == "" {
			t.Fatal("signature without a format")
		}
		if typ == "tag" && !bytes.Equal(append(bytes.Clone(o.Payload), o.Signature...), raw) {
			t.Fatal("tag payload + signature != object")
		}
		p, err := ParseObject(o.Payload, typ, "")
		if err != nil {
			if typ == "commit" {
				t.Fatalf("payload of an accepted commit does not parse: %v", err)
			}
			return
		}
		if typ == "commit" && p.Signature != nil {
			t.Fatal("payload still carries a gpgsig header")
		}
	})
}

// FuzzParseAllowedSigners checks the allowed-signers parser never panics
// and that every accepted entry can be found by its own key.
func FuzzParseAllowedSigners(f *testing.F) {
	key := "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIL460KIEccS4881p7PPpiiQBsxF+H5tgC6De6crw9rbU"
	f.Add([]byte("cloudhead " + key + "\n"))
	f.Add([]byte("\"Lorenz Leutgeb\" " + key + " comment\n# c\n\n"))
	f.Add([]byte("a@b,c@d namespaces=\"git,file\",valid-after=\"20240101\",valid-before=\"20250101Z\" " + key + "\n"))
	f.Add([]byte("*@example.com cert-authority " + key + "\n"))
	f.Add([]byte("x valid-before=2024 " + key + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		as, err := ParseAllowedSigners(data)
		if err != nil {
			return
		}
		for _, e := range as.Entries {
			if e.Key == nil || len(e.Principals) == 0 || e.Line < 1 {
				t.Fatalf("incomplete entry %+v", e)
			}
			for _, p := range e.Principals {
				if p == "" {
					t.Fatal("empty principal")
				}
			}
			if e.CertAuthority || len(e.Namespaces) > 0 {
				continue
			}
			at := e.ValidAfter
			if at.IsZero() {
				at = e.ValidBefore
			}
			if at.IsZero() {
				at = time.Unix(1700000000, 0)
			}
			if m, _ := as.FindPrincipals(e.Key, at); m == nil {
				t.Fatalf("entry on line %d not found by its own key at %s", e.Line, at)
			}
		}
	})
}

// FuzzParsePolicy checks the policy parser never panics and that accepted
// policies are valid and digested.
func FuzzParsePolicy(f *testing.F) {
	f.Add([]byte("version: 1\nrules:\n  - repositories: [\"*\"]\n    refs: [\"refs/heads/*\"]\n    schemes: [ssh]\n    ssh:\n      allowed_signers: signers\n"))
	f.Add([]byte("version: 1\nrules:\n  - repositories: [a]\n    refs: [b]\n    schemes: [x509]\n    x509:\n      trusted_root: r.json\n      identities:\n        - san: \"*@x\"\n          issuer: https://i\n"))
	f.Add([]byte("version: 1\nrules: []\nextra: 1\n"))
	f.Add([]byte("version: 2\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParsePolicy(data)
		if err != nil {
			return
		}
		if p.Version != 1 || len(p.Rules) == 0 || !strings.HasPrefix(p.Digest, "sha256:") {
			t.Fatalf("accepted invalid policy %+v", p)
		}
		for _, r := range p.Rules {
			if len(r.Schemes) == 0 || len(r.Refs) == 0 || len(r.Repositories) == 0 {
				t.Fatalf("accepted rule without schemes, refs or repositories")
			}
		}
	})
}

// FuzzParseKeyring checks the gpg --import style keyring reader never
// panics, returns keys or an ErrMalformed error, and that every warning
// names its block without quoting the input.
func FuzzParseKeyring(f *testing.F) {
	e := pgpKey(f, "Fuzz", fixtureT0, 0)
	var bin bytes.Buffer
	if err := e.Serialize(&bin); err != nil {
		f.Fatal(err)
	}
	f.Add(bin.Bytes())
	f.Add(append(bytes.Clone(bin.Bytes()), 0xc2, 0x03, 0x04, 0x20, 0x00))
	f.Add([]byte("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nxjMEZ\n-----END PGP PUBLIC KEY BLOCK-----\n-----BEGIN PGP SIGNATURE-----\n\nAAAA\n-----END PGP SIGNATURE-----\n"))
	f.Add([]byte{0x99, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		el, warns, err := ParseKeyringWarn(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) || len(el) != 0 {
				t.Fatalf("error %v with %d keys", err, len(el))
			}
			return
		}
		if len(el) == 0 {
			t.Fatal("no keys and no error")
		}
		for _, w := range warns {
			if !strings.Contains(w, "block") && !strings.Contains(w, "keyring") {
				t.Fatalf("warning %q names no block", w)
			}
		}
	})
}
