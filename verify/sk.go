package verify

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/big"

	"golang.org/x/crypto/ssh"
)

// FIDO (security key) flag bits of an SSH sk signature (OpenSSH
// PROTOCOL.u2f, sk-api.h).
const (
	SKUserPresence     = 0x01 // UP: the user touched the key
	SKUserVerification = 0x04 // UV: the key verified the user (PIN, biometric)
)

// SKSignature describes the FIDO fields of a sk-ecdsa-sha2-nistp256@openssh.com
// or sk-ssh-ed25519@openssh.com signature (OpenSSH PROTOCOL.u2f, "SSH U2F
// Signatures"): the key's application string, the authenticator's flags
// byte and its signature counter.
type SKSignature struct {
	Application      string `json:"application"`
	Flags            byte   `json:"flags"`
	Counter          uint32 `json:"counter"`
	UserPresent      bool   `json:"user_present"`
	UserVerification bool   `json:"user_verified"`
}

// skKey verifies sk signatures as OpenSSH's sshkey_verify does
// (ssh-ed25519-sk.c, ssh-ecdsa-sk.c): the flags are reported, never judged,
// so a signature without user presence verifies, as with ssh-keygen -Y
// verify. (golang.org/x/crypto's sk key types refuse it.) The key it wraps
// keeps its wire form, so fingerprints and comparisons are unchanged.
type skKey struct {
	ssh.PublicKey               // the key as signed: an sk key or a certificate of one
	sk            ssh.PublicKey // the sk key itself
	last          *SKSignature  // the fields of the last verified signature
}

// skAware returns pub wrapped so that sk signatures verify without a flag
// policy; other keys are returned as they are.
func skAware(pub ssh.PublicKey) ssh.PublicKey {
	inner := pub
	if c, ok := pub.(*ssh.Certificate); ok {
		inner = c.Key
	}
	switch inner.Type() {
	case ssh.KeyAlgoSKED25519, ssh.KeyAlgoSKECDSA256:
		return &skKey{PublicKey: pub, sk: inner}
	}
	return pub
}

func (k *skKey) Verify(data []byte, sig *ssh.Signature) error {
	if sig.Format != k.sk.Type() {
		return fmt.Errorf("ssh: signature type %s for key type %s", sig.Format, k.sk.Type())
	}
	var fields struct {
		Flags   byte
		Counter uint32
	}
	// The flags byte and counter follow the signature blob; nothing may
	// follow them (SSH_ERR_UNEXPECTED_TRAILING_DATA in OpenSSH).
	if len(sig.Rest) != 5 {
		return fmt.Errorf("ssh: sk signature has %d bytes after the signature, want 5 (flags, counter)", len(sig.Rest))
	}
	fields.Flags, fields.Counter = sig.Rest[0], binary.BigEndian.Uint32(sig.Rest[1:])
	app, verify, err := parseSKKey(k.sk)
	if err != nil {
		return err
	}
	appHash := sha256.Sum256([]byte(app))
	dataHash := sha256.Sum256(data)
	msg := make([]byte, 0, 32+1+4+32)
	msg = append(msg, appHash[:]...)
	msg = append(msg, fields.Flags)
	msg = binary.BigEndian.AppendUint32(msg, fields.Counter)
	msg = append(msg, dataHash[:]...)
	if err := verify(msg, sig.Blob); err != nil {
		return err
	}
	k.last = &SKSignature{Application: app, Flags: fields.Flags, Counter: fields.Counter,
		UserPresent: fields.Flags&SKUserPresence != 0, UserVerification: fields.Flags&SKUserVerification != 0}
	return nil
}

// parseSKKey reads an sk public key's wire form (PROTOCOL.u2f) and returns
// its application and a verifier of the signature blob over msg.
func parseSKKey(pub ssh.PublicKey) (string, func(msg, blob []byte) error, error) {
	switch pub.Type() {
	case ssh.KeyAlgoSKED25519:
		var w struct {
			Name        string
			Key         []byte
			Application string
		}
		if err := ssh.Unmarshal(pub.Marshal(), &w); err != nil || len(w.Key) != ed25519.PublicKeySize {
			return "", nil, fmt.Errorf("ssh: bad sk-ssh-ed25519 key")
		}
		return w.Application, func(msg, blob []byte) error {
			if len(blob) != ed25519.SignatureSize || !ed25519.Verify(ed25519.PublicKey(w.Key), msg, blob) {
				return fmt.Errorf("ssh: sk-ssh-ed25519 signature did not verify")
			}
			return nil
		}, nil
	case ssh.KeyAlgoSKECDSA256:
		var w struct {
			Name        string
			Curve       string
			Q           []byte
			Application string
		}
		if err := ssh.Unmarshal(pub.Marshal(), &w); err != nil || w.Curve != "nistp256" {
			return "", nil, fmt.Errorf("ssh: bad sk-ecdsa-sha2-nistp256 key")
		}
		key, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), w.Q)
		if err != nil {
			return "", nil, fmt.Errorf("ssh: bad sk-ecdsa-sha2-nistp256 point: %w", err)
		}
		return w.Application, func(msg, blob []byte) error {
			var rs struct {
				R, S *big.Int
			}
			if err := ssh.Unmarshal(blob, &rs); err != nil {
				return fmt.Errorf("ssh: sk-ecdsa signature blob: %w", err)
			}
			d := sha256.Sum256(msg)
			if !ecdsa.Verify(key, d[:], rs.R, rs.S) {
				return fmt.Errorf("ssh: sk-ecdsa-sha2-nistp256 signature did not verify")
			}
			return nil
		}, nil
	}
	return "", nil, fmt.Errorf("ssh: %s is not an sk key", pub.Type())
}
