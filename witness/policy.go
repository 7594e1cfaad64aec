package witness

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// Policy is a parsed c2sp.org/tlog-policy file: the logs whose checkpoints
// it accepts, the witnesses it knows and the quorum of cosignatures a
// checkpoint needs. A Policy is immutable after ParsePolicy and safe for
// concurrent use.
type Policy struct {
	Logs      []PolicyLog
	Witnesses []PolicyWitness
	// Quorum is the name on the quorum line: a witness, a group or "none".
	Quorum string

	quorum *member // nil for "quorum none"
}

// PolicyLog is a "log <vkey> [<url>]" line. The vkey's key name is the
// log's origin.
type PolicyLog struct {
	VKey     string
	URL      string
	Verifier note.Verifier
}

// PolicyWitness is a "witness <name> <vkey> [<url>]" line. URL, when set,
// is the witness's c2sp.org/tlog-witness submission prefix.
type PolicyWitness struct {
	Name     string
	VKey     string
	URL      string
	Verifier note.Verifier
}

// member is a quorum node: a witness (index >= 0) or a group of members
// of which at least k must have witnessed.
type member struct {
	witness int
	k       int
	members []*member
}

// Policy limits: the specification recommends supporting at least 32 of
// each; these bound a hostile file.
const (
	maxPolicyBytes = 1 << 20
	maxPolicyItems = 256
)

// ParsePolicy parses a c2sp.org/tlog-policy file. Lines are "log <vkey>
// [<url>]", "witness <name> <vkey> [<url>]", "group <name> all|any|<k>
// <name>..." and exactly one "quorum <name>|none"; blank lines and '#'
// comments are ignored; groups and the quorum may name only what earlier
// lines defined; a name joins a group at most once; no two logs or two
// witnesses wrap the same public key. Errors name the line number and the
// field, never the file's content.
func ParsePolicy(b []byte) (*Policy, error) {
	if len(b) > maxPolicyBytes {
		return nil, fmt.Errorf("policy: larger than %d bytes", maxPolicyBytes)
	}
	for i, c := range b {
		if c < 0x20 && c != '\t' && c != '\n' || c == 0x7f {
			return nil, fmt.Errorf("policy: control character at byte %d (only tab and newline are allowed)", i)
		}
	}
	ps := &policyParser{p: &Policy{}, names: map[string]*member{}, defined: map[string]int{}, keys: map[string]int{}}
	items := 0
	for i, line := range strings.Split(string(b), "\n") {
		f := strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' })
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if items++; items > maxPolicyItems {
			return nil, fmt.Errorf("policy: more than %d definitions", maxPolicyItems)
		}
		var err error
		switch f[0] {
		case "log":
			err = ps.log(f[1:], i+1)
		case "witness":
			err = ps.witness(f[1:], i+1)
		case "group":
			err = ps.group(f[1:], i+1)
		case "quorum":
			err = ps.quorum(f[1:], i+1)
		default:
			err = errors.New("unknown keyword (want log, witness, group or quorum)")
		}
		if err != nil {
			return nil, fmt.Errorf("policy line %d: %w", i+1, err)
		}
	}
	if ps.quorumLine == 0 {
		return nil, errors.New("policy: no quorum line (use \"quorum none\" to require no cosignatures)")
	}
	return ps.p, nil
}

// policyParser holds what ParsePolicy has read so far.
type policyParser struct {
	p          *Policy
	names      map[string]*member // witness and group names
	defined    map[string]int     // name -> line
	keys       map[string]int     // "log:"/"witness:" + key material -> line
	quorumLine int
}

// key records a log or witness key, refusing a duplicate.
func (ps *policyParser) key(kind, vkey string, line int) error {
	k := kind + ":" + vkeyMaterial(vkey)
	if prev, ok := ps.keys[k]; ok {
		return fmt.Errorf("%s key duplicates line %d", kind, prev)
	}
	ps.keys[k] = line
	return nil
}

func (ps *policyParser) log(f []string, line int) error {
	if len(f) < 1 || len(f) > 2 {
		return errors.New("log wants <vkey> [<url>]")
	}
	v, err := note.NewVerifier(f[0])
	if err != nil {
		return fmt.Errorf("log vkey: %v", err)
	}
	if err := ps.key("log", f[0], line); err != nil {
		return err
	}
	l := PolicyLog{VKey: f[0], Verifier: v}
	if len(f) == 2 {
		if err := checkURL(f[1]); err != nil {
			return fmt.Errorf("log url: %v", err)
		}
		l.URL = f[1]
	}
	ps.p.Logs = append(ps.p.Logs, l)
	return nil
}

func (ps *policyParser) witness(f []string, line int) error {
	if len(f) < 2 || len(f) > 3 {
		return errors.New("witness wants <name> <vkey> [<url>]")
	}
	if err := checkName(f[0], ps.defined); err != nil {
		return fmt.Errorf("witness name: %v", err)
	}
	v, err := NewCosignatureVerifier(f[1])
	if err != nil {
		return fmt.Errorf("witness vkey: %v", err)
	}
	if err := ps.key("witness", f[1], line); err != nil {
		return err
	}
	w := PolicyWitness{Name: f[0], VKey: f[1], Verifier: v}
	if len(f) == 3 {
		if err := checkURL(f[2]); err != nil {
			return fmt.Errorf("witness url: %v", err)
		}
		w.URL = f[2]
	}
	ps.defined[f[0]] = line
	ps.names[f[0]] = &member{witness: len(ps.p.Witnesses)}
	ps.p.Witnesses = append(ps.p.Witnesses, w)
	return nil
}

func (ps *policyParser) group(f []string, line int) error {
	if len(f) < 3 {
		return errors.New("group wants <name>, all|any|<k> and one or more members")
	}
	if err := checkName(f[0], ps.defined); err != nil {
		return fmt.Errorf("group name: %v", err)
	}
	g := &member{witness: -1}
	seen := map[string]bool{}
	for j, m := range f[2:] {
		mm, ok := ps.names[m]
		if !ok {
			return fmt.Errorf("group member %d is not a witness or group defined above", j+1)
		}
		if seen[m] {
			return fmt.Errorf("group member %d is listed twice", j+1)
		}
		seen[m] = true
		g.members = append(g.members, mm)
	}
	switch f[1] {
	case "all":
		g.k = len(g.members)
	case "any":
		g.k = 1
	default:
		k, err := strconv.Atoi(f[1])
		if err != nil || strconv.Itoa(k) != f[1] {
			return errors.New("group threshold must be all, any or a decimal number")
		}
		if k < 1 || k > len(g.members) {
			return fmt.Errorf("group threshold %d is not between 1 and its %d members", k, len(g.members))
		}
		g.k = k
	}
	ps.defined[f[0]] = line
	ps.names[f[0]] = g
	return nil
}

func (ps *policyParser) quorum(f []string, line int) error {
	if len(f) != 1 {
		return errors.New("quorum wants one name")
	}
	if ps.quorumLine != 0 {
		return fmt.Errorf("second quorum line (first on line %d)", ps.quorumLine)
	}
	ps.quorumLine = line
	ps.p.Quorum = f[0]
	if f[0] == "none" {
		return nil
	}
	q, ok := ps.names[f[0]]
	if !ok {
		return errors.New("quorum is not a witness or group defined above")
	}
	ps.p.quorum = q
	return nil
}

// checkName checks a witness or group name: not "none", not defined before.
func checkName(name string, defined map[string]int) error {
	if name == "none" {
		return errors.New(`"none" is reserved`)
	}
	if prev, ok := defined[name]; ok {
		return fmt.Errorf("already defined on line %d", prev)
	}
	return nil
}

// checkURL accepts an absolute http or https URL.
func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("must be an absolute http or https URL")
	}
	return nil
}

// vkeyMaterial returns a vkey's public key without its type byte, so keys
// that wrap the same public key under different names compare equal.
func vkeyMaterial(vkey string) string {
	// name+keyid+base64: neither name nor key id contains '+', base64 may.
	parts := strings.SplitN(vkey, "+", 3)
	if len(parts) != 3 {
		return vkey
	}
	b, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(b) < 2 {
		return vkey
	}
	return string(b[1:])
}

// Met reports whether the witnesses named in cosigners (names of the
// policy's witness lines; others are ignored) satisfy the quorum. It is
// true for "quorum none".
func (p *Policy) Met(cosigners []string) bool {
	if p.quorum == nil {
		return true
	}
	have := make([]bool, len(p.Witnesses))
	for _, c := range cosigners {
		for i, w := range p.Witnesses {
			if w.Name == c {
				have[i] = true
			}
		}
	}
	return p.quorum.met(have)
}

func (m *member) met(have []bool) bool {
	if m.witness >= 0 {
		return have[m.witness]
	}
	n := 0
	for _, c := range m.members {
		if c.met(have) {
			n++
		}
	}
	return n >= m.k
}

// CheckResult is what Policy.Check found in a cosigned checkpoint.
type CheckResult struct {
	// Text is the checkpoint text (origin, size, root, extension lines).
	Text string
	// Cosigners are the names of the policy's witnesses whose cosignature
	// verified, in policy order.
	Cosigners []string
	// QuorumMet reports whether Cosigners satisfy the quorum.
	QuorumMet bool
}

// ErrQuorum is returned (wrapped) by Policy.Check when the checkpoint's
// valid cosignatures do not satisfy the quorum.
var ErrQuorum = errors.New("cosignatures do not meet the witness quorum")

// Check verifies a signed checkpoint note: it must carry a valid signature
// of logKey (when not nil) or, when logKey is nil, of one of the policy's
// logs; every signature from a known witness key must verify; and the valid
// cosignatures must satisfy the quorum (else the result is returned with an
// error wrapping ErrQuorum). Signatures from unknown keys are ignored
// (c2sp.org/tlog-witness). Errors name what failed, not the note's text.
func (p *Policy) Check(signed []byte, logKey note.Verifier) (CheckResult, error) {
	var logs []note.Verifier
	if logKey != nil {
		logs = []note.Verifier{logKey}
	} else {
		for _, l := range p.Logs {
			logs = append(logs, l.Verifier)
		}
	}
	if len(logs) == 0 {
		return CheckResult{}, errors.New("check checkpoint: no log key given and the policy lists no log")
	}
	vs := append([]note.Verifier{}, logs...)
	for _, w := range p.Witnesses {
		vs = append(vs, w.Verifier)
	}
	n, err := note.Open(signed, note.VerifierList(vs...))
	if err != nil {
		return CheckResult{}, fmt.Errorf("check checkpoint: %w", openError(err))
	}
	res := CheckResult{Text: n.Text}
	logSigned := false
	for _, s := range n.Sigs {
		for _, l := range logs {
			if s.Name == l.Name() && s.Hash == l.KeyHash() {
				logSigned = true
			}
		}
	}
	if !logSigned {
		return res, errors.New("check checkpoint: no valid signature from the log key")
	}
	for _, w := range p.Witnesses {
		for _, s := range n.Sigs {
			if s.Name == w.Verifier.Name() && s.Hash == w.Verifier.KeyHash() {
				res.Cosigners = append(res.Cosigners, w.Name)
				break
			}
		}
	}
	res.QuorumMet = p.Met(res.Cosigners)
	if !res.QuorumMet {
		return res, fmt.Errorf("check checkpoint: %w (quorum %s; valid cosignatures from %d witnesses)", ErrQuorum, p.Quorum, len(res.Cosigners))
	}
	return res, nil
}

// openError rewords note.Open's errors without the note's text.
func openError(err error) error {
	var inv *note.InvalidSignatureError
	var unv *note.UnverifiedNoteError
	switch {
	case errors.As(err, &inv):
		return fmt.Errorf("invalid signature from key %s", inv.Name)
	case errors.As(err, &unv):
		return errors.New("no signature from a known key")
	}
	return err
}

// splitNote returns the text of a signed note and its signature lines.
func splitNote(signed []byte) (text, sigs []byte, err error) {
	i := bytes.LastIndex(signed, []byte("\n\n"))
	if i < 0 {
		return nil, nil, errors.New("malformed signed note: no blank line before the signatures")
	}
	return signed[:i+1], signed[i+2:], nil
}
