package verify

import (
	"crypto/sha1"
	"crypto/x509"
	"encoding/asn1"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/digitorus/pkcs7"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/sigstore/sigstore-go/pkg/fulcio/certificate"
	"github.com/sigstore/sigstore-go/pkg/root"
)

// oidRekorEntry is gitsign's CMS unsigned attribute carrying the Rekor
// transparency-log entry (sigstore/gitsign internal/fork/ietf-cms).
var oidRekorEntry = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57264, 3, 1}

// LoadTrustedRoot reads a Sigstore trusted_root.json (protobuf-specs
// TrustedRoot, media type application/vnd.dev.sigstore.trustedroot+json)
// through sigstore-go.
func LoadTrustedRoot(path string) (*root.TrustedRoot, error) {
	tr, err := root.NewTrustedRootFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("load sigstore trusted root %s: %w", path, err)
	}
	return tr, nil
}

// LoadCAPool reads PEM certificates into a pool for S/MIME chains.
func LoadCAPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA pool: %w", err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("CA pool %s: no PEM certificates", path)
	}
	return p, nil
}

// verifyX509 checks a CMS (PKCS #7 SignedData, detached) signature over the
// payload with digitorus/pkcs7, then the signer certificate chain at the
// signing time (CMS signingTime attribute, else the signer's git time):
// Sigstore Fulcio certificates against opts.TrustedRoot, others against
// opts.CAPool. A good CMS signature whose chain no configured root
// verifies reads U with ErrUnknownCA, as git with gpgsm reports an S/MIME
// signature whose CA it does not trust.
func verifyX509(o *Object, opts *Options, r *Result) *Error {
	blk, _ := pem.Decode(o.Signature)
	if blk == nil || blk.Type != "SIGNED MESSAGE" {
		r.Verdict, r.Letter = ledger.VerdictError, "E"
		return newErr(ErrMalformed, "x509 signature is not a PEM SIGNED MESSAGE block")
	}
	p7, err := pkcs7.Parse(blk.Bytes)
	if err != nil {
		r.Verdict, r.Letter = ledger.VerdictError, "E"
		return wrapErr(ErrMalformed, err, "parse CMS")
	}
	leaf := p7.GetOnlySigner()
	if leaf == nil {
		r.Verdict, r.Letter = ledger.VerdictError, "E"
		return newErr(ErrMalformed, "CMS must have exactly one signer with its certificate, has %d signers", len(p7.Signers))
	}
	sum := sha1.Sum(leaf.Raw)
	r.Key = strings.ToUpper(hex.EncodeToString(sum[:]))
	r.Signer = certSAN(leaf)
	ext, extErr := certificate.ParseExtensions(leaf.Extensions)
	fulcio := extErr == nil && ext.Issuer != ""
	if fulcio {
		r.Issuer = ext.Issuer
	} else {
		r.Issuer = leaf.Issuer.String()
	}
	checkTlog(p7, leaf, opts.TrustedRoot, r)
	var signingTime time.Time
	if err := p7.UnmarshalSignedAttribute(pkcs7.OIDAttributeSigningTime, &signingTime); err != nil || signingTime.IsZero() {
		signingTime = o.SignerTime
	}
	r.SignedAt = signingTime.UTC()
	p7.Content = o.Payload
	if err := p7.Verify(); err != nil {
		if strings.Contains(err.Error(), "outside of certificate validity") {
			r.Verdict, r.Letter = ledger.VerdictExpiredKey, "Y"
			return wrapErr(ErrExpired, err, "certificate not valid at signing time")
		}
		r.Verdict, r.Letter = ledger.VerdictBad, "B"
		return wrapErr(ErrBadSignature, err, "cms")
	}
	var chainErrs []error
	if fulcio && opts.TrustedRoot != nil {
		for _, ca := range opts.TrustedRoot.FulcioCertificateAuthorities() {
			if _, err := ca.Verify(leaf, signingTime); err == nil {
				r.Verdict, r.Letter, r.ChainVerified = ledger.VerdictGood, "G", true
				return nil
			} else {
				chainErrs = append(chainErrs, err)
			}
		}
	}
	if opts.CAPool != nil {
		inter := x509.NewCertPool()
		for _, c := range p7.Certificates {
			inter.AddCert(c)
		}
		_, err := leaf.Verify(x509.VerifyOptions{Roots: opts.CAPool, Intermediates: inter, CurrentTime: signingTime,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		if err == nil {
			r.Verdict, r.Letter, r.ChainVerified = ledger.VerdictGood, "G", true
			return nil
		}
		chainErrs = append(chainErrs, err)
	}
	r.Verdict, r.Letter = ledger.VerdictUnknownKey, "U"
	if fulcio && opts.TrustedRoot == nil {
		// The letter is git's for the same material: git 2.39 hands CMS to
		// gpgsm 2.2, which rejects Fulcio leaf certificates (empty subject)
		// with "ERROR verify.leave" and no status line, so git reports N.
		// The verdict stays this package's own: a good CMS signature whose
		// issuer is unknown (ErrUnknownCA).
		r.Letter = "N"
	}
	if len(chainErrs) == 0 {
		if fulcio {
			return newErr(ErrUnknownCA, "good CMS signature; no Sigstore trusted root or CA pool configured")
		}
		return newErr(ErrUnknownCA, "good CMS signature; no CA pool configured for issuer %s", leaf.Issuer)
	}
	return wrapErr(ErrUnknownCA, errors.Join(chainErrs...), "good CMS signature; certificate chain not verified at %s", signingTime.UTC().Format(time.RFC3339))
}

// certSAN returns the certificate's first subject alternative name: an
// e-mail address, else a URI, else a DNS name ("" when none).
func certSAN(c *x509.Certificate) string {
	switch {
	case len(c.EmailAddresses) > 0:
		return c.EmailAddresses[0]
	case len(c.URIs) > 0:
		return c.URIs[0].String()
	case len(c.DNSNames) > 0:
		return c.DNSNames[0]
	}
	return ""
}

// checkTlog reports and verifies an embedded Rekor entry, offline, whatever
// the chain's outcome; a policy may require it (X509Trust.RequireTlog).
func checkTlog(p7 *pkcs7.PKCS7, leaf *x509.Certificate, tm root.TrustedMaterial, r *Result) {
	for _, a := range p7.Signers[0].UnauthenticatedAttributes {
		if a.Type.Equal(oidRekorEntry) {
			r.TlogEntry = true
		}
	}
	if !r.TlogEntry {
		return
	}
	var err error
	if r.Tlog, err = verifyTlog(p7, leaf, tm); err != nil {
		r.TlogError = err.Error()
	}
}
