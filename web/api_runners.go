package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/verify"
	"github.com/go-chi/chi/v5"
)

// RunnerAddRequest is the body of POST /api/v1/runners (admin): a runner
// name and its Ed25519 public key as an OpenSSH line or a PEM PUBLIC KEY.
type RunnerAddRequest struct {
	Name      string `json:"name"`
	PublicKey string `json:"public_key"`
}

// RunnerRevokeRequest is the body of POST /api/v1/runners/{name}/revoke
// (admin).
type RunnerRevokeRequest struct {
	Reason string `json:"reason"`
}

// RunnerAnswer is the answer of a runner-key append: the runner's state
// and the appended entry.
type RunnerAnswer struct {
	Runner ledger.RunnerState `json:"runner"`
	Entry  AppendedJSON       `json:"entry"`
}

// RunnerLog is what registering runner keys needs: the log writer, the
// log reader and the entry queries the registry is folded from.
type RunnerLog interface {
	ledger.LogWriter
	ledger.LogReader
	ledger.Queries
}

// AddRunner validates and appends a runner-key registration of name with
// the key in keyFile (its bytes: see verify.ParseRunnerPublicKey) by the
// admin named by, and returns the registration. It is refused with
// CodeConflict when the name has a live key or the key was registered
// before, CodeInvalid naming public_key or name for bad input. Adding the
// name's live key again appends nothing and answers the registration with
// Existing set. It is the
// one implementation behind POST /api/v1/runners and the local
// `ledger runner add`; two concurrent adds for one name both append, and
// the registry's fold keeps the first.
func AddRunner(ctx context.Context, st RunnerLog, name string, keyFile []byte, by string) (ledger.RunnerState, *ledger.AppendResult, error) {
	return addRunnerKey(ctx, st, name, keyFile, by, "")
}

// addRunnerKey is AddRunner for a key of kind ("" a runner,
// ledger.RunnerKindAgent an agent).
func addRunnerKey(ctx context.Context, st RunnerLog, name string, keyFile []byte, by, kind string) (ledger.RunnerState, *ledger.AppendResult, error) {
	return addKeyLeaf(ctx, st, name, keyFile, by, kind, "", nil)
}

// addKeyLeaf is addRunnerKey whose leaf carries specDigest and labels (an
// agent approval's, or "" and nil).
func addKeyLeaf(ctx context.Context, st RunnerLog, name string, keyFile []byte, by, kind, specDigest string, labels map[string]string) (ledger.RunnerState, *ledger.AppendResult, error) {
	pub, err := verify.ParseRunnerPublicKey(keyFile)
	if err != nil {
		return ledger.RunnerState{}, nil, ledger.FieldError("public_key", "%v", err)
	}
	k := ledger.RunnerKey{Action: ledger.RunnerAdd, Kind: kind, Name: name, KeyID: verify.RunnerKeyID(pub), PublicKey: verify.AuthorizedKey(pub), SpecDigest: specDigest, Labels: labels, By: by, At: time.Now().UTC()}
	reg, err := ledger.LoadRunnerKeys(ctx, st, 0)
	if err != nil {
		return ledger.RunnerState{}, nil, err
	}
	if live, ok := reg.Live(name); ok && live.KeyID == k.KeyID && live.Kind == kind {
		// The same registration again: answered, not appended.
		cp, err := st.Checkpoint(ctx)
		if err != nil {
			return ledger.RunnerState{}, nil, err
		}
		return live, &ledger.AppendResult{Entries: []ledger.AppendedEntry{{Entry: ledger.Entry{ID: live.Entry, Index: live.Index, Kind: ledger.KindRunnerKey}, Existing: true}}, Checkpoint: cp}, nil
	}
	return appendRunnerKey(ctx, st, k)
}

// RevokeRunner appends the revocation of name's live key with reason, by
// the admin named by; CodeNotFound when the name has no live key.
func RevokeRunner(ctx context.Context, st RunnerLog, name, reason, by string) (ledger.RunnerState, *ledger.AppendResult, error) {
	reg, err := ledger.LoadRunnerKeys(ctx, st, 0)
	if err != nil {
		return ledger.RunnerState{}, nil, err
	}
	live, ok := reg.Live(name)
	if !ok {
		return ledger.RunnerState{}, nil, ledger.NotFound("runner %q has no live key", name)
	}
	k := ledger.RunnerKey{Action: ledger.RunnerRevoke, Name: name, KeyID: live.KeyID, Reason: reason, By: by, At: time.Now().UTC()}
	return appendRunnerKey(ctx, st, k)
}

func appendRunnerKey(ctx context.Context, store RunnerLog, k ledger.RunnerKey) (ledger.RunnerState, *ledger.AppendResult, error) {
	if err := k.Validate(); err != nil {
		return ledger.RunnerState{}, nil, err
	}
	reg, err := ledger.LoadRunnerKeys(ctx, store, 0)
	if err != nil {
		return ledger.RunnerState{}, nil, err
	}
	if err := reg.Check(k); err != nil {
		return ledger.RunnerState{}, nil, err
	}
	body, err := ledger.CanonicalBody(&k)
	if err != nil {
		return ledger.RunnerState{}, nil, err
	}
	res, err := store.Append(ctx, []ledger.Record{{Kind: ledger.KindRunnerKey, Body: body}}, "")
	if err != nil {
		return ledger.RunnerState{}, nil, err
	}
	// The state as the fold sees it after this entry.
	reg, err = ledger.LoadRunnerKeys(ctx, store, 0)
	if err != nil {
		return ledger.RunnerState{}, nil, err
	}
	st, _ := reg.ByKeyID(k.KeyID)
	return st, res, nil
}

func (s *Server) handleAddRunner(w http.ResponseWriter, r *http.Request) {
	var req RunnerAddRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	who, err := actorOf(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	st, res, err := AddRunner(r.Context(), s.store, req.Name, []byte(req.PublicKey), who.Name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.runnerAnswer(w, st, res)
}

func (s *Server) handleRevokeRunner(w http.ResponseWriter, r *http.Request) {
	var req RunnerRevokeRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	who, err := actorOf(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	st, res, err := RevokeRunner(r.Context(), s.store, chi.URLParam(r, "name"), req.Reason, who.Name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.runnerAnswer(w, st, res)
}

func (s *Server) runnerAnswer(w http.ResponseWriter, st ledger.RunnerState, res *ledger.AppendResult) {
	status, a := s.runnerAnswerOf(st, res)
	s.writeJSON(w, status, a)
}

// runnerAnswerOf is the status (201, or 200 when nothing was appended)
// and answer of a runner-key append, counting the leaf in the metrics.
func (s *Server) runnerAnswerOf(st ledger.RunnerState, res *ledger.AppendResult) (int, RunnerAnswer) {
	e := res.Entries[0]
	status := http.StatusOK
	if !e.Existing {
		status = http.StatusCreated
		s.metrics.appended.WithLabelValues(string(ledger.KindRunnerKey)).Inc()
	}
	return status, RunnerAnswer{Runner: st, Entry: AppendedJSON{ID: e.ID, Index: e.Index, LeafHash: e.LeafHash, Existing: e.Existing, InclusionProof: e.Proof}}
}

func (s *Server) handleListRunners(w http.ResponseWriter, r *http.Request) {
	asOf, err := queryAsOf(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	reg, err := ledger.LoadRunnerKeys(r.Context(), s.store, asOf)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, http.StatusOK, map[string]any{"runners": nonNilSlice(reg.Runners)})
}

// signedRecords turns the elements of a POST /evidence body into evidence
// records: a DSSE envelope is verified against the runner registry
// (verify.VerifyEvidenceEnvelope) and becomes the record with its signer;
// plain evidence that carries a signer is refused (only the server sets
// it), and so is plain evidence naming a run (ledger.RefuseRunClaim).
// With the DSSE content type every element must be an envelope.
// Unless ofRun (the envelopes of a run the caller's agent holds, which
// its callers check against the run), an envelope any of whose
// signatures is an approved agent key's is refused (refuseAgentSigner,
// RefuseAgentSignature), and so is any envelope
// naming a run. prefix(i) gives the field
// prefix of element i.
//
// Every record is checked against tok's scope and stamped with recorded_by
// (stampEvidence): rec names the request's token, plus, for an envelope,
// the runner key that signed it. rec nil (no token) stamps nothing.
func (s *Server) signedRecords(r *http.Request, raws []json.RawMessage, dsseOnly, ofRun bool, tok ledger.Token, rec *ledger.Recorder, prefix func(int) string) ([]ledger.Record, error) {
	recs := make([]ledger.Record, len(raws))
	var reg *ledger.RunnerRegistry
	for i, raw := range raws {
		env, signer := ledger.EvidenceShape(raw)
		switch {
		case env:
			if reg == nil {
				r, err := ledger.LoadRunnerKeys(r.Context(), s.store, 0)
				if err != nil {
					return nil, err
				}
				reg = &r
			}
			if !ofRun {
				// The signed payload as it is, before decoding: a member
				// named run in any letter case, null included.
				if _, payload, err := ledger.DecodeEnvelope(raw); err == nil {
					if err := ledger.RefuseRunClaim(payload, prefix(i)); err != nil {
						return nil, err
					}
				}
			}
			body, err := verify.VerifyEvidenceEnvelope(r.Context(), raw, *reg)
			if err != nil {
				return nil, withPrefix(err, prefix(i))
			}
			var signed struct {
				Signer *ledger.Signer `json:"signer"`
			}
			if !ofRun && json.Unmarshal(body, &signed) == nil && signed.Signer != nil {
				if err := refuseAgentSigner(*reg, *signed.Signer, prefix(i)); err != nil {
					return nil, err
				}
			}
			if !ofRun {
				if err := RefuseAgentSignature(*reg, raw, ledger.PayloadTypeEvidence, prefix(i)); err != nil {
					return nil, err
				}
			}
			// A signed payload is a claim like any other: it cannot carry
			// what only the server computes (TRUST.md rule 1).
			if err := gates.RefuseServerMarkers(body, prefix(i)); err != nil {
				return nil, err
			}
			if body, err = stampEvidence(tok, runnerRecorder(rec, body), body, prefix(i)); err != nil {
				return nil, err
			}
			recs[i] = ledger.Record{Kind: ledger.KindEvidence, Body: body}
		case dsseOnly:
			return nil, ledger.FieldError(prefix(i)+"payloadType", "Content-Type %s: every element must be a DSSE envelope", ledger.ContentTypeDSSE)
		case signer:
			return nil, ledger.FieldError(prefix(i)+ledger.SignerField, "only the server sets signer, after verifying a DSSE envelope signed by a registered runner key: post the envelope instead")
		default:
			if err := gates.RefuseServerMarkers(raw, prefix(i)); err != nil {
				return nil, err
			}
			if err := ledger.RefuseRunClaim(raw, prefix(i)); err != nil {
				return nil, err
			}
			if rec == nil {
				recs[i] = ledger.Record{Kind: ledger.KindEvidence, Body: raw}
				continue
			}
			if err := checkPosted(tok, raw, prefix(i)); err != nil {
				return nil, err
			}
			// recorded_by is set when the record is prepared, so its
			// body is decoded once.
			recs[i] = ledger.Record{Kind: ledger.KindEvidence, Body: raw, RecordedBy: rec}
		}
	}
	return recs, nil
}

// refuseAgentSigner refuses evidence posted outside a run and signed by
// an approved agent's key (a runner key of kind agent): an agent records
// only through the runs whose leases it holds, where the server checks
// each record against the run's lanes and backend and the agent's
// declared configuration (TRUST.md: an agent must not record for a lane
// or backend it did not declare). CodeForbidden naming the signer.
func refuseAgentSigner(reg ledger.RunnerRegistry, s ledger.Signer, prefix string) error {
	if st, ok := reg.ByEntry(s.KeyEntry); ok && st.Kind == ledger.RunnerKindAgent {
		return &ledger.Error{Code: ledger.CodeForbidden, Field: prefix + ledger.SignerField,
			Message: fmt.Sprintf("signed by agent %s's key: an agent's evidence is recorded only through the runs it holds (POST /api/v1/agent/runs/{id}/finish), nothing was recorded", s.Runner)}
	}
	return nil
}

// RefuseAgentSignature is refuseAgentSigner for every signature of a
// DSSE envelope of payloadType, not only the one its Signer names (the
// server's routes and `ledger record --db` call it): an
// envelope with a signature of an agent's key (its keyid names one, or it
// verifies under one: verify.SignatureOfKind) beside a runner's is
// refused, CodeForbidden naming prefix + "signatures[i]".
func RefuseAgentSignature(reg ledger.RunnerRegistry, envelope []byte, payloadType, prefix string) error {
	if i, st, ok := verify.SignatureOfKind(envelope, payloadType, reg, ledger.RunnerKindAgent); ok {
		return &ledger.Error{Code: ledger.CodeForbidden, Field: fmt.Sprintf("%ssignatures[%d]", prefix, i),
			Message: fmt.Sprintf("a signature of agent %s's key: an agent's evidence is recorded only through the runs it holds (POST /api/v1/agent/runs/{id}/finish), nothing was recorded", st.Name)}
	}
	return nil
}

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
	if e, ok := err.(*ledger.Error); ok {
		c := *e
		c.Field = p + c.Field
		return &c
	}
	return err
}

// mediaType is the request's Content-Type without parameters, lowercase.
func mediaType(r *http.Request) string {
	mt, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
	return strings.ToLower(strings.TrimSpace(mt))
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
