package witness

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/note"
)

// algCosignatureV1 is the signature type byte of Ed25519 cosignature/v1
// keys (c2sp.org/tlog-cosignature, "Format").
const algCosignatureV1 = 0x04

// CosignatureVerifierKey returns the vkey ("name+hash+base64(0x04||pub)",
// c2sp.org/signed-note) of an Ed25519 cosignature/v1 cosigner called name
// with public key pub. It errors on an invalid name (empty, or containing a
// space or '+') or a key that is not 32 bytes.
func CosignatureVerifierKey(name string, pub ed25519.PublicKey) (string, error) {
	if !validKeyName(name) {
		return "", errors.New("cosigner name must be non-empty, with no spaces or '+'")
	}
	if len(pub) != ed25519.PublicKeySize {
		return "", fmt.Errorf("cosigner key must be %d bytes, got %d", ed25519.PublicKeySize, len(pub))
	}
	key := append([]byte{algCosignatureV1}, pub...)
	return fmt.Sprintf("%s+%08x+%s", name, keyHash(name, key), base64.StdEncoding.EncodeToString(key)), nil
}

// NewCosignatureVerifier parses a cosignature/v1 vkey (signature type 0x04)
// and returns a note.Verifier of its cosignatures: a signature is
// timestamp (8 bytes, big endian) || Ed25519 signature over
// "cosignature/v1\ntime <timestamp>\n" || the checkpoint text
// (c2sp.org/tlog-cosignature, "Ed25519 signed message"). It errors, naming
// the part, on a malformed vkey, a key id that does not match the name and
// key, or a key of another signature type.
func NewCosignatureVerifier(vkey string) (note.Verifier, error) {
	name, rest, ok1 := strings.Cut(vkey, "+")
	hash16, key64, ok2 := strings.Cut(rest, "+")
	if !ok1 || !ok2 || !validKeyName(name) {
		return nil, errors.New("cosigner vkey: want name+keyid+key")
	}
	hash, err := strconv.ParseUint(hash16, 16, 32)
	if err != nil || len(hash16) != 8 {
		return nil, errors.New("cosigner vkey: key id must be 8 hex digits")
	}
	key, err := base64.StdEncoding.DecodeString(key64)
	if err != nil || len(key) == 0 {
		return nil, errors.New("cosigner vkey: key is not base64")
	}
	if key[0] != algCosignatureV1 {
		return nil, fmt.Errorf("cosigner vkey: signature type 0x%02x is not cosignature/v1 (0x04)", key[0])
	}
	if len(key) != 1+ed25519.PublicKeySize {
		return nil, errors.New("cosigner vkey: Ed25519 key must be 32 bytes")
	}
	if uint32(hash) != keyHash(name, key) {
		return nil, errors.New("cosigner vkey: key id does not match the name and key")
	}
	return &cosigVerifier{name: name, hash: uint32(hash), pub: ed25519.PublicKey(key[1:])}, nil
}

type cosigVerifier struct {
	name string
	hash uint32
	pub  ed25519.PublicKey
}

func (v *cosigVerifier) Name() string    { return v.name }
func (v *cosigVerifier) KeyHash() uint32 { return v.hash }

func (v *cosigVerifier) Verify(msg, sig []byte) bool {
	if len(sig) != 8+ed25519.SignatureSize {
		return false
	}
	t := binary.BigEndian.Uint64(sig)
	if t > 1<<63-1 {
		return false
	}
	m := cosignedMessage(t, msg)
	return ed25519.Verify(v.pub, m, sig[8:])
}

// cosignedMessage is the message a cosignature/v1 signs over checkpoint
// text msg at POSIX time t.
func cosignedMessage(t uint64, msg []byte) []byte {
	m := make([]byte, 0, 40+len(msg))
	m = append(m, "cosignature/v1\ntime "...)
	m = strconv.AppendUint(m, t, 10)
	m = append(m, '\n')
	return append(m, msg...)
}

// CosignatureTime returns the time a cosignature/v1 signature says it was
// made: the first 8 bytes after the 4-byte key id of the base64 signature.
func CosignatureTime(sig note.Signature) (time.Time, error) {
	b, err := base64.StdEncoding.DecodeString(sig.Base64)
	if err != nil || len(b) != 4+8+ed25519.SignatureSize {
		return time.Time{}, errors.New("malformed cosignature")
	}
	t := binary.BigEndian.Uint64(b[4:])
	if t > 1<<63-1 {
		return time.Time{}, errors.New("malformed cosignature: timestamp out of range")
	}
	return time.Unix(int64(t), 0).UTC(), nil
}

// keyHash is the signed-note key id: SHA-256(name || "\n" || key)[:4].
func keyHash(name string, key []byte) uint32 {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte("\n"))
	h.Write(key)
	return binary.BigEndian.Uint32(h.Sum(nil))
}

// validKeyName reports whether name is a valid signed-note key name:
// non-empty UTF-8 with no Unicode space and no '+'.
func validKeyName(name string) bool {
	return name != "" && utf8.ValidString(name) && strings.IndexFunc(name, unicode.IsSpace) < 0 && !strings.Contains(name, "+")
}
