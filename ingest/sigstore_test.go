package ingest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/sigstore/sigstore-go/pkg/root"
)

// corpusWant is the expected outcome of one corpus file: recorded (code
// "") or refused with code and a message naming reason.
type corpusWant struct {
	predicate string          // the lane's predicate type; "" = test-result
	policy    *SigstorePolicy // the lane's Sigstore policy (nil: none)
	code      ledger.Code
	reason    string
}

// TestAttestCorpus gives every file under attest/ and every bundle and
// statement under x509/sigstore-go/ of the shared corpus its expected
// outcome, and fails when a file there has none (so a new corpus file
// cannot go untested):
//   - the valid Sigstore bundles verify offline against the public-good
//     trusted root and record with the certificate identity as runner
//     identity and the statement's subjects as pins;
//   - NEG- files are refused with their own reason where one can be told
//     offline: a non-canonical DSSE signature, a signed entry timestamp
//     that does not verify, a log entry for another signature, a signer
//     or builder identity the lane's policy does not name;
//   - bare envelopes signed by a Fulcio certificate verify up to the time
//     of signing, which only their Rekor entry shows, and are refused
//     naming it (SOURCES.tsv's "verifies" needs that online lookup);
//   - bundles that verify but carry a Statement the ledger cannot pin
//     (no predicateType; sha512-only subjects) say the bundle verified;
//   - bundles signed by a public key, npm attestation lists and gcloud's
//     Cloud Build output are refused naming what they are;
//   - the in-toto spec's examples record where their digests are real and
//     are refused naming the placeholder digest elsewhere.
func TestAttestCorpus(t *testing.T) {
	dir := corpusDir(t, "attest")
	sg := corpusDir(t, "x509/sigstore-go")
	tr, err := LoadTrustedRoot(filepath.Join(sg, "trusted-roots", "trusted-root-public-good.json"))
	if err != nil {
		t.Fatal(err)
	}
	anyID := &SigstorePolicy{TrustedRoot: tr, IssuerRegexp: ".*", SANRegexp: ".*"}
	// slsa-github-generator's own builders at a release tag: what a lane
	// that trusts that builder names (slsa-verifier's trusted builder ids).
	builder := &SigstorePolicy{TrustedRoot: tr, Issuer: "https://token.actions.githubusercontent.com",
		SANRegexp: `^https://github\.com/slsa-framework/slsa-github-generator/\.github/workflows/(generator_generic_slsa3|builder_go_slsa3)\.yml@refs/tags/v[0-9]+\.[0-9]+\.[0-9]+$`}
	noRoot := &SigstorePolicy{TrustedRoot: emptyRoot(t), IssuerRegexp: ".*", SANRegexp: ".*"}
	untimed := "nothing with a bare envelope shows it was signed while the certificate was valid"
	bare := func(pol *SigstorePolicy) corpusWant {
		return corpusWant{AnyPredicate, pol, ledger.CodeUnauthorized, untimed}
	}
	wrongID := corpusWant{AnyPredicate, builder, ledger.CodeUnauthorized, "certificate identity (issuer https://token.actions.githubusercontent.com, SAN https://github.com/asraa/slsa-github-generator/.github/workflows/builder_go_slsa3.yml@refs/"}
	cases := map[string]corpusWant{
		"slsa-verifier/bcr-MODULE.bazel.intoto.jsonl":                                                     {AnyPredicate, anyID, "", ""},
		"slsa-verifier/bundle-valid-v0.3.intoto.sigstore":                                                 {AnyPredicate, anyID, "", ""},
		"slsa-verifier/gha_generic-v2.1.0-binary-linux-amd64-push-v14.intoto.jsonl":                       {"https://slsa.dev/provenance/v0.2", anyID, "", ""},
		"slsa-verifier/gha_delegator-v2.1.0-binary-linux-amd64-push-v14.build.slsa":                       {AnyPredicate, anyID, "", ""},
		"slsa-verifier/gha_container-based-v2.1.0-binary-linux-amd64-workflow_dispatch.intoto.build.slsa": {AnyPredicate, anyID, "", ""},
		"slsa-verifier/gha_maven-v2.1.0-binary-linux-amd64-push-v14.build.slsa":                           {AnyPredicate, anyID, "", ""},
		// A v0.1 bundle that verifies, whose Statement has an empty
		// predicateType (required by in-toto v0.1 and v1).
		"slsa-verifier/bundle-valid.intoto.sigstore":                {AnyPredicate, anyID, ledger.CodeInvalid, "predicateType: required (the bundle verified"},
		"slsa-verifier/NEG-bundle-invalid-dsse-sig.intoto.sigstore": {AnyPredicate, anyID, ledger.CodeUnauthorized, "sig: not canonical base64"},
		"slsa-verifier/NEG-bundle-invalid-set.intoto.sigstore":      {AnyPredicate, anyID, ledger.CodeUnauthorized, "signed entry timestamp verifies"},
		"slsa-verifier/NEG-bundle-mismatch-tlog.intoto.sigstore":    {AnyPredicate, anyID, ledger.CodeUnauthorized, "records another signature than the bundle's"},
		// The lane's policy names the BCR publisher's identity (set below).
		"slsa-verifier/NEG-bcr-MODULE-wrong-signer.bazel.intoto.jsonl": {AnyPredicate, nil, ledger.CodeUnauthorized, "SAN https://github.com/loosebazooka/aa-test/.github/workflows/malicious_attestation"},
		// Bare envelopes signed by a Fulcio certificate: the generator's
		// releases verify up to the signing time; the NEG- ones come from
		// a fork's workflow, which a lane trusting the generator refuses.
		"slsa-verifier/gha_generic-v1.2.1-binary-linux-amd64-push-v14.intoto.jsonl":          bare(builder),
		"slsa-verifier/gha_generic-v2.0.0-binary-linux-amd64-workflow_dispatch.intoto.jsonl": bare(builder),
		"slsa-verifier/gha_go-v2.0.0-binary-linux-amd64-push-v13.0.30.intoto.jsonl":          bare(builder),
		"slsa-verifier/annotated-tag.intoto.jsonl":                                           bare(builder),
		"slsa-verifier/binary-linux-amd64-multi-subject-first.intoto.jsonl":                  bare(anyID),
		"slsa-verifier/NEG-binary-linux-amd64-untrusted-builder.intoto.jsonl":                wrongID,
		"slsa-verifier/NEG-binary-linux-amd64-expired-cert.intoto.jsonl":                     wrongID,
		"slsa-verifier/NEG-binary-linux-amd64-no-tlog-upload.intoto.jsonl":                   wrongID,
		"slsa-verifier/gcb-v0.1-gcloud-container-github.json":                                {AnyPredicate, anyID, ledger.CodeInvalid, "Cloud KMS keys"},
		"slsa-verifier/gcb-v1.0-gcloud-container-github.json":                                {AnyPredicate, anyID, ledger.CodeInvalid, "Cloud KMS keys"},
		"slsa-verifier/NEG-gcb-gcloud-container-invalid-signature.json":                      {AnyPredicate, anyID, ledger.CodeInvalid, "Cloud KMS keys"},
		"slsa-verifier/NEG-gcb-v1.0-single-invalid-sig.json":                                 {AnyPredicate, anyID, ledger.CodeInvalid, "Cloud KMS keys"},
		"slsa-verifier/npm-provenance-npm-test-cli-v1-prega.tgz.json":                        {AnyPredicate, anyID, ledger.CodeInvalid, "npm registry attestations list"},
		"slsa-verifier/NEG-npm-provenance-npm-test-cli-v1-prega-invalidsigprov.tgz.json":     {AnyPredicate, anyID, ledger.CodeInvalid, "npm registry attestations list"},
		// The spec's examples: the test-result one records; the others are
		// not test results, and placeholder digests are refused.
		"in-toto-attestation-spec/test-result-example1.json": {"", nil, "", ""},
		"in-toto-attestation-spec/reference-example1.json":   {AnyPredicate, nil, "", ""},
		"in-toto-attestation-spec/reference-example2.json":   {AnyPredicate, nil, "", ""},
		"in-toto-attestation-spec/svr-example1.json":         {"", nil, ledger.CodeInvalid, "predicateType: the lane expects"},
		"in-toto-attestation-spec/svr-example2.json":         {AnyPredicate, nil, ledger.CodeInvalid, "digest.sha256: want 64 lowercase hex"},
		"in-toto-attestation-spec/svr-example3.json":         {AnyPredicate, nil, ledger.CodeInvalid, "digest.sha256: want 64 lowercase hex"},
		"in-toto-attestation-spec/release-example1.json":     {AnyPredicate, nil, ledger.CodeInvalid, "digest.sha256: want 64 lowercase hex"},
		"in-toto-attestation-spec/release-example3.json":     {AnyPredicate, nil, ledger.CodeInvalid, "digest.sha256: want 64 lowercase hex"},
		"in-toto-attestation-spec/release-example4.json":     {AnyPredicate, nil, ledger.CodeInvalid, "needs a sha256 or gitCommit digest"},
		// sigstore-go's bundles and statements.
		"x509/sigstore-go/dsse-2sigs.sigstore.json":                   {AnyPredicate, anyID, ledger.CodeUnauthorized, "exactly one signature is required"},
		"x509/sigstore-go/dsse.sigstore.json":                         {AnyPredicate, anyID, ledger.CodeInvalid, "needs a sha256 or gitCommit digest (the bundle verified"},
		"x509/sigstore-go/othername.sigstore.json":                    {AnyPredicate, anyID, ledger.CodeInvalid, "exactly one --artifact"},
		"x509/sigstore-go/bundle-provenance.json":                     {AnyPredicate, anyID, ledger.CodeInvalid, "needs a sha256 or gitCommit digest (the bundle verified"},
		"x509/sigstore-go/sigstore.js@2.0.0-provenance.sigstore.json": {AnyPredicate, anyID, ledger.CodeInvalid, "needs a sha256 or gitCommit digest (the bundle verified"},
		"x509/sigstore-go/bundle-publish.json":                        {AnyPredicate, anyID, ledger.CodeUnauthorized, "signed by a public key, not a Fulcio certificate"},
		"x509/sigstore-go/public-key-validity.sigstore.json":          {AnyPredicate, anyID, ledger.CodeUnauthorized, "signed by a public key, not a Fulcio certificate"},
		"x509/sigstore-go/statement-provenance-sigstorejs1.3.0.json":  {AnyPredicate, nil, ledger.CodeInvalid, "needs a sha256 or gitCommit digest"},
		"x509/sigstore-go/intoto.txt":                                 {AnyPredicate, nil, "", ""},
	}
	// Files that are inputs of others, not attestations: subject
	// artifacts, keys, trust material and a signing config.
	notInputs := map[string]bool{"attest/SOURCES.tsv": true, "x509/sigstore-go/hello_world.txt": true,
		"x509/sigstore-go/public-key-validity.pem": true, "x509/sigstore-go/publish_key.pub": true, "x509/sigstore-go/signing_config.v0.2.json": true}
	root := filepath.Dir(filepath.Dir(sg))
	for _, top := range []string{"attest", "x509/sigstore-go"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			rel = filepath.ToSlash(rel)
			if strings.Contains(rel, "/artifacts/") || strings.Contains(rel, "/trusted-roots/") || strings.Contains(rel, "/tuf/") || notInputs[rel] {
				return nil
			}
			if _, ok := cases[strings.TrimPrefix(rel, "attest/")]; !ok {
				t.Errorf("corpus file %s has no expected outcome in this test", rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The BCR publisher's identity, read from the valid bundle.
	bcr, _ := os.ReadFile(filepath.Join(dir, "slsa-verifier/bcr-MODULE.bazel.intoto.jsonl"))
	p := testParams()
	p.PredicateType, p.Sigstore = AnyPredicate, anyID
	res, err := Decode(context.Background(), MediaSigstoreBundle, bcr, p)
	if err != nil {
		t.Fatalf("bcr bundle: %v", err)
	}
	_, d := outcomes(t, res)
	if d.Identity == nil || d.Identity.Name == "" || d.Identity.Issuer == "" {
		t.Fatalf("bcr identity %+v", d.Identity)
	}
	w := cases["slsa-verifier/NEG-bcr-MODULE-wrong-signer.bazel.intoto.jsonl"]
	w.policy = &SigstorePolicy{TrustedRoot: tr, Issuer: d.Identity.Issuer, SAN: d.Identity.Name}
	cases["slsa-verifier/NEG-bcr-MODULE-wrong-signer.bazel.intoto.jsonl"] = w

	check := func(t *testing.T, name string, body []byte, w corpusWant) {
		t.Helper()
		format, err := Detect(name, body)
		if err == nil {
			p := testParams()
			p.PredicateType, p.Sigstore = w.predicate, w.policy
			if strings.Contains(name, "test-result") {
				p.Commit = "" // the statement's gitCommit subject gives it
			}
			var res *Result
			if res, err = DecodeFormat(context.Background(), format, body, p); err == nil && w.code == "" {
				checkOriginal(t, res, body)
				_, d := outcomes(t, res)
				if format == FormatSigstore && (d.Identity == nil || d.Identity.Kind != "sigstore-certificate" || d.Identity.Name == "") {
					t.Fatalf("identity %+v", d.Identity)
				}
				if len(res.Evidence[0].Subject.Artifacts) == 0 && res.Evidence[0].Subject.Commit == "" {
					t.Fatalf("no subject pins")
				}
				return
			}
		}
		if w.code == "" {
			t.Fatalf("want recorded, got %v", err)
		}
		var le *ledger.Error
		if err == nil || !errors.As(err, &le) || le.Code != w.code || !strings.Contains(err.Error(), w.reason) {
			t.Fatalf("err = %v, want %s naming %q", err, w.code, w.reason)
		}
		if strings.Contains(err.Error(), "-----BEGIN") || len(err.Error()) > 600 {
			t.Fatalf("the refusal echoes the file: %v", err)
		}
	}
	for name, w := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name)
			if strings.HasPrefix(name, "x509/") {
				path = filepath.Join(root, name)
			}
			body, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			check(t, name, body, w)
		})
	}

	// Variants made here: each check is reached only when the ones before
	// it pass, so each variant names its own reason.
	read := func(name string) map[string]any {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	enc := func(m map[string]any) []byte { b, _ := json.Marshal(m); return b }
	flip := func(s string) string {
		b, _ := base64.StdEncoding.DecodeString(s)
		b[len(b)/2] ^= 1
		return base64.StdEncoding.EncodeToString(b)
	}
	env := read("slsa-verifier/gha_generic-v2.0.0-binary-linux-amd64-workflow_dispatch.intoto.jsonl")
	sig0 := env["signatures"].([]any)[0].(map[string]any)
	goodSig, cert := sig0["sig"].(string), sig0["cert"].(string)
	sig0["sig"] = flip(goodSig)
	t.Run("bare envelope, flipped signature", func(t *testing.T) {
		check(t, "x.jsonl", enc(env), corpusWant{AnyPredicate, builder, ledger.CodeUnauthorized, "signature does not verify with the certificate's key"})
	})
	sig0["sig"] = goodSig
	t.Run("bare envelope, trusted root without its Fulcio authority", func(t *testing.T) {
		check(t, "x.jsonl", enc(env), corpusWant{AnyPredicate, noRoot, ledger.CodeUnauthorized, "does not chain to a Fulcio authority"})
	})
	t.Run("bare envelope, no Sigstore trust setting", func(t *testing.T) {
		check(t, "x.jsonl", enc(env), corpusWant{AnyPredicate, nil, ledger.CodePrecondition, "sigstore-trusted-root"})
	})
	sig0["cert"] = strings.Replace(cert, "MII", "MIJ", 1)
	t.Run("bare envelope, corrupt certificate", func(t *testing.T) {
		check(t, "x.jsonl", enc(env), corpusWant{AnyPredicate, builder, ledger.CodeInvalid, "signatures[0].cert"})
	})
	sig0["cert"] = cert
	env["payload"] = base64.StdEncoding.EncodeToString([]byte(`{"_type":"https://in-toto.io/Statement/v1"}`))
	t.Run("bare envelope, another payload", func(t *testing.T) {
		check(t, "x.jsonl", enc(env), corpusWant{AnyPredicate, builder, ledger.CodeUnauthorized, "signature does not verify"})
	})
	b := read("slsa-verifier/bundle-valid-v0.3.intoto.sigstore")
	bsig := b["dsseEnvelope"].(map[string]any)["signatures"].([]any)[0].(map[string]any)
	bsig["sig"] = flip(bsig["sig"].(string))
	t.Run("bundle, flipped DSSE signature", func(t *testing.T) {
		check(t, "x.sigstore", enc(b), corpusWant{AnyPredicate, anyID, ledger.CodeUnauthorized, "DSSE signature does not verify with the certificate's key"})
	})
}

// emptyRoot is a trusted root with no authorities: nothing verifies.
func emptyRoot(t *testing.T) *root.TrustedRoot {
	t.Helper()
	tr, err := root.NewTrustedRootFromJSON([]byte(`{"mediaType":"application/vnd.dev.sigstore.trustedroot+json;version=0.1"}`))
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestSigstoreConfig checks the identity rules of --sigstore-policy: the
// first rule whose lane and token match applies, a bundle with no
// matching rule is refused naming the policy, a bad file is refused
// naming the rule's field, and a rule's identity is what sigstore-go
// checks (a bundle whose certificate is another identity is refused).
func TestSigstoreConfig(t *testing.T) {
	for _, tc := range []struct {
		file, want string
	}{
		{"rules: []", "rules"},
		{"rules: [{lane: ci-tests/v1, issuer: x}]", "rules[0].san"},
		{"rules: [{issuer: x, issuer_regexp: y, san: z}]", "rules[0].issuer"},
		{"rules: [{issuer: x, san_regexp: '('}]", "rules[0].san_regexp"},
		{"rules: [{lane: 'no lane', issuer: x, san: y}]", "rules[0].lane"},
		{"rules: [{issuer: x, san: y, extra: 1}]", "rules"},
	} {
		_, err := ParseSigstoreRules([]byte(tc.file))
		var le *ledger.Error
		if err == nil || !errors.As(err, &le) || le.Field != tc.want {
			t.Errorf("%q: err = %v, want the field %s named", tc.file, err, tc.want)
		}
	}
	rules, err := ParseSigstoreRules([]byte(`rules:
  - {lane: other/v1, issuer: https://a, san: first}
  - {lane: ci-tests/v1, token: ci, issuer: https://b, san_regexp: '^second$'}
  - {token: ci, issuer_regexp: '.*', san: third}
`))
	if err != nil {
		t.Fatal(err)
	}
	c := &SigstoreConfig{TrustedRoot: emptyRoot(t), Rules: rules}
	for _, tc := range []struct{ lane, token, san string }{
		{"other/v1", "", "first"}, {"ci-tests/v1", "ci", ""}, {"third/v1", "ci", "third"},
	} {
		pol, err := c.Policy(tc.lane, tc.token)
		if err != nil || pol.SAN != tc.san {
			t.Errorf("lane %s token %s: policy %+v, %v; want SAN %q", tc.lane, tc.token, pol, err, tc.san)
		}
	}
	var le *ledger.Error
	if _, err := c.Policy("ci-tests/v1", "other"); !errors.As(err, &le) || le.Code != ledger.CodePrecondition || le.Field != "sigstore-policy" {
		t.Errorf("no matching rule: err = %v, want a precondition naming sigstore-policy", err)
	}

	dir := filepath.Join("..", "..", "shared", "corpus", "x509", "sigstore-go")
	tr, err := LoadTrustedRoot(filepath.Join(dir, "trusted-roots", "trusted-root-public-good.json"))
	if err != nil {
		t.Skipf("sigstore-go corpus absent: %v", err)
	}
	body, err := os.ReadFile(filepath.Join(dir, "dsse.sigstore.json"))
	if err != nil {
		t.Skipf("sigstore-go corpus absent: %v", err)
	}
	p := testParams()
	p.PredicateType, p.Token = AnyPredicate, "ci"
	p.SigstoreTrust = &SigstoreConfig{TrustedRoot: tr, Rules: []SigstoreRule{{Issuer: "https://nobody.example", SANRegexp: ".*"}}}
	if _, err := Decode(context.Background(), MediaSigstoreBundle, body, p); err == nil || !strings.Contains(err.Error(), "identity") {
		t.Errorf("bundle under a rule of another issuer: err = %v, want the identity refused", err)
	}
}
