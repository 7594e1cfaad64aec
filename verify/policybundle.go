package verify

import (
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/sigstore/sigstore-go/pkg/root"
)

// policyFiles lists the file names a parsed policy refers to, in rule
// order, each once.
func policyFiles(p *Policy) []string {
	var out []string
	seen := map[string]bool{}
	add := func(f string) {
		if f != "" && !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	for _, r := range p.Rules {
		if r.OpenPGP != nil {
			for _, k := range r.OpenPGP.Keyrings {
				add(k)
			}
		}
		if r.SSH != nil {
			add(r.SSH.AllowedSigners)
		}
		if r.X509 != nil {
			add(r.X509.TrustedRoot)
			add(r.X509.CAPool)
		}
	}
	return out
}

// ReadPolicyBundle reads the policy file at file and every file it names
// (relative paths are relative to the policy file's directory, as in
// LoadPolicy), returning the policy bytes and the files keyed by the name
// the policy gives them: the content of a registered policy
// (ledger.PolicyRecord). It is what `ledger policy apply` sends; the server
// never reads these files. The bundle is checked with PolicyFromBundle
// before it is returned.
func ReadPolicyBundle(file string) (policy []byte, files map[string][]byte, err error) {
	policy, err = os.ReadFile(file)
	if err != nil {
		return nil, nil, fmt.Errorf("read policy: %w", err)
	}
	p, err := ParsePolicy(policy)
	if err != nil {
		return nil, nil, err
	}
	base := filepath.Dir(file)
	files = map[string][]byte{}
	for _, name := range policyFiles(p) {
		path := name
		if !filepath.IsAbs(path) {
			path = filepath.Join(base, name)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, fmt.Errorf("policy file %s: %w", name, err)
		}
		files[name] = b
	}
	if _, err := PolicyFromBundle(policy, files); err != nil {
		return nil, nil, err
	}
	return policy, files, nil
}

// PolicyFromBundle parses a registered policy (its YAML and the files it
// names, as ReadPolicyBundle returns them) and loads its key material from
// files alone, touching no file system. The returned policy's Digest is
// ledger.PolicyDigest of the bundle (it covers the keys), not of the YAML
// alone. Errors wrap ErrMalformed and name the rule and the file, never
// its content; a named file missing from files is an error.
func PolicyFromBundle(policy []byte, files map[string][]byte) (*Policy, error) {
	p, err := ParsePolicy(policy)
	if err != nil {
		return nil, err
	}
	for i := range p.Rules {
		if err := p.Rules[i].loadFrom(i, files); err != nil {
			return nil, err
		}
	}
	for name := range files {
		found := false
		for _, n := range policyFiles(p) {
			found = found || n == name
		}
		if !found {
			return nil, newErr(ErrMalformed, "file %q is not named by the policy", name)
		}
	}
	p.Digest = ledger.PolicyDigest(string(policy), files)
	return p, nil
}

// loadFrom loads rule i's key material from files (see PolicyFromBundle).
func (r *PolicyRule) loadFrom(i int, files map[string][]byte) error {
	get := func(name string) ([]byte, error) {
		b, ok := files[name]
		if !ok {
			return nil, newErr(ErrMalformed, "rules[%d]: file %q is not in the policy's files", i, name)
		}
		return b, nil
	}
	if r.OpenPGP != nil {
		for _, k := range r.OpenPGP.Keyrings {
			b, err := get(k)
			if err != nil {
				return err
			}
			el, err := ParseKeyring(b)
			if err != nil {
				return newErr(ErrMalformed, "rules[%d] openpgp keyring %q does not parse", i, k)
			}
			r.keyring = append(r.keyring, el...)
		}
	}
	if r.SSH != nil && r.SSH.AllowedSigners != "" {
		b, err := get(r.SSH.AllowedSigners)
		if err != nil {
			return err
		}
		if r.allowedSigners, err = ParseAllowedSigners(b); err != nil {
			return newErr(ErrMalformed, "rules[%d] ssh allowed signers %q do not parse", i, r.SSH.AllowedSigners)
		}
	}
	if r.X509 == nil {
		return nil
	}
	if r.X509.TrustedRoot != "" {
		b, err := get(r.X509.TrustedRoot)
		if err != nil {
			return err
		}
		tr, err := root.NewTrustedRootFromJSON(b)
		if err != nil {
			return newErr(ErrMalformed, "rules[%d] x509 trusted root %q does not parse", i, r.X509.TrustedRoot)
		}
		r.trustedRoot = tr
	}
	if r.X509.CAPool != "" {
		b, err := get(r.X509.CAPool)
		if err != nil {
			return err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return newErr(ErrMalformed, "rules[%d] x509 ca pool %q holds no PEM certificate", i, r.X509.CAPool)
		}
		r.caPool = pool
	}
	return nil
}
