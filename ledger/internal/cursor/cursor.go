// Package cursor encodes the opaque page cursors that store drivers hand
// out as the Next value of a listing. A cursor names the log index below
// which the next page starts; callers outside the drivers never build or
// read one (they bound a query by size with the filters' AsOfSize).
package cursor

import (
	"encoding/base64"
	"strconv"
	"strings"
)

// prefix versions the encoding so a later change can be told apart.
const prefix = "c1."

// Encode returns the cursor of a page that continues below index.
func Encode(index uint64) string {
	return prefix + base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatUint(index, 10)))
}

// Decode returns the index a cursor continues below, ok false when c is
// not a cursor Encode made. The empty cursor is the first page: index
// ^uint64(0), ok true.
func Decode(c string) (index uint64, ok bool) {
	if c == "" {
		return ^uint64(0), true
	}
	rest, found := strings.CutPrefix(c, prefix)
	if !found {
		return 0, false
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b), 10, 63)
	if err != nil {
		return 0, false
	}
	return v, true
}
