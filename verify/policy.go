package verify

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/evidence-ledger/ledger/internal/yamltext"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/sigstore/sigstore-go/pkg/root"
	"gopkg.in/yaml.v3"
)

// Policy is a trust policy: an ordered list of rules, the first rule whose
// repository and ref patterns match a head decides. It is read-only after
// LoadPolicy and safe for concurrent use.
//
// The YAML shape (unknown keys are errors; file paths are relative to the
// policy file):
//
//	version: 1
//	rules:
//	  - repositories: ["github.com/acme/*"]      # path.Match patterns
//	    refs: ["refs/heads/main", "refs/tags/v*"]
//	    schemes: [openpgp, ssh, x509]            # acceptable schemes
//	    openpgp:
//	      keyrings: [keys/release.asc]           # public keys (armoured or binary)
//	      fingerprints: [5DE3E050...]            # trusted primary keys; empty (and no certified_by): every keyring key
//	      certified_by: [ABCD...]                # certifying (master) keys: keys they certified are valid
//	      depth: 1                               # certification path length, default 1
//	    ssh:
//	      allowed_signers: allowed_signers       # git's gpg.ssh.allowedSignersFile format
//	      principals: ["release-*"]              # optional principal patterns
//	      no_touch_required: false               # FIDO: accept sk signatures without user presence
//	      verify_required: false                 # FIDO: require user verification (PIN)
//	    x509:
//	      trusted_root: trusted_root.json        # Sigstore trusted root (gitsign)
//	      ca_pool: smime-ca.pem                  # PEM roots for S/MIME
//	      require_tlog: false                    # gitsign: require a verified embedded Rekor entry
//	      identities:                            # required when x509 is accepted
//	        - san: "*@acme.example"              # path.Match pattern on the SAN
//	          issuer: https://accounts.google.com  # exact OIDC issuer (or CA DN for S/MIME)
type Policy struct {
	Version int          `yaml:"version"`
	Rules   []PolicyRule `yaml:"rules"`
	// Digest is "sha256:<hex>" of the policy file bytes (set by ParsePolicy).
	Digest string `yaml:"-"`
}

// PolicyRule is one rule of a Policy.
type PolicyRule struct {
	Repositories []string      `yaml:"repositories"`
	Refs         []string      `yaml:"refs"`
	Schemes      []string      `yaml:"schemes"`
	OpenPGP      *OpenPGPTrust `yaml:"openpgp"`
	SSH          *SSHTrust     `yaml:"ssh"`
	X509         *X509Trust    `yaml:"x509"`

	keyring        openpgp.EntityList
	allowedSigners *AllowedSigners
	trustedRoot    root.TrustedMaterial
	caPool         *x509.CertPool
}

// OpenPGPTrust names trusted OpenPGP keys. Fingerprints are trusted
// signers (gpg's ultimate trust: their signatures read G). CertifiedBy are
// introducers (gpg's full ownertrust on a key the policy vouches for):
// a key one of them certified, on a user id, with a valid, unexpired,
// unrevoked certification, is valid, as gpg computes validity; Depth (1
// when 0) is how many certification steps a path may take, keys validated
// at a shorter distance introducing in turn, as with trust signatures.
type OpenPGPTrust struct {
	Keyrings     []string `yaml:"keyrings"`
	Fingerprints []string `yaml:"fingerprints"`
	CertifiedBy  []string `yaml:"certified_by"`
	Depth        int      `yaml:"depth"`
}

// SSHTrust names the allowed-signers file and optional principal patterns.
// For FIDO (sk) signatures the rule requires the user-presence flag unless
// NoTouchRequired, and the user-verification flag when VerifyRequired, as
// sshd's authorized_keys options of the same names do (sshd(8)); the git
// letter is not affected, since ssh-keygen -Y verify judges no flags.
type SSHTrust struct {
	AllowedSigners  string   `yaml:"allowed_signers"`
	Principals      []string `yaml:"principals"`
	NoTouchRequired bool     `yaml:"no_touch_required"`
	VerifyRequired  bool     `yaml:"verify_required"`
}

// X509Trust names trust anchors and the identities trusted under them.
// RequireTlog makes the rule trust a gitsign signature only with an
// embedded Rekor entry verified offline against the trusted root's
// transparency-log keys (Result.Tlog) whose integrated time lies within
// the signing certificate's validity.
type X509Trust struct {
	TrustedRoot string         `yaml:"trusted_root"`
	CAPool      string         `yaml:"ca_pool"`
	Identities  []X509Identity `yaml:"identities"`
	RequireTlog bool           `yaml:"require_tlog"`
}

// X509Identity is a certificate identity: SAN pattern and exact issuer.
type X509Identity struct {
	SAN    string `yaml:"san"`
	Issuer string `yaml:"issuer"`
}

var knownSchemes = map[string]bool{"openpgp": true, "ssh": true, "x509": true}

// ParsePolicy decodes and validates a policy document without reading the
// files it names (LoadPolicy does). Errors wrap ErrMalformed and name the
// offending rule and field.
func ParsePolicy(data []byte) (*Policy, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var p Policy
	if err := dec.Decode(&p); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, newErr(ErrMalformed, "policy is empty")
		}
		// The yaml error would quote the start of a scalar it could not
		// decode: only its wording without values is kept.
		return nil, newErr(ErrMalformed, "policy yaml: %s", strings.Join(yamltext.Messages(err, map[string]string{"verify.Policy": "a trust policy (a mapping)", "verify.PolicyRule": "a rule (a mapping)"}), "; "))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, newErr(ErrMalformed, "policy holds more than one YAML document")
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	p.Digest = "sha256:" + hex.EncodeToString(sum[:])
	return &p, nil
}

func (p *Policy) validate() error {
	if p.Version != 1 {
		return newErr(ErrMalformed, "policy version %d, want 1", p.Version)
	}
	if len(p.Rules) == 0 {
		return newErr(ErrMalformed, "policy has no rules")
	}
	for i := range p.Rules {
		if msg := p.Rules[i].problem(); msg != "" {
			return newErr(ErrMalformed, "rules[%d]: %s", i, msg)
		}
	}
	return nil
}

// problem returns what is wrong with the rule, naming the field, or "".
func (r *PolicyRule) problem() string {
	if len(r.Repositories) == 0 || len(r.Refs) == 0 {
		return "repositories and refs are required"
	}
	for _, pat := range append(append([]string{}, r.Repositories...), r.Refs...) {
		if _, err := path.Match(pat, ""); err != nil || pat == "" {
			return fmt.Sprintf("bad pattern %q", pat)
		}
	}
	if len(r.Schemes) == 0 {
		return "schemes is required"
	}
	for _, s := range r.Schemes {
		if !knownSchemes[s] {
			return fmt.Sprintf("unknown scheme %q (want openpgp, ssh or x509)", s)
		}
	}
	for _, check := range []func() string{r.openpgpProblem, r.sshProblem, r.x509Problem} {
		if msg := check(); msg != "" {
			return msg
		}
	}
	return ""
}

func (r *PolicyRule) openpgpProblem() string {
	if r.accepts("openpgp") && (r.OpenPGP == nil || len(r.OpenPGP.Keyrings) == 0) {
		return "openpgp accepted but openpgp.keyrings is empty"
	}
	if r.OpenPGP == nil {
		return ""
	}
	for _, f := range r.OpenPGP.Fingerprints {
		if !validFpr(f) {
			return fmt.Sprintf("openpgp.fingerprints: %q is not 40 or 64 hex digits", f)
		}
	}
	for _, f := range r.OpenPGP.CertifiedBy {
		if !validFpr(f) {
			return fmt.Sprintf("openpgp.certified_by: %q is not 40 or 64 hex digits", f)
		}
	}
	if r.OpenPGP.Depth < 0 || r.OpenPGP.Depth > 8 {
		return fmt.Sprintf("openpgp.depth %d: want 1 to 8 (0 means 1)", r.OpenPGP.Depth)
	}
	if r.OpenPGP.Depth != 0 && len(r.OpenPGP.CertifiedBy) == 0 {
		return "openpgp.depth is set but openpgp.certified_by is empty"
	}
	return ""
}

func validFpr(f string) bool {
	n := normFpr(f)
	_, err := hex.DecodeString(n)
	return err == nil && (len(n) == 40 || len(n) == 64)
}

func (r *PolicyRule) sshProblem() string {
	if r.accepts("ssh") && (r.SSH == nil || r.SSH.AllowedSigners == "") {
		return "ssh accepted but ssh.allowed_signers is empty"
	}
	return ""
}

func (r *PolicyRule) x509Problem() string {
	if !r.accepts("x509") {
		return ""
	}
	if r.X509 == nil || (r.X509.TrustedRoot == "" && r.X509.CAPool == "") {
		return "x509 accepted but neither x509.trusted_root nor x509.ca_pool is set"
	}
	if r.X509.RequireTlog && r.X509.TrustedRoot == "" {
		return "x509.require_tlog needs x509.trusted_root (its transparency-log keys)"
	}
	if len(r.X509.Identities) == 0 {
		return "x509 accepted but x509.identities is empty"
	}
	for j, id := range r.X509.Identities {
		if _, err := path.Match(id.SAN, ""); err != nil || id.SAN == "" || id.Issuer == "" {
			return fmt.Sprintf("x509.identities[%d] needs a valid san pattern and an issuer", j)
		}
	}
	return ""
}

// LoadPolicy reads a policy file and the key material it names (paths
// relative to the file's directory). Errors wrap ErrMalformed for bad
// documents and material, or are file-system errors.
func LoadPolicy(file string) (*Policy, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	p, err := ParsePolicy(data)
	if err != nil {
		return nil, err
	}
	base := filepath.Dir(file)
	rel := func(f string) string {
		if filepath.IsAbs(f) {
			return f
		}
		return filepath.Join(base, f)
	}
	for i := range p.Rules {
		r := &p.Rules[i]
		if r.OpenPGP != nil {
			for _, k := range r.OpenPGP.Keyrings {
				el, err := LoadKeyring(rel(k))
				if err != nil {
					return nil, fmt.Errorf("rules[%d] openpgp keyring %s: %w", i, k, err)
				}
				r.keyring = append(r.keyring, el...)
			}
		}
		if r.SSH != nil && r.SSH.AllowedSigners != "" {
			if r.allowedSigners, err = LoadAllowedSigners(rel(r.SSH.AllowedSigners)); err != nil {
				return nil, fmt.Errorf("rules[%d]: %w", i, err)
			}
		}
		if r.X509 != nil {
			if r.X509.TrustedRoot != "" {
				tr, err := LoadTrustedRoot(rel(r.X509.TrustedRoot))
				if err != nil {
					return nil, fmt.Errorf("rules[%d]: %w", i, err)
				}
				r.trustedRoot = tr
			}
			if r.X509.CAPool != "" {
				if r.caPool, err = LoadCAPool(rel(r.X509.CAPool)); err != nil {
					return nil, fmt.Errorf("rules[%d]: %w", i, err)
				}
			}
		}
	}
	return p, nil
}

// Match returns the first rule covering repository and ref, or nil.
func (p *Policy) Match(repository, ref string) *PolicyRule {
	if p == nil {
		return nil
	}
	for i := range p.Rules {
		r := &p.Rules[i]
		if matchAny(repository, r.Repositories) && matchAny(ref, r.Refs) {
			return r
		}
	}
	return nil
}

func matchAny(s string, pats []string) bool {
	for _, p := range pats {
		if p == "*" || p == "**" {
			return true
		}
		if ok, _ := path.Match(p, s); ok {
			return true
		}
	}
	return false
}

func (r *PolicyRule) accepts(scheme string) bool {
	for _, s := range r.Schemes {
		if s == scheme {
			return true
		}
	}
	return false
}

// Options returns the verification material of the rule (loaded by
// LoadPolicy). With no fingerprints and no certified_by listed, every
// keyring key is trusted.
func (r *PolicyRule) Options() *Options {
	o := &Options{Keyring: r.keyring, AllowedSigners: r.allowedSigners, TrustedRoot: r.trustedRoot, CAPool: r.caPool}
	switch {
	case r.OpenPGP != nil && (len(r.OpenPGP.Fingerprints) > 0 || len(r.OpenPGP.CertifiedBy) > 0):
		o.TrustedFingerprints = r.OpenPGP.Fingerprints
		for _, f := range r.OpenPGP.CertifiedBy {
			o.Introducers = append(o.Introducers, Introducer{Fingerprint: f, Depth: r.OpenPGP.Depth})
		}
	default:
		for _, e := range r.keyring {
			o.TrustedFingerprints = append(o.TrustedFingerprints, fpr(e.PrimaryKey.Fingerprint))
		}
	}
	return o
}

// Decide applies the rule to a verification result: trusted only when the
// scheme is accepted, the letter is G (a trusted OpenPGP key, an SSH key in
// the allowed signers at the signer time, an X.509 chain verified at the
// signing time), every mergetag verified, and the signer matches the
// rule's principals or X.509 identities. The error explains an untrusted
// decision (wrapping ErrUntrusted, or the verification's own sentinel).
func (r *PolicyRule) Decide(res Result) (ledger.Decision, error) {
	untrusted := func(kind error, f string, a ...any) (ledger.Decision, error) {
		return ledger.DecisionUntrusted, &Error{Object: res.Object, Key: res.Key, Scheme: res.Scheme, Kind: kind, Detail: fmt.Sprintf(f, a...)}
	}
	if res.Scheme == "" {
		return untrusted(ErrUnsigned, "head is not signed")
	}
	if !r.accepts(res.Scheme) {
		return untrusted(ErrUntrusted, "scheme %s not accepted by the policy (accepts %s)", res.Scheme, strings.Join(r.Schemes, ", "))
	}
	if res.Err != nil {
		return ledger.DecisionUntrusted, res.Err
	}
	switch res.Scheme {
	case "ssh":
		if msg := r.SSH.refuses(res); msg != "" {
			return untrusted(ErrUntrusted, "%s", msg)
		}
	case "x509":
		if msg := r.X509.refusesTlog(res); msg != "" {
			return untrusted(ErrUntrusted, "%s", msg)
		}
		for _, id := range r.X509.Identities {
			if ok, _ := path.Match(id.SAN, res.Signer); ok && id.Issuer == res.Issuer {
				return ledger.DecisionTrusted, nil
			}
		}
		return untrusted(ErrUntrusted, "certificate identity %s (issuer %s) not among the policy's identities", res.Signer, res.Issuer)
	}
	return ledger.DecisionTrusted, nil
}

// refuses returns why the rule does not trust an SSH result that verified,
// or "": a principal outside the rule's patterns (any of res.Principals
// may match), or an sk signature without the flags the rule requires.
func (t *SSHTrust) refuses(res Result) string {
	if t == nil {
		return ""
	}
	if len(t.Principals) > 0 {
		ps := res.Principals
		if len(ps) == 0 && res.Signer != "" {
			ps = []string{res.Signer}
		}
		ok := false
		for _, p := range ps {
			if matchAny(p, t.Principals) {
				ok = true
			}
		}
		if !ok {
			return fmt.Sprintf("ssh principal %q not among the policy's principals", strings.Join(ps, ","))
		}
	}
	if sk := res.SK; sk != nil {
		if !sk.UserPresent && !t.NoTouchRequired {
			return fmt.Sprintf("FIDO signature without user presence (flags %#02x); the policy does not set no_touch_required", sk.Flags)
		}
		if !sk.UserVerification && t.VerifyRequired {
			return fmt.Sprintf("FIDO signature without user verification (flags %#02x); the policy sets verify_required", sk.Flags)
		}
	}
	return ""
}

// refusesTlog returns why the rule's transparency-log requirement is not
// met, or "".
func (t *X509Trust) refusesTlog(res Result) string {
	switch {
	case t == nil || !t.RequireTlog:
		return ""
	case res.Tlog == nil && res.TlogError != "":
		return "the policy requires a verified transparency-log entry: " + res.TlogError
	case res.Tlog == nil:
		return "the policy requires a verified transparency-log entry; the signature embeds none"
	case !res.Tlog.CertificateValid:
		return fmt.Sprintf("transparency-log entry (verified: %s) does not show an authenticated integration time within the signing certificate's validity (integrated %s)",
			strings.Join(res.Tlog.Verified, ", "), res.Tlog.IntegratedTime.Format(time.RFC3339))
	}
	return ""
}
