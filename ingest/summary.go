package ingest

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/evidence-ledger/ledger/ledger"
)

// CasesOmitted says how many cases, by outcome, the evidence details
// leave out of Details.Cases to stay within ledger.MaxDetailsBytes, and
// how many messages of cases kept were left out (Messages); every case
// and message is in the original (KeptIn "original"), kept byte for byte.
type CasesOmitted struct {
	Passed     int    `json:"passed,omitempty"`
	Failed     int    `json:"failed,omitempty"`
	Errors     int    `json:"error,omitempty"`
	Skipped    int    `json:"skipped,omitempty"`
	Flaky      int    `json:"flaky,omitempty"`
	Incomplete int    `json:"incomplete,omitempty"`
	Messages   int    `json:"messages,omitempty"`
	KeptIn     string `json:"kept_in"`
}

func (o *CasesOmitted) count(k Outcome) {
	switch k {
	case Passed:
		o.Passed++
	case Failed:
		o.Failed++
	case Errored:
		o.Errors++
	case Skipped:
		o.Skipped++
	case Flaky:
		o.Flaky++
	case Incomplete:
		o.Incomplete++
	}
}

// maxNotes is how many of a run's notes the details keep; the rest are
// counted in one last note.
const maxNotes = 100

// keptNotes is notes, at most maxNotes of them and a last one saying
// how many more the original has.
func keptNotes(notes []string) []string {
	if len(notes) <= maxNotes {
		return notes
	}
	out := append([]string(nil), notes[:maxNotes]...)
	return append(out, strconv.Itoa(len(notes)-maxNotes)+" more note(s) left out: the original has every case")
}

// failing reports whether a case of outcome k is failing (names a failing
// case id of the evidence): every outcome but passed and skipped.
func failing(k Outcome) bool { return k != Passed && k != Skipped }

// summarize sets d.Cases to the cases of r the details have room for
// within ledger.MaxDetailsBytes, in the input's order, and
// d.CasesOmitted to what is left out (nil when nothing is). Room goes
// first to every failing case's id and outcome (in order, while they
// fit), then to their messages, then to skipped cases (with their
// message where it fits), then to passed cases in order until the first
// that does not fit. d's other members must be set: their size is
// what the cases may not use.
func (d *Details) summarize(r *Run) error {
	d.Cases = []Case{}
	d.CasesOmitted = &CasesOmitted{Passed: len(r.Cases), Failed: len(r.Cases), Errors: len(r.Cases), Skipped: len(r.Cases),
		Flaky: len(r.Cases), Incomplete: len(r.Cases), Messages: len(r.Cases), KeptIn: "original"} // the largest it can be
	fixed, err := json.Marshal(d)
	if err != nil {
		return err
	}
	room := ledger.MaxDetailsBytes - len(fixed)
	var buf bytes.Buffer
	buf.Grow(2 * MaxMessage)
	enc := json.NewEncoder(&buf)
	size := func(c Case) int { // c's bytes in the cases array, its comma included
		buf.Reset()
		enc.Encode(c)    // a Case always encodes
		return buf.Len() // the newline stands for the comma
	}
	const (
		out      = iota // left out
		bare            // kept without its message
		withText        // kept with its message
	)
	keep := make([]uint8, len(r.Cases))
	used := 0
	take := func(n int) bool {
		if used+n > room {
			return false
		}
		used += n
		return true
	}
	for i, c := range r.Cases {
		if failing(c.Outcome) {
			plain := c
			plain.Message = ""
			if take(size(plain)) {
				keep[i] = bare
			}
		}
	}
	for i, c := range r.Cases {
		if keep[i] == bare && c.Message != "" {
			plain := c
			plain.Message = ""
			if take(size(c) - size(plain)) {
				keep[i] = withText
			}
		}
	}
	for i, c := range r.Cases {
		if c.Outcome != Skipped {
			continue
		}
		plain := c
		plain.Message = ""
		switch {
		case c.Message != "" && take(size(c)):
			keep[i] = withText
		case take(size(plain)):
			keep[i] = bare
		}
	}
	for i, c := range r.Cases {
		if c.Outcome == Passed {
			if !take(size(c)) {
				break
			}
			keep[i] = withText
		}
	}
	omitted := CasesOmitted{KeptIn: "original"}
	kept := 0
	for i, c := range r.Cases {
		switch {
		case keep[i] == out:
			omitted.count(c.Outcome)
		case keep[i] == bare && c.Message != "":
			omitted.Messages++
			kept++
		default:
			kept++
		}
	}
	d.CasesOmitted = nil
	if kept == len(r.Cases) && omitted.Messages == 0 {
		d.Cases = r.Cases // all of them, whole
		if d.Cases == nil {
			d.Cases = []Case{}
		}
		return nil
	}
	d.CasesOmitted = &omitted
	d.Cases = make([]Case, 0, kept)
	for i, c := range r.Cases {
		switch keep[i] {
		case out:
			continue
		case bare:
			c.Message = ""
		}
		d.Cases = append(d.Cases, c)
	}
	return nil
}
