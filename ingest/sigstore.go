package ingest

import (
	"encoding/hex"
	"errors"
	"regexp"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/verify"
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

// SigstorePolicy is how a lane (or a token) accepts Sigstore bundles:
// the trusted root (a trusted_root.json read by the operator, never named
// by the request) and the certificate identity: the OIDC issuer and the
// subject alternative name, each exact or a regular expression (Go RE2
// syntax, anchored by the caller). At least one of SAN and SANRegexp, and
// of Issuer and IssuerRegexp, must be set.
type SigstorePolicy struct {
	TrustedRoot  root.TrustedMaterial
	Issuer       string
	IssuerRegexp string
	SAN          string
	SANRegexp    string
}

// LoadTrustedRoot reads a trusted_root.json (Sigstore's TrustedRoot
// message, protobuf-specs) from path.
func LoadTrustedRoot(path string) (*root.TrustedRoot, error) {
	return root.NewTrustedRootFromPath(path)
}

// decodeBundle verifies a Sigstore bundle offline with sigstore-go: the
// certificate chains to the trusted root's Fulcio authorities, it carries
// signed certificate timestamps from the root's CT logs, a transparency
// log entry (inclusion proof or promise) and an observer timestamp verify,
// the signature verifies over the DSSE envelope or the message digest, and
// the certificate's identity matches the policy. The identity becomes
// the runner identity; a DSSE payload must be an in-toto Statement and is
// mapped as decodeStatement does. A message-signature bundle signs one
// artifact: exactly one --artifact pin must give its digest, and the run
// is one case, "sigstore message signature", passed.
func decodeBundle(body []byte, p Params) (*Run, error) {
	pol := p.Sigstore
	if pol == nil || pol.TrustedRoot == nil {
		return nil, ledger.Errorf(ledger.CodeUnauthorized, "no Sigstore trust policy for lane %q: a bundle cannot be verified", clip(p.Lane))
	}
	for _, re := range []string{pol.IssuerRegexp, pol.SANRegexp} {
		if re != "" {
			if _, err := regexp.Compile(re); err != nil {
				return nil, ledger.FieldError("policy", "bad identity regular expression: %v", err)
			}
		}
	}
	var b bundle.Bundle
	if err := b.UnmarshalJSON(body); err != nil {
		return nil, ledger.FieldError("bundle", "not a valid Sigstore bundle: %s", clip(err.Error()))
	}
	content, err := b.SignatureContent()
	if err != nil {
		return nil, ledger.FieldError("bundle", "no signature content: %s", clip(err.Error()))
	}
	var artifact verify.ArtifactPolicyOption
	var statement []byte
	if env := content.EnvelopeContent(); env != nil {
		if env.RawEnvelope().PayloadType != MediaInToto {
			return nil, ledger.FieldError("dsseEnvelope.payloadType", "want %s", MediaInToto)
		}
		if statement, err = env.RawEnvelope().DecodeB64Payload(); err != nil {
			return nil, ledger.FieldError("dsseEnvelope.payload", "not base64")
		}
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
	id, err := verify.NewShortCertificateIdentity(pol.Issuer, pol.IssuerRegexp, pol.SAN, pol.SANRegexp)
	if err != nil {
		return nil, ledger.FieldError("policy", "identity policy: %s", clip(err.Error()))
	}
	opts := []verify.VerifierOption{verify.WithTransparencyLog(1), verify.WithObserverTimestamps(1)}
	if len(pol.TrustedRoot.CTLogs()) > 0 {
		opts = append(opts, verify.WithSignedCertificateTimestamps(1))
	}
	v, err := verify.NewVerifier(pol.TrustedRoot, opts...)
	if err != nil {
		return nil, ledger.Errorf(ledger.CodeInternal, "sigstore verifier: %v", err)
	}
	res, err := v.Verify(&b, verify.NewPolicy(artifact, verify.WithCertificateIdentity(id)))
	if err != nil {
		return nil, bundleError(err)
	}
	var r *Run
	if statement != nil {
		st, err := DecodeStatement(statement)
		if err != nil {
			return nil, err
		}
		if r, err = p.statementRun(st); err != nil {
			return nil, err
		}
	} else {
		r = &Run{Cases: []Case{{ID: "sigstore message signature", Outcome: Passed}}}
	}
	ident := &Identity{Kind: "sigstore-certificate"}
	if res.Signature != nil && res.Signature.Certificate != nil {
		ident.Name = res.Signature.Certificate.SubjectAlternativeName
		ident.Issuer = res.Signature.Certificate.Extensions.Issuer
	}
	r.Identity = ident
	return r, nil
}

// bundleError names why sigstore-go refused a bundle, without the bytes.
func bundleError(err error) error {
	msg := err.Error()
	reason := "verification failed"
	switch {
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
