package verify

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/auth"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"golang.org/x/crypto/ssh"
)

// Runner-key errors, checkable with errors.Is. Every error of this file is
// also a CodeInvalid *ledger.Error naming the member it is about.
var (
	// ErrUnknownRunnerKey: no signature of the envelope names (or verifies
	// under) a registered runner key.
	ErrUnknownRunnerKey = errors.New("signed by no registered runner key")
	// ErrRevokedRunnerKey: the envelope is signed by a revoked runner key.
	ErrRevokedRunnerKey = errors.New("signed by a revoked runner key")
	// ErrEnvelopeSignature: a signature names a registered key but does not
	// verify over the envelope's PAE (a tampered payload or payload type).
	ErrEnvelopeSignature = errors.New("envelope signature does not verify")
)

// envelopeError is a *ledger.Error (CodeInvalid, naming Field) that also
// matches its sentinel with errors.Is.
type envelopeError struct {
	le       *ledger.Error
	sentinel error
}

func (e *envelopeError) Error() string   { return e.le.Error() }
func (e *envelopeError) Unwrap() []error { return []error{e.le, e.sentinel} }

func refuse(sentinel error, field, format string, args ...any) error {
	return &envelopeError{ledger.FieldError(field, format, args...), sentinel}
}

// ParseRunnerPublicKey reads a runner's Ed25519 public key from data: an
// OpenSSH public key line ("ssh-ed25519 AAAA... comment", as in a .pub file
// or authorized_keys) or a PEM "PUBLIC KEY" block (PKIX, RFC 8410). Other
// key types are refused. Errors never quote the input.
func ParseRunnerPublicKey(data []byte) (ed25519.PublicKey, error) {
	d := bytes.TrimSpace(data)
	if bytes.HasPrefix(d, []byte("-----BEGIN")) {
		b, _ := pem.Decode(d)
		if b == nil || b.Type != "PUBLIC KEY" {
			return nil, errors.New("PEM key file: want one PUBLIC KEY block (PKIX Ed25519)")
		}
		k, err := x509.ParsePKIXPublicKey(b.Bytes)
		if err != nil {
			return nil, errors.New("PEM key file: not a PKIX public key")
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, errors.New("PEM key file: not an Ed25519 key (only Ed25519 runner keys are supported)")
		}
		return pub, nil
	}
	pk, _, _, rest, err := ssh.ParseAuthorizedKey(d)
	if err != nil {
		return nil, errors.New("not an OpenSSH public key line or a PEM PUBLIC KEY")
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, errors.New("more than one key in the file")
	}
	ck, ok := pk.(ssh.CryptoPublicKey)
	if !ok || pk.Type() != ssh.KeyAlgoED25519 {
		return nil, fmt.Errorf("key type %s: only ssh-ed25519 runner keys are supported", pk.Type())
	}
	return ck.CryptoPublicKey().(ed25519.PublicKey), nil
}

// ParseRunnerPrivateKey reads a runner's Ed25519 signing key: an
// unencrypted OpenSSH private key ("BEGIN OPENSSH PRIVATE KEY", as
// ssh-keygen -t ed25519 -N ” writes) or a PEM "PRIVATE KEY" block (PKCS #8,
// as openssl genpkey -algorithm ed25519 and `ledger runner keygen` write).
// Errors never quote the key.
func ParseRunnerPrivateKey(data []byte) (ed25519.PrivateKey, error) {
	k, err := ssh.ParseRawPrivateKey(data)
	if err != nil {
		var pp *ssh.PassphraseMissingError
		if errors.As(err, &pp) {
			return nil, errors.New("the key is encrypted: use an unencrypted key file (mode 0600)")
		}
		return nil, errors.New("not an OpenSSH or PKCS #8 PEM private key")
	}
	switch p := k.(type) {
	case ed25519.PrivateKey:
		return p, nil
	case *ed25519.PrivateKey:
		return *p, nil
	}
	return nil, errors.New("not an Ed25519 private key (only Ed25519 runner keys are supported)")
}

// RunnerKeyID returns the key id of pub: its OpenSSH SHA256 fingerprint
// ("SHA256:..."), the DSSE keyid a runner puts in its signatures.
func RunnerKeyID(pub ed25519.PublicKey) string {
	pk, err := ssh.NewPublicKey(pub)
	if err != nil {
		return ""
	}
	return ssh.FingerprintSHA256(pk)
}

// AuthorizedKey returns pub as the OpenSSH line "ssh-ed25519 <base64>"
// without comment: the form a runner-key record keeps.
func AuthorizedKey(pub ed25519.PublicKey) string {
	pk, err := ssh.NewPublicKey(pub)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pk)))
}

// ed25519SV is a dsse.SignerVerifier over one Ed25519 key.
type ed25519SV struct {
	pub  ed25519.PublicKey
	priv ed25519.PrivateKey
}

func (k ed25519SV) Sign(_ context.Context, data []byte) ([]byte, error) {
	if k.priv == nil {
		return nil, errors.New("no private key")
	}
	return ed25519.Sign(k.priv, data), nil
}

func (k ed25519SV) Verify(_ context.Context, data, sig []byte) error {
	if !ed25519.Verify(k.pub, data, sig) {
		return ErrEnvelopeSignature
	}
	return nil
}

func (k ed25519SV) KeyID() (string, error)   { return RunnerKeyID(k.pub), nil }
func (k ed25519SV) Public() crypto.PublicKey { return k.pub }

// SignEvidence wraps one evidence JSON object in a DSSE envelope
// (payloadType ledger.PayloadTypeEvidence, payload the bytes as given)
// signed with priv, its keyid the key's fingerprint, and returns the
// envelope's JSON. The payload is checked as evidence first, so a runner
// does not sign what the server would refuse.
func SignEvidence(ctx context.Context, priv ed25519.PrivateKey, evidence []byte) ([]byte, error) {
	if _, err := ledger.PayloadEvidence(evidence); err != nil {
		return nil, err
	}
	signer, err := dsse.NewEnvelopeSigner(ed25519SV{pub: priv.Public().(ed25519.PublicKey), priv: priv})
	if err != nil {
		return nil, err
	}
	env, err := signer.SignPayload(ctx, ledger.PayloadTypeEvidence, bytes.TrimSpace(evidence))
	if err != nil {
		return nil, err
	}
	return json.Marshal(env)
}

// VerifyEvidenceEnvelope checks a DSSE envelope of evidence against the
// runner registry reg and returns the evidence record to append: the
// payload with its Signer set (runner, key id, key entry and the envelope
// in canonical form). It checks, in order, the envelope's shape and payload
// type (ledger.DecodeEnvelope), that the payload is evidence without a
// signer, and that a signature verifies over the DSSE PAE under a live
// registered key (VerifyRunnerEnvelope). A signature whose keyid names
// a revoked key is ErrRevokedRunnerKey; one naming a live key that does not
// verify is ErrEnvelopeSignature; no registered key at all is
// ErrUnknownRunnerKey. Every error is a CodeInvalid *ledger.Error naming the
// member (payloadType, payload..., signatures). Safe for concurrent use.
func VerifyEvidenceEnvelope(ctx context.Context, envelope []byte, reg auth.RunnerRegistry) ([]byte, error) {
	_, payload, err := ledger.DecodeEnvelope(envelope)
	if err != nil {
		return nil, err
	}
	if _, err := ledger.PayloadEvidence(payload); err != nil {
		return nil, prefix(err, "payload")
	}
	payload, signer, err := VerifyRunnerEnvelope(ctx, envelope, ledger.PayloadTypeEvidence, reg)
	if err != nil {
		return nil, err
	}
	var e ledger.Evidence
	if err := ledger.DecodeStrict(bytes.TrimSpace(payload), &e); err != nil {
		return nil, prefix(err, "payload")
	}
	e.Signer = &signer
	return ledger.CanonicalBody(&e)
}

// VerifyRunnerEnvelope is the ledger's one DSSE verifier of runner
// signatures: it decodes envelope strictly (ledger.DecodeEnvelopeOf, so
// the payload type must be payloadType: ledger.PayloadTypeEvidence or
// ledger.PayloadTypeInToto), verifies a signature over the DSSE
// pre-authentication encoding under a live key of reg
// (go-securesystemslib/dsse), and returns the decoded payload and the
// Signer a record made from it carries (runner name, key id, the
// runner-key entry and the envelope in canonical form). Errors are those
// of VerifyEvidenceEnvelope. Safe for concurrent use.
func VerifyRunnerEnvelope(ctx context.Context, envelope []byte, payloadType string, reg auth.RunnerRegistry) ([]byte, ledger.Signer, error) {
	env, payload, err := ledger.DecodeEnvelopeOf(envelope, payloadType)
	if err != nil {
		return nil, ledger.Signer{}, err
	}
	var verifiers []dsse.Verifier
	live := map[string]auth.RunnerState{}
	for _, s := range reg.Runners {
		if s.Revoked {
			continue
		}
		pub, err := ParseRunnerPublicKey([]byte(s.PublicKey))
		if err != nil {
			return nil, ledger.Signer{}, fmt.Errorf("runner %q: registered key: %w", s.Name, err)
		}
		verifiers = append(verifiers, ed25519SV{pub: pub})
		live[s.KeyID] = s
	}
	var accepted []dsse.AcceptedKey
	if len(verifiers) > 0 {
		ev, err := dsse.NewEnvelopeVerifier(verifiers...)
		if err != nil {
			return nil, ledger.Signer{}, err
		}
		de := &dsse.Envelope{PayloadType: env.PayloadType, Payload: env.Payload}
		for _, s := range env.Signatures {
			de.Signatures = append(de.Signatures, dsse.Signature{KeyID: s.KeyID, Sig: s.Sig})
		}
		accepted, _ = ev.Verify(ctx, de)
	}
	if len(accepted) == 0 {
		for i, s := range env.Signatures {
			f := fmt.Sprintf("signatures[%d]", i)
			if r, ok := live[s.KeyID]; ok {
				return nil, ledger.Signer{}, refuse(ErrEnvelopeSignature, f, "does not verify under runner %q's key %s (the payload or payload type was changed after signing, or the signature is corrupt)", r.Name, r.KeyID)
			}
			if r, ok := reg.ByKeyID(s.KeyID); ok && r.Revoked {
				return nil, ledger.Signer{}, refuse(ErrRevokedRunnerKey, f, "signed by runner %q's key %s, revoked at index %d", r.Name, r.KeyID, r.RevokedIndex)
			}
		}
		return nil, ledger.Signer{}, refuse(ErrUnknownRunnerKey, "signatures", "signed by no registered runner key (register it: ledger runner add NAME KEYFILE)")
	}
	r := live[accepted[0].KeyID]
	canon, err := ledger.CanonicalJSON(envelope)
	if err != nil {
		return nil, ledger.Signer{}, ledger.FieldError("", "envelope: %v", err)
	}
	return payload, ledger.Signer{Runner: r.Name, KeyID: r.KeyID, KeyEntry: r.Entry, Envelope: canon}, nil
}

// SignatureOfKind returns the index of the first signature of the DSSE
// envelope (payload type payloadType) that belongs to a registered key of
// kind (ledger.RunnerKindAgent, or "" a runner key), and that key's
// registration: a signature whose keyid names such a key (live or
// revoked), or one that verifies over the DSSE PAE under a live key of
// kind, whatever keyid it carries. An envelope holds a signature of
// several keys over one payload; VerifyRunnerEnvelope's Signer names the
// first that verifies, and a caller that must refuse some kind of signer
// checks every signature with this. An envelope that does not decode
// reports none (ok false): VerifyRunnerEnvelope refuses it. Safe for
// concurrent use.
func SignatureOfKind(envelope []byte, payloadType string, reg auth.RunnerRegistry, kind string) (i int, st auth.RunnerState, ok bool) {
	env, payload, err := ledger.DecodeEnvelopeOf(envelope, payloadType)
	if err != nil {
		return 0, auth.RunnerState{}, false
	}
	type key struct {
		st  auth.RunnerState
		pub ed25519.PublicKey
	}
	var live []key
	for _, s := range reg.Runners {
		if s.Kind != kind || s.Revoked {
			continue
		}
		if pub, err := ParseRunnerPublicKey([]byte(s.PublicKey)); err == nil {
			live = append(live, key{s, pub})
		}
	}
	pae := dsse.PAE(env.PayloadType, payload)
	for i, sig := range env.Signatures {
		if r, ok := reg.ByKeyID(sig.KeyID); ok && r.Kind == kind {
			return i, r, true
		}
		b, err := base64.StdEncoding.DecodeString(sig.Sig)
		if err != nil {
			// DSSE allows either alphabet (ledger.DecodeEnvelopeOf).
			if b, err = base64.URLEncoding.DecodeString(sig.Sig); err != nil {
				continue
			}
		}
		for _, k := range live {
			if ed25519.Verify(k.pub, pae, b) {
				return i, k.st, true
			}
		}
	}
	return 0, auth.RunnerState{}, false
}

// SignRunnerEnvelope wraps payload in a DSSE envelope of payloadType
// signed with priv (keyid the key's fingerprint) and returns its JSON:
// what a runner posts for an in-toto Statement (ledger.PayloadTypeInToto).
func SignRunnerEnvelope(ctx context.Context, priv ed25519.PrivateKey, payloadType string, payload []byte) ([]byte, error) {
	signer, err := dsse.NewEnvelopeSigner(ed25519SV{pub: priv.Public().(ed25519.PublicKey), priv: priv})
	if err != nil {
		return nil, err
	}
	env, err := signer.SignPayload(ctx, payloadType, payload)
	if err != nil {
		return nil, err
	}
	return json.Marshal(env)
}

func prefix(err error, p string) error {
	var le *ledger.Error
	if errors.As(err, &le) {
		c := *le
		if c.Field == "" {
			c.Field = p
		} else {
			c.Field = p + "." + c.Field
		}
		return &c
	}
	return err
}

// ReverifySigned checks the signer of a stored evidence record again, as an
// audit does: the registration it names (reg as of the record's index) must
// be the key it names and must not have been revoked before the record,
// and the envelope must verify under that key and carry the record's
// payload. It returns nil for an unsigned record.
func ReverifySigned(ctx context.Context, e ledger.EvidenceEntry, reg auth.RunnerRegistry) error {
	s := e.Evidence.Signer
	if s == nil {
		return nil
	}
	r, ok := reg.ByEntry(s.KeyEntry)
	if !ok || r.KeyID != s.KeyID || r.Name != s.Runner {
		return fmt.Errorf("entry %s (index %d): signer names runner-key entry %s, which did not register %s for %q before it", e.ID, e.Index, s.KeyEntry, s.KeyID, s.Runner)
	}
	if r.Revoked && r.RevokedIndex < e.Index {
		return fmt.Errorf("entry %s (index %d): signed by %q's key %s, revoked at index %d before it", e.ID, e.Index, s.Runner, s.KeyID, r.RevokedIndex)
	}
	only := auth.RunnerRegistry{Runners: []auth.RunnerState{r}}
	only.Runners[0].Revoked = false
	if ledger.EnvelopePayloadType(s.Envelope) == ledger.PayloadTypeInToto {
		return reverifyInToto(ctx, e, only)
	}
	body, err := VerifyEvidenceEnvelope(ctx, s.Envelope, only)
	if err != nil {
		return fmt.Errorf("entry %s (index %d): %w", e.ID, e.Index, err)
	}
	_, signed, err := ledger.PrepareEvidence(body)
	if err != nil {
		return fmt.Errorf("entry %s (index %d): %w", e.ID, e.Index, err)
	}
	// The server adds recorded_by (who posted the envelope) after
	// verifying; everything else must be the envelope's record.
	rec := e.Evidence
	rec.RecordedBy = nil
	b, err := ledger.CanonicalBody(&rec)
	if err != nil {
		return fmt.Errorf("entry %s (index %d): %w", e.ID, e.Index, err)
	}
	_, stored, err := ledger.PrepareEvidence(b)
	if err != nil {
		return fmt.Errorf("entry %s (index %d): %w", e.ID, e.Index, err)
	}
	if !bytes.Equal(stored, signed) {
		return fmt.Errorf("entry %s (index %d): the record differs from its verified envelope", e.ID, e.Index)
	}
	return nil
}

// reverifyInToto is ReverifySigned for a record decoded from an in-toto
// Statement (package ingest): the kept envelope verifies under the
// runner's key, and the record binds what the Statement names
// (ledger.PrepareEvidence checks the record's pins against its subjects).
func reverifyInToto(ctx context.Context, e ledger.EvidenceEntry, only auth.RunnerRegistry) error {
	s := e.Evidence.Signer
	if _, got, err := VerifyRunnerEnvelope(ctx, s.Envelope, ledger.PayloadTypeInToto, only); err != nil {
		return fmt.Errorf("entry %s (index %d): %w", e.ID, e.Index, err)
	} else if got.Runner != s.Runner || got.KeyID != s.KeyID {
		return fmt.Errorf("entry %s (index %d): the envelope verifies under %s, not the signer's %s", e.ID, e.Index, got.KeyID, s.KeyID)
	}
	rec := e.Evidence
	rec.RecordedBy = nil
	b, err := ledger.CanonicalBody(&rec)
	if err != nil {
		return fmt.Errorf("entry %s (index %d): %w", e.ID, e.Index, err)
	}
	if _, _, err := ledger.PrepareEvidence(b); err != nil {
		return fmt.Errorf("entry %s (index %d): %w", e.ID, e.Index, err)
	}
	return nil
}
