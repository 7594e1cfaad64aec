package admit

import (
	"context"

	"github.com/evidence-ledger/ledger/ingest"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/auth"
	"github.com/evidence-ledger/ledger/verify"
)

// Ingest admits body, an input of format (any but ingest.FormatEvidence:
// JUnit, go test -json, an in-toto Statement, a DSSE envelope, a Sigstore
// bundle), recorded by principal p with params (what the format lacks:
// lane, backend, pins; the Sigstore trust), and returns the decoded
// result and the records of one atomic append, the original first.
//
// In order, so that each refusal is the one a caller can act on and a
// token out of scope learns nothing about signatures or parsing:
// IngestScope (CIScope) on what params name; for a DSSE envelope the
// checks before any signature (ingest.CheckDSSE), then its runner-key
// signature against the registry of keys at log's latest size
// (verify.VerifyRunnerEnvelope; an approved agent's key refused,
// AgentUndeclared); the decode (ingest.DecodeFormat, CodeInvalid naming
// the field); then Decoded's checks and stamps. Nothing is returned to
// append on any error. Safe for concurrent use.
func Ingest(ctx context.Context, log ledger.Queries, p Principal, format string, body []byte, params ingest.Params) (*ingest.Result, []ledger.Record, error) {
	if err := IngestScope(p, params.Repository, params.Lane, params.Backend); err != nil {
		return nil, nil, err
	}
	if format == ingest.FormatDSSE {
		if err := ingest.CheckDSSE(body, params); err != nil {
			return nil, nil, err
		}
		env, err := verifyEnvelope(ctx, log, body, ingest.MediaInToto)
		if err != nil {
			return nil, nil, err
		}
		params.Envelope = env
	}
	res, err := ingest.DecodeFormat(ctx, format, body, params)
	if err != nil {
		return nil, nil, err
	}
	recs, err := Decoded(res.Records, p)
	if err != nil {
		return nil, nil, err
	}
	return res, recs, nil
}

// verifyEnvelope verifies envelope, whose payload type must be
// payloadType, against the runner-key registry of log at its latest size
// (auth.LoadRunnerKeys) with the ledger's one DSSE verifier
// (verify.VerifyRunnerEnvelope): the same registry and checks as an
// envelope of native evidence (Admit), an approved agent's signature
// refused as there (RefuseAgentSigner, RefuseAgentSignature).
func verifyEnvelope(ctx context.Context, log ledger.Queries, envelope []byte, payloadType string) (*ingest.VerifiedEnvelope, error) {
	reg, err := auth.LoadRunnerKeys(ctx, log, 0)
	if err != nil {
		return nil, err
	}
	payload, signer, err := verify.VerifyRunnerEnvelope(ctx, envelope, payloadType, reg)
	if err != nil {
		return nil, err
	}
	if err := RefuseAgentSigner(reg, signer, ""); err != nil {
		return nil, err
	}
	if err := RefuseAgentSignature(reg, envelope, payloadType, ""); err != nil {
		return nil, err
	}
	return &ingest.VerifiedEnvelope{Envelope: envelope, Payload: payload, Signer: signer}, nil
}
