package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
	"time"
)

// PolicyRecord is the body of a policy leaf (KindPolicy): a trust policy
// registered by an admin, self-contained so that the server verifies heads
// with it without reading any file. Policy is the policy YAML document
// (verify.Policy's shape); Files holds the content of every file it names
// (OpenPGP keyrings, the SSH allowed-signers file, Sigstore trusted roots,
// CA pools), keyed by the path exactly as the YAML writes it. Digest is
// PolicyDigest(Policy, Files): what a release binds (policy_digest) and
// what a head verification records (HeadVerification.Policy). A later
// leaf of the same Name replaces the earlier one for lookups by name; both
// stay in the log.
//
//	{"name": "release-signers", "digest": "sha256:...", "policy": "version: 1\nrules: ...",
//	 "files": {"keys/release.asc": "<base64>"}, "applied_at": "2026-12-01T21:00:00Z", "applied_by": "admin"}
type PolicyRecord struct {
	Name      string            `json:"name"`
	Digest    string            `json:"digest"`
	Policy    string            `json:"policy"`
	Files     map[string][]byte `json:"files,omitempty"`
	AppliedAt time.Time         `json:"applied_at"`
	AppliedBy string            `json:"applied_by,omitempty"`
}

// PolicyEntry is a policy record with its log entry.
type PolicyEntry struct {
	Entry
	Policy PolicyRecord `json:"policy"`
}

// MaxPolicyFiles and MaxPolicyBytes bound a policy record: the files it
// names, and the policy plus all file contents in bytes.
const (
	MaxPolicyFiles = 64
	MaxPolicyBytes = 8 << 20
)

var policyNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// ValidPolicyName reports whether s can name a registered policy: 1-64 of
// [a-z0-9._-], starting with a letter or digit. A name is never a path.
func ValidPolicyName(s string) bool { return policyNameRe.MatchString(s) && !strings.Contains(s, "..") }

// PolicyDigest returns "sha256:<hex>" of the canonical JSON of
// {"files": files, "policy": policy} (file contents base64, keys sorted):
// the digest covers the policy and every key it trusts, not its name.
func PolicyDigest(policy string, files map[string][]byte) string {
	if files == nil {
		files = map[string][]byte{}
	}
	b, err := CanonicalBody(struct {
		Files  map[string][]byte `json:"files"`
		Policy string            `json:"policy"`
	}{files, policy})
	if err != nil { // cannot happen: strings and byte slices
		panic(err)
	}
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

// Validate checks the record: a valid name, a non-empty policy, at most
// MaxPolicyFiles files with relative or absolute names of 1-255 characters
// and no NUL, MaxPolicyBytes in all, AppliedAt set, and Digest equal to
// PolicyDigest of the content. Errors are CodeInvalid *Error values naming
// the field; they never quote the policy or a file.
func (p *PolicyRecord) Validate() error {
	if !ValidPolicyName(p.Name) {
		return FieldError("name", "a policy name is 1-64 of [a-z0-9._-] starting with a letter or digit (never a path)")
	}
	if strings.TrimSpace(p.Policy) == "" {
		return FieldError("policy", "required: the policy YAML")
	}
	if len(p.Files) > MaxPolicyFiles {
		return FieldError("files", "at most %d files", MaxPolicyFiles)
	}
	n := len(p.Policy)
	for name, b := range p.Files {
		if name == "" || len(name) > 255 || strings.ContainsRune(name, 0) {
			return FieldError("files", "file names are 1-255 characters without NUL")
		}
		n += len(b)
	}
	if n > MaxPolicyBytes {
		return FieldError("files", "policy and files hold %d bytes, more than %d", n, MaxPolicyBytes)
	}
	if p.AppliedAt.IsZero() {
		return FieldError("applied_at", "required")
	}
	if want := PolicyDigest(p.Policy, p.Files); p.Digest != want {
		return FieldError("digest", "does not match the policy and its files (want %s)", want)
	}
	return nil
}

// PreparePolicy is PrepareEvidence for policy records.
func PreparePolicy(body []byte) (PolicyRecord, []byte, error) {
	var p PolicyRecord
	if err := DecodeStrict(body, &p); err != nil {
		return p, nil, err
	}
	if err := p.Validate(); err != nil {
		return p, nil, err
	}
	p.AppliedAt = p.AppliedAt.UTC()
	b, err := marshalNoEscape(&p)
	return p, b, err
}
