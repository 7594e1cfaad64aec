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
// parse_gpg_output): GOODSIG G/U by validity (a trusted key, or one a
// trusted key or introducer certified), EXPKEYSIG Y, EXPSIG X, REVKEYSIG
// R, ERRSIG (no public key) E, BADSIG B.
func verifyOpenPGP(o *Object, opts *Options, r *Result) *Error {
	fail := func(v ledger.Verdict, letter string, e *Error) *Error {
		r.Verdict, r.Letter = v, letter
		return e
	}
	sig, body, perr := readDetachedSignature(o.Signature)
	if perr != nil {
		return fail(ledger.VerdictError, "E", perr)
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
	ent, verr := verifyDetached(opts.Keyring, o.Payload, body, sig, now)
	if ent == nil {
		v, letter, e := unverified(verr)
		return fail(v, letter, e)
	}
	identifySigner(r, opts.Keyring, sig, ent)
	if verr == nil && revokedAnyTime(opts.Keyring, sig) {
		// gpg applies a key revocation whatever its date (go-crypto only
		// from its creation on): a key revoked later reads R at a past
		// verification time too.
		verr = pgperrors.ErrKeyRevoked
	}
	if verr != nil {
		v, letter, e := goodButInvalid(verr, opts.Keyring, sig, now)
		return fail(v, letter, e)
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

// readDetachedSignature de-armours a detached signature and reads its
// first packet.
func readDetachedSignature(armoured []byte) (*packet.Signature, []byte, *Error) {
	blk, err := armor.Decode(bytes.NewReader(armoured))
	if err != nil {
		return nil, nil, wrapErr(ErrMalformed, err, "openpgp armour")
	}
	body, err := io.ReadAll(blk.Body)
	if err != nil {
		return nil, nil, wrapErr(ErrMalformed, err, "openpgp armour")
	}
	if blk.Type != openpgp.SignatureType {
		return nil, nil, newErr(ErrMalformed, "armour type %q is not a detached signature", blk.Type)
	}
	p, err := packet.NewReader(bytes.NewReader(body)).Next()
	if err != nil {
		return nil, nil, wrapErr(ErrMalformed, err, "openpgp signature packet")
	}
	sig, ok := p.(*packet.Signature)
	if !ok {
		return nil, nil, newErr(ErrMalformed, "first packet is not a signature")
	}
	return sig, body, nil
}

// verifyDetached runs go-crypto's check at now. go-crypto calls a
// signature "expired" when it, or the key's self-signature or subkey
// binding, was made after the verification time (a key refreshed later, a
// clock a second ahead); gpg, asked at that time, reports the signature
// good, so such a signature is judged at the latest of those creation
// times instead.
func verifyDetached(ring openpgp.EntityList, payload, body []byte, sig *packet.Signature, now time.Time) (*openpgp.Entity, error) {
	at := now
	_, ent, verr := openpgp.VerifyDetachedSignature(ring, bytes.NewReader(payload), bytes.NewReader(body), &packet.Config{Time: func() time.Time { return at }})
	if errors.Is(verr, pgperrors.ErrSignatureExpired) && !sigLifetimeOver(sig, now) {
		if later := latestCreation(ring.KeysById(*sig.IssuerKeyId), sig); later.After(now) {
			at = later
			_, ent, verr = openpgp.VerifyDetachedSignature(ring, bytes.NewReader(payload), bytes.NewReader(body), &packet.Config{Time: func() time.Time { return at }})
		}
	}
	return ent, verr
}

// unverified maps a failed check (no entity) to a verdict, letter and error.
func unverified(verr error) (ledger.Verdict, string, *Error) {
	if errors.Is(verr, pgperrors.ErrUnknownIssuer) {
		// The key exists but not with signing capability.
		return ledger.VerdictUnknownKey, "E", wrapErr(ErrUnknownKey, verr, "no signing key for the signature")
	}
	var se pgperrors.StructuralError
	var ue pgperrors.UnsupportedError
	if errors.As(verr, &se) || errors.As(verr, &ue) {
		return ledger.VerdictError, "E", wrapErr(ErrMalformed, verr, "openpgp signature")
	}
	return ledger.VerdictBad, "B", wrapErr(ErrBadSignature, verr, "openpgp")
}

// goodButInvalid maps a cryptographically good signature whose key or
// signature is not valid now to gpg's status.
func goodButInvalid(verr error, ring openpgp.EntityList, sig *packet.Signature, now time.Time) (ledger.Verdict, string, *Error) {
	switch {
	case errors.Is(verr, pgperrors.ErrKeyRevoked) && signingKeyExpired(ring, sig, now):
		// gpg reports EXPKEYSIG before REVKEYSIG for a key both expired
		// and revoked (sig-check.c checks expiry first).
		return ledger.VerdictExpiredKey, "Y", wrapErr(ErrExpired, verr, "good signature by a key expired (and revoked) at %s", now.UTC().Format(time.RFC3339))
	case errors.Is(verr, pgperrors.ErrKeyRevoked):
		return ledger.VerdictRevoked, "R", wrapErr(ErrRevoked, verr, "good signature by a revoked key")
	case errors.Is(verr, pgperrors.ErrKeyExpired):
		return ledger.VerdictExpiredKey, "Y", wrapErr(ErrExpired, verr, "good signature by a key expired at %s", now.UTC().Format(time.RFC3339))
	case errors.Is(verr, pgperrors.ErrSignatureExpired):
		return ledger.VerdictExpiredSignature, "X", wrapErr(ErrExpired, verr, "good but expired signature")
	}
	return ledger.VerdictBad, "B", wrapErr(ErrBadSignature, verr, "openpgp")
}

// identifySigner fills the signing key, primary key and user id of a
// signature that verified.
func identifySigner(r *Result, ring openpgp.EntityList, sig *packet.Signature, ent *openpgp.Entity) {
	r.PrimaryKey = fpr(ent.PrimaryKey.Fingerprint)
	if r.Key == "" || len(r.Key) == 16 {
		for _, k := range ring.KeysById(*sig.IssuerKeyId) {
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

// revokedAnyTime reports whether the signing key (subkey or its primary)
// carries a revocation, of any date.
func revokedAnyTime(ring openpgp.EntityList, sig *packet.Signature) bool {
	for _, k := range ring.KeysById(*sig.IssuerKeyId) {
		if k.Entity == nil {
			continue
		}
		if len(k.Entity.Revocations) > 0 {
			return true
		}
		for _, sk := range k.Entity.Subkeys {
			if sk.PublicKey == k.PublicKey && len(sk.Revocations) > 0 {
				return true
			}
		}
	}
	return false
}
