package verify

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// AllowedSigner is one line of an OpenSSH allowed-signers file.
type AllowedSigner struct {
	Line          int           // 1-based line number in the file
	Principals    []string      // principal patterns, unquoted, in file order
	CertAuthority bool          // the key is a CA key that certifies signing keys
	Namespaces    []string      // namespace patterns; empty means any namespace
	ValidAfter    time.Time     // zero when absent
	ValidBefore   time.Time     // zero when absent
	Key           ssh.PublicKey // the signing key or CA key
}

// AllowedSigners is a parsed allowed-signers file. It is read-only after
// parsing and safe for concurrent use.
type AllowedSigners struct {
	Entries []AllowedSigner
	// Skipped lists the lines ssh-keygen would skip (an unknown option such
	// as no-touch-required, an unparsable key or time): ssh-keygen logs
	// them and goes on to the next line (sshsig.c, check_allowed_keys_line
	// treats a parse failure as "key not found"), so they match no key.
	Skipped []SkippedLine
}

// SkippedLine is an allowed-signers line that matches nothing, and why.
type SkippedLine struct {
	Line   int    // 1-based line number
	Reason string // the parse error, naming the option or field
}

// ParseAllowedSigners parses an allowed-signers file in the format of
// ssh-keygen(1), section ALLOWED SIGNERS (OpenSSH 9.x):
//
//	principals [options] keytype base64-key [comment]
//
// Principals are a comma-separated pattern list, optionally in double
// quotes (quoted principals may contain spaces). Options are cert-authority,
// namespaces="list", valid-after="time" and valid-before="time"; times are
// YYYYMMDD[HHMM[SS]] with an optional Z suffix. Unlike ssh-keygen, a time
// without Z is read as UTC rather than the local zone, so results do not
// depend on the host. Blank lines and '#' comments are skipped. An unknown
// option, an unparsable key or time makes the line match nothing, as in
// ssh-keygen; it is listed in Skipped with the reason. An unreadable file
// (a line over 1 MiB) is an ErrMalformed error.
func ParseAllowedSigners(data []byte) (*AllowedSigners, error) {
	as := &AllowedSigners{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		e, err := parseAllowedSignerLine(line)
		if err != nil {
			as.Skipped = append(as.Skipped, SkippedLine{Line: n, Reason: err.Error()})
			continue
		}
		e.Line = n
		as.Entries = append(as.Entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, wrapErr(ErrMalformed, err, "allowed signers")
	}
	return as, nil
}

// LoadAllowedSigners reads and parses an allowed-signers file.
func LoadAllowedSigners(path string) (*AllowedSigners, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read allowed signers: %w", err)
	}
	return ParseAllowedSigners(b)
}

func parseAllowedSignerLine(line string) (AllowedSigner, error) {
	var e AllowedSigner
	var princ, rest string
	if line[0] == '"' {
		end := strings.IndexByte(line[1:], '"')
		if end < 0 {
			return e, fmt.Errorf("unterminated quoted principals")
		}
		princ, rest = line[1:1+end], line[2+end:]
		if rest != "" && rest[0] != ' ' && rest[0] != '\t' {
			return e, fmt.Errorf("no space after quoted principals")
		}
	} else {
		i := strings.IndexAny(line, " \t")
		if i < 0 {
			return e, fmt.Errorf("no key after principals")
		}
		princ, rest = line[:i], line[i:]
	}
	if princ == "" {
		return e, fmt.Errorf("empty principals")
	}
	for _, p := range strings.Split(princ, ",") {
		if p == "" {
			return e, fmt.Errorf("empty principal in list %q", princ)
		}
		e.Principals = append(e.Principals, p)
	}
	rest = strings.TrimLeft(rest, " \t")
	// The remainder has the authorized_keys shape "[options] keytype key
	// [comment]"; x/crypto/ssh parses it, quotes in options included.
	key, _, opts, _, err := ssh.ParseAuthorizedKey([]byte(rest))
	if err != nil {
		return e, fmt.Errorf("parse key: %w", err)
	}
	e.Key = key
	if err := e.setOptions(opts); err != nil {
		return e, err
	}
	return e, nil
}

// setOptions applies the line's options as sshsigopt_parse (sshsig.c)
// reads them: cert-authority, namespaces, valid-after, valid-before, each
// once; anything else makes the line unusable.
func (e *AllowedSigner) setOptions(opts []string) error {
	seen := map[string]bool{}
	for _, o := range opts {
		name, val, hasVal := strings.Cut(o, "=")
		lname := strings.ToLower(name)
		if seen[lname] && lname != "cert-authority" {
			return fmt.Errorf("multiple %q clauses", name)
		}
		seen[lname] = true
		switch lname {
		case "cert-authority":
			if hasVal {
				return fmt.Errorf("cert-authority takes no value")
			}
			e.CertAuthority = true
		case "namespaces":
			v, err := unquoteOpt(val, hasVal)
			if err != nil {
				return fmt.Errorf("namespaces: %w", err)
			}
			for _, ns := range strings.Split(v, ",") {
				if ns == "" {
					return fmt.Errorf("namespaces: empty namespace")
				}
				e.Namespaces = append(e.Namespaces, ns)
			}
		case "valid-after", "valid-before":
			v, err := unquoteOpt(val, hasVal)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			t, err := parseSSHTime(v)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if strings.EqualFold(name, "valid-after") {
				e.ValidAfter = t
			} else {
				e.ValidBefore = t
			}
		default:
			// no-touch-required and verify-required are authorized_keys
			// options; sshsigopt_parse (OpenSSH 9.x) rejects them too.
			return fmt.Errorf("unknown option %q", name)
		}
	}
	if !e.ValidAfter.IsZero() && !e.ValidBefore.IsZero() && !e.ValidBefore.After(e.ValidAfter) {
		return fmt.Errorf("valid-before is not after valid-after")
	}
	return nil
}

func unquoteOpt(v string, has bool) (string, error) {
	if !has {
		return "", fmt.Errorf("missing value")
	}
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = v[1 : len(v)-1]
	}
	if v == "" {
		return "", fmt.Errorf("empty value")
	}
	return v, nil
}

// parseSSHTime parses OpenSSH's YYYYMMDD[HHMM[SS]][Z] time (UTC).
func parseSSHTime(s string) (time.Time, error) {
	s = strings.TrimSuffix(strings.TrimSuffix(s, "Z"), "z")
	var layout string
	switch len(s) {
	case 8:
		layout = "20060102"
	case 12:
		layout = "200601021504"
	case 14:
		layout = "20060102150405"
	default:
		return time.Time{}, fmt.Errorf("time %q is not YYYYMMDD[HHMM[SS]][Z]", s)
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return time.Time{}, fmt.Errorf("time %q is not numeric", s)
		}
	}
	return time.ParseInLocation(layout, s, time.UTC)
}

// matchPattern reports whether s matches the OpenSSH wildcard pattern p
// ('*' any run, '?' any one character); match.c semantics.
func matchPattern(s, p string) bool {
	for len(p) > 0 {
		switch p[0] {
		case '*':
			p = p[1:]
			if p == "" {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if matchPattern(s[i:], p) {
					return true
				}
			}
			return false
		case '?':
			if s == "" {
				return false
			}
			s, p = s[1:], p[1:]
		default:
			if s == "" || s[0] != p[0] {
				return false
			}
			s, p = s[1:], p[1:]
		}
	}
	return s == ""
}

// matchPatternList implements OpenSSH match_pattern_list over a list: a
// negated ("!pat") match vetoes, otherwise any positive match accepts.
func matchPatternList(s string, pats []string) bool {
	ok := false
	for _, p := range pats {
		if neg, found := strings.CutPrefix(p, "!"); found {
			if matchPattern(s, neg) {
				return false
			}
			continue
		}
		if matchPattern(s, p) {
			ok = true
		}
	}
	return ok
}

// sshTime is the verification time as ssh-keygen compares it: seconds
// since the epoch.
func sshTime(t time.Time) uint64 {
	if t.Unix() < 0 {
		return 0
	}
	return uint64(t.Unix())
}

func (e *AllowedSigner) windowHolds(at uint64) bool {
	if !e.ValidAfter.IsZero() && at < sshTime(e.ValidAfter) {
		return false
	}
	return e.ValidBefore.IsZero() || at <= sshTime(e.ValidBefore)
}

// matchesKey reports whether the line names pub itself (a plain line) or
// the CA that signed the certificate pub (a cert-authority line).
func (e *AllowedSigner) matchesKey(pub ssh.PublicKey) (*ssh.Certificate, bool) {
	cert, isCert := pub.(*ssh.Certificate)
	if e.CertAuthority {
		return cert, isCert && bytes.Equal(cert.SignatureKey.Marshal(), e.Key.Marshal())
	}
	return nil, !isCert && bytes.Equal(pub.Marshal(), e.Key.Marshal())
}

// certAuthorized is sshkey_cert_check_authority for a user certificate with
// a required principal list (sshkey.c): a user certificate, principals
// present, at within [valid_after, valid_before), and, when principal is
// not "", principal among them exactly.
func certAuthorized(c *ssh.Certificate, at uint64, principal string) bool {
	if c.CertType != ssh.UserCert || len(c.ValidPrincipals) == 0 {
		return false
	}
	if at < c.ValidAfter || (c.ValidBefore != ssh.CertTimeInfinity && at >= c.ValidBefore) {
		return false
	}
	if principal == "" {
		return true
	}
	for _, p := range c.ValidPrincipals {
		if p == principal {
			return true
		}
	}
	return false
}

// FindPrincipals is ssh-keygen -Y find-principals -O verify-time=at
// (sshsig.c, sshsig_find_principals): the first line that names pub (or,
// for cert-authority lines, the certificate's CA, the certificate being
// valid at at) and whose validity window holds at gives the principals, one
// per element as ssh-keygen prints them. For a plain line they are the
// line's principals; for a cert-authority line, the certificate's
// principals that match one of the line's patterns (cert_filter_principals,
// in pattern order, a principal repeated where two patterns match it).
// Namespaces are not consulted, as in ssh-keygen. The second result
// reports that a line matched the key but not at at (its window or the
// certificate's). Nil principals mean no line matched.
func (as *AllowedSigners) FindPrincipals(pub ssh.PublicKey, at time.Time) ([]string, bool) {
	if as == nil {
		return nil, false
	}
	t := sshTime(at)
	outside := false
	for i := range as.Entries {
		e := &as.Entries[i]
		cert, ok := e.matchesKey(pub)
		if !ok {
			continue
		}
		var found []string
		if e.CertAuthority {
			if !certAuthorized(cert, t, "") {
				outside = outside || cert.CertType == ssh.UserCert && len(cert.ValidPrincipals) > 0
				continue
			}
			for _, p := range e.Principals {
				for _, cp := range cert.ValidPrincipals {
					if matchPattern(cp, p) {
						found = append(found, cp)
					}
				}
			}
			if len(found) == 0 {
				continue
			}
		} else {
			found = append(found, e.Principals...)
		}
		if !e.windowHolds(t) {
			outside = true
			continue
		}
		return found, outside
	}
	return nil, outside
}

// VerifyPrincipal is the allowed-signers check of ssh-keygen -Y verify -I
// principal -n namespace -O verify-time=at (sshsig.c,
// sshsig_check_allowed_keys): the first line whose principal patterns
// admit principal (match_pattern_list, "!" negating), that names pub (for a
// cert-authority line: a user certificate by that CA naming principal
// exactly, valid at at), whose namespaces admit namespace and whose window
// holds at. It returns that line, or nil.
func (as *AllowedSigners) VerifyPrincipal(pub ssh.PublicKey, principal, namespace string, at time.Time) *AllowedSigner {
	if as == nil {
		return nil
	}
	t := sshTime(at)
	for i := range as.Entries {
		e := &as.Entries[i]
		if !matchPatternList(principal, e.Principals) {
			continue
		}
		cert, ok := e.matchesKey(pub)
		if !ok || e.CertAuthority && !certAuthorized(cert, t, principal) {
			continue
		}
		if len(e.Namespaces) > 0 && !matchPatternList(namespace, e.Namespaces) {
			continue
		}
		if !e.windowHolds(t) {
			continue
		}
		return e
	}
	return nil
}

// checkCertSignature verifies the CA signature over a certificate (what
// OpenSSH checks when it parses one, sshkey.c cert_parse). Critical options
// and extensions are not judged: sshsig does not judge them either.
func checkCertSignature(c *ssh.Certificate) error {
	if c.Signature == nil || c.SignatureKey == nil {
		return fmt.Errorf("certificate has no CA signature")
	}
	b := c.Marshal()
	n := 4 + len(ssh.Marshal(c.Signature))
	if n > len(b) {
		return fmt.Errorf("certificate encoding too short")
	}
	return skAware(c.SignatureKey).Verify(b[:len(b)-n], c.Signature)
}
