package ingest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
)

// sigstoreGoCorpus is the shared corpus's x509/sigstore-go folder, or a
// skip naming it.
func sigstoreGoCorpus(t *testing.T) string {
	t.Helper()
	dir := filepath.Join("..", "..", "shared", "corpus", "x509", "sigstore-go")
	if _, err := os.Stat(filepath.Join(dir, "public-key-validity.sigstore.json")); err != nil {
		t.Skipf("sigstore-go corpus absent (%v): ../shared/corpus/x509/sigstore-go", err)
	}
	return dir
}

// publicKeyBundle is sigstore-go's public-key-validity bundle (a message
// signature by a managed key, timestamped by an RFC 3161 TSA, no log
// entry), its trusted root, its key, and Params pinning its digest.
func publicKeyBundle(t *testing.T) (body []byte, pol SigstorePolicy, p Params) {
	t.Helper()
	dir := sigstoreGoCorpus(t)
	body, err := os.ReadFile(filepath.Join(dir, "public-key-validity.sigstore.json"))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := LoadTrustedRoot(filepath.Join(dir, "trusted-roots", "public-key-validity.json"))
	if err != nil {
		t.Fatal(err)
	}
	pemText, err := os.ReadFile(filepath.Join(dir, "public-key-validity.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := parsePublicKeyPEM(string(pemText))
	if err != nil {
		t.Fatal(err)
	}
	p = testParams()
	p.PredicateType = AnyPredicate
	p.Artifacts = map[string]string{"artifact": "sha256:6ae8a75555209fd6c44157c0aed8016e763ff435a19cf186f76863140143ff72"}
	return body, SigstorePolicy{TrustedRoot: tr, KeyName: "release-key", PublicKey: pub, TimestampOnly: true}, p
}

// otherKey is a fresh P-256 public key.
func otherKey(t *testing.T) *ecdsa.PublicKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &k.PublicKey
}

// wantRefused fails unless err is a *ledger.Error of code whose text
// holds reason.
func wantRefused(t *testing.T, name string, err error, code ledger.Code, reason string) {
	t.Helper()
	var le *ledger.Error
	if !errors.As(err, &le) || le.Code != code || !strings.Contains(err.Error(), reason) {
		t.Errorf("%s: err = %v; want %s naming %q", name, err, code, reason)
	}
}

// TestSigstorePublicKeyAndTimestampBundles: a bundle signed by a managed
// key and timestamped by a TSA (no log entry) records under a policy that
// names that key and sets TimestampOnly, with the key's name as signer;
// it is refused, naming why, where the policy names another key, names a
// certificate identity, requires a log entry, or trusts no TSA that
// signed its timestamp. A certificate bundle under a key policy is
// refused too.
func TestSigstorePublicKeyAndTimestampBundles(t *testing.T) {
	body, pol, p := publicKeyBundle(t)
	ctx := context.Background()
	decode := func(pol SigstorePolicy, body []byte) (*Result, error) {
		q := p
		q.Sigstore = &pol
		return Decode(ctx, MediaSigstoreBundle, body, q)
	}
	res, err := decode(pol, body)
	if err != nil {
		t.Fatalf("public-key bundle under its key and timestamp_only: %v", err)
	}
	got, d := outcomes(t, res)
	if id := d.Identity; id == nil || id.Kind != "sigstore-public-key" || id.Name != "release-key" || !strings.HasPrefix(id.KeyID, "sha256:") {
		t.Errorf("identity = %+v, want the policy's key by name", d.Identity)
	}
	if len(got) != 1 || got["sigstore message signature"] != Passed {
		t.Errorf("cases = %v, want the one message-signature case passed", got)
	}

	wrong := pol
	wrong.PublicKey = otherKey(t)
	_, err = decode(wrong, body)
	wantRefused(t, "another key", err, ledger.CodeUnauthorized, `does not verify with the policy's public key "release-key"`)

	needsLog := pol
	needsLog.TimestampOnly = false
	_, err = decode(needsLog, body)
	wantRefused(t, "no timestamp_only", err, ledger.CodeUnauthorized, "no transparency-log entry, and the lane's policy requires one")

	ident := SigstorePolicy{TrustedRoot: pol.TrustedRoot, IssuerRegexp: ".*", SANRegexp: ".*", TimestampOnly: true}
	_, err = decode(ident, body)
	wantRefused(t, "identity policy", err, ledger.CodeUnauthorized, "the lane's policy allows no public key")

	pg, err := LoadTrustedRoot(filepath.Join(sigstoreGoCorpus(t), "trusted-roots", "trusted-root-public-good.json"))
	if err != nil {
		t.Fatal(err)
	}
	untrustedTSA := pol
	untrustedTSA.TrustedRoot = pg
	_, err = decode(untrustedTSA, body)
	wantRefused(t, "TSA not in the trusted root", err, ledger.CodeUnauthorized, "no RFC 3161 timestamp verifies with a timestamp authority of the trusted root")

	noTSA := pol
	noTSA.TrustedRoot = emptyRoot(t)
	_, err = decode(noTSA, body)
	wantRefused(t, "trusted root without TSA", err, ledger.CodeUnauthorized, "the trusted root has no timestamp authority")

	cert, err := os.ReadFile(filepath.Join(sigstoreGoCorpus(t), "dsse.sigstore.json"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = decode(pol, cert)
	wantRefused(t, "certificate bundle under a key policy", err, ledger.CodeUnauthorized, `allows only the public key "release-key"`)
}

// TestSigstoreConformanceReasons gives, for each sigstore-conformance and
// GitHub attestation case whose refusal named another check than the one
// the case is about, a bundle of the shared corpus altered the same way,
// and asserts the refusal names that case's own reason (the conformance
// suite's files are not in the corpus; each stand-in says what it copies):
//   - bundle-empty-certificate-chain: x509CertificateChain.certificates [];
//   - bundle-with-root-cert: the chain holds the root before the
//     intermediate it issued (a root at the end of a v0.1 chain, as
//     real bundles carry, is ignored: TestAttestCorpus);
//   - rekor2-timestamp-with-incorrect-time: a line-wrapped base64
//     signedTimestamp decodes as the same bytes, so the bundle verifies as
//     it does unwrapped (the case's own refusal, the timestamp outside the
//     certificate's validity, then follows from the bytes);
//   - managed-key-wrong-key: the policy's key is not the signer's;
//   - GitHub's invalid-signature cases: a DSSE envelope whose signature
//     does not verify is refused for the signature, not its payloadType;
//   - a .jsonl of two bundles: one bundle per request (and `ledger
//     record` detects it as a bundle, to say so).
func TestSigstoreConformanceReasons(t *testing.T) {
	dir := sigstoreGoCorpus(t)
	ctx := context.Background()
	pg, err := LoadTrustedRoot(filepath.Join(dir, "trusted-roots", "trusted-root-public-good.json"))
	if err != nil {
		t.Fatal(err)
	}
	anyID := &SigstorePolicy{TrustedRoot: pg, IssuerRegexp: ".*", SANRegexp: ".*"}
	dsseBody, err := os.ReadFile(filepath.Join(dir, "dsse.sigstore.json"))
	if err != nil {
		t.Fatal(err)
	}
	edit := func(body []byte, f func(map[string]any)) []byte {
		var doc map[string]any
		if err := json.Unmarshal(body, &doc); err != nil {
			t.Fatal(err)
		}
		f(doc)
		out, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	chain := func(doc map[string]any) map[string]any {
		return doc["verificationMaterial"].(map[string]any)["x509CertificateChain"].(map[string]any)
	}
	decode := func(pol *SigstorePolicy, body []byte) error {
		p := testParams()
		p.PredicateType, p.Sigstore = AnyPredicate, pol
		_, err := Decode(ctx, MediaSigstoreBundle, body, p)
		return err
	}

	empty := edit(dsseBody, func(d map[string]any) { chain(d)["certificates"] = []any{} })
	wantRefused(t, "bundle-empty-certificate-chain", decode(anyID, empty), ledger.CodeUnauthorized, "the certificate chain is empty")

	rootFirst := edit(dsseBody, func(d map[string]any) {
		c := chain(d)["certificates"].([]any)
		if len(c) != 3 {
			t.Fatalf("dsse.sigstore.json's chain has %d certificates, want leaf, intermediate, root", len(c))
		}
		c[1], c[2] = c[2], c[1]
	})
	wantRefused(t, "bundle-with-root-cert", decode(anyID, rootFirst), ledger.CodeUnauthorized, "carries a root (self-signed CA) certificate")

	keyBody, pol, p := publicKeyBundle(t)
	wrapped := edit(keyBody, func(d map[string]any) {
		ts := d["verificationMaterial"].(map[string]any)["timestampVerificationData"].(map[string]any)["rfc3161Timestamps"].([]any)[0].(map[string]any)
		s := ts["signedTimestamp"].(string)
		var b strings.Builder
		for len(s) > 76 {
			b.WriteString(s[:76] + "\n")
			s = s[76:]
		}
		ts["signedTimestamp"] = b.String() + s
	})
	if !bytes.Contains(wrapped, []byte(`\n`)) {
		t.Fatal("the stand-in's timestamp is not line-wrapped")
	}
	q := p
	q.Sigstore = &pol
	if _, err := Decode(ctx, MediaSigstoreBundle, wrapped, q); err != nil {
		t.Errorf("rekor2-timestamp-with-incorrect-time (line-wrapped base64): %v; want it read as the same bytes, and verified", err)
	}
	wrongKey := pol
	wrongKey.PublicKey = otherKey(t)
	q.Sigstore = &wrongKey
	_, err = Decode(ctx, MediaSigstoreBundle, keyBody, q)
	wantRefused(t, "managed-key-wrong-key", err, ledger.CodeUnauthorized, "does not verify with the policy's public key")

	otherType := edit(dsseBody, func(d map[string]any) {
		d["dsseEnvelope"].(map[string]any)["payloadType"] = "application/vnd.example+json"
	})
	wantRefused(t, "invalid signature, other payloadType", decode(anyID, otherType), ledger.CodeUnauthorized, "the DSSE signature does not verify")

	var line bytes.Buffer
	if err := json.Compact(&line, dsseBody); err != nil {
		t.Fatal(err)
	}
	jsonl := append(append(line.Bytes(), '\n'), append(line.Bytes(), '\n')...)
	wantRefused(t, ".jsonl of two bundles", decode(anyID, jsonl), ledger.CodeInvalid, "send one bundle per request (this body has 2 JSON lines)")
	if f, err := Detect("attestations.jsonl", jsonl); f != FormatSigstore || err != nil {
		t.Errorf("Detect(.jsonl of two bundles) = %q, %v; want %s, whose decoder names one bundle per request", f, err, FormatSigstore)
	}
}

// TestSigstorePolicyPublicKeys: a --sigstore-policy file names public keys
// and rules that use them; every malformed key, unknown or unused name, or
// rule naming both a key and an identity is refused naming its field.
func TestSigstorePolicyPublicKeys(t *testing.T) {
	der, err := x509.MarshalPKIXPublicKey(otherKey(t))
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	indent := "      " + strings.ReplaceAll(strings.TrimSpace(keyPEM), "\n", "\n      ")
	keys := "public_keys:\n  - name: release-key\n    pem: |\n" + indent + "\n"
	rules, parsed, err := ParseSigstorePolicy([]byte(keys + "rules:\n  - {lane: ci-tests/v1, public_key: release-key, timestamp_only: true}\n  - {issuer: https://x.example, san: a@example.com}\n"))
	if err != nil || len(rules) != 2 || parsed["release-key"] == nil || !rules[0].TimestampOnly {
		t.Fatalf("rules %+v keys %v: %v", rules, parsed, err)
	}
	c := &SigstoreConfig{TrustedRoot: emptyRoot(t), Rules: rules, Keys: parsed}
	if pol, err := c.Policy("ci-tests/v1", ""); err != nil || pol.KeyName != "release-key" || pol.PublicKey == nil || !pol.TimestampOnly {
		t.Errorf("policy for the key's lane: %+v, %v", pol, err)
	}
	if pol, err := c.Policy("other/v1", ""); err != nil || pol.PublicKey != nil || pol.TimestampOnly {
		t.Errorf("policy for another lane: %+v, %v", pol, err)
	}
	for _, tc := range []struct{ file, field string }{
		{keys + "rules:\n  - {public_key: nope}\n", "rules[0].public_key"},
		{keys + "rules:\n  - {public_key: release-key, issuer: https://x.example}\n", "rules[0].public_key"},
		{keys + "rules:\n  - {issuer: https://x.example, san: a@example.com}\n", "public_keys[0].name"},
		{"public_keys:\n  - {name: k, pem: not-a-key}\nrules:\n  - {public_key: k}\n", "public_keys[0].pem"},
		{"public_keys:\n  - {name: 'bad name', pem: x}\nrules:\n  - {public_key: k}\n", "public_keys[0].name"},
		{keys + "  - name: release-key\n    pem: x\nrules:\n  - {public_key: release-key}\n", "public_keys[1].name"},
		{keys + "rules:\n  - {public_key: release-key, timestamp: true}\n", "rules"},
	} {
		_, _, err := ParseSigstorePolicy([]byte(tc.file))
		var le *ledger.Error
		if !errors.As(err, &le) || le.Code != ledger.CodeInvalid || le.Field != tc.field {
			t.Errorf("%q: err = %v; want CodeInvalid naming %s", tc.file, err, tc.field)
		}
	}
	if _, err := ParseSigstoreRules([]byte(keys + "rules:\n  - {public_key: release-key}\n")); err == nil {
		t.Error("ParseSigstoreRules took a file with public keys")
	}

	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	os.WriteFile(policy, []byte(keys+"rules:\n  - {public_key: release-key, timestamp_only: true}\n"), 0o644)
	noTSA := filepath.Join(dir, "root.json")
	os.WriteFile(noTSA, []byte(`{"mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1"}`), 0o644)
	if _, err := LoadSigstoreConfig(noTSA, policy); err == nil || !strings.Contains(err.Error(), "no timestamp authority") {
		t.Errorf("timestamp_only with a root without TSA: %v", err)
	}
	if body := sigstoreGoCorpus(t); body != "" {
		cfg, err := LoadSigstoreConfig(filepath.Join(body, "trusted-roots", "public-key-validity.json"), policy)
		if err != nil || cfg.Keys["release-key"] == nil {
			t.Errorf("load with a TSA root: %+v, %v", cfg, err)
		}
	}
}
