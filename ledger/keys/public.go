package keys

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// Public returns a Key of the verifier key vkey alone
// ("name+hash+base64(alg||pub)", a ledger.pub line): its Signer has the
// key's name and hash but refuses to sign, so a read-only store and the
// audit can run with no private key. Errors name the problem, never the
// key text.
func Public(vkey string) (Key, error) {
	vkey = strings.TrimSpace(vkey)
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return Key{}, fmt.Errorf("verifier key: %w", err)
	}
	return Key{Signer: publicSigner{v}, VerifierKey: vkey}, nil
}

// publicSigner is a note.Signer that cannot sign.
type publicSigner struct{ v note.Verifier }

func (p publicSigner) Name() string    { return p.v.Name() }
func (p publicSigner) KeyHash() uint32 { return p.v.KeyHash() }
func (p publicSigner) Sign(msg []byte) ([]byte, error) {
	return nil, errors.New("public key only: cannot sign")
}
