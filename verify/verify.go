package verify

import (
	"crypto/x509"
	"errors"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/sigstore/sigstore-go/pkg/root"
)

// Options carries the verification material and clock for VerifyObject.
// The zero value verifies nothing as trusted: every good signature reads
// U (or E for OpenPGP with an empty keyring). Options are read-only during
// verification; one Options may be shared by concurrent calls.
type Options struct {
	// Now is the verification time: OpenPGP key and signature expiry and
	// revocation are evaluated at it, as gpg does. Zero means time.Now().
	Now time.Time
	// ExpectedID, when set, must equal the SHA-1 of the object bytes.
	ExpectedID string

	// Keyring holds the OpenPGP public keys (gpg's keyring).
	Keyring openpgp.EntityList
	// TrustedFingerprints are primary-key fingerprints (hex, any case) with
	// ultimate trust, as gpg gives it: a good signature by one reads G, and
	// so does one by a key one of them certified (a certification path of
	// length 1, see Introducers); by another key of the keyring U.
	TrustedFingerprints []string
	// Introducers are certifying keys (a project's master key): keys they
	// certified are valid, as gpg computes validity for a fully trusted,
	// valid certifier; their own signatures read U unless they are also in
	// TrustedFingerprints.
	Introducers []Introducer

	// AllowedSigners is git's gpg.ssh.allowedSignersFile, parsed.
	AllowedSigners *AllowedSigners

	// TrustedRoot is a Sigstore trusted root (trusted_root.json) whose
	// Fulcio CAs verify gitsign certificates at their signing time.
	TrustedRoot root.TrustedMaterial
	// CAPool verifies S/MIME (non-Sigstore) certificate chains at signing time.
	CAPool *x509.CertPool
}

func (o *Options) now() time.Time {
	if o == nil || o.Now.IsZero() {
		return time.Now()
	}
	return o.Now
}

// Result is the outcome of verifying one object's signature.
type Result struct {
	Object     string `json:"object"`
	ObjectType string `json:"object_type"`
	Commit     string `json:"commit,omitempty"` // commits: the object; tags: the tagged object when it is a commit
	Tree       string `json:"tree,omitempty"`
	Scheme     string `json:"scheme,omitempty"` // openpgp, ssh, x509, "" when unsigned
	// Verdict is the cryptographic verdict (see ledger.Verdict).
	Verdict ledger.Verdict `json:"verdict"`
	// Letter is git's %G? letter for the same material: G, U, Y, X, R, E,
	// B or N. Objects this package refuses (ErrMalformed, unsupported)
	// read E: they cannot be checked.
	Letter string `json:"git_letter"`
	// Signer is the OpenPGP primary user id, the SSH principal git
	// reports (the first that ssh-keygen -Y find-principals prints and -Y
	// verify accepts; for a certificate, the certificate's principal), or
	// the certificate SAN.
	Signer string `json:"signer,omitempty"`
	// Principals are every SSH principal found and verified, in
	// find-principals order (Signer first); a policy matches any of them.
	Principals []string `json:"principals,omitempty"`
	// SK holds the FIDO flags and counter of an sk SSH signature.
	SK *SKSignature `json:"sk,omitempty"`
	// Issuer is the Fulcio OIDC issuer (1.3.6.1.4.1.57264.1.8 or .1.1) or
	// the certificate issuer DN for other X.509 certificates.
	Issuer string `json:"issuer,omitempty"`
	// Key is the signing key: OpenPGP fingerprint (upper-case hex), SSH
	// "SHA256:..." fingerprint, or X.509 SHA-256 certificate fingerprint.
	Key string `json:"key,omitempty"`
	// PrimaryKey is the OpenPGP primary-key fingerprint when it differs.
	PrimaryKey string    `json:"primary_key,omitempty"`
	SignedAt   time.Time `json:"signed_at,omitzero"`
	// TlogEntry reports that a gitsign signature embeds a Rekor entry
	// (CMS unsigned attribute 1.3.6.1.4.1.57264.3.1).
	TlogEntry bool `json:"tlog_entry,omitempty"`
	// Tlog is the embedded Rekor entry, set only when it verified offline
	// against the trusted root's transparency-log keys (it is about this
	// signature by construction, see TlogEntry); TlogError says why an
	// embedded entry did not verify.
	Tlog      *TlogEntry `json:"tlog,omitempty"`
	TlogError string     `json:"tlog_error,omitempty"`
	// CertificationPath is the OpenPGP web-of-trust path that made the
	// signing key valid: from a trusted or introducer key to the signer's
	// primary key, one certification per step. Empty when the key is
	// itself trusted or not valid.
	CertificationPath []Certification `json:"certification_path,omitempty"`
	// ChainVerified reports an X.509 chain verified to a configured root.
	ChainVerified bool `json:"chain_verified,omitempty"`
	// Reason explains a non-G letter in words.
	Reason string `json:"reason,omitempty"`
	// MergeTags are the results for the commit's mergetag headers.
	MergeTags []Result `json:"mergetags,omitempty"`
	// Err is nil for G and otherwise the *Error (one sentinel) explaining
	// the verdict.
	Err error `json:"-"`
}

// VerifyObject verifies the signature of a raw commit or tag object (its
// bytes exactly as git hashes them; objType "commit" or "tag"). It always
// returns a filled Result; the error is nil exactly when the letter is G
// and every mergetag is G, otherwise it is an *Error wrapping one sentinel.
// It is safe for concurrent use.
func VerifyObject(raw []byte, objType string, opts *Options) (Result, error) {
	if opts == nil {
		opts = &Options{}
	}
	o, err := ParseObject(raw, objType, opts.ExpectedID)
	if err != nil {
		id := ObjectID(objType, raw)
		r := Result{Object: id, ObjectType: objType, Verdict: ledger.VerdictError, Letter: "E", Err: err, Reason: err.Error()}
		return r, err
	}
	r := VerifyParsed(o, opts)
	return r, r.Err
}

// VerifyParsed verifies an already parsed object; see VerifyObject.
func VerifyParsed(o *Object, opts *Options) Result {
	if opts == nil {
		opts = &Options{}
	}
	r := Result{Object: o.ID, ObjectType: o.Type, Scheme: o.Format, Tree: o.Tree}
	if o.Type == "commit" {
		r.Commit = o.ID
	} else if o.TargetTyp == "commit" {
		r.Commit = o.Target
	}
	var err *Error
	switch o.Format {
	case "":
		r.Verdict, r.Letter = ledger.VerdictUnsigned, "N"
		err = newErr(ErrUnsigned, "no signature")
	case "openpgp":
		err = verifyOpenPGP(o, opts, &r)
	case "ssh":
		err = verifySSH(o, opts, &r)
	case "x509":
		err = verifyX509(o, opts, &r)
	}
	for _, mt := range o.MergeTags {
		mr := VerifyParsed(mt, opts)
		r.MergeTags = append(r.MergeTags, mr)
		if mr.Err != nil && err == nil {
			err = wrapErr(kindOf(mr.Err), mr.Err, "mergetag %s", mt.ID)
		}
	}
	if err != nil {
		if err.Object == "" {
			err.Object = o.ID
		}
		if err.Key == "" {
			err.Key = r.Key
		}
		if err.Scheme == "" {
			err.Scheme = r.Scheme
		}
		r.Err = err
		if r.Reason == "" {
			r.Reason = err.Error()
		}
	}
	return r
}

func kindOf(err error) error {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return ErrMalformed
}

func normFpr(s string) string {
	return strings.ToUpper(strings.ReplaceAll(strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X"), " ", ""))
}

// PrimaryKeyOr returns the OpenPGP primary-key fingerprint: PrimaryKey when
// set (a subkey signed), else Key.
func (r Result) PrimaryKeyOr() string {
	if r.PrimaryKey != "" {
		return r.PrimaryKey
	}
	return r.Key
}
