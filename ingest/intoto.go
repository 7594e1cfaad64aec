package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
)

// The in-toto names, from github.com/in-toto/attestation (spec/v1 and
// spec/predicates/test-result.md).
const (
	StatementV1         = "https://in-toto.io/Statement/v1"
	StatementV01        = "https://in-toto.io/Statement/v0.1"
	PredicateTestResult = "https://in-toto.io/attestation/test-result/v0.1"
	// AnyPredicate as Params.PredicateType accepts every predicate type
	// (a lane whose rule maps any attestation to one passed case).
	AnyPredicate = "*"
)

// Statement is an in-toto Statement (v1; v0.1 reads the same fields).
type Statement struct {
	Type          string               `json:"_type"`
	Subject       []ResourceDescriptor `json:"subject"`
	PredicateType string               `json:"predicateType"`
	Predicate     json.RawMessage      `json:"predicate,omitempty"`
}

// ResourceDescriptor is the subset of an in-toto ResourceDescriptor the
// ledger reads: a name and digests by algorithm ("sha256", "gitCommit",
// "gitTree"); other fields are ignored.
type ResourceDescriptor struct {
	Name   string            `json:"name,omitempty"`
	URI    string            `json:"uri,omitempty"`
	Digest map[string]string `json:"digest,omitempty"`
}

// TestResult is the test-result predicate v0.1: result is PASSED, WARNED
// or FAILED; the test lists name cases.
type TestResult struct {
	Result        string            `json:"result"`
	Configuration []json.RawMessage `json:"configuration,omitempty"` // ResourceDescriptors, kept as given
	URL           string            `json:"url,omitempty"`
	PassedTests   []string          `json:"passedTests"`
	WarnedTests   []string          `json:"warnedTests"`
	FailedTests   []string          `json:"failedTests"`
}

// VerifiedEnvelope is a DSSE envelope whose signature the caller verified
// against the ledger's runner-key registry before decoding (admit.Ingest:
// the registry at the latest size, verify.VerifyRunnerEnvelope, an
// approved agent's key refused): Envelope is the exact body verified,
// Payload its payload and Signer the runner the decoded record carries.
// Decoding refuses (CodeInternal) a body other than Envelope.
type VerifiedEnvelope struct {
	Envelope []byte
	Payload  []byte
	Signer   ledger.Signer
}

// CheckDSSE is what decoding a DSSE body (FormatDSSE) refuses before any
// signature is verified, with the errors DecodeFormat gives: an empty
// body, and an envelope signed with a certificate (Sigstore's keyless
// form) that p's Sigstore trust does not admit. A caller verifying the
// runner-key signature first (admit.Ingest) calls it before, so the
// answer to such a body is the same as without a registry.
func CheckDSSE(body []byte, p Params) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return ledger.FieldError("", "empty body: send a %s document", FormatDSSE)
	}
	if hasCertSignature(body) {
		return refuseCertEnvelope(body, p)
	}
	return nil
}

// hasCertSignature reports whether body is a DSSE envelope whose first
// signature carries a certificate.
func hasCertSignature(body []byte) bool {
	var certEnv struct {
		Signatures []struct {
			Cert string `json:"cert"`
		} `json:"signatures"`
	}
	return json.Unmarshal(body, &certEnv) == nil && len(certEnv.Signatures) > 0 && certEnv.Signatures[0].Cert != ""
}

// IsInTotoEnvelope reports whether body is one DSSE envelope whose
// payloadType is an in-toto Statement's (MediaInToto). Envelopes of the
// ledger's own evidence (ledger.PayloadTypeEvidence), and arrays of them,
// are the native format's, not this package's.
func IsInTotoEnvelope(body []byte) bool {
	var probe struct {
		PayloadType string `json:"payloadType"`
	}
	b := bytes.TrimSpace(body)
	return len(b) > 0 && b[0] == '{' && json.Unmarshal(b, &probe) == nil && probe.PayloadType == MediaInToto
}

// DecodeStatement reads an in-toto Statement and checks its type and
// subjects; it does not check the predicate type (see Params). A
// Statement with a member name twice in any object is refused
// (ledger.RefuseDuplicateNames): two readers of a signed document must
// not see two different claims.
func DecodeStatement(body []byte) (*Statement, error) {
	if err := ledger.RefuseDuplicateNames(body); err != nil {
		return nil, err
	}
	var st Statement
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, ledger.FieldError("", "not an in-toto Statement: malformed JSON")
	}
	if st.Type != StatementV1 && st.Type != StatementV01 {
		return nil, ledger.FieldError("_type", "want %s, got %q", StatementV1, clip(st.Type))
	}
	if len(st.Subject) == 0 {
		return nil, ledger.FieldError("subject", "a Statement needs at least one subject")
	}
	if st.PredicateType == "" {
		return nil, ledger.FieldError("predicateType", "required")
	}
	return &st, nil
}

// decodeStatement decodes a bare (unsigned) Statement. Provenance is
// refused: its facts count only from verified bytes.
func decodeStatement(ctx context.Context, body []byte, p Params) (*Run, error) {
	st, err := DecodeStatement(body)
	if err != nil {
		return nil, err
	}
	if IsProvenance(st.PredicateType) {
		if _, err := statementSubject(st); err != nil {
			return nil, err
		}
		return nil, &ledger.Error{Code: ledger.CodeInvalid, Field: "predicateType",
			Message: "unsigned SLSA provenance is not recorded: send it as a DSSE envelope signed by a registered runner key (" + FormatDSSE + ") or a Sigstore bundle (" + FormatSigstore + ")"}
	}
	return p.statementRun(ctx, st)
}

// statementRun maps a Statement to a run: subjects with a sha256 digest
// become artifact pins by name, a subject with gitCommit (and gitTree)
// the repository (its name, when given), commit and tree; the
// test-result predicate's lists become cases; any other predicate type
// the lane expects is one case named after the predicate type, passed.
// It stops with ctx.Err() once ctx is done (checked every cancelStep
// cases).
func (p Params) statementRun(ctx context.Context, st *Statement) (*Run, error) {
	if err := p.acceptsPredicate(st.PredicateType); err != nil {
		return nil, err
	}
	subj, err := statementSubject(st)
	if err != nil {
		return nil, err
	}
	r := &Run{Subject: subj, PredicateType: st.PredicateType}
	if IsProvenance(st.PredicateType) {
		if r.Provenance, err = extractProvenance(st); err != nil {
			return nil, err
		}
		if src := r.Provenance.Source; p.Commit == "" && p.Repository == "" && subj.Commit == "" && src.Commit != "" {
			subj.Commit, subj.Repository = src.Commit, src.Repository
		}
	}
	if st.PredicateType != PredicateTestResult {
		r.Cases = []Case{{ID: st.PredicateType, Outcome: Passed}}
		return r, nil
	}
	var tr TestResult
	if err := ledger.DecodeStrict(st.Predicate, &tr); err != nil {
		var le *ledger.Error
		if errors.As(err, &le) {
			le.Field = "predicate." + le.Field
		}
		return nil, err
	}
	ids := newCaseIDs()
	for _, l := range []struct {
		names   []string
		outcome Outcome
	}{{tr.PassedTests, Passed}, {tr.WarnedTests, Flaky}, {tr.FailedTests, Failed}} {
		for i, n := range l.names {
			if i%cancelStep == 0 {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
			}
			r.Cases = append(r.Cases, Case{ID: ids.next(n), Outcome: l.outcome})
		}
	}
	c := r.Tally()
	switch tr.Result {
	case "PASSED":
		if c.Failed+c.Flaky > 0 {
			return nil, ledger.FieldError("predicate.result", "PASSED with warned or failed tests")
		}
	case "WARNED":
		if c.Flaky == 0 {
			r.Cases = append(r.Cases, Case{ID: ids.next("(result WARNED)"), Outcome: Flaky})
		}
	case "FAILED":
		if c.Failed == 0 {
			r.Cases = append(r.Cases, Case{ID: ids.next("(result FAILED)"), Outcome: Failed})
		}
	default:
		return nil, ledger.FieldError("predicate.result", "want PASSED, WARNED or FAILED, got %q", clip(tr.Result))
	}
	return r, nil
}

// statementSubject maps a Statement's subjects to a ledger subject (see
// statementRun).
func statementSubject(st *Statement) (*ledger.Subject, error) {
	subj := &ledger.Subject{Artifacts: map[string]string{}}
	for i, sd := range st.Subject {
		field := fmt.Sprintf("subject[%d]", i)
		used := false
		if d, ok := sd.Digest["sha256"]; ok {
			if len(d) != 64 || !ledger.LowerHex(d) {
				return nil, ledger.FieldError(field+".digest.sha256", "want 64 lowercase hex digits")
			}
			if sd.Name == "" {
				return nil, ledger.FieldError(field+".name", "an artifact subject needs a name")
			}
			if old, dup := subj.Artifacts[sd.Name]; dup && old != "sha256:"+d {
				return nil, ledger.FieldError(field+".name", "subject %q is pinned twice to different digests", clip(sd.Name))
			}
			subj.Artifacts[sd.Name] = "sha256:" + d
			used = true
		}
		if c, ok := sd.Digest["gitCommit"]; ok {
			if !ledger.ValidObjectID(c) || subj.Commit != "" && subj.Commit != c {
				return nil, ledger.FieldError(field+".digest.gitCommit", "want one 40 or 64 lowercase hex commit id")
			}
			subj.Commit, subj.Repository, used = c, strings.TrimSpace(sd.Name), true
			if t, ok := sd.Digest["gitTree"]; ok {
				if !ledger.ValidObjectID(t) {
					return nil, ledger.FieldError(field+".digest.gitTree", "want 40 or 64 lowercase hex digits")
				}
				subj.Tree = t
			}
		}
		if !used {
			return nil, ledger.FieldError(field+".digest", "needs a sha256 or gitCommit digest")
		}
	}
	return subj, nil
}

func decodeDSSE(ctx context.Context, body []byte, p Params) (*Run, error) {
	if hasCertSignature(body) {
		return nil, refuseCertEnvelope(body, p)
	}
	if p.Envelope == nil {
		return nil, ledger.Errorf(ledger.CodeUnauthorized, "no runner-key registry to verify a DSSE envelope against")
	}
	if !bytes.Equal(p.Envelope.Envelope, body) {
		return nil, ledger.Errorf(ledger.CodeInternal, "the verified DSSE envelope is not the body being decoded")
	}
	payload, signer := p.Envelope.Payload, p.Envelope.Signer
	var probe struct {
		Type *string `json:"_type"`
	}
	if json.Unmarshal(payload, &probe) != nil || probe.Type == nil {
		return nil, ledger.FieldError("payloadType", "is %s but the payload is not an in-toto Statement (ledger evidence is signed as %s)", MediaInToto, ledger.PayloadTypeEvidence)
	}
	st, err := DecodeStatement(payload)
	if err != nil {
		return nil, err
	}
	r, err := p.statementRun(ctx, st)
	if err != nil {
		return nil, err
	}
	r.Identity = &Identity{Kind: "runner-key", Name: signer.Runner, KeyID: signer.KeyID}
	r.Signer = &signer
	return r, nil
}
