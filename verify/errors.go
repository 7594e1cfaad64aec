package verify

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every failure returned by this package wraps exactly one
// of them (through an *Error); test with errors.Is.
var (
	// ErrUnsigned: the object carries no signature git recognises (git's N).
	ErrUnsigned = errors.New("object is not signed")
	// ErrUnknownKey: the signing key is not in the keyring (OpenPGP, git's
	// E) or not in the allowed-signers file (SSH, git's U).
	ErrUnknownKey = errors.New("signing key is unknown")
	// ErrUnknownCA: an X.509 signature is cryptographically good but its
	// certificate does not chain to a configured root (no Sigstore trusted
	// root or CA pool, or none that issued it).
	ErrUnknownCA = errors.New("certificate authority is unknown")
	// ErrBadSignature: the signature does not verify over the payload (git's B).
	ErrBadSignature = errors.New("bad signature")
	// ErrExpired: a good signature by a key that has expired (git's Y), a
	// signature that has expired (X), or an SSH key used outside its
	// allowed-signers validity window.
	ErrExpired = errors.New("key or signature expired")
	// ErrRevoked: a good signature by a revoked key (git's R).
	ErrRevoked = errors.New("key revoked")
	// ErrUntrusted: the signature is good but the signer is not trusted,
	// either by the trusted-key set (git's U for OpenPGP) or by the policy.
	ErrUntrusted = errors.New("signer not trusted")
	// ErrMalformed: the object or its signature block cannot be parsed, or
	// the object is ambiguous (a duplicated singleton header, a bad id).
	ErrMalformed = errors.New("malformed object or signature")
	// ErrUnsupportedObjectFormat: the repository uses an object format other
	// than SHA-1 (for example extensions.objectFormat = sha256).
	ErrUnsupportedObjectFormat = errors.New("unsupported object format")
	// ErrNoPolicy: no rule of the trust policy covers the repository and ref.
	ErrNoPolicy = errors.New("no policy rule covers this repository and ref")
)

// Error is the structured error of this package. It names the object and,
// where known, the signing key, and wraps one sentinel error (Kind) and an
// optional cause. Use errors.As to read it and errors.Is to test the Kind.
type Error struct {
	Object string // hex object id, "" when unknown
	Key    string // key fingerprint or id, "" when unknown
	Scheme string // "openpgp", "ssh", "x509" or ""
	Kind   error  // one of the sentinel errors above
	Detail string // human-readable reason
	Err    error  // underlying library error, may be nil
}

func (e *Error) Error() string {
	s := e.Kind.Error()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	if e.Key != "" {
		s += " (key " + e.Key + ")"
	}
	if e.Object != "" {
		s = "object " + e.Object + ": " + s
	}
	return s
}

// Unwrap returns the sentinel and the cause so that errors.Is matches both.
func (e *Error) Unwrap() []error {
	if e.Err != nil {
		return []error{e.Kind, e.Err}
	}
	return []error{e.Kind}
}

func newErr(kind error, format string, args ...any) *Error {
	return &Error{Kind: kind, Detail: fmt.Sprintf(format, args...)}
}

func wrapErr(kind error, cause error, format string, args ...any) *Error {
	return &Error{Kind: kind, Err: cause, Detail: fmt.Sprintf(format, args...)}
}
