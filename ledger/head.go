package ledger

import "time"

// Verdict is the cryptographic verdict on a head's signature, independent of
// trust policy. GitLetter gives git's %G? letter for comparison.
type Verdict string

// The verdicts. They map to git's %G? letters: good -> G (trusted) or U
// (validity unknown), expired_key -> Y, expired_signature -> X, revoked -> R,
// unknown_key -> E, bad -> B, unsigned -> N.
const (
	VerdictGood             Verdict = "good"
	VerdictBad              Verdict = "bad"
	VerdictUnknownKey       Verdict = "unknown_key"
	VerdictExpiredKey       Verdict = "expired_key"
	VerdictExpiredSignature Verdict = "expired_signature"
	VerdictRevoked          Verdict = "revoked"
	VerdictUnsigned         Verdict = "unsigned"
	VerdictError            Verdict = "error" // the object could not be checked (malformed, unsupported)
)

// Decision is the trust-policy decision on a head, a separate field from
// the cryptographic Verdict.
type Decision string

// The policy decisions.
const (
	DecisionTrusted   Decision = "trusted"
	DecisionUntrusted Decision = "untrusted"
	DecisionNoPolicy  Decision = "no_policy" // no policy rule covers this repository and ref
)

// HeadVerification is the ledger record of one signed-head check.
type HeadVerification struct {
	Repository string    `json:"repository"`
	Ref        string    `json:"ref,omitempty"`
	Object     string    `json:"object"`           // the verified object id (commit, or tag for a signed tag)
	ObjectType string    `json:"object_type"`      // "commit" or "tag"
	Commit     string    `json:"commit"`           // the commit the head points at
	Tree       string    `json:"tree,omitempty"`   // that commit's tree
	Scheme     string    `json:"scheme,omitempty"` // "openpgp", "ssh", "x509" or "" when unsigned
	Signer     string    `json:"signer,omitempty"` // uid, SSH principal, or certificate SAN
	Issuer     string    `json:"issuer,omitempty"` // OIDC issuer or CA for x509
	Key        string    `json:"key,omitempty"`    // key fingerprint
	Verdict    Verdict   `json:"verdict"`
	GitLetter  string    `json:"git_letter,omitempty"`
	Decision   Decision  `json:"decision"`
	Reason     string    `json:"reason,omitempty"` // why, in words
	Policy     string    `json:"policy,omitempty"` // sha256 digest of the policy file used
	VerifiedAt time.Time `json:"verified_at"`
	SignedAt   time.Time `json:"signed_at,omitempty"`
	// RecordedBy is the token (of any scope) whose request made the server
	// compute and record this verification (POST /api/v1/heads/verify);
	// nil for a verification appended to the store directly (the local
	// CLI with --db).
	RecordedBy *Recorder `json:"recorded_by,omitempty"`
}

// Validate checks the record's required fields.
func (h *HeadVerification) Validate() error {
	if err := CheckText("repository", h.Repository, MaxIdentifier, true, false); err != nil {
		return err
	}
	if err := CheckText("ref", h.Ref, MaxIdentifier, false, false); err != nil {
		return err
	}
	if !ValidObjectID(h.Object) {
		return FieldError("object", "must be 40 or 64 lowercase hex digits")
	}
	if !ValidObjectID(h.Commit) {
		return FieldError("commit", "must be 40 or 64 lowercase hex digits")
	}
	if h.Tree != "" && !ValidObjectID(h.Tree) {
		return FieldError("tree", "must be 40 or 64 lowercase hex digits")
	}
	if h.ObjectType != "commit" && h.ObjectType != "tag" {
		return FieldError("object_type", "must be commit or tag")
	}
	switch h.Verdict {
	case VerdictGood, VerdictBad, VerdictUnknownKey, VerdictExpiredKey, VerdictExpiredSignature, VerdictRevoked, VerdictUnsigned, VerdictError:
	default:
		return FieldError("verdict", "unknown verdict %q", Clip(string(h.Verdict)))
	}
	switch h.Decision {
	case DecisionTrusted, DecisionUntrusted, DecisionNoPolicy:
	default:
		return FieldError("decision", "unknown decision %q", Clip(string(h.Decision)))
	}
	if h.VerifiedAt.IsZero() {
		return FieldError("verified_at", "required")
	}
	if h.RecordedBy != nil {
		if err := h.RecordedBy.Validate(); err != nil {
			return err
		}
	}
	return nil
}
