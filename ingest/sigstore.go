package ingest

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/fulcio/certificate"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/tlog"
	"github.com/sigstore/sigstore-go/pkg/verify"
	"github.com/sigstore/sigstore/pkg/signature"
)

// MediaSigstoreBundle is the Sigstore bundle media type of v0.3; v0.1 and
// v0.2 bundles name themselves "application/vnd.dev.sigstore.bundle+json;
// version=0.x" (github.com/sigstore/protobuf-specs, bundle.proto). Decode
// accepts both spellings.
const (
	MediaSigstoreBundle = "application/vnd.dev.sigstore.bundle.v0.3+json"
	FormatSigstore      = "sigstore-bundle"
)

func init() { formats[FormatSigstore] = MediaSigstoreBundle }

// decodeBundle verifies a Sigstore bundle offline with sigstore-go, as
// the lane's policy (SigstorePolicy) allows:
//   - the signer: a Fulcio certificate chaining to the trusted root's
//     authorities, with signed certificate timestamps from the root's CT
//     logs, whose identity matches the policy; or, where the policy names
//     a public key, a publicKey bundle whose signature verifies with that
//     key;
//   - the signing time: a transparency-log entry (inclusion proof or
//     promise) and an observer timestamp; or, where the policy sets
//     TimestampOnly and the bundle has no log entry, an RFC 3161 timestamp
//     from a timestamp authority of the trusted root;
//   - the signature over the DSSE envelope or the message digest.
//
// The signer becomes the runner identity; a DSSE payload must be an
// in-toto Statement (checked after the signature) and is mapped as
// decodeStatement does. A message-signature bundle signs one artifact:
// exactly one --artifact pin must give its digest, and the run is one
// case, "sigstore message signature", passed. A body of several JSON
// values (a .jsonl of bundles) is refused: one bundle per request.
func decodeBundle(ctx context.Context, body []byte, p Params) (*Run, error) {
	pol, err := p.sigstorePolicy()
	if err != nil {
		return nil, err
	}
	if n := jsonValues(body); n > 1 {
		return nil, ledger.FieldError("bundle", "send one bundle per request (this body has %d JSON lines)", n)
	}
	if err := checkChain(body); err != nil {
		return nil, err
	}
	var b bundle.Bundle
	if err := b.UnmarshalJSON(body); err != nil {
		unwrapped, field := unwrapBase64(body)
		if field == "" || b.UnmarshalJSON(unwrapped) != nil {
			return nil, ledger.FieldError("bundle", "not a valid Sigstore bundle: %s", clip(err.Error()))
		}
		body = unwrapped
	}
	vc, err := b.VerificationContent()
	if err != nil {
		return nil, ledger.FieldError("bundle.verificationMaterial", "no certificate or public key: %s", clip(err.Error()))
	}
	byKey := vc.Certificate() == nil
	refused := func(field, msg string) error {
		return &ledger.Error{Code: ledger.CodeUnauthorized, Field: field, Message: msg}
	}
	switch {
	case byKey && pol.PublicKey == nil:
		return nil, refused("bundle.verificationMaterial", "signed by a public key, not a Fulcio certificate: the lane's policy allows no public key (it names a certificate identity; a rule's public_key names a key)")
	case !byKey && pol.PublicKey != nil:
		return nil, refused("bundle.verificationMaterial", fmt.Sprintf("signed by a Fulcio certificate: the lane's policy allows only the public key %q", pol.KeyName))
	}
	content, err := b.SignatureContent()
	if err != nil {
		return nil, ledger.FieldError("bundle", "no signature content: %s", clip(err.Error()))
	}
	var artifact verify.ArtifactPolicyOption
	var env *dsse.Envelope
	if ec := content.EnvelopeContent(); ec != nil {
		env = ec.RawEnvelope()
		artifact = verify.WithoutArtifactUnsafe() // the statement's subjects become the pins
	} else if ms := content.MessageSignatureContent(); ms != nil {
		if len(p.Artifacts) != 1 {
			return nil, ledger.FieldError("artifact", "a message-signature bundle signs one artifact: give exactly one --artifact NAME=sha256:HEX")
		}
		for _, d := range p.Artifacts {
			sum, _ := hex.DecodeString(strings.TrimPrefix(d, "sha256:"))
			artifact = verify.WithArtifactDigest("sha256", sum)
		}
	}
	entries, _ := b.TlogEntries()
	var opts []verify.VerifierOption
	if len(entries) > 0 {
		opts = append(opts, verify.WithTransparencyLog(1), verify.WithObserverTimestamps(1))
	} else {
		stamps, _ := b.Timestamps()
		switch {
		case !pol.TimestampOnly:
			return nil, refused("verificationMaterial.tlogEntries", "no transparency-log entry, and the lane's policy requires one (its rule does not set timestamp_only)")
		case len(stamps) == 0:
			return nil, refused("verificationMaterial.timestampVerificationData", "neither a transparency-log entry nor an RFC 3161 timestamp: nothing shows when it was signed")
		case len(pol.TrustedRoot.TimestampingAuthorities()) == 0:
			return nil, refused("verificationMaterial.timestampVerificationData", "no transparency-log entry, and the trusted root has no timestamp authority to verify its RFC 3161 timestamp")
		}
		opts = append(opts, verify.WithSignedTimestamps(1))
	}
	trusted := pol.TrustedRoot
	var signer verify.PolicyOption
	if byKey {
		v, err := signature.LoadVerifier(pol.PublicKey, crypto.SHA256)
		if err != nil {
			return nil, ledger.FieldError("policy", "public key %q: %s", pol.KeyName, clip(err.Error()))
		}
		key := root.NewExpiringKey(v, time.Time{}, time.Time{})
		trusted = root.TrustedMaterialCollection{pol.TrustedRoot, root.NewTrustedPublicKeyMaterial(
			func(string) (root.TimeConstrainedVerifier, error) { return key, nil })}
		signer = verify.WithKey()
	} else {
		if len(pol.TrustedRoot.CTLogs()) > 0 {
			opts = append(opts, verify.WithSignedCertificateTimestamps(1))
		}
		id, err := verify.NewShortCertificateIdentity(pol.Issuer, pol.IssuerRegexp, pol.SAN, pol.SANRegexp)
		if err != nil {
			return nil, ledger.FieldError("policy", "identity policy: %s", clip(err.Error()))
		}
		signer = verify.WithCertificateIdentity(id)
	}
	v, err := verify.NewVerifier(trusted, opts...)
	if err != nil {
		return nil, ledger.Errorf(ledger.CodeInternal, "sigstore verifier: %v", err)
	}
	res, err := v.Verify(&b, verify.NewPolicy(artifact, signer))
	if err != nil {
		return nil, bundleReason(body, &b, pol, len(entries) == 0, err)
	}
	var r *Run
	if env != nil {
		if env.PayloadType != MediaInToto {
			return nil, ledger.FieldError("dsseEnvelope.payloadType", "want %s (the bundle verified: its payload is not an in-toto Statement)", MediaInToto)
		}
		statement, err := env.DecodeB64Payload()
		if err != nil {
			return nil, ledger.FieldError("dsseEnvelope.payload", "not base64")
		}
		st, err := DecodeStatement(statement)
		if err == nil {
			r, err = p.statementRun(ctx, st)
		}
		if le := (*ledger.Error)(nil); errors.As(err, &le) {
			c := *le
			c.Message += " (the bundle verified: its Statement is refused)"
			return nil, &c
		}
		if err != nil {
			return nil, err
		}
	} else {
		r = &Run{Cases: []Case{{ID: "sigstore message signature", Outcome: Passed}}}
	}
	if byKey {
		r.Identity = &Identity{Kind: "sigstore-public-key", Name: pol.KeyName, KeyID: keyID(pol.PublicKey)}
		return r, nil
	}
	ident := &Identity{Kind: "sigstore-certificate"}
	if res.Signature != nil && res.Signature.Certificate != nil {
		ident.Name = res.Signature.Certificate.SubjectAlternativeName
		ident.Issuer = res.Signature.Certificate.Extensions.Issuer
	}
	r.Identity = ident
	return r, nil
}

// bundleReason names, for a bundle (body, parsed as b) sigstore-go
// refused with err, the first check a reader can tell apart that fails, since sigstore-go
// reports a bad DSSE signature and a bad signed entry timestamp alike
// ("not enough verified log entries"): the DSSE signature with the
// certificate's key, then the entries' inclusion promises with the
// trusted root's Rekor keys; otherwise bundleError's reading of err.
// sigstore-go's verdict stands either way: this only names it.
func bundleReason(body []byte, b *bundle.Bundle, pol *SigstorePolicy, timestampOnly bool, err error) error {
	refused := func(field, msg string) error {
		return &ledger.Error{Code: ledger.CodeUnauthorized, Field: field, Message: msg}
	}
	content, cerr := b.SignatureContent()
	vc, verr := b.VerificationContent()
	if cerr == nil && verr == nil && (vc.Certificate() != nil || pol.PublicKey != nil) && content.EnvelopeContent() != nil {
		env := content.EnvelopeContent().RawEnvelope()
		payload, perr := base64.StdEncoding.DecodeString(env.Payload)
		if perr != nil || len(env.Signatures) != 1 {
			return bundleError(err)
		}
		var raw struct {
			DSSE struct {
				Signatures []struct {
					Sig string `json:"sig"`
				} `json:"signatures"`
			} `json:"dsseEnvelope"`
		}
		rawSig := env.Signatures[0].Sig
		if json.Unmarshal(body, &raw) == nil && len(raw.DSSE.Signatures) == 1 {
			rawSig = raw.DSSE.Signatures[0].Sig // as sent: the parsed bundle's is re-encoded
		}
		sig, serr := base64.StdEncoding.Strict().DecodeString(rawSig)
		if serr != nil {
			return refused("dsseEnvelope.signatures[0].sig", "not canonical base64 (RFC 4648 section 3.5: its padding bits must be zero)")
		}
		if vc.Certificate() == nil {
			if !keySigned(pol.PublicKey, env.PayloadType, payload, sig) {
				return refused("dsseEnvelope.signatures[0]", fmt.Sprintf("the DSSE signature does not verify with the policy's public key %q", pol.KeyName))
			}
		} else if !certSigned(vc.Certificate(), env.PayloadType, payload, sig) {
			return refused("dsseEnvelope.signatures[0]", "the DSSE signature does not verify with the certificate's key")
		}
	}
	msg := err.Error()
	if cerr == nil && verr == nil && vc.Certificate() == nil && pol.PublicKey != nil {
		if ms := content.MessageSignatureContent(); ms != nil && !digestSigned(pol.PublicKey, ms.Digest(), ms.Signature()) {
			return refused("messageSignature.signature", fmt.Sprintf("the signature does not verify with the policy's public key %q", pol.KeyName))
		}
	}
	if verr == nil && vc.Certificate() != nil && strings.Contains(msg, "leaf certificate verification failed") {
		cert := vc.Certificate()
		if _, cerr := verify.VerifyLeafCertificate(cert.NotBefore, cert, pol.TrustedRoot); cerr != nil {
			return refused("bundle.verificationMaterial", "the certificate does not chain to a Fulcio authority of the trusted root")
		}
		return refused("bundle.verificationMaterial", "the verified signing time is outside the certificate's validity ("+
			cert.NotBefore.UTC().Format(time.RFC3339)+" to "+cert.NotAfter.UTC().Format(time.RFC3339)+")")
	}
	if timestampOnly && strings.Contains(msg, "timestamp") {
		return refused("verificationMaterial.timestampVerificationData", "no RFC 3161 timestamp verifies with a timestamp authority of the trusted root (an untrusted TSA, a bad signature over the timestamp, or a time outside the signer's validity): "+clip(msg))
	}
	if entries, terr := b.TlogEntries(); terr == nil && len(entries) > 0 {
		promised, promiseOK := 0, 0
		for _, e := range entries {
			if e.HasInclusionPromise() {
				promised++
				if tlog.VerifySET(e, pol.TrustedRoot.RekorLogs()) == nil {
					promiseOK++
				}
			}
		}
		if promised > 0 && promiseOK == 0 && !slices.ContainsFunc(entries, (*tlog.Entry).HasInclusionProof) {
			return refused("verificationMaterial.tlogEntries", "no transparency-log entry's signed entry timestamp verifies with the trusted root's Rekor keys")
		}
	}
	if berr := bundleError(err); vc != nil && vc.Certificate() != nil && strings.Contains(berr.Error(), "identity does not match") {
		return refused("bundle", "the certificate identity ("+certIdentity(vc.Certificate())+") does not match the lane's policy")
	} else {
		return berr
	}
}

// certIdentity is "issuer I, SAN S" of a Fulcio certificate, each clipped,
// for a refusal the operator can fix the policy from.
func certIdentity(cert *x509.Certificate) string {
	sum, err := certificate.SummarizeCertificate(cert)
	if err != nil {
		return "no Fulcio identity"
	}
	c := func(s string) string {
		if len(s) > 256 {
			return s[:256] + "…"
		}
		return s
	}
	return "issuer " + c(sum.Extensions.Issuer) + ", SAN " + c(sum.SubjectAlternativeName)
}

// bundleError names why sigstore-go refused a bundle, without the bytes.
func bundleError(err error) error {
	msg := err.Error()
	reason := "verification failed"
	switch {
	case strings.Contains(msg, "transparency log signature does not match"):
		reason = "the transparency-log entry records another signature than the bundle's"
	case strings.Contains(msg, "expected identity") || strings.Contains(msg, "no matching CertificateIdentity") || strings.Contains(msg, "failed to verify certificate identity"):
		reason = "the certificate identity does not match the lane's policy"
	case strings.Contains(msg, "certificate") && strings.Contains(msg, "expired"), strings.Contains(msg, "not yet valid"):
		reason = "the certificate was not valid at the verified signing time"
	case strings.Contains(msg, "transparency log") || strings.Contains(msg, "tlog") || strings.Contains(msg, "inclusion"):
		reason = "the transparency-log entry does not verify"
	case strings.Contains(msg, "timestamp"):
		reason = "no signed or observed timestamp verifies"
	case strings.Contains(msg, "signature"):
		reason = "the signature does not verify"
	}
	var ve verify.ErrVerification
	_ = errors.As(err, &ve)
	return &ledger.Error{Code: ledger.CodeUnauthorized, Field: "bundle", Message: reason + ": " + clip(msg)}
}
