package ingest

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxMessage is the most bytes of a case's message the evidence details
// keep (Case.Message). A longer message is cut on a UTF-8 boundary and
// ends with the marker "…[cut: N bytes]", N the length of the whole
// message; the input itself is kept whole in the original.
const MaxMessage = 1024

// messageText collects a message from parts, keeping its first bytes (a
// little more than MaxMessage) and counting all of them, so that a long
// message costs MaxMessage bytes, not its length. The zero value is
// empty. It is not safe for concurrent use.
type messageText struct {
	b []byte
	n int // bytes added in all
}

// add appends s.
func (m *messageText) add(s string) {
	m.n += len(s)
	if room := MaxMessage + utf8.UTFMax - len(m.b); room > 0 {
		m.b = append(m.b, s[:min(len(s), room)]...)
	}
}

// addBytes appends b.
func (m *messageText) addBytes(b []byte) {
	m.n += len(b)
	if room := MaxMessage + utf8.UTFMax - len(m.b); room > 0 {
		m.b = append(m.b, b[:min(len(b), room)]...)
	}
}

// text is the message, whitespace around it trimmed, cut (cutMessage).
func (m *messageText) text() string {
	if m == nil {
		return ""
	}
	s := strings.TrimSpace(string(m.b))
	if m.n > len(m.b) {
		return cutMessage(s, m.n)
	}
	return cutMessage(s, len(s))
}

// cutMessage returns s, in valid UTF-8, when it is at most MaxMessage
// bytes and whole (total, the whole message's length, is len(s));
// otherwise its first bytes, not splitting a UTF-8 sequence, and the
// marker "…[cut: total bytes]", MaxMessage bytes at most in all.
func cutMessage(s string, total int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= MaxMessage && total <= len(s) {
		return s
	}
	marker := "…[cut: " + strconv.Itoa(max(total, len(s))) + " bytes]"
	keep := min(len(s), MaxMessage-len(marker))
	for keep > 0 && keep < len(s) && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + marker
}

// joinMessage is a JUnit element's message: its message attribute, then
// its text when that says more.
func joinMessage(attr string, body *messageText) string {
	attr = strings.TrimSpace(attr)
	text := body.text()
	switch {
	case text == "" || text == attr:
		return cutMessage(attr, len(attr))
	case attr == "":
		return text
	}
	whole := &messageText{}
	whole.add(attr)
	whole.add("\n")
	whole.add(string(body.b))
	whole.n += body.n - len(body.b)
	return whole.text()
}
