package ingest

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"github.com/sigstore/sigstore-go/pkg/fulcio/certificate"
	"github.com/sigstore/sigstore-go/pkg/verify"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/options"
)

// certEnvelope is a bare DSSE envelope whose one signature carries its
// Fulcio certificate in "cert" (PEM), as slsa-github-generator wrote
// provenance before v2.1; its transparency-log entry is in Rekor only.
type certEnvelope struct {
	PayloadType string `json:"payloadType"`
	Payload     string `json:"payload"`
	Signatures  []struct {
		Sig  string `json:"sig"`
		Cert string `json:"cert"`
	} `json:"signatures"`
}

// certSigned reports whether sig is a signature by cert's key over the
// DSSE pre-authentication encoding of (payloadType, payload), with the
// SHA-256 digest Fulcio certificates' keys sign with.
func certSigned(cert *x509.Certificate, payloadType string, payload, sig []byte) bool {
	return keySigned(cert.PublicKey, payloadType, payload, sig)
}

// keySigned reports whether sig is a signature by pub over the DSSE
// pre-authentication encoding of (payloadType, payload), SHA-256 digest
// (ECDSA and RSA; Ed25519 signs the message itself).
func keySigned(pub crypto.PublicKey, payloadType string, payload, sig []byte) bool {
	v, err := signature.LoadVerifier(pub, crypto.SHA256)
	return err == nil && v.VerifySignature(bytes.NewReader(sig), bytes.NewReader(dsse.PAE(payloadType, payload))) == nil
}

// digestSigned reports whether sig is a signature by pub over the
// SHA-256 digest (a message-signature bundle's messageDigest).
func digestSigned(pub crypto.PublicKey, digest, sig []byte) bool {
	v, err := signature.LoadVerifier(pub, crypto.SHA256)
	return err == nil && v.VerifySignature(bytes.NewReader(sig), nil, options.WithDigest(digest)) == nil
}

// refuseCertEnvelope checks a bare certificate-signed DSSE envelope as
// far as it can be checked offline, in the order a verifier with the log
// entry would, and always refuses it, naming the first check that fails:
//   - no Sigstore trust setting for the lane: CodePrecondition, as for
//     bundles;
//   - one signature, a PEM certificate in it: CodeInvalid;
//   - the certificate chains to a Fulcio authority of the trusted root at
//     its own notBefore (the only time the envelope offers): else
//     CodeUnauthorized;
//   - the signature verifies over the DSSE pre-authentication encoding
//     with the certificate's key: else CodeUnauthorized;
//   - the certificate identity (OIDC issuer and SAN) matches the lane's
//     policy: else CodeUnauthorized (an untrusted builder is refused
//     here);
//   - the payload type is in-toto;
//   - then CodeUnauthorized anyway: a Fulcio certificate is valid for
//     minutes, and only the log entry's integration time shows that the
//     signature was made within them (sigstore's model: without it an
//     expired certificate's leaked key could sign today). A verifier that
//     looks the entry up in Rekor (slsa-verifier does) can accept the
//     envelope; this ledger verifies offline and does not.
//
// Messages name fields and checks, never the envelope's bytes.
func refuseCertEnvelope(body []byte, p Params) error {
	pol, err := p.sigstorePolicy()
	if err != nil {
		return err
	}
	var env certEnvelope
	if err := json.Unmarshal(body, &env); err != nil {
		return ledger.FieldError("envelope", "not a DSSE envelope: %s", clip(err.Error()))
	}
	if len(env.Signatures) != 1 {
		return ledger.FieldError("signatures", "exactly one signature is required, got %d", len(env.Signatures))
	}
	blk, rest := pem.Decode([]byte(env.Signatures[0].Cert))
	if blk == nil || blk.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		return ledger.FieldError("signatures[0].cert", "not one PEM certificate")
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return ledger.FieldError("signatures[0].cert", "not an X.509 certificate: %s", clip(err.Error()))
	}
	unauthorized := func(field, msg string) error {
		return &ledger.Error{Code: ledger.CodeUnauthorized, Field: field, Message: msg}
	}
	if _, err := verify.VerifyLeafCertificate(cert.NotBefore, cert, pol.TrustedRoot); err != nil {
		return unauthorized("signatures[0].cert", "the certificate does not chain to a Fulcio authority of the trusted root")
	}
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		return ledger.FieldError("payload", "not base64")
	}
	sig, err := base64.StdEncoding.Strict().DecodeString(env.Signatures[0].Sig)
	if err != nil {
		return ledger.FieldError("signatures[0].sig", "not canonical base64 (RFC 4648 section 3.5)")
	}
	if !certSigned(cert, env.PayloadType, payload, sig) {
		return unauthorized("signatures[0].sig", "the signature does not verify with the certificate's key")
	}
	sum, err := certificate.SummarizeCertificate(cert)
	if err != nil {
		return unauthorized("signatures[0].cert", "the certificate carries no Fulcio identity: "+clip(err.Error()))
	}
	id, err := verify.NewShortCertificateIdentity(pol.Issuer, pol.IssuerRegexp, pol.SAN, pol.SANRegexp)
	if err != nil {
		return ledger.FieldError("policy", "identity policy: %s", clip(err.Error()))
	}
	if err := id.Verify(sum); err != nil {
		return unauthorized("signatures[0].cert", "the certificate identity ("+certIdentity(cert)+") does not match the lane's policy")
	}
	if env.PayloadType != MediaInToto {
		return ledger.FieldError("payloadType", "want %s", MediaInToto)
	}
	return unauthorized("signatures[0].cert", "the signature, its certificate's chain and identity verify, but nothing with a bare envelope shows it was signed while the certificate was valid ("+
		cert.NotBefore.UTC().Format(time.RFC3339)+" to "+cert.NotAfter.UTC().Format(time.RFC3339)+"): that is its transparency-log entry, which only Rekor holds and this ledger does not look up; send the Sigstore bundle, which carries it")
}
