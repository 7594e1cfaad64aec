package verify_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/auth"
	"github.com/evidence-ledger/ledger/verify"
)

// A runner signs one evidence record as a DSSE envelope; the server checks
// it against the registered runner keys and records the signer.
func ExampleVerifyEvidenceEnvelope() {
	ctx := context.Background()
	seed := make([]byte, ed25519.SeedSize) // a fixed key, for a stable example
	priv := ed25519.NewKeyFromSeed(seed)
	pub := priv.Public().(ed25519.PublicKey)
	evidence := []byte(`{"lane":"qmv-bias-sum/v1","subject":{"repository":"mlx","commit":"` + strings.Repeat("1", 40) +
		`","tree":"` + strings.Repeat("2", 40) + `"},"backend":"metal","cases_exact":216,"cases_total":216,` +
		`"control":"caught","status":"passed","started_at":"2026-11-29T10:00:00Z","finished_at":"2026-11-29T10:00:05Z"}`)
	envelope, err := verify.SignEvidence(ctx, priv, evidence)
	if err != nil {
		panic(err)
	}
	reg := auth.RunnerRegistry{Runners: []auth.RunnerState{{
		Name: "ci-mac", KeyID: verify.RunnerKeyID(pub), PublicKey: verify.AuthorizedKey(pub), Entry: strings.Repeat("0", 32),
	}}}
	body, err := verify.VerifyEvidenceEnvelope(ctx, envelope, reg)
	if err != nil {
		panic(err)
	}
	e, _, err := ledger.PrepareEvidence(body)
	if err != nil {
		panic(err)
	}
	fmt.Println("signed by", e.Signer.Runner, e.Signer.KeyID)

	_, err = verify.VerifyEvidenceEnvelope(ctx, envelope, auth.RunnerRegistry{})
	fmt.Println(errors.Is(err, verify.ErrUnknownRunnerKey))
	// Output:
	// signed by ci-mac SHA256:tAXFyTXI8xtDaujAEcwJslAYc9/6FKcUkd2Lw0xDhPo
	// true
}
