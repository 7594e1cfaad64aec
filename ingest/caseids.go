package ingest

import (
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"strconv"
	"strings"
)

// caseIDs gives each case a stable id: its parts joined by " > ", cut
// to the ledger's 256 characters with a digest suffix when longer, and
// duplicates numbered "#2", "#3"... in document order: a case whose id is
// taken gets "id #n" for the smallest n >= 2 not taken yet, whether the
// taken id was numbered here or was a case's own name (a case named
// "a #2" before a second "a" moves that one to "a #3"). The search for n
// resumes where the last one for the same id stopped (ids are only ever
// added, so no smaller n frees up), which keeps N duplicates linear
// instead of quadratic. A caseIDs is not safe for concurrent use.
type caseIDs struct {
	taken map[string]struct{}
	nextN map[string]int // id -> the smallest n >= 2 that may still be free for "id #n"
}

func newCaseIDs() *caseIDs {
	return &caseIDs{taken: map[string]struct{}{}, nextN: map[string]int{}}
}

// next returns the id of the case whose parts are given (see caseIDs).
func (ids *caseIDs) next(parts ...string) string {
	return ids.nextUnder(idPrefix{}, parts...)
}

// nextUnder is next with parts following the parts already in p (a
// suite's path), so a case under deep suites costs its own parts only.
func (ids *caseIDs) nextUnder(p idPrefix, parts ...string) string {
	for _, part := range parts {
		p = p.extend(part)
	}
	id := p.id()
	if _, dup := ids.taken[id]; dup {
		base := id
		n := max(ids.nextN[base], 2)
		for {
			id = base + " #" + strconv.Itoa(n)
			if _, dup := ids.taken[id]; !dup {
				break
			}
			n++
		}
		ids.nextN[base] = n + 1
	}
	ids.taken[id] = struct{}{}
	return id
}

// The id rule's lengths: an id longer than idMax bytes is cut to at most
// idCut bytes (not splitting a UTF-8 sequence), then "…" and the first 4
// bytes of the SHA-256 of the whole id in hex are added (227 bytes at
// most, leaving room for " #n" within the ledger's 256).
const (
	idMax = 230
	idCut = 216
	// idKeep is how long a prefix is kept whole; past it, only its first
	// idMax+1 bytes and the SHA-256 state of all of it are kept.
	idKeep = 1024
)

// idPrefix is the first parts of a case id, trimmed, empty ones left
// out, joined by " > ". It is kept whole up to idKeep bytes; past that
// as its first idMax+1 bytes, its length and the SHA-256 state over all
// of it, so the ids of a suite nested thousands deep cost each case its
// own parts, not the whole path (a path of depth D and N cases would
// otherwise cost N·D). The zero idPrefix is empty.
type idPrefix struct {
	s     string // the whole prefix (state == nil) or its first idMax+1 bytes
	n     int    // the whole prefix's length in bytes
	state []byte // the SHA-256 state (encoding.BinaryMarshaler) of all n bytes; nil while whole
}

// extend returns p followed by part (trimmed; an empty part changes
// nothing).
func (p idPrefix) extend(part string) idPrefix {
	if part = strings.TrimSpace(part); part == "" {
		return p
	}
	sep := ""
	if p.n > 0 {
		sep = " > "
	}
	if p.state == nil && p.n+len(sep)+len(part) <= idKeep {
		whole := p.s + sep + part
		return idPrefix{s: whole, n: len(whole)}
	}
	h := sha256.New()
	if p.state == nil {
		h.Write([]byte(p.s))
	} else if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(p.state); err != nil {
		panic("sha256 state: " + err.Error()) // a state this package marshaled
	}
	h.Write([]byte(sep))
	h.Write([]byte(part))
	state, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		panic("sha256 state: " + err.Error())
	}
	head := p.s
	if len(head) <= idMax {
		head += sep + part
		if len(head) > idMax+1 {
			head = head[:idMax+1]
		}
	}
	return idPrefix{s: head, n: p.n + len(sep) + len(part), state: state}
}

// id is the case id p names before numbering: "(unnamed)" when empty,
// cut with a digest suffix when longer than idMax bytes.
func (p idPrefix) id() string {
	if p.n == 0 {
		return "(unnamed)"
	}
	if p.n <= idMax {
		return p.s
	}
	var sum []byte
	if p.state == nil {
		d := sha256.Sum256([]byte(p.s))
		sum = d[:]
	} else {
		h := sha256.New()
		if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(p.state); err != nil {
			panic("sha256 state: " + err.Error())
		}
		sum = h.Sum(nil)
	}
	cut := idCut
	for cut > 0 && p.s[cut]&0xC0 == 0x80 { // do not split a UTF-8 sequence
		cut--
	}
	return p.s[:cut] + "…" + hex.EncodeToString(sum[:4])
}
