package ingest

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	"github.com/sigstore/sigstore-go/pkg/fulcio/certificate"
	"github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/tlog"
	"github.com/sigstore/sigstore-go/pkg/verify"
	"gopkg.in/yaml.v3"
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
func decodeBundle(ctx context.Context, body []byte, p Params) (*Run, error) {
	pol, err := p.sigstorePolicy()
	if err != nil {
		return nil, err
	}
	var b bundle.Bundle
	if err := b.UnmarshalJSON(body); err != nil {
		return nil, ledger.FieldError("bundle", "not a valid Sigstore bundle: %s", clip(err.Error()))
	}
	if vc, err := b.VerificationContent(); err == nil && vc.Certificate() == nil {
		return nil, &ledger.Error{Code: ledger.CodeUnauthorized, Field: "bundle.verificationMaterial",
			Message: "signed by a public key, not a Fulcio certificate: this ledger takes Sigstore bundles whose certificate identity a lane's policy names"}
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
		return nil, bundleReason(body, &b, pol, err)
	}
	var r *Run
	if statement != nil {
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
	ident := &Identity{Kind: "sigstore-certificate"}
	if res.Signature != nil && res.Signature.Certificate != nil {
		ident.Name = res.Signature.Certificate.SubjectAlternativeName
		ident.Issuer = res.Signature.Certificate.Extensions.Issuer
	}
	r.Identity = ident
	return r, nil
}

// sigstorePolicy is the Sigstore policy p's lane and token are judged
// by: p.Sigstore, else the server's trust setting's rule for them. It is
// CodePrecondition when there is none (naming --sigstore-trusted-root) and
// CodeInvalid when an identity regular expression does not compile.
func (p Params) sigstorePolicy() (*SigstorePolicy, error) {
	pol := p.Sigstore
	if pol == nil {
		var err error
		if pol, err = p.SigstoreTrust.Policy(p.Lane, p.Token); err != nil {
			return nil, err
		}
	}
	if pol.TrustedRoot == nil {
		_, err := (*SigstoreConfig)(nil).Policy(p.Lane, p.Token)
		return nil, err
	}
	for _, re := range []string{pol.IssuerRegexp, pol.SANRegexp} {
		if re != "" {
			if _, err := regexp.Compile(re); err != nil {
				return nil, ledger.FieldError("policy", "bad identity regular expression: %v", err)
			}
		}
	}
	return pol, nil
}

// bundleReason names, for a bundle (body, parsed as b) sigstore-go
// refused with err, the first check a reader can tell apart that fails, since sigstore-go
// reports a bad DSSE signature and a bad signed entry timestamp alike
// ("not enough verified log entries"): the DSSE signature with the
// certificate's key, then the entries' inclusion promises with the
// trusted root's Rekor keys; otherwise bundleError's reading of err.
// sigstore-go's verdict stands either way: this only names it.
func bundleReason(body []byte, b *bundle.Bundle, pol *SigstorePolicy, err error) error {
	refused := func(field, msg string) error {
		return &ledger.Error{Code: ledger.CodeUnauthorized, Field: field, Message: msg}
	}
	content, cerr := b.SignatureContent()
	vc, verr := b.VerificationContent()
	if cerr == nil && verr == nil && vc.Certificate() != nil && content.EnvelopeContent() != nil {
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
		if !certSigned(vc.Certificate(), env.PayloadType, payload, sig) {
			return refused("dsseEnvelope.signatures[0]", "the DSSE signature does not verify with the certificate's key")
		}
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

// SigstoreRule is one identity rule of a SigstoreConfig: it applies to
// bundles recorded for Lane ("" any lane) by the token named Token (""
// any token), and accepts the certificate identity it names: Issuer or
// IssuerRegexp, and SAN or SANRegexp (RE2, matched as sigstore-go
// matches: unanchored unless the expression anchors itself).
type SigstoreRule struct {
	Lane         string `yaml:"lane,omitempty" json:"lane,omitempty"`
	Token        string `yaml:"token,omitempty" json:"token,omitempty"`
	Issuer       string `yaml:"issuer,omitempty" json:"issuer,omitempty"`
	IssuerRegexp string `yaml:"issuer_regexp,omitempty" json:"issuer_regexp,omitempty"`
	SAN          string `yaml:"san,omitempty" json:"san,omitempty"`
	SANRegexp    string `yaml:"san_regexp,omitempty" json:"san_regexp,omitempty"`
}

// SigstoreConfig is the server's Sigstore trust setting: the trusted
// root the operator configured (`ledger serve --sigstore-trusted-root`)
// and the identity rules (`--sigstore-policy`). A request never names
// either. A SigstoreConfig is read-only once loaded: safe for concurrent
// use.
type SigstoreConfig struct {
	TrustedRoot root.TrustedMaterial
	Rules       []SigstoreRule
}

// sigstorePolicyFile is the shape of a --sigstore-policy file (YAML or
// JSON): {"rules": [SigstoreRule...]}.
type sigstorePolicyFile struct {
	Rules []SigstoreRule `yaml:"rules" json:"rules"`
}

// ParseSigstoreRules reads a --sigstore-policy file's bytes: a YAML (or
// JSON) object with a "rules" list. Every rule needs an issuer (exact or
// regexp) and a SAN (exact or regexp), not both forms of one; regular
// expressions must compile; lanes must be lane names. Errors are
// CodeInvalid naming "rules[i].field" and never quote the file.
func ParseSigstoreRules(data []byte) ([]SigstoreRule, error) {
	var f sigstorePolicyFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, ledger.FieldError("rules", "not a YAML object with a rules list (fields lane, token, issuer, issuer_regexp, san, san_regexp)")
	}
	if len(f.Rules) == 0 {
		return nil, ledger.FieldError("rules", "no rules: every bundle would be refused")
	}
	for i, r := range f.Rules {
		field := fmt.Sprintf("rules[%d].", i)
		if r.Lane != "" && !ledger.ValidLane(r.Lane) {
			return nil, ledger.FieldError(field+"lane", "must be a lane name (name/vN)")
		}
		for _, pair := range []struct {
			name, exact, re string
		}{{"issuer", r.Issuer, r.IssuerRegexp}, {"san", r.SAN, r.SANRegexp}} {
			if (pair.exact == "") == (pair.re == "") {
				return nil, ledger.FieldError(field+pair.name, "give exactly one of %s and %s_regexp", pair.name, pair.name)
			}
			if pair.re != "" {
				if _, err := regexp.Compile(pair.re); err != nil {
					return nil, ledger.FieldError(field+pair.name+"_regexp", "does not compile (RE2 syntax)")
				}
			}
		}
	}
	return f.Rules, nil
}

// LoadSigstoreConfig reads the trusted root at rootPath and the identity
// rules at policyPath (ParseSigstoreRules). Both are required.
func LoadSigstoreConfig(rootPath, policyPath string) (*SigstoreConfig, error) {
	if rootPath == "" || policyPath == "" {
		return nil, ledger.FieldError("sigstore-policy", "--sigstore-trusted-root and --sigstore-policy go together: a trusted root without an identity policy would accept any certificate")
	}
	tr, err := LoadTrustedRoot(rootPath)
	if err != nil {
		return nil, ledger.FieldError("sigstore-trusted-root", "%s is not a Sigstore trusted_root.json", rootPath)
	}
	data, err := os.ReadFile(policyPath)
	if err != nil {
		return nil, ledger.FieldError("sigstore-policy", "read %s: %v", policyPath, errors.Unwrap(err))
	}
	rules, err := ParseSigstoreRules(data)
	if err != nil {
		return nil, err
	}
	return &SigstoreConfig{TrustedRoot: tr, Rules: rules}, nil
}

// Policy returns the identity policy for a bundle recorded for lane by
// the token named token: the first rule, in file order, whose lane and
// token match. c nil (no trust setting) or no matching rule is a
// CodePrecondition error naming the missing setting.
func (c *SigstoreConfig) Policy(lane, token string) (*SigstorePolicy, error) {
	if c == nil || c.TrustedRoot == nil {
		return nil, &ledger.Error{Code: ledger.CodePrecondition, Field: "sigstore-trusted-root",
			Message: "this server has no Sigstore trust setting (ledger serve --sigstore-trusted-root FILE --sigstore-policy FILE): Sigstore bundles are refused"}
	}
	for _, r := range c.Rules {
		if (r.Lane == "" || r.Lane == lane) && (r.Token == "" || r.Token == token) {
			return &SigstorePolicy{TrustedRoot: c.TrustedRoot, Issuer: r.Issuer, IssuerRegexp: r.IssuerRegexp, SAN: r.SAN, SANRegexp: r.SANRegexp}, nil
		}
	}
	return nil, &ledger.Error{Code: ledger.CodePrecondition, Field: "sigstore-policy",
		Message: fmt.Sprintf("no rule of the server's --sigstore-policy applies to lane %q and token %q: the bundle is refused", clip(lane), clip(token))}
}
