package verify_test

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"

	"github.com/evidence-ledger/ledger/verify"
	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"
)

// sshSignedCommit builds a commit signed with a throwaway SSH key, the way
// git inserts the signature (a gpgsig header with continuation lines).
func sshSignedCommit(signer ssh.Signer, msg string) []byte {
	body := "tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n" +
		"author A <a@example.com> 1735689600 +0000\ncommitter A <a@example.com> 1735689600 +0000\n\n" + msg + "\n"
	sig, _ := sshsig.Sign(strings.NewReader(body), signer, sshsig.HashSHA512, "git")
	armoured := strings.TrimSpace(string(sshsig.Armor(sig)))
	header := "gpgsig " + strings.ReplaceAll(armoured, "\n", "\n ") + "\n"
	i := strings.Index(body, "\n\n")
	return []byte(body[:i+1] + header + body[i+1:])
}

func ExampleVerifyObject() {
	seed := bytes.Repeat([]byte{7}, ed25519.SeedSize) // a fixed throwaway key
	signer, _ := ssh.NewSignerFromKey(ed25519.NewKeyFromSeed(seed))
	signers, _ := verify.ParseAllowedSigners([]byte("release-bot " + string(ssh.MarshalAuthorizedKey(signer.PublicKey()))))

	commit := sshSignedCommit(signer, "release 1.0")
	r, err := verify.VerifyObject(commit, "commit", &verify.Options{AllowedSigners: signers})
	fmt.Println(r.Letter, r.Scheme, r.Signer, err)

	tampered := bytes.Replace(commit, []byte("release 1.0"), []byte("release 6.6"), 1)
	r, err = verify.VerifyObject(tampered, "commit", &verify.Options{AllowedSigners: signers})
	fmt.Println(r.Letter, errors.Is(err, verify.ErrBadSignature))

	var ve *verify.Error
	if errors.As(err, &ve) {
		fmt.Println(ve.Object == r.Object, ve.Key == r.Key)
	}
	// Output:
	// G ssh release-bot <nil>
	// B true
	// true true
}

func ExampleParseAllowedSigners() {
	as, err := verify.ParseAllowedSigners([]byte(`# git's gpg.ssh.allowedSignersFile
"Lorenz Leutgeb" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFhK7CqgIIbSthoNn8ea32krOnMzC807Z+PpBkR2YOVj
ops@example.com namespaces="git",valid-before="20270101Z" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIL460KIEccS4881p7PPpiiQBsxF+H5tgC6De6crw9rbU
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range as.Entries {
		fmt.Println(e.Line, e.Principals, e.Namespaces, e.ValidBefore.Format("2006-01-02"))
	}
	// Output:
	// 2 [Lorenz Leutgeb] [] 0001-01-01
	// 3 [ops@example.com] [git] 2027-01-01
}

func ExampleParsePolicy() {
	p, err := verify.ParsePolicy([]byte(`version: 1
rules:
  - repositories: ["github.com/acme/*"]
    refs: ["refs/tags/v*"]
    schemes: [x509]
    x509:
      trusted_root: trusted_root.json
      identities:
        - san: "*@acme.example"
          issuer: https://accounts.google.com
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Match("github.com/acme/runtime", "refs/tags/v1.2.0") != nil)
	fmt.Println(p.Match("github.com/acme/runtime", "refs/heads/main") != nil)

	_, err = verify.ParsePolicy([]byte("version: 1\nrulez: []\n"))
	fmt.Println(errors.Is(err, verify.ErrMalformed))
	// Output:
	// true
	// false
	// true
}
