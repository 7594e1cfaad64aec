package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"regexp"
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
			return FieldError(field, "label key %q: must be 1-63 of [a-z0-9._/-] starting alphanumeric", Clip(k))
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
		return FieldError("name", "must be 1-64 of [a-z0-9._-] starting alphanumeric, got %q", Clip(k.Name))
	}
	if !keyIDRe.MatchString(k.KeyID) {
		return FieldError("key_id", "must be an OpenSSH SHA256 fingerprint (SHA256:<43 base64>)")
	}
	if k.Kind != "" && k.Kind != RunnerKindAgent {
		return FieldError("kind", "must be empty (a runner) or %q, got %q", RunnerKindAgent, Clip(k.Kind))
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
		return FieldError("action", "must be add or revoke, got %q", Clip(k.Action))
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
