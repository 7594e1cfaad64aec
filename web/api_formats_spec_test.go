package web

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	svrv01 "github.com/in-toto/attestation/go/predicates/svr/v01"
	trv0 "github.com/in-toto/attestation/go/predicates/test_result/v0"
	vsav1 "github.com/in-toto/attestation/go/predicates/vsa/v1"
	attv1 "github.com/in-toto/attestation/go/v1"
	sslibdsse "github.com/secure-systems-lab/go-securesystemslib/dsse"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// intotoStatement validates a Statement with the in-toto attestation
// framework's own Go library (github.com/in-toto/attestation/go/v1):
// protojson decodes it into the Statement proto, refusing unknown fields,
// and Statement.Validate checks the type, the subjects and their digests.
// The predicate is decoded the same way into pred (strict, or ignoring
// fields the proto lacks when lax); it returns the predicate's JSON.
func intotoStatement(t *testing.T, payload []byte, wantType string, pred proto.Message, lax bool) []byte {
	t.Helper()
	var st attv1.Statement
	if err := protojson.Unmarshal(payload, &st); err != nil {
		t.Fatalf("in-toto attestation library: the Statement does not decode: %v\n%s", err, payload)
	}
	if err := st.Validate(); err != nil {
		t.Fatalf("in-toto attestation library: Statement.Validate: %v\n%s", err, payload)
	}
	if st.GetPredicateType() != wantType {
		t.Fatalf("predicateType %q, want %q", st.GetPredicateType(), wantType)
	}
	pb, err := protojson.Marshal(st.GetPredicate())
	if err != nil {
		t.Fatal(err)
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: lax}).Unmarshal(pb, pred); err != nil {
		t.Fatalf("in-toto attestation library: the %s predicate does not decode: %v\n%s", wantType, err, pb)
	}
	return pb
}

// validTestResult checks a test-result v0.1 Statement with the in-toto
// library: the Statement as intotoStatement, the predicate into the
// library's TestResult proto, result one of the spec's three, and the
// configuration the spec requires present with every ResourceDescriptor
// valid (ResourceDescriptor.Validate). The library has no Validate for
// this predicate, so the last two are the spec's words checked on the
// library's decoding.
func validTestResult(t *testing.T, payload []byte) *trv0.TestResult {
	t.Helper()
	var tr trv0.TestResult
	intotoStatement(t, payload, "https://in-toto.io/attestation/test-result/v0.1", &tr, false)
	if r := tr.GetResult(); r != "PASSED" && r != "WARNED" && r != "FAILED" {
		t.Fatalf("result %q", r)
	}
	if len(tr.GetConfiguration()) == 0 {
		t.Fatalf("the test-result predicate has no configuration (required by test-result v0.1)\n%s", payload)
	}
	for i, rd := range tr.GetConfiguration() {
		if err := rd.Validate(); err != nil {
			t.Fatalf("configuration[%d]: ResourceDescriptor.Validate: %v", i, err)
		}
	}
	return &tr
}

// TestSpecValidatorsOnSpecExamples: the validators the answers are held
// to accept the spec's own examples (in-toto attestation spec, shared
// corpus), so that a refusal of the ledger's answers is the ledger's.
func TestSpecValidatorsOnSpecExamples(t *testing.T) {
	dir := filepath.Join("..", "..", "shared", "corpus", "attest", "in-toto-attestation-spec")
	b, err := os.ReadFile(filepath.Join(dir, "test-result-example1.json"))
	if err != nil {
		t.Skipf("in-toto attestation spec corpus absent (%v)", err)
	}
	validTestResult(t, b)
	for _, f := range []string{"svr-example1.json", "svr-example3.json"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		// The examples' digests are shortened ("3A244fd47e07d10..."): the
		// library refuses them as digests; the predicate is what is checked.
		var raw struct {
			Predicate json.RawMessage `json:"predicate"`
		}
		_ = json.Unmarshal(b, &raw)
		var p svrv01.SimpleVerificationResult
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw.Predicate, &p); err != nil || p.GetVerifier().GetId() == "" {
			t.Fatalf("%s: %v", f, err)
		}
	}
}

// TestReadinessAnswersBySpec: the readiness verdict as a VSA is checked by
// slsa-verifier's own command, `slsa-verifier verify-vsa` with the log's
// public key (slsaVerifierCLI): it refuses the FAILED VSA because its verificationResult is
// not PASSED, which lists "FAILED" as its verified level, accepts the
// PASSED one with the operator's verifier id and refuses it for another
// verifier id, another resource, another subject or another key. The VSA,
// the SVR and the evidence's test-result Statement decode and validate
// with the in-toto attestation library.
func TestReadinessAnswersBySpec(t *testing.T) {
	const verifierID = "https://ledger.example.com/"
	e := newAPIEnv(t, Config{VerifierID: verifierID})
	admin, _, err := e.store.CreateToken(context.Background(), "admin", ledger.ScopeAdmin, nil)
	if err != nil {
		t.Fatal(err)
	}
	commit := fmt.Sprintf("%040x", 2) // testEvidence(1)'s
	rel := fmt.Sprintf("version: 9.9.8\ncomponents:\n  - {name: core, repository: github.com/ml-explore/mlx, reviewed: %s, head: %s}\n"+
		"gates:\n  - {id: qmv, kind: lane, lane: qmv-bias-sum/v1, component: core, backends: [cpu], cases: 216}\n", commit, commit)
	if code, body := e.do(t, http.MethodPut, "/api/v1/releases/9.9.8", admin, rel, "Content-Type", "application/yaml"); code != http.StatusCreated {
		t.Fatalf("define release: %d %s", code, body)
	}
	pub := logPublicKey(t, e)
	keyID, err := sslibdsse.SHA256KeyID(pub)
	if err != nil {
		t.Fatal(err)
	}
	bin := slsaVerifierCLI(t)
	dir := t.TempDir()
	writeKey := func(name string, k ed25519.PublicKey) string {
		der, err := x509.MarshalPKIXPublicKey(k)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	logKey := writeKey("log.pem", pub)
	// slsaVerify runs slsa-verifier verify-vsa on env and returns "" when
	// it says PASSED, else what it printed.
	slsaVerify := func(env []byte, key, id, resource, digest string, levels []string) string {
		att := filepath.Join(dir, "vsa.dsse.json")
		if err := os.WriteFile(att, env, 0o600); err != nil {
			t.Fatal(err)
		}
		args := []string{"verify-vsa", "--attestation-path", att, "--public-key-path", key, "--public-key-id", keyID,
			"--verifier-id", id, "--resource-uri", resource, "--subject-digest", digest}
		for _, l := range levels {
			args = append(args, "--verified-level", l)
		}
		out, err := exec.Command(bin, args...).CombinedOutput()
		t.Logf("slsa-verifier verify-vsa --verifier-id %s --resource-uri %s --subject-digest %s --verified-level %v: %v\n%s", id, resource, digest, levels, err, bytes.TrimSpace(out))
		if err == nil && strings.Contains(string(out), "Verifying VSA: PASSED") {
			return ""
		}
		if err == nil {
			t.Fatalf("slsa-verifier exited 0 without PASSED: %s", out)
		}
		return string(out)
	}
	get := func(format string) []byte {
		code, env := e.do(t, http.MethodGet, "/api/v1/releases/9.9.8/readiness?format="+format, "", nil)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", format, code, env)
		}
		return env
	}
	const resource = "ledger:release/9.9.8"
	gitDigest := "gitCommit:" + commit

	// Not ready: FAILED, as slsa-verifier says.
	env := get("vsa")
	if out := slsaVerify(env, logKey, verifierID, resource, gitDigest, nil); !strings.Contains(out, "Verifying VSA: FAILED: verificationResult is not PASSED: verification result is not Passed: FAILED") {
		t.Fatalf("slsa-verifier on the FAILED VSA: %q, want it refused for its result FAILED", out)
	}
	payload, err := independentVerify(t, pub, env)
	if err != nil {
		t.Fatal(err)
	}
	var vsa vsav1.VerificationSummary
	intotoStatement(t, payload, PredicateVSA, &vsa, false)
	if vsa.GetVerificationResult() != "FAILED" || !reflect.DeepEqual(vsa.GetVerifiedLevels(), []string{"FAILED"}) || vsa.GetVerifier().GetId() != verifierID {
		t.Fatalf("FAILED VSA: result %s levels %v verifier %s", vsa.GetVerificationResult(), vsa.GetVerifiedLevels(), vsa.GetVerifier().GetId())
	}
	payload, err = independentVerify(t, pub, get("svr"))
	if err != nil {
		t.Fatalf("the SVR does not verify with sigstore's DSSE verifier: %v", err)
	}
	svr := checkSVR(t, payload, verifierID)
	if len(svr.Properties) != 0 {
		t.Fatalf("SVR of a release that is not ready: properties %v, want none", svr.Properties)
	}

	// The evidence that makes it ready, and its test-result Statement.
	code, body := e.do(t, http.MethodPost, "/api/v1/evidence", e.record, testEvidence(1))
	if code != http.StatusCreated {
		t.Fatalf("post: %d %s", code, body)
	}
	var ans AppendedJSON
	_ = json.Unmarshal(body, &ans)
	_, st := e.do(t, http.MethodGet, "/api/v1/evidence/"+ans.ID+"?format=in-toto", "", nil)
	tr := validTestResult(t, st)
	var names []string
	for _, rd := range tr.GetConfiguration() {
		names = append(names, rd.GetName()+" "+rd.GetUri())
	}
	if want := []string{"lane ledger:lane/qmv-bias-sum/v1", "backend ledger:backend/cpu", "runner ledger:runner/test"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("configuration %v, want %v", names, want)
	}
	if dev := tr.GetConfiguration()[1].GetAnnotations().GetFields()["device"].GetStructValue().GetFields(); dev["model"].GetStringValue() != "test cpu" || dev["cores"].GetNumberValue() != 2 {
		t.Fatalf("backend annotations %v", tr.GetConfiguration()[1].GetAnnotations())
	}
	code, env = e.do(t, http.MethodGet, "/api/v1/evidence/"+ans.ID+"?format=dsse", "", nil)
	if payload, err := independentVerify(t, pub, env); code != http.StatusOK || err != nil {
		t.Fatalf("evidence dsse: %d %v", code, err)
	} else {
		validTestResult(t, payload)
	}

	// Ready: PASSED, accepted by slsa-verifier with the levels it claims.
	env = get("vsa")
	if out := slsaVerify(env, logKey, verifierID, resource, gitDigest, []string{"SLSA_BUILD_LEVEL_0"}); out != "" {
		t.Fatalf("slsa-verifier refuses the PASSED VSA: %s", out)
	}
	otherPub, _, _ := ed25519.GenerateKey(nil)
	otherKey := writeKey("other.pem", otherPub)
	// The refusals, in slsa-verifier's own words (its errors package).
	for _, c := range []struct {
		what, key, id, resource, subj string
		levels                        []string
		want                          string
	}{
		{"another verifier id", logKey, "https://other.example.com/", resource, gitDigest, nil, "verifier ID does not match"},
		{"another release", logKey, verifierID, "ledger:release/9.9.9", gitDigest, nil, "resource URI does not match"},
		{"another commit", logKey, verifierID, resource, "gitCommit:" + strings.Repeat("f", 40), nil, "missing subject digest"},
		{"a level it does not claim", logKey, verifierID, resource, gitDigest, []string{"SLSA_BUILD_LEVEL_1"}, "verified levels do not match"},
		{"another key", otherKey, verifierID, resource, gitDigest, nil, "no valid signature"},
	} {
		if out := slsaVerify(env, c.key, c.id, c.resource, c.subj, c.levels); !strings.Contains(out, "Verifying VSA: FAILED: "+c.want) {
			t.Errorf("slsa-verifier with %s: %q, want it refused with %q", c.what, out, c.want)
		}
	}
	payload, _ = independentVerify(t, pub, env)
	vsa.Reset()
	intotoStatement(t, payload, PredicateVSA, &vsa, false)
	if vsa.GetVerificationResult() != "PASSED" || !reflect.DeepEqual(vsa.GetVerifiedLevels(), []string{"SLSA_BUILD_LEVEL_0"}) {
		t.Fatalf("PASSED VSA: result %s levels %v", vsa.GetVerificationResult(), vsa.GetVerifiedLevels())
	}
	payload, err = independentVerify(t, pub, get("svr"))
	if err != nil {
		t.Fatal(err)
	}
	if svr := checkSVR(t, payload, verifierID); !reflect.DeepEqual(svr.Properties, []string{PropertyReleaseReady, PropertyGatePassed + "qmv"}) {
		t.Fatalf("SVR of a ready release: properties %v", svr.Properties)
	}
}

// checkSVR validates an SVR Statement: the Statement with the in-toto
// library, the predicate into the library's svr v0.1 proto (v1.2.0 has no
// v0.2 proto; the field v0.2 adds, verifier.policies, is skipped there),
// then v0.2's own rule: verifier.policies present, each a valid
// ResourceDescriptor. It returns the predicate as the ledger's type.
func checkSVR(t *testing.T, payload []byte, verifierID string) SVR {
	t.Helper()
	var p svrv01.SimpleVerificationResult
	pb := intotoStatement(t, payload, PredicateSVR, &p, true)
	if p.GetVerifier().GetId() != verifierID || p.GetTimeCreated() == nil {
		t.Fatalf("SVR verifier %q time %v", p.GetVerifier().GetId(), p.GetTimeCreated())
	}
	var v struct {
		Verifier struct {
			Policies []json.RawMessage `json:"policies"`
		} `json:"verifier"`
	}
	if err := json.Unmarshal(pb, &v); err != nil || v.Verifier.Policies == nil {
		t.Fatalf("SVR v0.2: verifier.policies must be present: %s", pb)
	}
	for i, raw := range v.Verifier.Policies {
		var rd attv1.ResourceDescriptor
		if err := protojson.Unmarshal(raw, &rd); err != nil {
			t.Fatalf("policies[%d]: %v", i, err)
		}
		if err := rd.Validate(); err != nil || !strings.HasPrefix(rd.GetUri(), "ledger:entry/") || len(rd.GetDigest()["sha256"]) != 64 {
			t.Fatalf("policies[%d] %s: %v", i, raw, err)
		}
	}
	var out SVR
	if err := json.Unmarshal(pb, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestVerifierIDSetting: a server refuses a verifier id that is not an
// absolute URI, naming it; without one it names its log origin as a URN.
func TestVerifierIDSetting(t *testing.T) {
	for _, bad := range []string{"ledger.vm.b6b0185f", "/relative", "https://", "https:///x", "http://h/#frag", "urn:a b", "urn:é"} {
		if err := CheckVerifierID(bad); err == nil {
			t.Errorf("CheckVerifierID(%q) accepted", bad)
		}
		if _, err := New(Config{Store: newAPIEnv(t, Config{}).store, VerifierID: bad}); err == nil || !strings.Contains(err.Error(), "verifier id") {
			t.Errorf("New with verifier id %q: %v", bad, err)
		}
	}
	for _, good := range []string{"https://ledger.example.com/", "https://ledger.example.com/verifier/v1", "urn:ledger:ledger.vm.b6b0185f", "spiffe://example.org/ledger"} {
		if err := CheckVerifierID(good); err != nil {
			t.Errorf("CheckVerifierID(%q): %v", good, err)
		}
	}
	e := newRunnerEnv(t)
	code, env := e.do(t, http.MethodGet, "/api/v1/releases/9.9.9/readiness?format=vsa", "", nil)
	payload, err := independentVerify(t, logPublicKey(t, e.apiEnv), env)
	if code != http.StatusOK || err != nil {
		t.Fatalf("vsa: %d %v", code, err)
	}
	origin, _, _ := strings.Cut(e.store.VerifierKey(), "+")
	var vsa vsav1.VerificationSummary
	intotoStatement(t, payload, PredicateVSA, &vsa, false)
	if want := "urn:ledger:" + origin; vsa.GetVerifier().GetId() != want {
		t.Fatalf("default verifier id %q, want %q", vsa.GetVerifier().GetId(), want)
	}
}

// slsaVerifierVersion is the slsa-verifier release the VSA test builds
// when none is given.
const slsaVerifierVersion = "v2.7.1"

// slsaVerifierCLI returns the path of an slsa-verifier command: the one
// $LEDGER_SLSA_VERIFIER names, else slsa-verifier on $PATH, else one built
// once from the module proxy (slsaVerifierVersion, with its own go.mod:
// its packages do not build against this module's newer sigstore-go) into
// the user cache directory. Under -short, or where the build cannot be
// done (no module proxy), the test is skipped saying so, unless
// LEDGER_REQUIRE_SLSA_VERIFIER=1.
func slsaVerifierCLI(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LEDGER_SLSA_VERIFIER"); p != "" {
		return p
	}
	if p, err := exec.LookPath("slsa-verifier"); err == nil {
		return p
	}
	skip := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("LEDGER_REQUIRE_SLSA_VERIFIER") == "1" {
			t.Fatalf(format, args...)
		}
		t.Skipf(format, args...)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		skip("slsa-verifier: no user cache directory to build it into: %v", err)
	}
	bin := filepath.Join(cache, "ledger-test", "slsa-verifier-"+slsaVerifierVersion, "slsa-verifier")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if testing.Short() {
		skip("slsa-verifier: not on $PATH or $LEDGER_SLSA_VERIFIER, and -short does not build it")
	}
	mod := "github.com/slsa-framework/slsa-verifier/v2@" + slsaVerifierVersion
	out, err := exec.Command("go", "mod", "download", "-json", mod).Output()
	var dl struct{ Dir, Error string }
	if err != nil || json.Unmarshal(out, &dl) != nil || dl.Dir == "" {
		skip("slsa-verifier: go mod download %s: %v %s %s", mod, err, dl.Error, out)
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		skip("slsa-verifier: %v", err)
	}
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	build := exec.Command("go", "build", "-o", tmp, "./cli/slsa-verifier")
	build.Dir = dl.Dir
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		skip("slsa-verifier: building %s: %v\n%s", mod, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		skip("slsa-verifier: %v", err)
	}
	return bin
}
