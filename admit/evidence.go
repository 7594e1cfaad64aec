package admit

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/auth"
	"github.com/evidence-ledger/ledger/verify"
)

// Evidence is the input of one evidence append in the ledger's own JSON.
type Evidence struct {
	// Raws are the posted elements: evidence objects or DSSE envelopes
	// of evidence, each as posted.
	Raws []json.RawMessage
	// DSSEOnly: the media type was ledger.ContentTypeDSSE, so every
	// element must be an envelope.
	DSSEOnly bool
	// OfRun: the envelopes of a run the posting agent holds (RunEvidence
	// checks them against the run), which may name the run and be signed
	// by the agent's key.
	OfRun bool
	// Prefix gives the field prefix of element i in refusals ("" for a
	// single object, "[i]." in an array).
	Prefix func(i int) string
}

// Admit admits the elements of in from p and returns one evidence
// record each, in order, to append atomically:
//   - a DSSE envelope is verified against the runner registry of keys
//     (verify.VerifyEvidenceEnvelope) and becomes its payload with the
//     signer; unless in.OfRun, an envelope naming a run
//     (ledger.RefuseRunClaim on the signed payload as it is) or signed by
//     an approved agent's key (RefuseAgentSigner, RefuseAgentSignature;
//     AgentUndeclared) is refused;
//   - plain evidence that carries a signer is refused (CIClaim: only the
//     server sets it), and so is plain evidence naming a run;
//   - every record carrying what only the server computes is refused
//     (gates.RefuseServerMarkers, CIClaim);
//   - every record is checked against p's token scope (CIScope) and
//     stamped with recorded_by: the token, plus, for an envelope, the
//     runner key that signed it. An anonymous p stamps nothing.
//
// Errors are refusals naming the field (prefixed by in.Prefix), the
// verifier's errors (prefixed), or keys' read errors. Nothing is appended.
func Admit(ctx context.Context, keys ledger.Queries, p Principal, in Evidence) ([]ledger.Record, error) {
	recs := make([]ledger.Record, len(in.Raws))
	rec := p.Recorder()
	tok := p.Token
	var reg *auth.RunnerRegistry
	for i, raw := range in.Raws {
		prefix := in.Prefix(i)
		env, signer := ledger.EvidenceShape(raw)
		switch {
		case env:
			if reg == nil {
				r, err := auth.LoadRunnerKeys(ctx, keys, 0)
				if err != nil {
					return nil, err
				}
				reg = &r
			}
			if !in.OfRun {
				// The signed payload as it is, before decoding: a member
				// named run in any letter case, null included.
				if _, payload, err := ledger.DecodeEnvelope(raw); err == nil {
					if err := refuse(CIClaim, ledger.RefuseRunClaim(payload, prefix)); err != nil {
						return nil, err
					}
				}
			}
			body, err := verify.VerifyEvidenceEnvelope(ctx, raw, *reg)
			if err != nil {
				return nil, withPrefix(err, prefix)
			}
			var signed struct {
				Signer *ledger.Signer `json:"signer"`
			}
			if !in.OfRun && json.Unmarshal(body, &signed) == nil && signed.Signer != nil {
				if err := RefuseAgentSigner(*reg, *signed.Signer, prefix); err != nil {
					return nil, err
				}
			}
			if !in.OfRun {
				if err := RefuseAgentSignature(*reg, raw, ledger.PayloadTypeEvidence, prefix); err != nil {
					return nil, err
				}
			}
			// A signed payload is a claim like any other: it cannot carry
			// what only the server computes (TRUST.md rule 1).
			if err := refuse(CIClaim, gates.RefuseServerMarkers(body, prefix)); err != nil {
				return nil, err
			}
			if body, err = stamp(tok, runnerRecorder(rec, body), body, prefix); err != nil {
				return nil, err
			}
			recs[i] = ledger.Record{Kind: ledger.KindEvidence, Body: body}
		case in.DSSEOnly:
			return nil, ledger.FieldError(prefix+"payloadType", "Content-Type %s: every element must be a DSSE envelope", ledger.ContentTypeDSSE)
		case signer:
			return nil, refuse(CIClaim, ledger.FieldError(prefix+ledger.SignerField, "only the server sets signer, after verifying a DSSE envelope signed by a registered runner key: post the envelope instead"))
		default:
			if err := refuse(CIClaim, gates.RefuseServerMarkers(raw, prefix)); err != nil {
				return nil, err
			}
			if err := refuse(CIClaim, ledger.RefuseRunClaim(raw, prefix)); err != nil {
				return nil, err
			}
			if rec == nil {
				recs[i] = ledger.Record{Kind: ledger.KindEvidence, Body: raw}
				continue
			}
			if err := checkPosted(tok, raw, prefix); err != nil {
				return nil, err
			}
			// recorded_by is set when the record is prepared, so its
			// body is decoded once.
			recs[i] = ledger.Record{Kind: ledger.KindEvidence, Body: raw, RecordedBy: rec}
		}
	}
	return recs, nil
}

// Local admits, for the local administrator of the database (`ledger
// record --db`), the ledger JSON records raws: refused as the server
// refuses them (Admit), with the same fields: details carrying the
// server's tree-check marker (gates.RefuseServerMarkers,
// "details.computed_by"), a record naming a run (ledger.RefuseRunClaim;
// in an envelope, its signed payload as it is), an envelope signed by an
// approved agent's key (an agent records only through its runs), a plain
// record carrying signer, and a record carrying recorded_by (set only by
// the server; a local record has none). A DSSE envelope is verified
// against the runner registry of keys and its payload checked the same
// way; its verification error is "record i: ...". Fields are prefixed
// "[i]." in an array; single is a body that was one object. No error
// quotes the records. The records are appended as they are (nothing is
// stamped).
func Local(ctx context.Context, keys ledger.Queries, raws []json.RawMessage, single bool) error {
	var reg *auth.RunnerRegistry
	for i, raw := range raws {
		prefix := ""
		if !single {
			prefix = fmt.Sprintf("[%d].", i)
		}
		body := []byte(raw)
		env, signer := ledger.EvidenceShape(raw)
		switch {
		case env:
			if reg == nil {
				loaded, err := auth.LoadRunnerKeys(ctx, keys, 0)
				if err != nil {
					return err
				}
				reg = &loaded
			}
			if _, signed, err := ledger.DecodeEnvelope(raw); err == nil {
				if err := refuse(CIClaim, ledger.RefuseRunClaim(signed, prefix)); err != nil {
					return err
				}
			}
			payload, err := verify.VerifyEvidenceEnvelope(ctx, raw, *reg)
			if err != nil {
				return fmt.Errorf("record %d: %w", i, err)
			}
			if err := RefuseAgentSignature(*reg, raw, ledger.PayloadTypeEvidence, prefix); err != nil {
				return err
			}
			body = payload
		case signer:
			return refuse(CIClaim, ledger.FieldError(prefix+ledger.SignerField, "only a verified DSSE envelope sets signer: record the envelope (or sign with --sign-key)"))
		}
		if err := refuse(CIClaim, gates.RefuseServerMarkers(body, prefix)); err != nil {
			return err
		}
		if err := refuse(CIClaim, ledger.RefuseRunClaim(body, prefix)); err != nil {
			return err
		}
		if ledger.HasMember(body, ledger.RecordedByField) {
			return refuse(CIClaim, ledger.FieldError(prefix+ledger.RecordedByField, "is set only by the server (the token or runner key that recorded the record); remove it"))
		}
	}
	return nil
}

// Decoded admits the records of an input of another format decoded by
// ingest (the original and its evidence) from p, putting every evidence
// record through what plain JSON evidence goes through (Admit): server
// markers (gates.RefuseDecodedMarkers, CIClaim: details.provenance is
// the decoder's own, from verified bytes) and a run claim
// (ledger.RefuseRunClaim) refused, p's token scope checked on the
// record's own repository, lane and backend (CIScope), and recorded_by
// stamped (plus the runner that signed it, for a verified envelope; the
// anonymous and the local administrator stamp nothing). Records of other
// kinds (the original) pass unchanged. It returns new records; recs is
// not modified.
func Decoded(recs []ledger.Record, p Principal) ([]ledger.Record, error) {
	rec := p.Recorder()
	out := make([]ledger.Record, len(recs))
	for i, r := range recs {
		out[i] = r
		if r.Kind != ledger.KindEvidence {
			continue
		}
		if err := refuse(CIClaim, gates.RefuseDecodedMarkers(r.Body, "")); err != nil {
			return nil, err
		}
		if err := refuse(CIClaim, ledger.RefuseRunClaim(r.Body, "")); err != nil {
			return nil, err
		}
		body, err := stamp(p.Token, runnerRecorder(rec, r.Body), r.Body, "")
		if err != nil {
			return nil, err
		}
		out[i].Body = body
	}
	return out, nil
}

// withPrefix puts p before the field of err's *ledger.Error (err itself,
// or the first of a joined error's); other errors are returned as they
// are.
func withPrefix(err error, p string) error {
	if p == "" {
		return err
	}
	if le, ok := err.(interface{ Unwrap() []error }); ok {
		for _, u := range le.Unwrap() {
			if e, ok := u.(*ledger.Error); ok {
				c := *e
				c.Field = p + c.Field
				return &c
			}
		}
	}
	return prefixed(err, p)
}

// recorderBytes is rec's JSON, nil when rec is nil.
func recorderBytes(rec *ledger.Recorder) []byte {
	if rec == nil {
		return nil
	}
	b, _ := json.Marshal(rec)
	return b
}

// runnerRecorder is rec's JSON with the runner that signed body (a
// verified envelope's record, whose signer the server set) added.
func runnerRecorder(rec *ledger.Recorder, body []byte) []byte {
	if rec == nil {
		return nil
	}
	var probe struct {
		Signer *ledger.Signer `json:"signer"`
	}
	c := *rec
	if json.Unmarshal(body, &probe) == nil && probe.Signer != nil {
		c.Runner = &ledger.RecorderRunner{Name: probe.Signer.Runner, KeyID: probe.Signer.KeyID}
	}
	return recorderBytes(&c)
}

// LocalRecords admits records the local administrator appends to the
// database (`ledger record --db`, `ledger run`, `ledger copy`), as a
// server does: an evidence record that is a DSSE envelope is verified
// against the runner registry of keys and becomes its payload with its
// signer (an error "record i: ..." otherwise); plain evidence that
// carries a signer is refused (CodeInvalid naming "[i].signer", CIClaim),
// since only a verified envelope may set it. Other kinds pass through. It
// returns new records; recs is not modified.
func LocalRecords(ctx context.Context, keys ledger.Queries, recs []ledger.Record) ([]ledger.Record, error) {
	out := make([]ledger.Record, len(recs))
	var reg *auth.RunnerRegistry
	for i, r := range recs {
		out[i] = r
		if r.Kind != ledger.KindEvidence {
			continue
		}
		env, signer := ledger.EvidenceShape(r.Body)
		switch {
		case env:
			if reg == nil {
				loaded, err := auth.LoadRunnerKeys(ctx, keys, 0)
				if err != nil {
					return nil, err
				}
				reg = &loaded
			}
			body, err := verify.VerifyEvidenceEnvelope(ctx, r.Body, *reg)
			if err != nil {
				return nil, fmt.Errorf("record %d: %w", i, err)
			}
			out[i].Body = body
		case signer:
			return nil, refuse(CIClaim, ledger.FieldError(fmt.Sprintf("[%d].%s", i, ledger.SignerField), "only a verified DSSE envelope sets signer: record the envelope (or sign with --sign-key)"))
		}
	}
	return out, nil
}
