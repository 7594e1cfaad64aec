package ledger

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
)

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
		return env, nil, FieldError("payloadType", "must be %q, got %q", payloadType, Clip(env.PayloadType))
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
		return FieldError("signer.runner", "must be a runner name, got %q", Clip(s.Runner))
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
				return FieldError(fmt.Sprintf("signer.envelope.payload.subject[%d]", i), "the signed Statement pins %q to a digest this record does not", Clip(sd.Name))
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
			return FieldError("subject.artifacts", "pins %q, which the signed Statement does not name", Clip(name))
		}
	}
	return nil
}
