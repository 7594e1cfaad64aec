package ingest

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"sort"
	"testing"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/auth"
	"github.com/evidence-ledger/ledger/verify"
)

// testRegistry is a runner-key registry of the given runners (name ->
// Ed25519 public key), each with a made-up runner-key entry id, verified
// through the ledger's one verifier (verify.VerifyRunnerEnvelope), as the
// server wires it.
func testRegistry(t testing.TB, runners map[string]ed25519.PublicKey) envelopeKeys {
	t.Helper()
	var reg auth.RunnerRegistry
	names := make([]string, 0, len(runners))
	for n := range runners {
		names = append(names, n)
	}
	sort.Strings(names)
	for i, n := range names {
		pub := runners[n]
		reg.Runners = append(reg.Runners, auth.RunnerState{Name: n, KeyID: verify.RunnerKeyID(pub), PublicKey: verify.AuthorizedKey(pub),
			Entry: fmt.Sprintf("%032x", i+1), Index: uint64(i)})
	}
	return func(ctx context.Context, env []byte, payloadType string) ([]byte, ledger.Signer, error) {
		return verify.VerifyRunnerEnvelope(ctx, env, payloadType, reg)
	}
}

// runnerSigner is an edSigner whose keyid is the key's fingerprint, as
// runners sign (verify.SignEvidence).
func runnerSigner(priv ed25519.PrivateKey) edSigner {
	return edSigner{verify.RunnerKeyID(priv.Public().(ed25519.PublicKey)), priv}
}

// envelopeKeys verifies a DSSE envelope against a runner-key registry and
// returns its payload and signer, as admit.Ingest does before decoding.
type envelopeKeys func(ctx context.Context, env []byte, payloadType string) ([]byte, ledger.Signer, error)

// decodeWith decodes body of format as admit.Ingest does: for a DSSE
// body with keys given, CheckDSSE, then keys' verification, then
// DecodeFormat with the verified envelope; otherwise DecodeFormat alone
// (keys nil: no registry).
func decodeWith(ctx context.Context, keys envelopeKeys, format string, body []byte, p Params) (*Result, error) {
	if format == FormatDSSE && keys != nil {
		if err := CheckDSSE(body, p); err != nil {
			return nil, err
		}
		payload, signer, err := keys(ctx, body, MediaInToto)
		if err != nil {
			return nil, err
		}
		p.Envelope = &VerifiedEnvelope{Envelope: body, Payload: payload, Signer: signer}
	}
	return DecodeFormat(ctx, format, body, p)
}
