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
// option, an unparsable key or time is an ErrMalformed error naming the line.
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
			return nil, wrapErr(ErrMalformed, err, "allowed signers line %d", n)
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
	for _, o := range opts {
		name, val, hasVal := strings.Cut(o, "=")
		switch strings.ToLower(name) {
		case "cert-authority":
			if hasVal {
				return e, fmt.Errorf("cert-authority takes no value")
			}
			e.CertAuthority = true
		case "namespaces":
			v, err := unquoteOpt(val, hasVal)
			if err != nil {
				return e, fmt.Errorf("namespaces: %w", err)
			}
			for _, ns := range strings.Split(v, ",") {
				if ns == "" {
					return e, fmt.Errorf("namespaces: empty namespace")
				}
				e.Namespaces = append(e.Namespaces, ns)
			}
		case "valid-after", "valid-before":
			v, err := unquoteOpt(val, hasVal)
			if err != nil {
				return e, fmt.Errorf("%s: %w", name, err)
			}
			t, err := parseSSHTime(v)
			if err != nil {
				return e, fmt.Errorf("%s: %w", name, err)
			}
			if strings.EqualFold(name, "valid-after") {
				e.ValidAfter = t
			} else {
				e.ValidBefore = t
			}
		default:
			return e, fmt.Errorf("unknown option %q", name)
		}
	}
	return e, nil
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

// signerMatch is the outcome of FindPrincipals.
type signerMatch struct {
	entry   *AllowedSigner
	outside bool // a line matched the key but not its validity window
}

// FindPrincipals returns the first entry whose key (or, for cert-authority
// entries, the CA that signed the certificate pub) matches pub, whose
// namespaces admit namespace, and whose validity window contains at, as
// ssh-keygen -Y find-principals -O verify-time does. The second result
// reports whether some entry matched the key but was outside its window.
func (as *AllowedSigners) FindPrincipals(pub ssh.PublicKey, namespace string, at time.Time) (*AllowedSigner, bool) {
	m := as.find(pub, namespace, at)
	return m.entry, m.outside
}

func (as *AllowedSigners) find(pub ssh.PublicKey, namespace string, at time.Time) signerMatch {
	var m signerMatch
	if as == nil {
		return m
	}
	cert, isCert := pub.(*ssh.Certificate)
	for i := range as.Entries {
		e := &as.Entries[i]
		if e.CertAuthority {
			if !isCert || !bytes.Equal(cert.SignatureKey.Marshal(), e.Key.Marshal()) {
				continue
			}
			if cert.CertType != ssh.UserCert {
				continue
			}
			// The certificate's own validity and a principal allowed by
			// the line (sshsig.c, check_allowed_keys_line).
			if !at.IsZero() && !certValidAt(cert, at) {
				m.outside = true
				continue
			}
			okPrincipal := false
			for _, p := range cert.ValidPrincipals {
				if matchPatternList(p, e.Principals) {
					okPrincipal = true
				}
			}
			if !okPrincipal {
				continue
			}
			if err := checkCertSignature(cert); err != nil {
				continue
			}
		} else {
			k := pub
			if isCert {
				continue // a plain key line never matches a certificate
			}
			if !bytes.Equal(k.Marshal(), e.Key.Marshal()) {
				continue
			}
		}
		if len(e.Namespaces) > 0 && !matchPatternList(namespace, e.Namespaces) {
			continue
		}
		if !at.IsZero() && (!e.ValidAfter.IsZero() && at.Before(e.ValidAfter) || !e.ValidBefore.IsZero() && at.After(e.ValidBefore)) {
			m.outside = true
			continue
		}
		m.entry = e
		return m
	}
	return m
}

func certValidAt(c *ssh.Certificate, at time.Time) bool {
	u := uint64(at.Unix())
	return u >= c.ValidAfter && (c.ValidBefore == ssh.CertTimeInfinity || u < c.ValidBefore)
}

// checkCertSignature verifies the CA signature on a certificate using
// x/crypto/ssh's CertChecker (its signature check only).
func checkCertSignature(c *ssh.Certificate) error {
	cc := &ssh.CertChecker{SupportedCriticalOptions: nil}
	// CheckCert checks principal and time as well; pass a principal from
	// the certificate and its own start time so that only the signature
	// (and critical options) decide.
	p := ""
	if len(c.ValidPrincipals) > 0 {
		p = c.ValidPrincipals[0]
	}
	cc.Clock = func() time.Time { return time.Unix(int64(c.ValidAfter), 0) }
	return cc.CheckCert(p, c)
}
