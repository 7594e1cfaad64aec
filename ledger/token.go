package ledger

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// The token entry kinds. A token's creation and its revocation are leaves
// (TRUST.md rule 5); the store's tokens table is their projection, which
// the audit checks against them. Only the store appends them (CreateToken,
// RevokeToken); no API route appends them.
const (
	KindToken           Kind = "token"            // a token created: TokenLeaf
	KindTokenRevocation Kind = "token-revocation" // a token revoked: TokenRevocationLeaf
)

// TokenSpec is what `ledger token create` asks for. Repositories, Lanes
// and Backends restrict a token's evidence (empty: any); a lane entry
// "name/vN" matches that lane exactly and "name" matches every version of
// it. ExpiresAt (nil: never) is when the token stops authenticating.
type TokenSpec struct {
	Name         string
	Scope        Scope
	Roles        []string
	Repositories []string
	Lanes        []string
	Backends     []Backend
	ExpiresAt    *time.Time
}

// TokenLeaf is the body of a KindToken leaf: everything the tokens table
// holds for the token, with the SHA-256 of its secret (hex), never the
// secret. The secret is 256 random bits, so its hash in a readable log
// gives nothing away.
type TokenLeaf struct {
	TokenID      string     `json:"token_id"`
	Name         string     `json:"name"`
	Scope        Scope      `json:"scope"`
	Roles        []string   `json:"roles"`
	Repositories []string   `json:"repositories"`
	Lanes        []string   `json:"lanes"`
	Backends     []Backend  `json:"backends"`
	ExpiresAt    *time.Time `json:"expires_at"`
	SecretSHA256 string     `json:"secret_sha256"`
	CreatedAt    time.Time  `json:"created_at"`
	// Adopted is true for a token created before tokens were logged
	// (schema 7), logged when a writable store first opened the database.
	Adopted bool `json:"adopted,omitempty"`
}

// TokenRevocationLeaf is the body of a KindTokenRevocation leaf.
type TokenRevocationLeaf struct {
	TokenID   string    `json:"token_id"`
	Name      string    `json:"name"`
	RevokedAt time.Time `json:"revoked_at"`
}

var (
	tokenNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	lanePartRe  = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,95}(/v[1-9][0-9]{0,5})?$`)
)

// Validate checks s and normalizes it (sorted, deduplicated lists; UTC
// expiry). Errors are CodeInvalid naming the field ("name", "scope",
// "roles", "repository", "lane", "backend", "expires"). now is the clock:
// an expiry not after it is refused.
func (s *TokenSpec) Validate(now time.Time) error {
	if !tokenNameRe.MatchString(s.Name) {
		return FieldError("name", "token name must be 1-64 of [A-Za-z0-9._-], got %q", Clip(s.Name))
	}
	switch s.Scope {
	case ScopeRead, ScopeRecord, ScopeAdmin, ScopeRun:
	default:
		return FieldError("scope", "must be read, record, run or admin, got %q", Clip(string(s.Scope)))
	}
	for _, r := range s.Roles {
		if !tokenNameRe.MatchString(r) {
			return FieldError("roles", "role must be 1-64 of [A-Za-z0-9._-], got %q", Clip(r))
		}
	}
	for _, r := range s.Repositories {
		if strings.TrimSpace(r) == "" || len(r) > 512 {
			return FieldError("repository", "each repository must be 1-512 characters")
		}
	}
	for _, l := range s.Lanes {
		if !lanePartRe.MatchString(l) {
			return FieldError("lane", "must be a lane name or name/vN (lowercase), got %q", Clip(l))
		}
	}
	for _, b := range s.Backends {
		if !b.Valid() {
			return FieldError("backend", "must be one of %s, got %q", BackendList(), Clip(string(b)))
		}
	}
	if s.ExpiresAt != nil {
		t := s.ExpiresAt.UTC()
		if !t.After(now) {
			return FieldError("expires", "expiry %s is not in the future", t.Format(time.RFC3339))
		}
		s.ExpiresAt = &t
	}
	s.Roles, s.Repositories, s.Lanes = sortedSet(s.Roles), sortedSet(s.Repositories), sortedSet(s.Lanes)
	s.Backends = sortedBackends(s.Backends)
	return nil
}

func sortedBackends(in []Backend) []Backend {
	out := make([]Backend, 0, len(in))
	for _, b := range in {
		if !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	slices.Sort(out)
	return out
}

func sortedSet(in []string) []string {
	out := make([]string, 0, len(in))
	seen := map[string]bool{}
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// SecretSHA256 returns the lowercase hex SHA-256 of a token secret, as
// token leaves carry it.
func SecretSHA256(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// Covers reports whether t's evidence scope covers evidence about repo,
// lane and backend. When it does not, field names the first member out of
// scope ("subject.repository", "lane" or "backend"). A token with no
// restriction covers everything.
func (t Token) Covers(repo, lane string, backend Backend) (field string, ok bool) {
	if len(t.Repositories) > 0 && !slices.Contains(t.Repositories, repo) {
		return "subject.repository", false
	}
	if len(t.Lanes) > 0 && !slices.Contains(t.Lanes, lane) && !slices.Contains(t.Lanes, LaneName(lane)) {
		return "lane", false
	}
	if len(t.Backends) > 0 {
		if !slices.Contains(t.Backends, backend) {
			return "backend", false
		}
	}
	return "", true
}

// Restricted reports whether t has any repository, lane or backend
// restriction.
func (t Token) Restricted() bool {
	return len(t.Repositories) > 0 || len(t.Lanes) > 0 || len(t.Backends) > 0
}

// Expired reports whether t has an expiry at or before now.
func (t Token) Expired(now time.Time) bool {
	return t.ExpiresAt != nil && !now.Before(*t.ExpiresAt)
}

// ScopeText renders t's evidence scope for listings: "repo=a,b lane=c
// backend=cuda", or "any" when unrestricted.
func (t Token) ScopeText() string {
	var b bytes.Buffer
	add := func(k string, v []string) {
		if len(v) > 0 {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%s=%s", k, strings.Join(v, ","))
		}
	}
	add("repo", t.Repositories)
	add("lane", t.Lanes)
	bs := make([]string, len(t.Backends))
	for i, x := range t.Backends {
		bs[i] = string(x)
	}
	add("backend", bs)
	if b.Len() == 0 {
		return "any"
	}
	return b.String()
}

// prepareTokenLeaf decodes a token or token-revocation body strictly,
// checks it, and returns its canonical bytes.
func prepareTokenLeaf(k Kind, body []byte) ([]byte, error) {
	if k == KindTokenRevocation {
		return prepareRevocationLeaf(body)
	}
	var l TokenLeaf
	if err := DecodeStrict(body, &l); err != nil {
		return nil, err
	}
	// Tokens made before schema 7 (Adopted) keep the id and stored hash
	// they had, whatever their form.
	if !tokenIDRe.MatchString(l.TokenID) && (!l.Adopted || !tokenNameRe.MatchString(l.TokenID)) {
		return nil, FieldError("token_id", "must be tok_ and 12 lowercase hex")
	}
	if !validSecretHash(l.SecretSHA256, l.Adopted) {
		return nil, FieldError("secret_sha256", "must be 64 lowercase hex")
	}
	if l.CreatedAt.IsZero() {
		return nil, FieldError("created_at", "required")
	}
	spec := TokenSpec{Name: l.Name, Scope: l.Scope, Roles: l.Roles, Repositories: l.Repositories, Lanes: l.Lanes, Backends: l.Backends}
	// The expiry was checked against the clock when the token was made;
	// a leaf is checked for its shape only.
	if err := spec.Validate(time.Time{}); err != nil {
		return nil, err
	}
	l.Roles, l.Repositories, l.Lanes, l.Backends = spec.Roles, spec.Repositories, spec.Lanes, spec.Backends
	l.CreatedAt = l.CreatedAt.UTC()
	if l.ExpiresAt != nil {
		t := l.ExpiresAt.UTC()
		l.ExpiresAt = &t
	}
	return marshalNoEscape(&l)
}

// validSecretHash reports whether h is a SHA-256 in lowercase hex (for an
// adopted token, whatever lowercase hex of at most 64 bytes it had).
func validSecretHash(h string, adopted bool) bool {
	if h == "" || len(h) > 128 || !LowerHex(h) {
		return false
	}
	return adopted || len(h) == 64
}

func prepareRevocationLeaf(body []byte) ([]byte, error) {
	var l TokenRevocationLeaf
	if err := DecodeStrict(body, &l); err != nil {
		return nil, err
	}
	if !tokenNameRe.MatchString(l.TokenID) {
		return nil, FieldError("token_id", "must be a token id")
	}
	if l.RevokedAt.IsZero() {
		return nil, FieldError("revoked_at", "required")
	}
	l.RevokedAt = l.RevokedAt.UTC()
	return marshalNoEscape(&l)
}
