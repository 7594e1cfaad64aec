package verify

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
)

// LoadKeyring reads OpenPGP public keys from a file, armoured or binary
// (a gpg --export keyring), as ParseKeyring does; warnings about skipped
// blocks are dropped (LoadKeyringWarn returns them). Several files may be
// concatenated by the caller with append.
func LoadKeyring(path string) (openpgp.EntityList, error) {
	el, _, err := LoadKeyringWarn(path)
	return el, err
}

// LoadKeyringWarn is LoadKeyring returning the warnings of
// ParseKeyringWarn. A file that cannot be read is an error.
func LoadKeyringWarn(path string) (openpgp.EntityList, []string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read keyring: %w", err)
	}
	return ParseKeyringWarn(b)
}

// ParseKeyring parses armoured or binary OpenPGP public keys; see
// ParseKeyringWarn.
func ParseKeyring(b []byte) (openpgp.EntityList, error) {
	el, _, err := ParseKeyringWarn(b)
	return el, err
}

// ParseKeyringWarn reads keys the way gpg --import does: every usable key
// (public or secret) of every armoured block in the file, or of the whole
// binary file, in order. What is not a usable key is skipped with a
// warning naming the block (its number and armour type) and the reason:
// a block of another type (a signature, a message), a lone revocation
// certificate or other packets outside a key, a key go-crypto cannot
// read, a block whose armour or checksum is broken. It is an ErrMalformed
// error when nothing usable remains; the error and warnings never quote
// the file's bytes.
func ParseKeyringWarn(b []byte) (openpgp.EntityList, []string, error) {
	var el openpgp.EntityList
	var warns []string
	if !bytes.Contains(b, []byte("-----BEGIN PGP ")) {
		el, warns = readEntities(bytes.NewReader(b), "binary keyring")
	} else {
		for i, chunk := range armourChunks(b) {
			name := fmt.Sprintf("block %d", i+1)
			blk, err := armor.Decode(bytes.NewReader(chunk))
			if err != nil {
				warns = append(warns, fmt.Sprintf("%s: armour unreadable (%v): skipped", name, err))
				continue
			}
			name += " (" + blk.Type + ")"
			if blk.Type != openpgp.PublicKeyType && blk.Type != openpgp.PrivateKeyType {
				warns = append(warns, name+": not a key block: skipped")
				continue
			}
			part, w := readEntities(blk.Body, name)
			el, warns = append(el, part...), append(warns, w...)
		}
	}
	if len(el) == 0 {
		msg := "keyring holds no usable keys"
		if len(warns) > 0 {
			msg += ": " + strings.Join(warns, "; ")
		}
		return nil, warns, newErr(ErrMalformed, "%s", msg)
	}
	return el, warns, nil
}

// armourChunks splits b at each line starting with "-----BEGIN PGP ".
func armourChunks(b []byte) [][]byte {
	var starts []int
	for off := 0; off < len(b); {
		if bytes.HasPrefix(b[off:], []byte("-----BEGIN PGP ")) {
			starts = append(starts, off)
		}
		nl := bytes.IndexByte(b[off:], '\n')
		if nl < 0 {
			break
		}
		off += nl + 1
	}
	out := make([][]byte, len(starts))
	for i, s := range starts {
		end := len(b)
		if i+1 < len(starts) {
			end = starts[i+1]
		}
		out[i] = b[s:end]
	}
	return out
}

// readEntities reads every entity of a packet stream, skipping (with a
// warning) packets that do not begin a key and keys that do not parse, up
// to the next primary key, as gpg --import does.
func readEntities(r io.Reader, name string) (openpgp.EntityList, []string) {
	var el openpgp.EntityList
	var warns []string
	pr := packet.NewReader(r)
	n := 0
	for {
		p, err := pr.Next()
		if err == io.EOF {
			return el, warns
		}
		if err != nil {
			warns = append(warns, fmt.Sprintf("%s: unreadable packet (%v): rest of the block skipped", name, err))
			return el, warns
		}
		if !isPrimaryKey(p) {
			warns = append(warns, fmt.Sprintf("%s: %s outside a key (a lone revocation certificate or signature): skipped", name, packetName(p)))
			continue
		}
		n++
		pr.Unread(p)
		e, err := openpgp.ReadEntity(pr)
		if err != nil {
			warns = append(warns, fmt.Sprintf("%s: key %d unusable (%v): skipped", name, n, err))
			skipToKey(pr)
			continue
		}
		el = append(el, e)
	}
}

func isPrimaryKey(p packet.Packet) bool {
	switch k := p.(type) {
	case *packet.PublicKey:
		return !k.IsSubkey
	case *packet.PrivateKey:
		return !k.IsSubkey
	}
	return false
}

// skipToKey drops packets up to the next primary key, left unread.
func skipToKey(pr *packet.Reader) {
	for {
		p, err := pr.Next()
		if err != nil {
			return
		}
		if isPrimaryKey(p) {
			pr.Unread(p)
			return
		}
	}
}

func packetName(p packet.Packet) string {
	switch s := p.(type) {
	case *packet.Signature:
		switch s.SigType {
		case packet.SigTypeKeyRevocation:
			return "key revocation signature"
		case packet.SigTypeCertificationRevocation:
			return "certification revocation signature"
		}
		return "signature packet"
	case *packet.UserId:
		return "user id packet"
	}
	return fmt.Sprintf("%T packet", p)
}
