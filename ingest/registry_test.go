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
func testRegistry(t testing.TB, runners map[string]ed25519.PublicKey) EnvelopeVerifier {
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
