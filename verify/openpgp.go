package verify

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	pgperrors "github.com/ProtonMail/go-crypto/openpgp/errors"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/evidence-ledger/ledger/ledger"
)

func fpr(b []byte) string { return strings.ToUpper(hex.EncodeToString(b)) }

// verifyOpenPGP checks a detached OpenPGP signature over o.Payload and maps
// the outcome to gpg's status as git reads it (gpg-interface.c,
// parse_gpg_output): GOODSIG G/U by ownertrust, EXPKEYSIG Y, EXPSIG X,
// REVKEYSIG R, ERRSIG (no public key) E, BADSIG B.
func verifyOpenPGP(o *Object, opts *Options, r *Result) *Error {
	fail := func(v ledger.Verdict, letter string, e *Error) *Error {
		r.Verdict, r.Letter = v, letter
		return e
	}
	blk, err := armor.Decode(bytes.NewReader(o.Signature))
	if err != nil {
		return fail(ledger.VerdictError, "E", wrapErr(ErrMalformed, err, "openpgp armour"))
	}
	body, err := io.ReadAll(blk.Body)
	if err != nil {
		return fail(ledger.VerdictError, "E", wrapErr(ErrMalformed, err, "openpgp armour"))
	}
	if blk.Type != openpgp.SignatureType {
		return fail(ledger.VerdictError, "E", newErr(ErrMalformed, "armour type %q is not a detached signature", blk.Type))
	}
	p, err := packet.NewReader(bytes.NewReader(body)).Next()
	if err != nil {
		return fail(ledger.VerdictError, "E", wrapErr(ErrMalformed, err, "openpgp signature packet"))
	}
	sig, ok := p.(*packet.Signature)
	if !ok {
		return fail(ledger.VerdictError, "E", newErr(ErrMalformed, "first packet is not a signature"))
	}
	r.SignedAt = sig.CreationTime.UTC()
	if sig.IssuerFingerprint != nil {
		r.Key = fpr(sig.IssuerFingerprint)
	} else if sig.IssuerKeyId != nil {
		r.Key = fmt.Sprintf("%016X", *sig.IssuerKeyId)
	}
	if sig.IssuerKeyId == nil || len(opts.Keyring.KeysById(*sig.IssuerKeyId)) == 0 {
		// Without the key, the signature's two-byte digest prefix (RFC 4880
		// 5.2.3/5.2.4 "left 16 bits of the signed hash value") still tells
		// an altered payload apart: gpg would report ERRSIG (E) here, but
		// a mismatch proves the signature is bad whoever made it.
		if hashTagMismatch(sig, o.Payload) {
			return fail(ledger.VerdictBad, "B", newErr(ErrBadSignature, "digest prefix does not match the payload (signing key not in keyring)"))
		}
		return fail(ledger.VerdictUnknownKey, "E", newErr(ErrUnknownKey, "no public key for the signature"))
	}
	now := opts.now()
	cfg := &packet.Config{Time: func() time.Time { return now }}
	_, ent, verr := openpgp.VerifyDetachedSignature(opts.Keyring, bytes.NewReader(o.Payload), bytes.NewReader(body), cfg)
	if errors.Is(verr, pgperrors.ErrSignatureExpired) && !sigLifetimeOver(sig, now) {
		// go-crypto calls a signature "expired" when it, or the key's
		// self-signature or subkey binding, was made after the
		// verification time (a key refreshed later, a clock a second
		// ahead); gpg, asked at that time, reports the signature good. Judge
		// it at the latest of those creation times instead.
		if at := latestCreation(opts.Keyring.KeysById(*sig.IssuerKeyId), sig); at.After(now) {
			_, ent, verr = openpgp.VerifyDetachedSignature(opts.Keyring, bytes.NewReader(o.Payload), bytes.NewReader(body), &packet.Config{Time: func() time.Time { return at }})
		}
	}
	if ent == nil {
		if errors.Is(verr, pgperrors.ErrUnknownIssuer) {
			// The key exists but not with signing capability.
			return fail(ledger.VerdictUnknownKey, "E", wrapErr(ErrUnknownKey, verr, "no signing key for the signature"))
		}
		var se pgperrors.StructuralError
		var ue pgperrors.UnsupportedError
		if errors.As(verr, &se) || errors.As(verr, &ue) {
			return fail(ledger.VerdictError, "E", wrapErr(ErrMalformed, verr, "openpgp signature"))
		}
		return fail(ledger.VerdictBad, "B", wrapErr(ErrBadSignature, verr, "openpgp"))
	}
	// The crypto check passed; identify the signer.
	r.PrimaryKey = fpr(ent.PrimaryKey.Fingerprint)
	if r.Key == "" || len(r.Key) == 16 {
		for _, k := range opts.Keyring.KeysById(*sig.IssuerKeyId) {
			if k.Entity == ent {
				r.Key = fpr(k.PublicKey.Fingerprint)
			}
		}
	}
	if r.PrimaryKey == r.Key {
		r.PrimaryKey = ""
	}
	if id := ent.PrimaryIdentity(); id != nil {
		r.Signer = id.Name
	}
	switch {
	case verr == nil:
	case errors.Is(verr, pgperrors.ErrKeyRevoked) && signingKeyExpired(opts.Keyring, sig, now):
		// gpg reports EXPKEYSIG before REVKEYSIG for a key both expired
		// and revoked (sig-check.c checks expiry first).
		return fail(ledger.VerdictExpiredKey, "Y", wrapErr(ErrExpired, verr, "good signature by a key expired (and revoked) at %s", now.UTC().Format(time.RFC3339)))
	case errors.Is(verr, pgperrors.ErrKeyRevoked):
		return fail(ledger.VerdictRevoked, "R", wrapErr(ErrRevoked, verr, "good signature by a revoked key"))
	case errors.Is(verr, pgperrors.ErrKeyExpired):
		return fail(ledger.VerdictExpiredKey, "Y", wrapErr(ErrExpired, verr, "good signature by a key expired at %s", now.UTC().Format(time.RFC3339)))
	case errors.Is(verr, pgperrors.ErrSignatureExpired):
		return fail(ledger.VerdictExpiredSignature, "X", wrapErr(ErrExpired, verr, "good but expired signature"))
	default:
		return fail(ledger.VerdictBad, "B", wrapErr(ErrBadSignature, verr, "openpgp"))
	}
	r.Verdict = ledger.VerdictGood
	primary := fpr(ent.PrimaryKey.Fingerprint)
	for _, t := range opts.TrustedFingerprints {
		if n := normFpr(t); n == primary || n == r.Key {
			r.Letter = "G"
			return nil
		}
	}
	// The web of trust: a key certified by a trusted key or an introducer.
	if p := newWOT(opts.Keyring, now, opts.TrustedFingerprints, opts.Introducers).path(ent); p != nil {
		r.Letter, r.CertificationPath = "G", p
		return nil
	}
	r.Letter = "U"
	return newErr(ErrUntrusted, "good signature, key neither trusted nor certified by a trusted key")
}

// hashTagMismatch reports whether a v4 signature's hash tag disagrees with
// the digest of payload and the signature's hashed trailer.
func hashTagMismatch(sig *packet.Signature, payload []byte) bool {
	if sig.Version != 4 || len(sig.HashSuffix) == 0 {
		return false
	}
	h, err := sig.PrepareVerify()
	if err != nil {
		return false
	}
	h.Write(payload)
	h.Write(sig.HashSuffix)
	d := h.Sum(nil)
	return d[0] != sig.HashTag[0] || d[1] != sig.HashTag[1]
}

// sigLifetimeOver reports whether sig's own expiry lies before now.
func sigLifetimeOver(sig *packet.Signature, now time.Time) bool {
	if sig.SigLifetimeSecs == nil || *sig.SigLifetimeSecs == 0 {
		return false
	}
	return now.After(sig.CreationTime.Add(time.Duration(*sig.SigLifetimeSecs) * time.Second))
}

// latestCreation returns the latest creation time among sig and the
// self-signatures and subkey bindings of the entities holding keys.
func latestCreation(keys []openpgp.Key, sig *packet.Signature) time.Time {
	at := sig.CreationTime
	later := func(s *packet.Signature) {
		if s != nil && s.CreationTime.After(at) {
			at = s.CreationTime
		}
	}
	for _, k := range keys {
		if k.Entity == nil {
			continue
		}
		for _, id := range k.Entity.Identities {
			later(id.SelfSignature)
		}
		for _, sk := range k.Entity.Subkeys {
			later(sk.Sig)
		}
	}
	return at
}

// signingKeyExpired reports whether the key that made sig (primary or
// subkey) has expired at now by its self-signature or binding.
func signingKeyExpired(ring openpgp.EntityList, sig *packet.Signature, now time.Time) bool {
	for _, k := range ring.KeysById(*sig.IssuerKeyId) {
		if k.Entity == nil {
			continue
		}
		if id := k.Entity.PrimaryIdentity(); id != nil && id.SelfSignature != nil && k.Entity.PrimaryKey.KeyExpired(id.SelfSignature, now) {
			return true
		}
		if k.SelfSignature != nil && k.PublicKey != k.Entity.PrimaryKey && k.PublicKey.KeyExpired(k.SelfSignature, now) {
			return true
		}
	}
	return false
}
