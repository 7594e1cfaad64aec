package ledger

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// KindRunnerKey is the entry kind of a runner key's registration or
// revocation (RunnerKey): admins append them, so the audit covers which
// runner keys the ledger trusted when (TRUST.md rule 5).
const KindRunnerKey Kind = "runner-key"

// PayloadTypeEvidence is the DSSE payloadType of a signed evidence record
// (https://github.com/secure-systems-lab/dsse/blob/master/envelope.md): the
// payload is one evidence JSON object, exactly as POST /api/v1/evidence
// takes it in plain form.
const PayloadTypeEvidence = "application/vnd.evidence-ledger.evidence.v1+json"

// PayloadTypeInToto is the DSSE payloadType of an in-toto Statement (the
// in-toto attestation framework, spec/v1/envelope.md). A record decoded
// from such an envelope (package ingest) keeps it in its Signer.
const PayloadTypeInToto = "application/vnd.in-toto+json"

// ContentTypeDSSE is the media type of a DSSE envelope (or a JSON array of
// them) posted to /api/v1/evidence.
const ContentTypeDSSE = "application/vnd.dsse.envelope.v1+json"

// RunnerKindAgent is the RunnerKey.Kind of an agent's key.
const RunnerKindAgent = "agent"

// The actions of a RunnerKey record.
const (
	RunnerAdd    = "add"
	RunnerRevoke = "revoke"
)

var (
	runnerNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	keyIDRe      = regexp.MustCompile(`^SHA256:[A-Za-z0-9+/]{43}$`)
	specDigestRe = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
)

// ValidRunnerName reports whether s is a runner name: 1-64 of [a-z0-9._-],
// starting alphanumeric.
func ValidRunnerName(s string) bool { return runnerNameRe.MatchString(s) }

// RunnerKey is the body of a KindRunnerKey entry: Action "add" registers
// PublicKey (an OpenSSH "ssh-ed25519 <base64>" line without comment) under
// Name; "revoke" revokes the key KeyID of Name. KeyID is the key's OpenSSH
// SHA256 fingerprint ("SHA256:" + 43 base64 characters, as ssh-keygen -l
// prints it), which is also the DSSE keyid runners put in their signatures.
// By is the name of the admin token that appended it. Kind is "" for a
// runner key and RunnerKindAgent for an approved agent's key (`ledger agent
// approve`): an agent is a runner whose key was registered by approving its
// registration, and a gate with `runner: agent` counts only evidence
// signed by such a key.
type RunnerKey struct {
	Action    string `json:"action"`
	Kind      string `json:"kind,omitempty"`
	Name      string `json:"name"`
	KeyID     string `json:"key_id"`
	PublicKey string `json:"public_key,omitempty"`
	Reason    string `json:"reason,omitempty"`
	// SpecDigest, on the approval of an agent key only, is the spec
	// digest ("sha256:" + 64 hex, runs.SpecDigestOf) of the registration
	// approved: what the agent declared (build, lanes, hardware) when the
	// admin approved it.
	SpecDigest string `json:"spec_digest,omitempty"`
	// Labels, on the approval of an agent key only, are the agent's
	// labels when it was approved (an approved agent's labels cannot
	// change): what a gate's agent_labels is checked against.
	Labels map[string]string `json:"labels,omitempty"`
	By     string            `json:"by"`
	At     time.Time         `json:"at"`
}

var (
	labelKeyRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._/-]{0,62}$`)
	labelValRe = regexp.MustCompile(`^[A-Za-z0-9._:/-]{0,128}$`)
)

// ValidateLabels checks agent, run or gate labels: at most 32, keys 1-63
// of [a-z0-9._/-] starting alphanumeric, values at most 128 of
// [A-Za-z0-9._:/-]. field names the member in CodeInvalid errors.
func ValidateLabels(field string, l map[string]string) error {
	if len(l) > 32 {
		return FieldError(field, "at most 32 labels, got %d", len(l))
	}
	for k, v := range l {
		if !labelKeyRe.MatchString(k) {
			return FieldError(field, "label key %q: must be 1-63 of [a-z0-9._/-] starting alphanumeric", clip(k))
		}
		if !labelValRe.MatchString(v) {
			return FieldError(field, "label %s's value must be at most 128 of [A-Za-z0-9._:/-]", k)
		}
	}
	return nil
}

// Validate checks every field of k, including that an added key's KeyID is
// the fingerprint of its PublicKey. Errors are CodeInvalid naming the field.
func (k *RunnerKey) Validate() error {
	if !ValidRunnerName(k.Name) {
		return FieldError("name", "must be 1-64 of [a-z0-9._-] starting alphanumeric, got %q", clip(k.Name))
	}
	if !keyIDRe.MatchString(k.KeyID) {
		return FieldError("key_id", "must be an OpenSSH SHA256 fingerprint (SHA256:<43 base64>)")
	}
	if k.Kind != "" && k.Kind != RunnerKindAgent {
		return FieldError("kind", "must be empty (a runner) or %q, got %q", RunnerKindAgent, clip(k.Kind))
	}
	switch k.Action {
	case RunnerAdd:
		id, err := SSHKeyFingerprint(k.PublicKey)
		if err != nil {
			return FieldError("public_key", "%v", err)
		}
		if id != k.KeyID {
			return FieldError("key_id", "is not the fingerprint of public_key")
		}
		if k.Reason != "" {
			return FieldError("reason", "only a revocation carries a reason")
		}
		if k.SpecDigest != "" && (k.Kind != RunnerKindAgent || !specDigestRe.MatchString(k.SpecDigest)) {
			return FieldError("spec_digest", "only an agent key's approval carries one: sha256: and 64 lowercase hex")
		}
		if len(k.Labels) > 0 && k.Kind != RunnerKindAgent {
			return FieldError("labels", "only an agent key's approval carries labels")
		}
		if err := ValidateLabels("labels", k.Labels); err != nil {
			return err
		}
	case RunnerRevoke:
		if k.PublicKey != "" || k.SpecDigest != "" || len(k.Labels) > 0 {
			return FieldError("public_key", "a revocation names the key by key_id only")
		}
		if strings.TrimSpace(k.Reason) == "" || len(k.Reason) > 1024 {
			return FieldError("reason", "required: why the key is revoked (at most 1024 characters)")
		}
	default:
		return FieldError("action", "must be add or revoke, got %q", clip(k.Action))
	}
	if strings.TrimSpace(k.By) == "" || len(k.By) > 256 {
		return FieldError("by", "required: the admin token's name")
	}
	if k.At.IsZero() {
		return FieldError("at", "required (RFC 3339)")
	}
	return nil
}

// SSHKeyFingerprint returns the OpenSSH SHA256 fingerprint of an
// "ssh-ed25519 <base64>" public key line: "SHA256:" and the unpadded
// standard base64 of SHA-256 over the key's wire-format blob (RFC 4253
// section 6.6, as ssh-keygen -l prints it). Only ssh-ed25519 keys are
// accepted; the line must have no comment.
func SSHKeyFingerprint(line string) (string, error) {
	typ, b64, ok := strings.Cut(line, " ")
	if !ok || typ != "ssh-ed25519" || strings.ContainsAny(b64, " \t\n") {
		return "", fmt.Errorf("must be an OpenSSH line \"ssh-ed25519 <base64>\" without comment")
	}
	blob, err := base64.StdEncoding.DecodeString(b64)
	// The ssh-ed25519 wire blob: string "ssh-ed25519" (4+11 bytes), string key (4+32).
	if err != nil || len(blob) != 51 || !bytes.HasPrefix(blob, []byte("\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20")) {
		return "", fmt.Errorf("is not an ssh-ed25519 public key")
	}
	sum := sha256.Sum256(blob)
	return "SHA256:" + base64.RawStdEncoding.EncodeToString(sum[:]), nil
}

// PrepareRunnerKey decodes body strictly as a RunnerKey, validates it and
// returns it with its canonical bytes.
func PrepareRunnerKey(body []byte) (RunnerKey, []byte, error) {
	var k RunnerKey
	if err := DecodeStrict(body, &k); err != nil {
		return k, nil, err
	}
	if err := k.Validate(); err != nil {
		return k, nil, err
	}
	k.At = k.At.UTC()
	b, err := marshalNoEscape(&k)
	return k, b, err
}

// Signer is the runner that signed an evidence record: its registered name,
// key id, the id of the runner-key entry that registered the key, and the
// DSSE envelope the server verified (canonical JSON; its payload is the
// record without Signer), kept so an audit can check the signature again.
// Only the server sets it, after verifying the envelope against the
// registered keys: POST /api/v1/evidence refuses plain JSON that carries
// it.
type Signer struct {
	Runner   string          `json:"runner"`
	KeyID    string          `json:"key_id"`
	KeyEntry string          `json:"key_entry"`
	Envelope json.RawMessage `json:"envelope"`
}

// SignerField is the evidence member that carries a Signer.
const SignerField = "signer"

// Envelope is a DSSE envelope (DSSE v1.0 envelope.md): Payload and each
// Sig are base64 (standard or URL alphabet, as the specification allows).
type Envelope struct {
	PayloadType string              `json:"payloadType"`
	Payload     string              `json:"payload"`
	Signatures  []EnvelopeSignature `json:"signatures"`
}

// EnvelopeSignature is one signature of an Envelope.
type EnvelopeSignature struct {
	KeyID string `json:"keyid,omitempty"`
	Sig   string `json:"sig"`
}

// DecodeEnvelope decodes data strictly as an Envelope (unknown and
// duplicate members refused) and checks its shape: the evidence payload
// type, a base64 payload, 1..16 signatures with base64 sigs. It returns the
// decoded payload. Errors are CodeInvalid naming the member.
func DecodeEnvelope(data []byte) (Envelope, []byte, error) {
	return DecodeEnvelopeOf(data, PayloadTypeEvidence)
}

// DecodeEnvelopeOf is DecodeEnvelope with the expected payload type given
// (PayloadTypeEvidence or PayloadTypeInToto): a different payloadType is
// refused naming "payloadType".
func DecodeEnvelopeOf(data []byte, payloadType string) (Envelope, []byte, error) {
	var env Envelope
	if err := DecodeStrict(data, &env); err != nil {
		return env, nil, err
	}
	if env.PayloadType != payloadType {
		return env, nil, FieldError("payloadType", "must be %q, got %q", payloadType, clip(env.PayloadType))
	}
	payload, err := decodeB64(env.Payload)
	if err != nil || len(payload) == 0 {
		return env, nil, FieldError("payload", "must be the base64 of one JSON object")
	}
	if len(env.Signatures) == 0 || len(env.Signatures) > 16 {
		return env, nil, FieldError("signatures", "1 to 16 signatures required, got %d", len(env.Signatures))
	}
	for i, s := range env.Signatures {
		if _, err := decodeB64(s.Sig); err != nil || s.Sig == "" {
			return env, nil, FieldError(fmt.Sprintf("signatures[%d].sig", i), "must be base64")
		}
		if len(s.KeyID) > 256 {
			return env, nil, FieldError(fmt.Sprintf("signatures[%d].keyid", i), "at most 256 characters")
		}
	}
	return env, payload, nil
}

func decodeB64(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		b, err = base64.URLEncoding.DecodeString(s)
	}
	return b, err
}

// validate checks that s names a runner and key in the right forms and
// that its envelope is a well-formed evidence envelope whose payload is e
// without its Signer (compared in canonical form). It does not check the
// signature: that needs the registered keys (package verify does it when the
// server appends, and the runner audit again later).
func (s *Signer) validate(e *Evidence) error {
	if !ValidRunnerName(s.Runner) {
		return FieldError("signer.runner", "must be a runner name, got %q", clip(s.Runner))
	}
	if !keyIDRe.MatchString(s.KeyID) {
		return FieldError("signer.key_id", "must be an OpenSSH SHA256 fingerprint")
	}
	if len(s.KeyEntry) != 32 || !LowerHex(s.KeyEntry) {
		return FieldError("signer.key_entry", "must be the 32-hex id of the runner-key entry")
	}
	env, payload, err := decodeSignerEnvelope(s.Envelope)
	if err != nil {
		return fieldUnder(err, "signer.envelope")
	}
	if env.PayloadType == PayloadTypeInToto {
		return statementBinds(payload, e)
	}
	signed, err := PayloadEvidence(payload)
	if err != nil {
		return fieldUnder(err, "signer.envelope.payload")
	}
	unsigned := *e
	unsigned.Signer = nil
	unsigned.RecordedBy = nil // the server adds it after verifying
	unsigned.Normalize()
	mine, err := marshalNoEscape(&unsigned)
	if err != nil {
		return err
	}
	if !bytes.Equal(mine, signed) {
		return FieldError("signer.envelope", "the envelope's payload is not this record")
	}
	return nil
}

// PayloadEvidence prepares the payload of an evidence envelope: one
// evidence object, which may not carry a signer itself. It returns the
// canonical bytes (as PrepareEvidence).
func PayloadEvidence(payload []byte) ([]byte, error) {
	p := bytes.TrimSpace(payload)
	if len(p) == 0 || p[0] != '{' {
		return nil, FieldError("", "must be one evidence JSON object")
	}
	return payloadMemo.do(p, payloadEvidence)
}

var payloadMemo byteMemo

func payloadEvidence(p []byte) ([]byte, error) {
	e, b, err := PrepareEvidence(p)
	if err != nil {
		return nil, err
	}
	if e.Signer != nil {
		return nil, FieldError(SignerField, "a signed payload may not carry a signer")
	}
	if e.RecordedBy != nil {
		return nil, FieldError(RecordedByField, "a signed payload may not carry recorded_by: the server sets it")
	}
	return b, nil
}

// fieldUnder returns err with its field put under prefix ("signer.envelope"
// and "payloadType" give "signer.envelope.payloadType"); errors other than
// *Error are returned as they are.
func fieldUnder(err error, prefix string) error {
	if e, ok := err.(*Error); ok {
		c := *e
		if c.Field == "" {
			c.Field = prefix
		} else {
			c.Field = prefix + "." + c.Field
		}
		return &c
	}
	return err
}

// RunnerState is one registration of a runner key folded with its
// revocation: the key, the entry that added it and, when revoked, the
// revocation.
type RunnerState struct {
	Name      string    `json:"name"`
	Kind      string    `json:"kind,omitempty"`
	KeyID     string    `json:"key_id"`
	PublicKey string    `json:"public_key"`
	Entry     string    `json:"entry"`
	Index     uint64    `json:"index"`
	AddedBy   string    `json:"added_by"`
	AddedAt   time.Time `json:"added_at"`
	// SpecDigest is the spec digest the approval of an agent key
	// recorded (RunnerKey.SpecDigest), "" for a runner key.
	SpecDigest string `json:"spec_digest,omitempty"`
	// Labels are the labels the approval of an agent key recorded
	// (RunnerKey.Labels), nil for a runner key.
	Labels  map[string]string `json:"labels,omitempty"`
	Revoked bool              `json:"revoked"`
	// RevokedIndex, RevokedBy, RevokedAt and Reason describe the
	// revocation when Revoked.
	RevokedIndex uint64    `json:"revoked_index,omitempty"`
	RevokedBy    string    `json:"revoked_by,omitempty"`
	RevokedAt    time.Time `json:"revoked_at,omitzero"`
	Reason       string    `json:"reason,omitempty"`
}

// RunnerRegistry is the state of every runner key registration, oldest
// first. The fold is deterministic over the log order: an add for a name
// that has a live key, or of a key id registered before (live or revoked),
// is ignored; a revoke applies to the name's live key when its key_id
// matches, and is ignored otherwise. A RunnerRegistry is a value: safe to
// share once built.
type RunnerRegistry struct {
	Runners []RunnerState `json:"runners"`
}

// Live returns the name's live (registered, not revoked) key.
func (r RunnerRegistry) Live(name string) (RunnerState, bool) {
	for _, s := range r.Runners {
		if s.Name == name && !s.Revoked {
			return s, true
		}
	}
	return RunnerState{}, false
}

// ByEntry returns the registration added by the entry with content id id.
func (r RunnerRegistry) ByEntry(id string) (RunnerState, bool) {
	for _, s := range r.Runners {
		if s.Entry == id {
			return s, true
		}
	}
	return RunnerState{}, false
}

// ByKeyID returns the registration of key id (there is at most one).
func (r RunnerRegistry) ByKeyID(id string) (RunnerState, bool) {
	for _, s := range r.Runners {
		if s.KeyID == id {
			return s, true
		}
	}
	return RunnerState{}, false
}

// Check returns why a registry change k would be ignored by the fold (a
// CodeConflict or CodeNotFound *Error), or nil when it applies.
func (r RunnerRegistry) Check(k RunnerKey) error {
	switch k.Action {
	case RunnerAdd:
		if s, ok := r.ByKeyID(k.KeyID); ok {
			state := "live"
			if s.Revoked {
				state = "revoked"
			}
			return Errorf(CodeConflict, "key %s is already registered (%s) for runner %q: register a new key", k.KeyID, state, s.Name)
		}
		if s, ok := r.Live(k.Name); ok {
			return Errorf(CodeConflict, "runner %q already has live key %s: revoke it first", k.Name, s.KeyID)
		}
	case RunnerRevoke:
		s, ok := r.Live(k.Name)
		if !ok {
			return NotFound("runner %q has no live key", k.Name)
		}
		if s.KeyID != k.KeyID {
			return Errorf(CodeConflict, "runner %q's live key is %s, not %s", k.Name, s.KeyID, k.KeyID)
		}
	}
	return nil
}

// apply folds one entry into r.
func (r *RunnerRegistry) apply(e Entry) error {
	var k RunnerKey
	if err := json.Unmarshal(e.Body, &k); err != nil {
		return fmt.Errorf("runner-key entry %s (index %d): %w", e.ID, e.Index, err)
	}
	if r.Check(k) != nil {
		return nil
	}
	switch k.Action {
	case RunnerAdd:
		r.Runners = append(r.Runners, RunnerState{Name: k.Name, Kind: k.Kind, KeyID: k.KeyID, PublicKey: k.PublicKey, Entry: e.ID, Index: e.Index, AddedBy: k.By, AddedAt: k.At, SpecDigest: k.SpecDigest, Labels: k.Labels})
	case RunnerRevoke:
		for i := range r.Runners {
			s := &r.Runners[i]
			if s.Name == k.Name && !s.Revoked {
				s.Revoked, s.RevokedIndex, s.RevokedBy, s.RevokedAt, s.Reason = true, e.Index, k.By, k.At, k.Reason
			}
		}
	}
	return nil
}

// LoadRunnerKeys folds every runner-key entry of the log as of tree size
// asOf (0: the latest) into a registry, reading every page. Errors are the
// store's, or one naming an entry that does not decode.
func LoadRunnerKeys(ctx context.Context, q Queries, asOf uint64) (RunnerRegistry, error) {
	var all []Entry
	f := EntryFilter{Kind: KindRunnerKey, AsOfSize: asOf, Limit: 1000}
	for {
		es, next, err := q.Entries(ctx, f)
		if err != nil {
			return RunnerRegistry{}, err
		}
		all = append(all, es...)
		if next == "" {
			break
		}
		f.Cursor = next
	}
	slices.SortFunc(all, func(a, b Entry) int { return cmp.Compare(a.Index, b.Index) })
	var r RunnerRegistry
	for _, e := range all {
		if err := r.apply(e); err != nil {
			return RunnerRegistry{}, err
		}
	}
	return r, nil
}

// EvidenceShape tells what one element of an evidence body is: a DSSE
// envelope (a JSON object with a top-level payloadType member) or plain
// evidence, and whether plain evidence carries a member only the server
// sets (signer). Only bodies that mention either member name or contain a
// backslash are decoded, so plain evidence pays a substring search; a body
// that is not a JSON
// object reports neither (the strict decoder names its problem).
func EvidenceShape(raw []byte) (envelope, hasSigner bool) {
	maybeEnv := bytes.Contains(raw, []byte(`"payloadType"`))
	maybeSigner := bytes.Contains(raw, []byte(`"`+SignerField+`"`))
	// A backslash may spell a member name with escapes ("sign\u0065r"),
	// which the decoders read as the name itself: decode then.
	if !maybeEnv && !maybeSigner && bytes.IndexByte(raw, '\\') < 0 {
		return false, false
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(raw, &top) != nil {
		return false, false
	}
	_, envelope = top["payloadType"]
	_, hasSigner = top[SignerField]
	return envelope, hasSigner
}

// Check verifies the signer's envelope against the registered public key
// pub (an "ssh-ed25519 <base64>" line): some signature whose keyid is
// empty or s.KeyID must be a valid Ed25519 signature over the DSSE PAE
// ("DSSEv1 <len> <payloadType> <len> <payload>", DSSE protocol.md) of the
// envelope's payload. Gates call it on every signed record they count, so
// a signer that reached the log without the server's verification (a
// forged row, a path that skipped the API's check) does not count. Errors
// name what failed, never key or payload bytes.
func (s *Signer) Check(pub string) error {
	id, err := SSHKeyFingerprint(pub)
	if err != nil {
		return fmt.Errorf("registered key: %w", err)
	}
	if id != s.KeyID {
		return fmt.Errorf("the registered key is not %s", s.KeyID)
	}
	blob, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(pub, "ssh-ed25519 "))
	key := ed25519.PublicKey(blob[len(blob)-ed25519.PublicKeySize:])
	env, payload, err := decodeSignerEnvelope(s.Envelope)
	if err != nil {
		return fmt.Errorf("envelope: %w", err)
	}
	pae := fmt.Appendf(nil, "DSSEv1 %d %s %d ", len(env.PayloadType), env.PayloadType, len(payload))
	pae = append(pae, payload...)
	for _, sig := range env.Signatures {
		if sig.KeyID != "" && sig.KeyID != s.KeyID {
			continue
		}
		if b, err := decodeB64(sig.Sig); err == nil && ed25519.Verify(key, pae, b) {
			return nil
		}
	}
	return fmt.Errorf("no signature of the envelope verifies under %s", s.KeyID)
}

// EnvelopePayloadType returns the payloadType member of a DSSE envelope
// ("" when data is not a JSON object that has one).
func EnvelopePayloadType(data []byte) string {
	var probe struct {
		PayloadType string `json:"payloadType"`
	}
	_ = json.Unmarshal(data, &probe)
	return probe.PayloadType
}

// decodeSignerEnvelope decodes the envelope a Signer keeps: one of
// evidence (its payload is the record) or of an in-toto Statement (the
// record was decoded from it by package ingest).
func decodeSignerEnvelope(data []byte) (Envelope, []byte, error) {
	if EnvelopePayloadType(data) == PayloadTypeInToto {
		return DecodeEnvelopeOf(data, PayloadTypeInToto)
	}
	return DecodeEnvelope(data)
}

// statementBinds checks that a record signed through an in-toto
// Statement is about exactly what the Statement names: every subject with
// a sha256 digest is an artifact pin of e with that digest, a subject with
// a gitCommit digest is e's commit (and its gitTree e's tree), and e pins
// no artifact the Statement does not name. Lane and backend are not in a
// Statement: they come from the request that recorded it, within its
// token's scope.
func statementBinds(payload []byte, e *Evidence) error {
	var st struct {
		Subject []struct {
			Name   string            `json:"name"`
			Digest map[string]string `json:"digest"`
		} `json:"subject"`
	}
	if err := json.Unmarshal(payload, &st); err != nil || len(st.Subject) == 0 {
		return FieldError("signer.envelope.payload", "is not an in-toto Statement with subjects")
	}
	named := map[string]bool{}
	for i, sd := range st.Subject {
		if d, ok := sd.Digest["sha256"]; ok {
			named[sd.Name] = true
			if e.Subject.Artifacts[sd.Name] != "sha256:"+d {
				return FieldError(fmt.Sprintf("signer.envelope.payload.subject[%d]", i), "the signed Statement pins %q to a digest this record does not", clip(sd.Name))
			}
		}
		if c, ok := sd.Digest["gitCommit"]; ok && c != e.Subject.Commit {
			return FieldError(fmt.Sprintf("signer.envelope.payload.subject[%d]", i), "the signed Statement names another commit than this record")
		}
		if t, ok := sd.Digest["gitTree"]; ok && t != e.Subject.Tree {
			return FieldError(fmt.Sprintf("signer.envelope.payload.subject[%d]", i), "the signed Statement names another tree than this record")
		}
	}
	for name := range e.Subject.Artifacts {
		if !named[name] {
			return FieldError("subject.artifacts", "pins %q, which the signed Statement does not name", clip(name))
		}
	}
	return nil
}
