package ingest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/sigstore/sigstore-go/pkg/root"
)

// TestAttestCorpus gives every attestation and bundle of the shared corpus
// its expected outcome: the valid Sigstore bundles verify offline against
// the public-good trusted root and record with the certificate identity
// as runner identity and the statement's subjects as pins; NEG- files and
// the other refusals fail with their specific reason.
func TestAttestCorpus(t *testing.T) {
	dir := corpusDir(t, "attest")
	x509 := corpusDir(t, "x509/sigstore-go")
	tr, err := LoadTrustedRoot(filepath.Join(x509, "trusted-roots", "trusted-root-public-good.json"))
	if err != nil {
		t.Fatal(err)
	}
	anyID := &SigstorePolicy{TrustedRoot: tr, IssuerRegexp: ".*", SANRegexp: ".*"}
	type want struct {
		predicate string // the lane's predicate type; "" = test-result
		policy    *SigstorePolicy
		code      ledger.Code // "" = records
		reason    string
	}
	refusedCert := want{AnyPredicate, anyID, ledger.CodeInvalid, "certificate-signed envelope is verified through its transparency-log entry"}
	cases := map[string]want{
		"slsa-verifier/bcr-MODULE.bazel.intoto.jsonl":                                                     {AnyPredicate, anyID, "", ""},
		"slsa-verifier/bundle-valid-v0.3.intoto.sigstore":                                                 {AnyPredicate, anyID, "", ""},
		"slsa-verifier/gha_generic-v2.1.0-binary-linux-amd64-push-v14.intoto.jsonl":                       {"https://slsa.dev/provenance/v0.2", anyID, "", ""},
		"slsa-verifier/gha_delegator-v2.1.0-binary-linux-amd64-push-v14.build.slsa":                       {AnyPredicate, anyID, "", ""},
		"slsa-verifier/gha_container-based-v2.1.0-binary-linux-amd64-workflow_dispatch.intoto.build.slsa": {AnyPredicate, anyID, "", ""},
		"slsa-verifier/gha_maven-v2.1.0-binary-linux-amd64-push-v14.build.slsa":                           {AnyPredicate, anyID, "", ""},
		// A v0.1 bundle whose statement has an empty predicateType.
		"slsa-verifier/bundle-valid.intoto.sigstore":                {AnyPredicate, anyID, ledger.CodeInvalid, "predicateType: required"},
		"slsa-verifier/NEG-bundle-invalid-dsse-sig.intoto.sigstore": {AnyPredicate, anyID, ledger.CodeUnauthorized, "transparency-log entry does not verify"},
		"slsa-verifier/NEG-bundle-invalid-set.intoto.sigstore":      {AnyPredicate, anyID, ledger.CodeUnauthorized, "transparency-log entry does not verify"},
		"slsa-verifier/NEG-bundle-mismatch-tlog.intoto.sigstore":    {AnyPredicate, anyID, ledger.CodeUnauthorized, "transparency-log entry does not verify"},
		// The lane's policy names the BCR publisher's identity (set below).
		"slsa-verifier/NEG-bcr-MODULE-wrong-signer.bazel.intoto.jsonl": {AnyPredicate, nil, ledger.CodeUnauthorized, "certificate identity does not match"},
		// Bare envelopes signed by a Fulcio certificate: their log entry is not with them.
		"slsa-verifier/NEG-binary-linux-amd64-expired-cert.intoto.jsonl":                     refusedCert,
		"slsa-verifier/NEG-binary-linux-amd64-no-tlog-upload.intoto.jsonl":                   refusedCert,
		"slsa-verifier/NEG-binary-linux-amd64-untrusted-builder.intoto.jsonl":                refusedCert,
		"slsa-verifier/gha_generic-v1.2.1-binary-linux-amd64-push-v14.intoto.jsonl":          refusedCert,
		"slsa-verifier/gha_generic-v2.0.0-binary-linux-amd64-workflow_dispatch.intoto.jsonl": refusedCert,
		"slsa-verifier/gha_go-v2.0.0-binary-linux-amd64-push-v13.0.30.intoto.jsonl":          refusedCert,
		"slsa-verifier/annotated-tag.intoto.jsonl":                                           refusedCert,
		"slsa-verifier/binary-linux-amd64-multi-subject-first.intoto.jsonl":                  refusedCert,
		// The spec's examples: the test-result one records; the others are
		// not test results, and their placeholder digests are refused.
		"in-toto-attestation-spec/test-result-example1.json": {"", nil, "", ""},
		"in-toto-attestation-spec/svr-example1.json":         {"", nil, ledger.CodeInvalid, "predicateType: the lane expects"},
		"in-toto-attestation-spec/svr-example2.json":         {AnyPredicate, nil, ledger.CodeInvalid, "digest.sha256: want 64 lowercase hex"},
		"in-toto-attestation-spec/release-example4.json":     {AnyPredicate, nil, ledger.CodeInvalid, "needs a sha256 or gitCommit digest"},
	}
	// The BCR publisher's identity, read from the valid bundle.
	bcr, _ := os.ReadFile(filepath.Join(dir, "slsa-verifier/bcr-MODULE.bazel.intoto.jsonl"))
	p := testParams()
	p.Commit, p.PredicateType, p.Sigstore = "", AnyPredicate, anyID
	p.Commit = strings.Repeat("a", 40)
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

	for name, w := range cases {
		t.Run(name, func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			format, err := Detect(name, body)
			if err != nil {
				t.Fatal(err)
			}
			p := testParams()
			p.PredicateType, p.Sigstore = w.predicate, w.policy
			if strings.Contains(name, "test-result") {
				p.Commit = "" // the statement's gitCommit subject gives it
			}
			res, err := DecodeFormat(context.Background(), format, body, p)
			if w.code != "" {
				var le *ledger.Error
				if err == nil || !errors.As(err, &le) || le.Code != w.code || !strings.Contains(err.Error(), w.reason) {
					t.Fatalf("err = %v, want %s naming %q", err, w.code, w.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			checkOriginal(t, res, body)
			_, d := outcomes(t, res)
			if format == FormatSigstore && (d.Identity == nil || d.Identity.Kind != "sigstore-certificate" || d.Identity.Name == "") {
				t.Fatalf("identity %+v", d.Identity)
			}
			if format == FormatSigstore && len(res.Evidence[0].Subject.Artifacts) == 0 {
				t.Fatalf("no subject pins")
			}
		})
	}
	// Files that are neither format (gcloud's describe output, npm's
	// attestation list) are refused when recorded as native evidence.
	for _, name := range []string{"gcb-v0.1-gcloud-container-github.json", "gcb-v1.0-gcloud-container-github.json",
		"NEG-gcb-gcloud-container-invalid-signature.json", "NEG-gcb-v1.0-single-invalid-sig.json",
		"npm-provenance-npm-test-cli-v1-prega.tgz.json", "NEG-npm-provenance-npm-test-cli-v1-prega-invalidsigprov.tgz.json"} {
		body, _ := os.ReadFile(filepath.Join(dir, "slsa-verifier", name))
		res, err := Decode(context.Background(), MediaEvidence, body, testParams())
		if err == nil {
			_, _, err = ledger.PrepareEvidence(res.Records[0].Body)
		}
		if err == nil {
			t.Errorf("%s recorded as evidence", name)
		}
	}
}

// TestSigstoreGoCorpus checks sigstore-go's own bundles: the DSSE bundle
// with two signatures is refused (exactly one is required), a bundle
// without a policy is refused, and a statement with only sha512 subjects
// is refused after verification naming the digest.
func TestSigstoreGoCorpus(t *testing.T) {
	dir := corpusDir(t, "x509/sigstore-go")
	tr, err := LoadTrustedRoot(filepath.Join(dir, "trusted-roots", "trusted-root-public-good.json"))
	if err != nil {
		t.Fatal(err)
	}
	pol := &SigstorePolicy{TrustedRoot: tr, IssuerRegexp: ".*", SANRegexp: ".*"}
	for _, tc := range []struct {
		file   string
		policy *SigstorePolicy
		code   ledger.Code
		reason string
	}{
		{"dsse-2sigs.sigstore.json", pol, ledger.CodeUnauthorized, "exactly one signature is required"},
		{"dsse.sigstore.json", nil, ledger.CodePrecondition, "--sigstore-trusted-root"},
		{"dsse.sigstore.json", pol, ledger.CodeInvalid, "needs a sha256 or gitCommit digest"},
		{"othername.sigstore.json", pol, ledger.CodeInvalid, "exactly one --artifact"},
	} {
		body, err := os.ReadFile(filepath.Join(dir, tc.file))
		if err != nil {
			t.Fatal(err)
		}
		p := testParams()
		p.PredicateType, p.Sigstore = AnyPredicate, tc.policy
		_, err = Decode(context.Background(), "application/vnd.dev.sigstore.bundle+json;version=0.1", body, p)
		var le *ledger.Error
		if err == nil || !errors.As(err, &le) || le.Code != tc.code || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("%s: err = %v, want %s naming %q", tc.file, err, tc.code, tc.reason)
		}
	}
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
