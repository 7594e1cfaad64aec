package verify

import (
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

func TestParsePolicyErrors(t *testing.T) {
	cases := map[string]string{
		"unknown key":        "version: 1\nrules:\n  - repositories: [a]\n    refs: [b]\n    schemes: [ssh]\n    ssh: {allowed_signers: s, principal: x}\n",
		"unknown top key":    "version: 1\nrule: []\n",
		"version":            "version: 2\nrules:\n  - repositories: [a]\n    refs: [b]\n    schemes: [ssh]\n    ssh: {allowed_signers: s}\n",
		"no rules":           "version: 1\nrules: []\n",
		"no schemes":         "version: 1\nrules:\n  - repositories: [a]\n    refs: [b]\n",
		"unknown scheme":     "version: 1\nrules:\n  - repositories: [a]\n    refs: [b]\n    schemes: [gpg]\n",
		"ssh without file":   "version: 1\nrules:\n  - repositories: [a]\n    refs: [b]\n    schemes: [ssh]\n",
		"x509 no identities": "version: 1\nrules:\n  - repositories: [a]\n    refs: [b]\n    schemes: [x509]\n    x509: {trusted_root: r.json}\n",
		"bad fingerprint":    "version: 1\nrules:\n  - repositories: [a]\n    refs: [b]\n    schemes: [openpgp]\n    openpgp: {keyrings: [k], fingerprints: [XYZ]}\n",
		"bad pattern":        "version: 1\nrules:\n  - repositories: [\"[a\"]\n    refs: [b]\n    schemes: [ssh]\n    ssh: {allowed_signers: s}\n",
		"two documents":      "version: 1\nrules:\n  - repositories: [a]\n    refs: [b]\n    schemes: [ssh]\n    ssh: {allowed_signers: s}\n---\nversion: 1\n",
		"empty":              "",
		"bad certified_by":   "version: 1\nrules:\n  - repositories: [a]\n    refs: [b]\n    schemes: [openpgp]\n    openpgp: {keyrings: [k], certified_by: [XYZ]}\n",
		"depth alone":        "version: 1\nrules:\n  - repositories: [a]\n    refs: [b]\n    schemes: [openpgp]\n    openpgp: {keyrings: [k], depth: 2}\n",
		"depth too deep":     "version: 1\nrules:\n  - repositories: [a]\n    refs: [b]\n    schemes: [openpgp]\n    openpgp: {keyrings: [k], certified_by: [" + strings.Repeat("A", 40) + "], depth: 9}\n",
		"tlog without root":  "version: 1\nrules:\n  - repositories: [a]\n    refs: [b]\n    schemes: [x509]\n    x509: {ca_pool: p.pem, require_tlog: true, identities: [{san: \"*\", issuer: i}]}\n",
		"fido option typo":   "version: 1\nrules:\n  - repositories: [a]\n    refs: [b]\n    schemes: [ssh]\n    ssh: {allowed_signers: s, no_touch: true}\n",
		"wrong type":         "version: one\n",
	}
	for name, doc := range cases {
		if _, err := ParsePolicy([]byte(doc)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: error %v, want ErrMalformed", name, err)
		}
	}
	// The error names the field.
	_, err := ParsePolicy([]byte(cases["bad certified_by"]))
	if err == nil || !strings.Contains(err.Error(), "rules[0]: openpgp.certified_by") {
		t.Errorf("bad certified_by: %v, want the field named", err)
	}
	ok := "version: 1\nrules:\n  - repositories: [a]\n    refs: [b]\n    schemes: [openpgp, ssh, x509]\n    openpgp: {keyrings: [k], certified_by: [" + strings.Repeat("A", 40) + "], depth: 2}\n    ssh: {allowed_signers: s, no_touch_required: true, verify_required: true}\n    x509: {trusted_root: r.json, require_tlog: true, identities: [{san: \"*\", issuer: i}]}\n"
	p, err := ParsePolicy([]byte(ok))
	if err != nil {
		t.Fatalf("policy with the new fields: %v", err)
	}
	if r := p.Rules[0]; r.OpenPGP.Depth != 2 || len(r.OpenPGP.CertifiedBy) != 1 || !r.SSH.NoTouchRequired || !r.SSH.VerifyRequired || !r.X509.RequireTlog {
		t.Errorf("fields not read: %+v %+v %+v", r.OpenPGP, r.SSH, r.X509)
	}
	if o := p.Rules[0].Options(); len(o.Introducers) != 1 || o.Introducers[0].Depth != 2 || len(o.TrustedFingerprints) != 0 {
		t.Errorf("options: introducers %+v trusted %v; want the certifier as introducer only", o.Introducers, o.TrustedFingerprints)
	}
}

// TestPolicyDecisions applies policies to generated OpenPGP, SSH and X.509
// objects: the decision is separate from the verdict.
func TestPolicyDecisions(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	alice := pgpKey(t, "Alice", fixtureT0, 0)
	other := pgpKey(t, "Other", fixtureT0, 0)
	var ring strings.Builder
	if err := alice.Serialize(&writerAdapter{&ring}); err != nil {
		t.Fatal(err)
	}
	if err := other.Serialize(&writerAdapter{&ring}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "ring.gpg"), []byte(ring.String()), 0o644)
	sshA := sshKey(t)
	os.WriteFile(filepath.Join(dir, "signers"), []byte("ops-bot "+authorizedLine(sshA.PublicKey())+"\n"), 0o644)
	ca := newTestCA(t, "Fixture CA")
	os.WriteFile(filepath.Join(dir, "ca.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}), 0o644)
	leaf, key := ca.leaf(t, "alice@example.com", now.Add(-time.Hour), now.Add(time.Hour))
	eve, ekey := ca.leaf(t, "eve@evil.example", now.Add(-time.Hour), now.Add(time.Hour))
	os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(`version: 1
rules:
  - repositories: ["example.com/*"]
    refs: ["refs/heads/*"]
    schemes: [openpgp, ssh, x509]
    openpgp:
      keyrings: [ring.gpg]
      fingerprints: [`+fpr(alice.PrimaryKey.Fingerprint)+`]
    ssh:
      allowed_signers: signers
      principals: ["release-*"]
    x509:
      ca_pool: ca.pem
      identities:
        - san: "*@example.com"
          issuer: "CN=Fixture CA"
  - repositories: ["example.com/*"]
    refs: ["refs/tags/*"]
    schemes: [ssh]
    ssh:
      allowed_signers: signers
`), 0o644)
	pol, err := LoadPolicy(filepath.Join(dir, "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	body := unsignedCommit(fixtureT0.Add(time.Hour), "fixture message")
	cases := []struct {
		name, ref string
		raw       []byte
		verdict   ledger.Verdict
		decision  ledger.Decision
		want      error
	}{
		{"openpgp trusted", "refs/heads/main", signObject("commit", body, pgpSigner(t, alice, fixtureT0.Add(time.Hour), 0)), ledger.VerdictGood, ledger.DecisionTrusted, nil},
		{"openpgp key in keyring, not listed", "refs/heads/main", signObject("commit", body, pgpSigner(t, other, fixtureT0.Add(time.Hour), 0)), ledger.VerdictGood, ledger.DecisionUntrusted, ErrUntrusted},
		{"ssh principal not allowed", "refs/heads/main", signObject("commit", body, sshSigner(t, sshA, "git")), ledger.VerdictGood, ledger.DecisionUntrusted, ErrUntrusted},
		{"ssh on tags rule", "refs/tags/v1", signObject("commit", body, sshSigner(t, sshA, "git")), ledger.VerdictGood, ledger.DecisionTrusted, nil},
		{"openpgp not accepted on tags", "refs/tags/v1", signObject("commit", body, pgpSigner(t, alice, fixtureT0.Add(time.Hour), 0)), ledger.VerdictUnknownKey, ledger.DecisionUntrusted, ErrUntrusted},
		{"x509 identity trusted", "refs/heads/main", signObject("commit", body, cmsSigner(t, leaf, key)), ledger.VerdictGood, ledger.DecisionTrusted, nil},
		{"x509 identity not listed", "refs/heads/main", signObject("commit", body, cmsSigner(t, eve, ekey)), ledger.VerdictGood, ledger.DecisionUntrusted, ErrUntrusted},
		{"unsigned", "refs/heads/main", body, ledger.VerdictUnsigned, ledger.DecisionUntrusted, ErrUnsigned},
	}
	for _, tc := range cases {
		rule := pol.Match("example.com/app", tc.ref)
		if rule == nil {
			t.Fatalf("%s: no rule", tc.name)
		}
		opts := rule.Options()
		opts.Now = now
		r, _ := VerifyObject(tc.raw, "commit", opts)
		d, err := rule.Decide(r)
		if r.Verdict != tc.verdict || d != tc.decision {
			t.Errorf("%s: verdict %s decision %s (%v); want %s %s", tc.name, r.Verdict, d, err, tc.verdict, tc.decision)
		}
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: decision error %v, want %v", tc.name, err, tc.want)
		}
	}
	if pol.Match("example.org/app", "refs/heads/main") != nil {
		t.Error("rule matched another repository")
	}
}

type writerAdapter struct{ b *strings.Builder }

func (w *writerAdapter) Write(p []byte) (int, error) { return w.b.Write(p) }
