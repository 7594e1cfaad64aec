package web

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/verify"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
)

// withSignature returns the DSSE envelope env with a signature of priv
// over its payload added first or last, its keyid priv's fingerprint
// (or none when noKeyID).
func withSignature(t *testing.T, env []byte, priv ed25519.PrivateKey, first, noKeyID bool) []byte {
	t.Helper()
	var e ledger.Envelope
	if err := json.Unmarshal(env, &e); err != nil {
		t.Fatal(err)
	}
	payload, err := base64.StdEncoding.DecodeString(e.Payload)
	if err != nil {
		t.Fatal(err)
	}
	s := ledger.EnvelopeSignature{Sig: base64.StdEncoding.EncodeToString(ed25519.Sign(priv, dsse.PAE(e.PayloadType, payload)))}
	if !noKeyID {
		s.KeyID = verify.RunnerKeyID(priv.Public().(ed25519.PublicKey))
	}
	if first {
		e.Signatures = append([]ledger.EnvelopeSignature{s}, e.Signatures...)
	} else {
		e.Signatures = append(e.Signatures, s)
	}
	b, _ := json.Marshal(e)
	return b
}

// TestAgentCosignedEnvelopeRefused: an envelope signed by a plain runner
// and by an approved agent over one payload, posted outside a run, is
// refused (403 naming the agent's signature or the signer, nothing
// appended) whichever signature comes first and whether or not the
// agent's signature carries its keyid, as evidence and as a signed in-toto
// Statement; the runner's envelope alone is recorded.
func TestAgentCosignedEnvelopeRefused(t *testing.T) {
	e := newRunnerEnv(t)
	agent := newKey(t)
	pub := verify.AuthorizedKey(agent.Public().(ed25519.PublicKey))
	if _, _, err := admit.AddKey(context.Background(), e.store, "h200-a", []byte(pub), "admin", ledger.RunnerKindAgent, "", nil); err != nil {
		t.Fatal(err)
	}
	ev := sign(t, e.mac, testEvidence(1))
	q := url.Values{"lane": {"qmv-bias-sum/v1"}, "backend": {"cpu"}, "commit": {mlxCommit}, "tree": {mlxTree}}
	intoto := dsseEnvelope(t, e.mac, ledger.PayloadTypeInToto, qmvStatement(t, "github.com/ml-explore/mlx", 216, nil))
	for _, tc := range []struct {
		name, path string
		body       []byte
		fields     []string
	}{
		{"evidence, runner then agent", "/api/v1/evidence", withSignature(t, ev, agent, false, false), []string{"signatures[1]"}},
		{"evidence, agent then runner", "/api/v1/evidence", withSignature(t, ev, agent, true, false), []string{"signer", "signatures[0]"}},
		{"evidence, runner then agent without keyid", "/api/v1/evidence", withSignature(t, ev, agent, false, true), []string{"signatures[1]"}},
		{"evidence, agent without keyid then runner", "/api/v1/evidence", withSignature(t, ev, agent, true, true), []string{"signer", "signatures[0]"}},
		{"in-toto, runner then agent", "/api/v1/evidence?" + q.Encode(), withSignature(t, intoto, agent, false, false), []string{"signatures[1]"}},
		{"in-toto, agent then runner", "/api/v1/evidence?" + q.Encode(), withSignature(t, intoto, agent, true, false), []string{"signer", "signatures[0]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.size(t)
			code, body := e.do(t, http.MethodPost, tc.path, e.record, tc.body, "Content-Type", ledger.ContentTypeDSSE)
			ae := apiError(t, body)
			if code != http.StatusForbidden || !slices.Contains(tc.fields, ae.Field) || !strings.Contains(ae.Message, "only through the runs it holds") {
				t.Fatalf("%d %s; want 403 naming one of %v", code, body, tc.fields)
			}
			if after := e.size(t); after != before {
				t.Fatalf("the refused envelope appended: size %d -> %d", before, after)
			}
		})
	}
	if code, body := e.do(t, http.MethodPost, "/api/v1/evidence", e.record, ev, "Content-Type", ledger.ContentTypeDSSE); code != http.StatusCreated {
		t.Fatalf("the runner's envelope alone: %d %s", code, body)
	}
}
