package ingest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/verify"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
)

// edSigner signs DSSE envelopes with a throwaway Ed25519 key.
type edSigner struct {
	id  string
	key ed25519.PrivateKey
}

func (s edSigner) Sign(_ context.Context, data []byte) ([]byte, error) {
	return ed25519.Sign(s.key, data), nil
}
func (s edSigner) KeyID() (string, error) { return s.id, nil }

func testStatement(t *testing.T, predicateType string, artifact string) []byte {
	t.Helper()
	st := Statement{Type: StatementV1, PredicateType: predicateType, Subject: []ResourceDescriptor{
		{Name: "github.com/example/repo", Digest: map[string]string{"gitCommit": strings.Repeat("a", 40), "gitTree": strings.Repeat("b", 40)}},
		{Name: "libx.so", Digest: map[string]string{"sha256": artifact}},
	}}
	st.Predicate, _ = json.Marshal(TestResult{Result: "FAILED", PassedTests: []string{"a", "b"}, WarnedTests: []string{"c"}, FailedTests: []string{"d"}})
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func signEnvelope(t *testing.T, s dsse.Signer, payloadType string, payload []byte) []byte {
	t.Helper()
	es, err := dsse.NewEnvelopeSigner(s)
	if err != nil {
		t.Fatal(err)
	}
	env, err := es.SignPayload(context.Background(), payloadType, payload)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(env)
	return b
}

// TestDSSE verifies envelopes signed by registered throwaway keys, makes
// the signer the runner identity and the subjects the pins, and refuses a
// wrong key, a wrong payload type, a tampered payload, a tampered
// signature, an unexpected predicate type and pins that disagree with the
// flags.
func TestDSSE(t *testing.T) {
	edPub, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	ed2Pub, ed2Priv, _ := ed25519.GenerateKey(rand.Reader)
	_, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	keys := testRegistry(t, map[string]ed25519.PublicKey{"runner-ed": edPub, "runner-two": ed2Pub})
	art := fmt.Sprintf("%064x", 7)
	stmt := testStatement(t, PredicateTestResult, art)
	p := testParams()
	p.Commit, p.Tree = "", ""

	for _, tc := range []struct {
		name   string
		signer dsse.Signer
		want   string
	}{{"ed25519", runnerSigner(edPriv), "runner-ed"}, {"second runner", runnerSigner(ed2Priv), "runner-two"}, {"no keyid", edSigner{"", edPriv}, "runner-ed"}} {
		env := signEnvelope(t, tc.signer, MediaInToto, stmt)
		res, err := decodeWith(context.Background(), keys, FormatDSSE, env, p)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		checkOriginal(t, res, env)
		ev := res.Evidence[0]
		_, d := outcomes(t, res)
		if d.Identity == nil || d.Identity.Name != tc.want || ev.Subject.Artifacts["libx.so"] != "sha256:"+art || ev.Subject.Commit != strings.Repeat("a", 40) {
			t.Fatalf("%s: identity %+v subject %+v", tc.name, d.Identity, ev.Subject)
		}
		if ev.Signer == nil || ev.Signer.Runner != tc.want {
			t.Fatalf("%s: signer %+v, want runner %s", tc.name, ev.Signer, tc.want)
		}
		if ev.CasesTotal != 4 || ev.CasesExact != 2 || ev.Status != ledger.StatusFailed {
			t.Fatalf("%s: cases %d/%d %s", tc.name, ev.CasesExact, ev.CasesTotal, ev.Status)
		}
	}

	good := signEnvelope(t, runnerSigner(edPriv), MediaInToto, stmt)
	var env dsse.Envelope
	_ = json.Unmarshal(good, &env)
	tamper := func(f func(e *dsse.Envelope)) []byte {
		e := env
		e.Signatures = append([]dsse.Signature(nil), env.Signatures...)
		f(&e)
		b, _ := json.Marshal(e)
		return b
	}
	otherPin := p
	otherPin.Artifacts = map[string]string{"libx.so": "sha256:" + fmt.Sprintf("%064x", 8)}
	otherCommit := p
	otherCommit.Commit = strings.Repeat("c", 40)
	provenance := p
	provenance.PredicateType = "https://slsa.dev/provenance/v1"
	for _, tc := range []struct {
		name string
		body []byte
		p    Params
		code ledger.Code
		want string
	}{
		{"unregistered key", signEnvelope(t, runnerSigner(otherPriv), MediaInToto, stmt), p, ledger.CodeInvalid, "signed by no registered runner key"},
		{"unregistered key claiming a registered keyid", signEnvelope(t, edSigner{verify.RunnerKeyID(edPub), otherPriv}, MediaInToto, stmt), p, ledger.CodeInvalid, "does not verify"},
		{"no keyid, unregistered key", signEnvelope(t, edSigner{"", otherPriv}, MediaInToto, stmt), p, ledger.CodeInvalid, "signed by no registered runner key"},
		{"evidence payload type", signEnvelope(t, runnerSigner(edPriv), ledger.PayloadTypeEvidence, stmt), p, ledger.CodeInvalid, "payloadType"},
		{"wrong payload type", signEnvelope(t, runnerSigner(edPriv), "application/json", stmt), p, ledger.CodeInvalid, "payloadType"},
		{"tampered payload", tamper(func(e *dsse.Envelope) {
			b, _ := base64.StdEncoding.DecodeString(e.Payload)
			b[len(b)/2] ^= 1
			e.Payload = base64.StdEncoding.EncodeToString(b)
		}), p, ledger.CodeInvalid, "does not verify"},
		{"tampered signature", tamper(func(e *dsse.Envelope) {
			b, _ := base64.StdEncoding.DecodeString(e.Signatures[0].Sig)
			b[0] ^= 1
			e.Signatures[0].Sig = base64.StdEncoding.EncodeToString(b)
		}), p, ledger.CodeInvalid, "does not verify"},
		{"unsigned", tamper(func(e *dsse.Envelope) { e.Signatures = nil }), p, ledger.CodeInvalid, "signatures"},
		{"extra artifact pin the runner did not sign", good, func() Params {
			q := p
			q.Artifacts = map[string]string{"other.so": "sha256:" + fmt.Sprintf("%064x", 9)}
			return q
		}(), ledger.CodeInvalid, "does not name"},
		{"predicate type the lane does not expect", good, provenance, ledger.CodeInvalid, "predicateType"},
		{"artifact pin disagrees", good, otherPin, ledger.CodeInvalid, "artifact"},
		{"commit disagrees", good, otherCommit, ledger.CodeInvalid, "commit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeWith(context.Background(), keys, FormatDSSE, tc.body, tc.p)
			var le *ledger.Error
			if err == nil || !errors.As(err, &le) || le.Code != tc.code || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %s naming %q", err, tc.code, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name string
		keys envelopeKeys
		code ledger.Code
		want string
	}{
		{"no registry", nil, ledger.CodeUnauthorized, "no runner-key registry"},
		{"empty registry", testRegistry(t, nil), ledger.CodeInvalid, "signed by no registered runner key"},
	} {
		_, err := decodeWith(context.Background(), tc.keys, FormatDSSE, good, p)
		var le *ledger.Error
		if err == nil || !errors.As(err, &le) || le.Code != tc.code || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: err = %v, want %s naming %q", tc.name, err, tc.code, tc.want)
		}
	}
	// A verified envelope decodes only the body it was verified for.
	q := p
	q.Envelope = &VerifiedEnvelope{Envelope: []byte("{}"), Payload: stmt, Signer: ledger.Signer{Runner: "runner-ed"}}
	var le *ledger.Error
	if _, err := DecodeFormat(context.Background(), FormatDSSE, good, q); err == nil || !errors.As(err, &le) || le.Code != ledger.CodeInternal {
		t.Fatalf("a verification of other bytes: err = %v, want CodeInternal", err)
	}
}

// TestStatementDuplicateNames: a Statement (signed or not) with a member
// name twice, at the top or inside the predicate, is refused naming the
// member: the last value would win here and the first in other readers.
func TestStatementDuplicateNames(t *testing.T) {
	for name, body := range map[string]string{
		"predicateType twice": `{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"a","digest":{"sha256":"` + strings.Repeat("a", 64) + `"}}],"predicateType":"https://in-toto.io/attestation/test-result/v0.1","predicateType":"https://slsa.dev/provenance/v1","predicate":{}}`,
		"builder id twice":    `{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"a","digest":{"sha256":"` + strings.Repeat("a", 64) + `"}}],"predicateType":"https://slsa.dev/provenance/v1","predicate":{"runDetails":{"builder":{"id":"https://evil/b","id":"https://good/b"}}}}`,
	} {
		_, err := DecodeStatement([]byte(body))
		var le *ledger.Error
		if err == nil || !errors.As(err, &le) || le.Code != ledger.CodeInvalid || !strings.Contains(err.Error(), "duplicate") {
			t.Fatalf("%s: err = %v, want CodeInvalid naming the duplicate", name, err)
		}
	}
}
