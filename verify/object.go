package verify

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Object is a parsed commit or tag, split into the bytes git signs and the
// signature, as git derives them (git's gpg-interface.c and commit.c,
// parse_signed_buffer and parse_buffer_signed_by_header, git 2.39).
type Object struct {
	ID   string // hex SHA-1 of "<type> <len>\x00" + Raw
	Type string // "commit" or "tag"
	Raw  []byte // the object body exactly as git hashed it

	// Payload is the signed data: for commits Raw without the gpgsig and
	// gpgsig-sha256 headers and their continuation lines, every other byte
	// kept; for tags Raw up to the last signature block in the message.
	// An unsigned object (Signature nil) has Payload equal to Raw, even
	// when it carries a gpgsig-sha256 header only.
	Payload []byte
	// Signature is the armoured signature block (continuation-line
	// prefixes removed for commits); nil when the object is unsigned.
	Signature []byte
	// Format is the signature scheme by its armour line: "openpgp", "ssh",
	// "x509", or "" when unsigned.
	Format string

	Tree      string   // commits: the tree id
	Parents   []string // commits: parent ids
	Target    string   // tags: the tagged object id
	TargetTyp string   // tags: the tagged object's type
	TagName   string   // tags: the tag name
	Author    string   // commits: the author line value
	Committer string   // commits: committer; tags: tagger
	// SignerTime is the committer (commit) or tagger (tag) time: git passes
	// it to ssh-keygen as the verification time. Zero when absent.
	SignerTime time.Time
	// MergeTags holds the tags embedded in mergetag headers, parsed as tag
	// objects (their ids are computed from the embedded bytes).
	MergeTags []*Object
}

// signature armour lines, by scheme (git's gpg-interface.c sigs[]).
var sigStarts = []struct{ line, format string }{
	{"-----BEGIN PGP SIGNATURE-----", "openpgp"},
	{"-----BEGIN PGP MESSAGE-----", "openpgp"},
	{"-----BEGIN SIGNED MESSAGE-----", "x509"},
	{"-----BEGIN SSH SIGNATURE-----", "ssh"},
}

func sigFormat(line []byte) string {
	for _, s := range sigStarts {
		if bytes.HasPrefix(line, []byte(s.line)) {
			return s.format
		}
	}
	return ""
}

// ObjectID returns the hex SHA-1 git gives an object of type typ with body
// raw. It is the object-name check of every parse.
func ObjectID(typ string, raw []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "%s %d\x00", typ, len(raw))
	h.Write(raw)
	return hex.EncodeToString(h.Sum(nil))
}

// ParseObject parses raw as a git object of type typ ("commit" or "tag")
// and splits off its signature. When wantID is not empty, the SHA-1 of raw
// must equal it. Errors wrap ErrMalformed: a non-canonical header layout
// (tree not first, author/committer missing or out of order, a duplicated
// tree, author, committer, object, type, tag, tagger or gpgsig header), a
// missing header/body separator, or an id mismatch.
// It is safe for concurrent use; the result aliases no memory of raw.
func ParseObject(raw []byte, typ, wantID string) (*Object, error) {
	return parseObject(raw, typ, wantID, "gpgsig")
}

// parseObject is ParseObject with the commit header that carries the
// signature in the object's format: gpgsig for SHA-1, gpgsig-sha256 for
// SHA-256 (git's commit.c gpg_sig_headers).
func parseObject(raw []byte, typ, wantID, sigHeader string) (*Object, error) {
	raw = bytes.Clone(raw)
	o := &Object{Type: typ, Raw: raw, ID: ObjectID(typ, raw)}
	if wantID != "" && !strings.EqualFold(wantID, o.ID) {
		return nil, &Error{Object: wantID, Kind: ErrMalformed, Detail: "object id mismatch: bytes hash to " + o.ID}
	}
	var err error
	switch typ {
	case "commit":
		err = o.parseCommit(sigHeader)
	case "tag":
		err = o.parseTag()
	default:
		err = newErr(ErrMalformed, "unsupported object type %q (want commit or tag)", typ)
	}
	if err != nil {
		if e, ok := err.(*Error); ok && e.Object == "" {
			e.Object = o.ID
		}
		return nil, err
	}
	return o, nil
}

// header is one header of an object: its name, its value with
// continuation lines joined by "\n" (leading space removed), and its byte
// span in the raw object.
type header struct {
	name       string
	value      []byte
	start, end int
}

// splitHeaders parses the header block of raw (everything before the first
// empty line). It returns the headers and the offset where the body starts.
func splitHeaders(raw []byte) ([]header, int, error) {
	var hs []header
	off := 0
	for {
		if off >= len(raw) {
			return nil, 0, newErr(ErrMalformed, "no blank line between header and message")
		}
		if raw[off] == '\n' {
			return hs, off + 1, nil
		}
		eol := bytes.IndexByte(raw[off:], '\n')
		if eol < 0 {
			return nil, 0, newErr(ErrMalformed, "header line without newline")
		}
		line := raw[off : off+eol]
		if line[0] == ' ' {
			if len(hs) == 0 {
				return nil, 0, newErr(ErrMalformed, "continuation line before any header")
			}
			h := &hs[len(hs)-1]
			h.value = append(append(h.value, '\n'), line[1:]...)
			h.end = off + eol + 1
			off = h.end
			continue
		}
		name, value, ok := bytes.Cut(line, []byte{' '})
		if !ok || len(name) == 0 {
			return nil, 0, newErr(ErrMalformed, "header line %q has no name", clip(line))
		}
		hs = append(hs, header{name: string(name), value: bytes.Clone(value), start: off, end: off + eol + 1})
		off += eol + 1
	}
}

func clip(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

func (o *Object) parseCommit(sigHeader string) error {
	hs, _, err := splitHeaders(o.Raw)
	if err != nil {
		return err
	}
	// Canonical order: tree, parent*, author, committer; then the rest.
	i := 0
	if len(hs) == 0 || hs[0].name != "tree" {
		return newErr(ErrMalformed, "commit does not start with a tree header")
	}
	o.Tree = string(hs[0].value)
	i++
	for i < len(hs) && hs[i].name == "parent" {
		o.Parents = append(o.Parents, string(hs[i].value))
		i++
	}
	if i >= len(hs) || hs[i].name != "author" {
		return newErr(ErrMalformed, "commit has no author header after tree and parents")
	}
	o.Author = string(hs[i].value)
	i++
	if i >= len(hs) || hs[i].name != "committer" {
		return newErr(ErrMalformed, "commit has no committer header after author")
	}
	o.Committer = string(hs[i].value)
	o.SignerTime = identTime(hs[i].value)
	if !validHexID(o.Tree) {
		return newErr(ErrMalformed, "tree header %q is not an object id", clip([]byte(o.Tree)))
	}
	for _, p := range o.Parents {
		if !validHexID(p) {
			return newErr(ErrMalformed, "parent header %q is not an object id", clip([]byte(p)))
		}
	}
	seen := map[string]bool{}
	var sigSpans [][2]int
	for j, h := range hs {
		switch h.name {
		case "tree", "author", "committer", "gpgsig", "gpgsig-sha256", "encoding":
			if seen[h.name] {
				return newErr(ErrMalformed, "duplicated %s header", h.name)
			}
			seen[h.name] = true
		case "parent":
			if j > i {
				return newErr(ErrMalformed, "parent header after committer")
			}
		}
		switch {
		case strings.HasPrefix(h.name, "gpgsig"):
			// git drops every header line starting with "gpgsig" (and its
			// continuation lines) from the payload; only sigHeader carries
			// the signature (commit.c, parse_buffer_signed_by_header).
			sigSpans = append(sigSpans, [2]int{h.start, h.end})
			if h.name == sigHeader {
				o.Signature = append(bytes.Clone(h.value), '\n')
			}
		case h.name == "mergetag":
			mt, err := ParseObject(append(bytes.Clone(h.value), '\n'), "tag", "")
			if err != nil {
				return wrapErr(ErrMalformed, err, "mergetag header")
			}
			o.MergeTags = append(o.MergeTags, mt)
		}
	}
	if o.Signature == nil {
		// Only sigHeader signs the commit: with no such header there is
		// no signed data, and git reports "no signature" without using a
		// payload.
		o.Payload = o.Raw
		return nil
	}
	p := make([]byte, 0, len(o.Raw))
	prev := 0
	for _, s := range sigSpans {
		p = append(p, o.Raw[prev:s[0]]...)
		prev = s[1]
	}
	o.Payload = append(p, o.Raw[prev:]...)
	first, _, _ := bytes.Cut(o.Signature, []byte{'\n'})
	o.Format = sigFormat(first)
	if o.Format == "" {
		return newErr(ErrMalformed, "%s header does not start with a known armour line", sigHeader)
	}
	return nil
}

func (o *Object) parseTag() error {
	hs, body, err := splitHeaders(o.Raw)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, h := range hs {
		switch h.name {
		case "object", "type", "tag", "tagger":
			if seen[h.name] {
				return newErr(ErrMalformed, "duplicated %s header", h.name)
			}
			seen[h.name] = true
		}
		switch h.name {
		case "object":
			o.Target = string(h.value)
		case "type":
			o.TargetTyp = string(h.value)
		case "tag":
			o.TagName = string(h.value)
		case "tagger":
			o.Committer = string(h.value)
			o.SignerTime = identTime(h.value)
		}
	}
	if len(hs) < 3 || hs[0].name != "object" || hs[1].name != "type" || hs[2].name != "tag" {
		return newErr(ErrMalformed, "tag does not start with object, type and tag headers")
	}
	if !validHexID(o.Target) {
		return newErr(ErrMalformed, "object header %q is not an object id", clip([]byte(o.Target)))
	}
	// The signature is the last line-initial armour block of the message
	// (git's parse_signed_buffer).
	match := len(o.Raw)
	for off := body; off < len(o.Raw); {
		if sigFormat(o.Raw[off:]) != "" {
			match = off
		}
		eol := bytes.IndexByte(o.Raw[off:], '\n')
		if eol < 0 {
			break
		}
		off += eol + 1
	}
	o.Payload = o.Raw[:match]
	if match < len(o.Raw) {
		o.Signature = o.Raw[match:]
		o.Format = sigFormat(o.Signature)
	}
	return nil
}

// identTime parses the "<unix seconds> <+hhmm>" tail of an ident line.
func identTime(v []byte) time.Time {
	gt := bytes.LastIndexByte(v, '>')
	if gt < 0 {
		return time.Time{}
	}
	f := strings.Fields(string(v[gt+1:]))
	if len(f) < 1 {
		return time.Time{}
	}
	sec, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return time.Time{}
	}
	loc := time.UTC
	if len(f) > 1 && len(f[1]) == 5 {
		h, e1 := strconv.Atoi(f[1][1:3])
		m, e2 := strconv.Atoi(f[1][3:5])
		if e1 == nil && e2 == nil {
			off := h*3600 + m*60
			if f[1][0] == '-' {
				off = -off
			}
			loc = time.FixedZone(f[1], off)
		}
	}
	return time.Unix(sec, 0).In(loc)
}

func validHexID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
