package web

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ingest"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
)

// PredicateVSA is the predicate type of a SLSA verification summary
// (https://slsa.dev/spec/v1.0/verification_summary).
const PredicateVSA = "https://slsa.dev/verification_summary/v1"

// ServiceEnvelope signs payload as a DSSE envelope of payloadType with
// the log's key (the key that signs checkpoints and readiness verdicts)
// and returns the envelope's JSON. The signature is Ed25519 over the DSSE
// pre-authentication encoding (DSSE protocol.md), made through
// keys.SignNote: a signed note's signature is the Ed25519 signature of
// its text, and the PAE is the text (payload must end in a newline, so
// the PAE does; it starts "DSSEv1 ", which no checkpoint or verdict text
// does, so the three uses cannot be mistaken for one another). The keyid
// is the key's OpenSSH SHA256 fingerprint; the public key is the 32 bytes after
// the algorithm byte 0x01 in the base64 part of GET /api/v1/log/key's
// verifier_key (ServicePublicKey). It fails for a key that is not Ed25519
// or that cannot sign (a read-only store).
func ServiceEnvelope(keys ledger.Keys, payloadType string, payload []byte) ([]byte, error) {
	if !bytes.HasSuffix(payload, []byte("\n")) {
		return nil, errors.New("service envelope: the payload must end in a newline")
	}
	pub, keyID, err := ServicePublicKey(keys.VerifierKey())
	if err != nil {
		return nil, err
	}
	pae := dsse.PAE(payloadType, payload)
	signed, err := keys.SignNote(string(pae))
	if err != nil {
		return nil, err
	}
	rest, ok := strings.CutPrefix(signed, string(pae)+"\n")
	if !ok {
		return nil, errors.New("service envelope: the note does not carry the text it was given")
	}
	line, _, _ := strings.Cut(rest, "\n")
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "—" {
		return nil, errors.New("service envelope: no signature line")
	}
	raw, err := base64.StdEncoding.DecodeString(f[2])
	if err != nil || len(raw) != 4+ed25519.SignatureSize {
		return nil, errors.New("service envelope: not an Ed25519 note signature")
	}
	sig := raw[4:]
	if !ed25519.Verify(pub, pae, sig) {
		return nil, errors.New("service envelope: the signature does not verify under the log key")
	}
	return json.Marshal(ledger.Envelope{PayloadType: payloadType, Payload: base64.StdEncoding.EncodeToString(payload),
		Signatures: []ledger.EnvelopeSignature{{KeyID: keyID, Sig: base64.StdEncoding.EncodeToString(sig)}}})
}

// ServicePublicKey returns the Ed25519 public key of a signed-note
// verifier key ("name+hash+base64(0x01 || key)", as ledger.pub and GET
// /api/v1/log/key give it) and the keyid ServiceEnvelope signs with
// (the key's OpenSSH SHA256 fingerprint, "SHA256:...", the keyid DSSE
// verifiers derive from a public key, as for runner keys).
func ServicePublicKey(verifierKey string) (ed25519.PublicKey, string, error) {
	parts := strings.SplitN(verifierKey, "+", 3)
	if len(parts) != 3 {
		return nil, "", errors.New("verifier key: want name+hash+base64")
	}
	raw, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(raw) != 1+ed25519.PublicKeySize || raw[0] != 1 {
		return nil, "", errors.New("verifier key: not an Ed25519 note key")
	}
	pub := ed25519.PublicKey(raw[1:])
	id, err := dsse.SHA256KeyID(pub)
	if err != nil {
		return nil, "", err
	}
	return pub, id, nil
}

// VSA is a SLSA verification summary predicate v1 (the fields the ledger
// fills; https://slsa.dev/spec/v1.0/verification_summary).
type VSA struct {
	Verifier struct {
		ID string `json:"id"`
	} `json:"verifier"`
	TimeVerified       time.Time `json:"timeVerified"`
	ResourceURI        string    `json:"resourceUri"`
	Policy             VSAPolicy `json:"policy"`
	VerificationResult string    `json:"verificationResult"`
	VerifiedLevels     []string  `json:"verifiedLevels"`
}

// VSAPolicy names the policy a VSA verified against: the release
// definition entry, by its log entry id.
type VSAPolicy struct {
	URI    string            `json:"uri"`
	Digest map[string]string `json:"digest,omitempty"`
}

// ReadinessVSA is the readiness verdict of rel as an in-toto Statement
// with the SLSA verification summary predicate: the subjects are
// readinessSubjects; verifier.id is verifierID (an absolute URI, see
// CheckVerifierID); timeVerified the verdict's computed_at; resourceUri
// "ledger:release/<version>"; policy readinessPolicy; verificationResult
// PASSED when the release is ready, FAILED otherwise. verifiedLevels is
// ["SLSA_BUILD_LEVEL_0"] when PASSED (the ledger checks a release's gates,
// not SLSA build provenance, and claims no build level above 0) and
// ["FAILED"] when FAILED, as the SLSA VSA spec (v1.0 to v1.2,
// "verifiedLevels") asks: the levels verified "or FAILED if policy
// verification failed".
func ReadinessVSA(verifierID string, rel *gates.Release, rd *gates.Readiness) ingest.Statement {
	st := ingest.Statement{Type: ingest.StatementV1, PredicateType: PredicateVSA, Subject: readinessSubjects(rel)}
	var v VSA
	v.Verifier.ID = verifierID
	v.TimeVerified = rd.ComputedAt.UTC()
	v.ResourceURI = "ledger:release/" + rd.Version
	v.Policy = readinessPolicy(rd)
	v.VerificationResult, v.VerifiedLevels = "FAILED", []string{"FAILED"}
	if rd.Ready {
		v.VerificationResult, v.VerifiedLevels = "PASSED", []string{"SLSA_BUILD_LEVEL_0"}
	}
	st.Predicate, _ = json.Marshal(v)
	return st
}

// readinessSubjects are the subjects of a readiness verdict's Statements:
// every component's repository at its head (gitCommit, and gitTree when
// the release pins one) and every artifact pin (sha256), by name.
func readinessSubjects(rel *gates.Release) []ingest.ResourceDescriptor {
	var subj []ingest.ResourceDescriptor
	for _, c := range rel.Components {
		d := map[string]string{"gitCommit": c.Head}
		if c.Tree != "" {
			d["gitTree"] = c.Tree
		}
		subj = append(subj, ingest.ResourceDescriptor{Name: c.Repository, Digest: d})
	}
	names := make([]string, 0, len(rel.Artifacts))
	for n := range rel.Artifacts {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		subj = append(subj, ingest.ResourceDescriptor{Name: n, Digest: map[string]string{"sha256": strings.TrimPrefix(rel.Artifacts[n], "sha256:")}})
	}
	return subj
}

// readinessPolicy names the policy a readiness verdict applied: the
// release definition entry, uri "ledger:entry/<release entry id>", with
// the verdict's pins digest (sha256) when it is one.
func readinessPolicy(rd *gates.Readiness) VSAPolicy {
	p := VSAPolicy{URI: "ledger:entry/" + rd.Release.ID}
	if d := strings.TrimPrefix(rd.PinsDigest, "sha256:"); len(d) == 64 && ledger.LowerHex(d) {
		p.Digest = map[string]string{"sha256": d}
	}
	return p
}

// signedStatement is st as JSON with a newline, in a DSSE envelope of the
// in-toto payload type signed with the log key (ServiceEnvelope).
func signedStatement(keys ledger.Keys, st ingest.Statement) ([]byte, error) {
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("encode statement: %w", err)
	}
	return ServiceEnvelope(keys, ledger.PayloadTypeInToto, append(b, '\n'))
}
