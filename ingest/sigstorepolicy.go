package ingest

import (
	"bytes"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"regexp"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/sigstore/sigstore-go/pkg/root"
	"gopkg.in/yaml.v3"
)

// SigstorePolicy is how a lane (or a token) accepts Sigstore bundles:
// the trusted root (a trusted_root.json read by the operator, never named
// by the request) and who may sign, exactly one of:
//   - a certificate identity: the OIDC issuer and the subject alternative
//     name, each exact or a regular expression (Go RE2 syntax, anchored by
//     the caller); at least one of SAN and SANRegexp, and of Issuer and
//     IssuerRegexp, is set;
//   - a named public key (KeyName, PublicKey): the bundle's
//     verificationMaterial is a publicKey and its signature verifies with
//     this key.
//
// TimestampOnly accepts, in place of a transparency-log entry, an RFC 3161
// signed timestamp from a timestamp authority of the trusted root (the
// signing time GitHub-instance attestations prove). Without it every
// bundle must carry a log entry.
type SigstorePolicy struct {
	TrustedRoot   root.TrustedMaterial
	Issuer        string
	IssuerRegexp  string
	SAN           string
	SANRegexp     string
	KeyName       string
	PublicKey     crypto.PublicKey
	TimestampOnly bool
}

// LoadTrustedRoot reads a trusted_root.json (Sigstore's TrustedRoot
// message, protobuf-specs) from path.
func LoadTrustedRoot(path string) (*root.TrustedRoot, error) {
	return root.NewTrustedRootFromPath(path)
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

// SigstoreRule is one rule of a SigstoreConfig: it applies to bundles
// recorded for Lane ("" any lane) by the token named Token ("" any
// token), and accepts either the certificate identity it names (Issuer or
// IssuerRegexp, and SAN or SANRegexp: RE2, matched as sigstore-go
// matches, unanchored unless the expression anchors itself) or the public
// key named PublicKey (a name of the file's public_keys). TimestampOnly:
// see SigstorePolicy.
type SigstoreRule struct {
	Lane          string `yaml:"lane,omitempty" json:"lane,omitempty"`
	Token         string `yaml:"token,omitempty" json:"token,omitempty"`
	Issuer        string `yaml:"issuer,omitempty" json:"issuer,omitempty"`
	IssuerRegexp  string `yaml:"issuer_regexp,omitempty" json:"issuer_regexp,omitempty"`
	SAN           string `yaml:"san,omitempty" json:"san,omitempty"`
	SANRegexp     string `yaml:"san_regexp,omitempty" json:"san_regexp,omitempty"`
	PublicKey     string `yaml:"public_key,omitempty" json:"public_key,omitempty"`
	TimestampOnly bool   `yaml:"timestamp_only,omitempty" json:"timestamp_only,omitempty"`
}

// SigstoreKey is one named public key of a --sigstore-policy file: Name
// is what rules and recorded identities call it, PEM one PEM "PUBLIC KEY"
// block (PKIX: ECDSA, Ed25519 or RSA).
type SigstoreKey struct {
	Name string `yaml:"name" json:"name"`
	PEM  string `yaml:"pem" json:"pem"`
}

// SigstoreConfig is the server's Sigstore trust setting: the trusted
// root the operator configured (`ledger serve --sigstore-trusted-root`),
// the rules and the public keys they name (`--sigstore-policy`, keyed by
// name). A request never names any of them. A SigstoreConfig is read-only
// once loaded: safe for concurrent use.
type SigstoreConfig struct {
	TrustedRoot root.TrustedMaterial
	Rules       []SigstoreRule
	Keys        map[string]crypto.PublicKey
}

// SigstorePolicyFile is the shape of a --sigstore-policy file (YAML or
// JSON): {"public_keys": [SigstoreKey...], "rules": [SigstoreRule...]}.
type SigstorePolicyFile struct {
	PublicKeys []SigstoreKey  `yaml:"public_keys,omitempty" json:"public_keys,omitempty"`
	Rules      []SigstoreRule `yaml:"rules" json:"rules"`
}

// keyNameRe is what a public key's name may be: it is shown as the
// recorded signer.
var keyNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@/-]{0,127}$`)

// ParseSigstorePolicy reads a --sigstore-policy file's bytes: a YAML (or
// JSON) object with a "rules" list and an optional "public_keys" list.
// Every rule gives either an issuer (exact or regexp) and a SAN (exact or
// regexp), not both forms of one, or public_key, the name of one of
// public_keys; regular expressions must compile; lanes must be lane
// names. Keys need unique names (letters, digits, ._@/-, at most 128) and
// one PEM public key each; a key no rule names is refused. Unknown fields
// are refused. Errors are CodeInvalid naming "rules[i].field" or
// "public_keys[i].field" and never quote the file.
func ParseSigstorePolicy(data []byte) ([]SigstoreRule, map[string]crypto.PublicKey, error) {
	var f SigstorePolicyFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, nil, ledger.FieldError("rules", "not a YAML object with a rules list (fields lane, token, issuer, issuer_regexp, san, san_regexp, public_key, timestamp_only) and an optional public_keys list (fields name, pem)")
	}
	if len(f.Rules) == 0 {
		return nil, nil, ledger.FieldError("rules", "no rules: every bundle would be refused")
	}
	keys := map[string]crypto.PublicKey{}
	for i, k := range f.PublicKeys {
		field := fmt.Sprintf("public_keys[%d].", i)
		if !keyNameRe.MatchString(k.Name) {
			return nil, nil, ledger.FieldError(field+"name", "must be 1 to 128 letters, digits or ._@/- (starting with a letter or digit)")
		}
		if _, dup := keys[k.Name]; dup {
			return nil, nil, ledger.FieldError(field+"name", "%q is named twice", k.Name)
		}
		pub, err := parsePublicKeyPEM(k.PEM)
		if err != nil {
			return nil, nil, ledger.FieldError(field+"pem", "%s", err.Error())
		}
		keys[k.Name] = pub
	}
	used := map[string]bool{}
	for i, r := range f.Rules {
		field := fmt.Sprintf("rules[%d].", i)
		if r.Lane != "" && !ledger.ValidLane(r.Lane) {
			return nil, nil, ledger.FieldError(field+"lane", "must be a lane name (name/vN)")
		}
		if r.PublicKey != "" {
			if r.Issuer != "" || r.IssuerRegexp != "" || r.SAN != "" || r.SANRegexp != "" {
				return nil, nil, ledger.FieldError(field+"public_key", "a rule names either a public key or a certificate identity (issuer, san), not both")
			}
			if _, ok := keys[r.PublicKey]; !ok {
				return nil, nil, ledger.FieldError(field+"public_key", "%q is not a name in public_keys", clip(r.PublicKey))
			}
			used[r.PublicKey] = true
			continue
		}
		for _, pair := range []struct {
			name, exact, re string
		}{{"issuer", r.Issuer, r.IssuerRegexp}, {"san", r.SAN, r.SANRegexp}} {
			if (pair.exact == "") == (pair.re == "") {
				return nil, nil, ledger.FieldError(field+pair.name, "give exactly one of %s and %s_regexp (or public_key instead of both)", pair.name, pair.name)
			}
			if pair.re != "" {
				if _, err := regexp.Compile(pair.re); err != nil {
					return nil, nil, ledger.FieldError(field+pair.name+"_regexp", "does not compile (RE2 syntax)")
				}
			}
		}
	}
	for i, k := range f.PublicKeys {
		if !used[k.Name] {
			return nil, nil, ledger.FieldError(fmt.Sprintf("public_keys[%d].name", i), "%q is named by no rule", k.Name)
		}
	}
	return f.Rules, keys, nil
}

// ParseSigstoreRules is ParseSigstorePolicy for a file without public
// keys: the rules only.
func ParseSigstoreRules(data []byte) ([]SigstoreRule, error) {
	rules, keys, err := ParseSigstorePolicy(data)
	if err == nil && len(keys) > 0 {
		return nil, ledger.FieldError("public_keys", "this reader takes no public keys: use ParseSigstorePolicy")
	}
	return rules, err
}

// parsePublicKeyPEM is the one PEM "PUBLIC KEY" block (PKIX) of s, with
// nothing but whitespace around it.
func parsePublicKeyPEM(s string) (crypto.PublicKey, error) {
	blk, rest := pem.Decode([]byte(s))
	if blk == nil || blk.Type != "PUBLIC KEY" || len(bytes.TrimSpace(rest)) != 0 {
		return nil, errors.New(`not one PEM "PUBLIC KEY" block`)
	}
	pub, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, errors.New("not a PKIX public key: " + clip(err.Error()))
	}
	return pub, nil
}

// keyID is "sha256:HEX" of pub's PKIX DER encoding, "" if it has none.
func keyID(pub crypto.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// LoadSigstoreConfig reads the trusted root at rootPath and the policy
// at policyPath (ParseSigstorePolicy). Both are required.
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
	rules, keys, err := ParseSigstorePolicy(data)
	if err != nil {
		return nil, err
	}
	for _, r := range rules {
		if r.TimestampOnly && len(tr.TimestampingAuthorities()) == 0 {
			return nil, ledger.FieldError("sigstore-policy", "a rule sets timestamp_only but the trusted root %s has no timestamp authority: no timestamp could verify", rootPath)
		}
	}
	return &SigstoreConfig{TrustedRoot: tr, Rules: rules, Keys: keys}, nil
}

// Policy returns the policy for a bundle recorded for lane by the token
// named token: the first rule, in file order, whose lane and token match.
// c nil (no trust setting) or no matching rule is a CodePrecondition error
// naming the missing setting.
func (c *SigstoreConfig) Policy(lane, token string) (*SigstorePolicy, error) {
	if c == nil || c.TrustedRoot == nil {
		return nil, &ledger.Error{Code: ledger.CodePrecondition, Field: "sigstore-trusted-root",
			Message: "this server has no Sigstore trust setting (ledger serve --sigstore-trusted-root FILE --sigstore-policy FILE): Sigstore bundles are refused"}
	}
	for _, r := range c.Rules {
		if (r.Lane == "" || r.Lane == lane) && (r.Token == "" || r.Token == token) {
			pol := &SigstorePolicy{TrustedRoot: c.TrustedRoot, Issuer: r.Issuer, IssuerRegexp: r.IssuerRegexp,
				SAN: r.SAN, SANRegexp: r.SANRegexp, TimestampOnly: r.TimestampOnly}
			if r.PublicKey != "" {
				pol.KeyName, pol.PublicKey = r.PublicKey, c.Keys[r.PublicKey]
			}
			return pol, nil
		}
	}
	return nil, &ledger.Error{Code: ledger.CodePrecondition, Field: "sigstore-policy",
		Message: fmt.Sprintf("no rule of the server's --sigstore-policy applies to lane %q and token %q: the bundle is refused", clip(lane), clip(token))}
}
