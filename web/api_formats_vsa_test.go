package web

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/sigstore/sigstore/pkg/signature"
	sigdsse "github.com/sigstore/sigstore/pkg/signature/dsse"
)

// logPublicKey reads the log's Ed25519 key from GET /api/v1/log/key the
// way a client outside the ledger would: the base64 part of the verifier
// key, its algorithm byte 0x01 dropped.
func logPublicKey(t *testing.T, e *apiEnv) ed25519.PublicKey {
	t.Helper()
	code, body := e.do(t, http.MethodGet, "/api/v1/log/key", "", nil)
	var k struct {
		VerifierKey string `json:"verifier_key"`
	}
	if err := json.Unmarshal(body, &k); code != http.StatusOK || err != nil {
		t.Fatalf("log key: %d %v", code, err)
	}
	parts := strings.SplitN(k.VerifierKey, "+", 3) // name+hash+base64 (which may hold '+')
	raw, err := base64.StdEncoding.DecodeString(parts[len(parts)-1])
	if err != nil || len(raw) != 33 || raw[0] != 1 {
		t.Fatalf("verifier key %q is not an Ed25519 note key", k.VerifierKey)
	}
	return ed25519.PublicKey(raw[1:])
}

// independentVerify checks a DSSE envelope with sigstore's DSSE verifier
// over the given key (sigstore/sigstore pkg/signature/dsse, not the
// ledger's code) and returns the decoded payload.
func independentVerify(t *testing.T, pub ed25519.PublicKey, env []byte) ([]byte, error) {
	t.Helper()
	v, err := signature.LoadED25519Verifier(pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := sigdsse.WrapVerifier(v, sigdsse.WithExpectedPayloadType(ledger.PayloadTypeInToto)).VerifySignature(bytes.NewReader(env), nil); err != nil {
		return nil, err
	}
	var e ledger.Envelope
	if err := json.Unmarshal(env, &e); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.DecodeString(e.Payload)
}

// TestReadinessVSA: the readiness verdict as a DSSE-signed SLSA
// verification summary verifies under the log key with sigstore's DSSE
// verifier, says FAILED for a release that is not ready and names its
// pins as subjects; every flipped byte of the payload or signature, and
// another key, fail the same verifier. Evidence ?format=dsse verifies
// the same way and carries the in-toto Statement of ?format=in-toto.
func TestReadinessVSA(t *testing.T) {
	e := newRunnerEnv(t)
	pub := logPublicKey(t, e.apiEnv)
	code, env := e.do(t, http.MethodGet, "/api/v1/releases/9.9.9/readiness?format=vsa", "", nil)
	if code != http.StatusOK {
		t.Fatalf("vsa: %d %s", code, env)
	}
	payload, err := independentVerify(t, pub, env)
	if err != nil {
		t.Fatalf("the VSA does not verify with sigstore's DSSE verifier: %v", err)
	}
	var st struct {
		Type          string `json:"_type"`
		PredicateType string `json:"predicateType"`
		Subject       []struct {
			Name   string
			Digest map[string]string
		}
		Predicate struct {
			Verifier           struct{ ID string }
			ResourceURI        string `json:"resourceUri"`
			VerificationResult string `json:"verificationResult"`
			VerifiedLevels     []string
			Policy             struct{ URI string }
		}
	}
	if err := json.Unmarshal(payload, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != "https://in-toto.io/Statement/v1" || st.PredicateType != "https://slsa.dev/verification_summary/v1" ||
		st.Predicate.VerificationResult != "FAILED" || st.Predicate.ResourceURI != "ledger:release/9.9.9" ||
		len(st.Subject) != 1 || st.Subject[0].Name != "github.com/ml-explore/mlx" || st.Subject[0].Digest["gitCommit"] != mlxCommit ||
		st.Predicate.Verifier.ID == "" || !strings.HasPrefix(st.Predicate.Policy.URI, "ledger:entry/") || len(st.Predicate.VerifiedLevels) != 1 {
		t.Fatalf("VSA %s", payload)
	}
	var envl ledger.Envelope
	_ = json.Unmarshal(env, &envl)
	flip := func(s string, i int) string {
		b, _ := base64.StdEncoding.DecodeString(s)
		b[i%len(b)] ^= 1
		return base64.StdEncoding.EncodeToString(b)
	}
	for i := 0; i < 64; i += 7 {
		for _, which := range []string{"payload", "sig"} {
			c := envl
			c.Signatures = append([]ledger.EnvelopeSignature(nil), envl.Signatures...)
			if which == "payload" {
				c.Payload = flip(c.Payload, i*13)
			} else {
				c.Signatures[0].Sig = flip(c.Signatures[0].Sig, i)
			}
			b, _ := json.Marshal(c)
			if _, err := independentVerify(t, pub, b); err == nil {
				t.Fatalf("a VSA with byte %d of its %s flipped verifies", i, which)
			}
		}
	}
	otherPub, _, _ := ed25519.GenerateKey(nil)
	if _, err := independentVerify(t, otherPub, env); err == nil {
		t.Fatal("the VSA verifies under another key")
	}

	// Evidence as a signed in-toto Statement.
	code, body := e.do(t, http.MethodPost, "/api/v1/evidence", e.record, testEvidence(1))
	if code != http.StatusCreated {
		t.Fatalf("post: %d %s", code, body)
	}
	var ans AppendedJSON
	_ = json.Unmarshal(body, &ans)
	code, env = e.do(t, http.MethodGet, "/api/v1/evidence/"+ans.ID+"?format=dsse", "", nil)
	if code != http.StatusOK {
		t.Fatalf("dsse: %d %s", code, env)
	}
	payload, err = independentVerify(t, pub, env)
	if err != nil {
		t.Fatalf("evidence ?format=dsse does not verify: %v", err)
	}
	_, plain := e.do(t, http.MethodGet, "/api/v1/evidence/"+ans.ID+"?format=in-toto", "", nil)
	if !bytes.Equal(payload, plain) {
		t.Fatalf("the signed Statement differs from ?format=in-toto:\n%s\n%s", payload, plain)
	}
	// Signed by the log key, not a runner key: posting it back is refused.
	code, body = e.do(t, http.MethodPost, "/api/v1/evidence?lane=qmv-bias-sum/v1&backend=cpu", e.record, env, "Content-Type", ledger.ContentTypeDSSE)
	if code != http.StatusBadRequest || !strings.Contains(string(body), "no registered runner key") {
		t.Fatalf("the service-signed envelope posted back: %d %s", code, body)
	}
	if code, _ := e.do(t, http.MethodGet, "/api/v1/releases/9.9.9/readiness?format=xml", "", nil); code != http.StatusBadRequest {
		t.Fatalf("unknown format: %d", code)
	}
}
